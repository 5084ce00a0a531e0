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
//   wait        not seated: it queues in its lane for Bulkhead::patience (its
//               lane's window, at least the delay target), else (a heavy-cap
//               unit taken elsewhere) it is refused for what held it (reason_of:
//               heavy_cap, budget, reserved; the upstream full: queue_timeout).
//               Retry-After: a budget refusal, the upstream's quota reset
//               (RateLimit-Reset); any other, queue_retry_after().
//   observe     decides exactly as enforce (a wait is a wait: its window
//               bounds it); where enforce refuses, the request goes on seated
//               outside the lane rules (the bulkhead carries the load it
//               really has), counted would_shed with the same reason. One the
//               level gate refused (level_refused) is not placed at all under
//               enforce: under observe it goes on so at once, never queued.
// timed_out(), for a queued request whose window ended: out of the queue and
// refused for what held it at its last ask; seated, when another thread seated
// it just before (its on_seated() is on the way).
// relocate(), for a request whose connect failed (nothing was sent): its lease
// ends where it was (teaching what it learnt, a heavy-cap unit kept), then it
// goes to an alternative that admits it now; else it waits on an open one (a
// delegated request is seated there at once); else it stays where it was,
// seated outside the lane rules so that it ends there.
// ask_again(), for a request its upstream refused (429, 503) before doing any
// of its work, that can be sent again, once: its lease ends where it was with
// that refusal (the estimate learns it, once per burst as ever), then it is
// placed as place() places a newcomer, but as the oldest of its lane
// (Seat::front: no chance draw, queued at its lane's front): seated within the
// lowered estimate, waiting its patience for the next release, or on an
// alternative. An upstream that refuses only above a capacity sharp to the
// request (a probe past K, or a slot it frees only once its answer is
// written) costs the client a wait of a release or two, not a refusal.
//
// Threading: any thread; the bulkheads lock themselves, one call at a time
// (a placement is several calls: each sees the bulkhead as it is then).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "admission/gate.hpp"
#include "admission/lease.hpp"

namespace sluice::admission {

// Why a request left its route's upstream for an alternative.
// Why a request moved off its upstream: it was closed or full, a connect
// failed, a replay after a cut, or its first event was late (a route's
// first_event_timeout).
enum class Fallback : std::uint8_t { closed, full, connect_failed, replay, first_event };
inline constexpr std::size_t kFallbackWhys = 5;
std::string_view to_string(Fallback f);

struct Ask {
  Lane lane = Lane::standard;
  std::size_t upstream = 0;
  std::span<const std::size_t> alternatives;
  bool pinned = false;  // its route is hard-pinned: it never moves
  Mode mode = Mode::enforce;
  bool delegated = false;      // carries a verified live lease's token (lane: the token's)
  Micros waited{0};            // time it already spent in a queue (a refusal's Retry-After)
  bool level_refused = false;  // the level gate refused it (observe mode: it goes on regardless)
  bool movable() const { return !pinned && !alternatives.empty(); }
};

enum class Placed : std::uint8_t {
  seated,    // go on: the lease is seated
  queued,    // wait: the lease is queued in its lane, seated later by a release or tick
  refused,   // answer 503 with `reason`
  observed,  // observe mode: refused `reason` under enforce; goes on seated outside the rules
  stayed,    // relocate() found no way on: seated where it was, to end there
};

struct Placement {
  Placed how = Placed::refused;
  std::size_t upstream = 0;           // where it goes, waits or was refused
  Reason reason = Reason::none;       // refused or observed: why
  std::optional<Millis> retry_after;  // refused: derived (before the lane's band)
  Micros wait_for{0};                 // queued: how long it may wait (Bulkhead::patience)
  std::optional<Fallback> fell_back;  // it moved to `upstream`, and why
  bool decreased = false;             // relocate(): the lease it left decreased that estimate
  Lease lease;
};

Placement place(const Ask& ask, Seat& seat, Upstreams& ups, Micros now, Rng& rng);

// `lease` (queued) reached the end of its wait (wait_for); ask.waited is the wait.
// On an upstream whose estimate is still growing (never measured exhausted,
// below the pool's share) it waits on (queued, for wait_for more), up to
// kUnmeasuredWait in all: its estimate is not the reason to refuse it.
inline constexpr Micros kUnmeasuredWait{30'000'000};
Placement timed_out(const Ask& ask, Seat& seat, Lease& lease, Upstreams& ups, Micros now);

// A refusal's Retry-After before the lane's band: the largest of the time it
// waited, the age of the lane's youngest live lease (seed 004) and the
// bulkhead's refusal_wait (the queues' drain, the refusals' duration, and
// what the lane's earlier episodes of refusals lasted).
Millis queue_retry_after(Upstreams& ups, Lane lane, std::size_t upstream, Micros waited,
                         Micros now);

// `lease` ends here with `signal` and `ttfb`; ask.upstream is where it was.
Placement relocate(const Ask& ask, Seat& seat, Lease& lease, Signal signal, Micros ttfb,
                   Fallback why, Upstreams& ups, Micros now, Rng& rng);

// `lease` (seated) ends with its upstream's refusal `signal`; the request asks again.
Placement ask_again(const Ask& ask, Seat& seat, Lease& lease, Signal signal, Micros ttfb,
                    Upstreams& ups, Micros now, Rng& rng);

}  // namespace sluice::admission
