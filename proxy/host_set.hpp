#pragma once
// The hosts of one upstream as the connection pool chooses among them.
//
// Choice, per request: the power of two choices on requests in flight. Two
// distinct hosts that are not ejected are drawn at random and the one with
// fewer requests in flight wins (a tie: either, at random). A replay's failed
// host (`avoid`) is left out while another is eligible. With one host there is
// no choice to make.
//
// Ejection: a connect to a host that is refused or times out (any connect
// error) ejects the host from the choice for a backoff of base x 2^(n-1),
// capped at max, n being its consecutive failures; a successful connect resets
// n and ends the ejection. An ejected host is eligible again when its backoff is
// over: the next choice may pick it, and a failure ejects it for twice as long.
// When every host is ejected, the one whose ejection ends first is chosen (the
// connect decides). Connects that were already under way when a host was
// ejected and fail too are not counted again: each connect carries the host's
// ejection count from when it began (its epoch).
//
// Hosts come and go (an upstream name's addresses, asked again within their
// TTL): a host that goes is out of the choice at once and its slot is reused
// once nothing is bound to it any more. A host whose active health checks
// failed is out of the choice too, until they pass again (either the checks or
// an ejection takes a host out; both must let it back). When no host is
// eligible, the one whose ejection ends first among those the checks pass is
// chosen, else among all (the connect decides); with no host at all, none.
//
// Plain C++: no sockets and no clock read (the time comes in), randomness from
// the caller's Rng. Threading: one per upstream per Worker, touched only by its
// thread.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "admission/gate.hpp"
#include "proxy/clock.hpp"

namespace sluice::proxy {

class HostSet {
 public:
  static constexpr std::size_t kNoHost = SIZE_MAX;
  struct Host {
    std::int64_t in_flight = 0;   // requests bound to the host: connecting or holding a connection
    std::uint32_t failures = 0;   // consecutive failed connects
    std::uint32_t ejections = 0;  // ejections so far: the epoch of a connect begun now
    Clock::time_point ejected_until{};  // ejected while now < ejected_until
    bool present = true;  // false: gone from the upstream's addresses (a free slot once unbound)
    bool healthy = true;  // the active health checks pass (or there are none)
  };

  HostSet(std::size_t hosts, std::chrono::milliseconds eject_base,
          std::chrono::milliseconds eject_max);
  std::size_t size() const { return hosts_.size(); }  // slots, present or not
  std::size_t present() const { return present_; }    // hosts present
  const Host& operator[](std::size_t host) const { return hosts_[host]; }

  // A host that came: a free slot (gone, nothing bound), else a new one.
  std::size_t add(bool healthy);
  // A host that went: out of the choice; its slot is free once nothing is bound.
  void remove(std::size_t host) {
    present_ -= hosts_[host].present;
    hosts_[host].present = false;
  }
  void set_healthy(std::size_t host, bool healthy) { hosts_[host].healthy = healthy; }

  // The host for a new request, `avoid` left out while another is eligible;
  // kNoHost when no host is present.
  std::size_t choose(Clock::time_point now, admission::Rng& rng, std::size_t avoid = kNoHost) const;

  // A request is bound to the host (connecting or holding a connection), or no longer.
  void bind(std::size_t host) { ++hosts_[host].in_flight; }
  void unbind(std::size_t host) { --hosts_[host].in_flight; }

  // The epoch of a connect to `host` that begins now.
  std::uint32_t epoch(std::size_t host) const { return hosts_[host].ejections; }
  void connected(std::size_t host);  // resets the failures, ends an ejection
  // A connect begun at `epoch` failed at `now`. True when this ejected the
  // host; false when the failure belongs to an ejection already counted.
  bool connect_failed(std::size_t host, std::uint32_t epoch, Clock::time_point now);
  // How long the n-th consecutive failure ejects a host (n >= 1).
  std::chrono::milliseconds backoff(std::uint32_t failures) const;

  bool ejected(std::size_t host, Clock::time_point now) const {
    return now < hosts_[host].ejected_until;
  }
  // True when every present host is ejected at `now` (or none is present).
  bool all_ejected(Clock::time_point now) const;

 private:
  std::vector<Host> hosts_;
  std::size_t present_ = 0;
  std::chrono::milliseconds eject_base_;
  std::chrono::milliseconds eject_max_;
};

}  // namespace sluice::proxy
