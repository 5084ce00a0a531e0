#pragma once
// The hosts of every upstream, kept on the admin thread. Each host name of
// SLUICE_UPSTREAMS is resolved (hosts/resolver.hpp, c-ares) and asked again
// when its answer's TTL runs out (hosts/schedule.hpp); every address of a name
// is a host. An upstream with a health check (SLUICE_HEALTH_CHECKS) has each of
// its addresses checked. Every change (an address that came or went, a host
// whose checks turned) is posted to each Worker's pool of that upstream
// (UpstreamPool::update), so the request path reads its own thread's copy.
//
// A lookup that fails keeps the addresses the name had: a DNS server that is
// down for a while takes no host away. A name that never resolved leaves its
// upstream without an address: its requests are refused (503 unresolved, with
// the time to the next lookup as their Retry-After), /readyz says so, and the
// lookup is retried (SLUICE_DNS_MIN_TTL, doubling to 30s).
//
// Threading: the admin io_context's thread only (the ticker's and the admin
// listener's), so the views below need no lock.
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hosts/resolver.hpp"
#include "hosts/schedule.hpp"
#include "proxy/clock.hpp"
#include "proxy/net.hpp"
#include "proxy/upstream_pool.hpp"
#include "tls/tls.hpp"

namespace sluice::proxy {

struct Runtime;

class Directory {
 public:
  Directory(Runtime& rt, net::io_context& ioc);  // throws config::ConfigError (SLUICE_RESOLVER)
  ~Directory();
  Directory(const Directory&) = delete;
  Directory& operator=(const Directory&) = delete;

  // Asks every name and starts the health checks; runs `ioc` until each name
  // has its first answer (or failure), for at most `patience`.
  void start(Clock::duration patience);

  const std::vector<HostEntry>& hosts(std::size_t upstream) const { return ups_[upstream].hosts; }
  // When the upstream's names that have no address are asked again.
  Clock::time_point retry_at(std::size_t upstream) const;
  // The upstreams without an address, by name (empty: every one has one).
  std::vector<std::string> unresolved() const;

  // What /admin/state and /metrics show.
  struct NameView {
    std::string host;  // as configured: name:port
    bool literal;      // an address, never looked up
    std::vector<std::string> addresses;
    std::string error;  // the last lookup's failure (empty: it answered)
    double ttl_s;       // the last answer's TTL
    double next_lookup_in_s;
    std::uint64_t lookups_ok, lookups_failed;
  };
  struct HostState {
    std::string address;  // address:port
    std::string name;     // the configured host it came from
    bool checked;         // the upstream has a health check
    bool checks_pass;
    std::uint32_t streak;    // check results in a row against its state
    std::string last_check;  // the last check's result (status 200, connect: ..., timed out)
    std::uint64_t checks_passed, checks_failed;
    // From the I/O threads' pools: in flight summed, ejected by any of them.
    int in_flight;
    bool ejected;
    double ejected_for_s;
    std::uint32_t failures;
    bool healthy() const { return checks_pass && !ejected; }
  };
  std::vector<NameView> names(std::size_t upstream, Clock::time_point now) const;
  struct Counts {
    std::uint64_t lookups_ok = 0, lookups_failed = 0;  // of its names
    std::uint64_t checks_passed = 0, checks_failed = 0;
  };
  const Counts& counts(std::size_t upstream) const { return ups_[upstream].counts; }
  std::vector<HostState> host_states(std::size_t upstream) const;

 private:
  struct Target {
    std::string name;
    std::uint16_t port = 0;
    bool literal = false;
    std::vector<net::ip::address> addresses;
    bool answered = false;
    std::uint32_t failures = 0;  // lookups failed in a row
    std::string error;
    std::chrono::seconds ttl{0};
    Clock::time_point next{};
    std::uint64_t ok = 0, failed = 0;
    std::unique_ptr<net::steady_timer> timer;
  };
  struct Check {
    explicit Check(net::io_context& ioc) : timer(ioc) {}
    std::size_t target = 0;
    hosts::HealthState state;
    net::steady_timer timer;
    std::uint64_t generation = 0;  // of the check under way; a removed host's results are dropped
    std::string last = "not checked yet";
    std::uint64_t passed = 0, failed = 0;
    tls::SessionSlot session;
  };
  struct Upstream {
    std::vector<Target> targets;
    const hosts::HealthCheck* check = nullptr;  // none: no health checks
    std::map<tcp::endpoint, std::unique_ptr<Check>> checks;
    std::vector<HostEntry> hosts;  // as last posted to the pools
    Counts counts;
  };

  void lookup(std::size_t u, std::size_t t);
  void answered(std::size_t u, std::size_t t, hosts::Answer a);
  void rebuild(std::size_t u, bool force_post = false);  // hosts from the targets and checks
  void schedule_check(std::size_t u, const tcp::endpoint& ep, Clock::duration after);
  void run_check(std::size_t u, const tcp::endpoint& ep);
  void checked(std::size_t u, const tcp::endpoint& ep, std::uint64_t generation, bool passed,
               std::string why);
  bool settled() const;

  Runtime& rt_;
  net::io_context& ioc_;
  std::unique_ptr<hosts::Resolver> resolver_;
  std::vector<Upstream> ups_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::uint64_t generation_ = 0;
};

}  // namespace sluice::proxy
