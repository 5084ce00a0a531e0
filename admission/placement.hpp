#pragma once
// Placement (seed 001 §8): where a request goes and how, a pure function of the
// request, the upstreams' states, the time and a random source. The proxy
// applies the answer; it decides nothing of its own.
//
// place(), for a request that passed the level gate:
//   delegated   a request carrying a live lease's token is seated at once on
//               its upstream, on the token's lane; never refused.
//   probe       a closed upstream lets one request through per probe interval:
//               seated outside the lane rules, the lease marked a probe.
//   closed      a closed upstream admits nothing else. A movable request (not
//               pinned, with alternatives) is seated on an alternative that
//               admits it now, else waits on an open alternative (Thompson
//               sampling picks), else it is refused pool_closed, Retry-After
//               the upstream's reopen hint.
//   full        its upstream does not seat it now: a movable request is seated
//               on an alternative that seats it now (Thompson sampling among
//               those whose lane rules allow it), else it waits at its own.
//   wait        not seated: it queues in its lane when the lane's window is
//               not zero, else it is refused queue_timeout, Retry-After from
//               queue_retry_after().
//   observe     a request that would wait or be refused goes on unseated, with
//               the reason it would have had (would_shed).
// relocate(), for a request whose connect failed (nothing was sent): its lease
// ends where it was (teaching what it learnt, a heavy-cap unit kept), then it
// goes to an alternative that admits it now; else it waits on an open one (a
// delegated request is seated there at once); else it stays where it was,
// seated outside the lane rules so that it ends there.
//
// Threading: the thread that owns the bulkheads Upstreams hands out.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "admission/gate.hpp"
#include "admission/lease.hpp"

namespace sluice::admission {

// Why a request left its route's upstream for an alternative.
enum class Fallback : std::uint8_t { closed, full, connect_failed, replay };
inline constexpr std::size_t kFallbackWhys = 4;
std::string_view to_string(Fallback f);

struct Ask {
  Lane lane = Lane::standard;
  std::size_t upstream = 0;
  std::span<const std::size_t> alternatives;
  bool pinned = false;  // its route is hard-pinned: it never moves
  Mode mode = Mode::enforce;
  bool delegated = false;  // carries a verified live lease's token (lane: the token's)
  Micros waited{0};        // time it already spent in a queue (a refusal's Retry-After)
  bool movable() const { return !pinned && !alternatives.empty(); }
};

enum class Placed : std::uint8_t {
  seated,    // go on: the lease is seated
  queued,    // wait: the lease is queued in its lane, seated later by a release or tick
  refused,   // answer 503 with `reason`
  unseated,  // observe mode: go on without a seat, counted would_shed `reason`
  stayed,    // relocate() found no way on: seated where it was, to end there
};

struct Placement {
  Placed how = Placed::refused;
  std::size_t upstream = 0;           // where it goes, waits or was refused
  Reason reason = Reason::none;       // refused or unseated: why
  std::optional<Millis> retry_after;  // pool_closed: the reopen hint
  std::optional<Fallback> fell_back;  // it moved to `upstream`, and why
  bool decreased = false;             // relocate(): the lease it left decreased that estimate
  Lease lease;
};

Placement place(const Ask& ask, Seat& seat, Upstreams& ups, Micros now, Rng& rng);

// A refusal's Retry-After before the lane's band (seed 004): the larger of the
// queue window it waited and the age of the lane's youngest live lease.
Millis queue_retry_after(Upstreams& ups, Lane lane, std::size_t upstream, Micros waited,
                         Micros now);

// `lease` ends here with `signal` and `ttfb`; ask.upstream is where it was.
Placement relocate(const Ask& ask, Seat& seat, Lease& lease, Signal signal, Micros ttfb,
                   Fallback why, Upstreams& ups, Micros now, Rng& rng);

}  // namespace sluice::admission
