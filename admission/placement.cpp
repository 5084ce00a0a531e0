#include "admission/placement.hpp"

#include <array>

namespace sluice::admission {

std::string_view to_string(Fallback f) {
  switch (f) {
    case Fallback::closed:
      return "closed";
    case Fallback::full:
      return "full";
    case Fallback::connect_failed:
      return "connect_failed";
    case Fallback::replay:
      return "replay";
    case Fallback::first_event:
      return "first_event";
  }
  return "closed";
}

// ---------------------------------------------------------------- Lease

void Lease::end_probe(bool clean) {
  if (std::exchange(probe_, false)) ups_->probe_ended(upstream_, clean);
}

bool Lease::complete(Signal signal, Micros ttfb, Micros now, bool closes) {
  if (!seat_) return false;
  if (!seat_->seated) {  // never seated: only a heavy-cap unit, if any, goes back
    abandon();
    return false;
  }
  Seat& s = *std::exchange(seat_, nullptr);
  end_probe(!closes && (signal == Signal::clean || signal == Signal::slow));
  return ups_->bulkhead(upstream_).release(s, signal, ttfb, now);
}

bool Lease::leave(Signal signal, Micros ttfb, Micros now) {
  if (!seat_) return false;
  Seat& s = *std::exchange(seat_, nullptr);
  end_probe(false);
  return ups_->bulkhead(upstream_).release(s, signal, ttfb, now, /*keep_cap=*/true);
}

void Lease::abandon() {
  Seat& s = *std::exchange(seat_, nullptr);
  ups_->bulkhead(upstream_).abandon(s);
  end_probe(false);
}

// ---------------------------------------------------------------- placement

namespace {

// Alternatives Thompson sampling picks among, with what their bulkheads know
// (successes, failures, mean latency). No allocation.
struct Candidates {
  static constexpr std::size_t kMax = 16;
  std::array<std::size_t, kMax> ids{};
  std::array<Candidate, kMax> known{};
  std::size_t n = 0;
  bool full() const { return n == kMax; }
  void add(std::size_t alt, const Bulkhead& b) {
    ids[n] = alt;
    known[n++] = b.known();
  }
  std::size_t pick(Rng& rng) const { return thompson_pick(std::span(known.data(), n), rng); }
  void drop(std::size_t i) {
    ids[i] = ids[n - 1];
    known[i] = known[--n];
  }
};

void seated(Placement& p, Upstreams& ups, Seat& s, bool probe = false) {
  p.how = Placed::seated;
  p.lease = Lease(ups, p.upstream, s, probe);
}

void moved(Placement& p, std::size_t alt, Fallback why) {
  p.upstream = alt;
  p.fell_back = why;
}

// Seats the request on an alternative that seats it now: a closed one's due
// probe, else one whose lane rules allow it (the chance draw aside), picked by
// Thompson sampling and then asked for real.
bool move_now(const Ask& a, Seat& s, Upstreams& ups, Micros now, Rng& rng, Fallback why,
              Placement& p) {
  Candidates c;
  for (std::size_t alt : a.alternatives) {
    if (alt == a.upstream || c.full()) continue;
    auto verdict = ups.ask_gate(alt, now);
    if (verdict == Verdict::probe) {
      ups.bulkhead(alt).seat_outside(s, now);
      moved(p, alt, why);
      seated(p, ups, s, /*probe=*/true);
      return true;
    }
    if (verdict == Verdict::closed) continue;
    auto& b = ups.bulkhead(alt);
    if (b.would_seat(a.lane, now)) c.add(alt, b);
  }
  while (c.n > 0) {
    auto i = c.pick(rng);
    if (ups.bulkhead(c.ids[i]).ask(s, now, rng, nullptr, false)) {
      moved(p, c.ids[i], why);
      seated(p, ups, s);
      return true;
    }
    c.drop(i);
  }
  return false;
}

// The open alternative a request waits on when none seats it now; false when
// every alternative is closed.
bool wait_on_alternative(const Ask& a, Upstreams& ups, Rng& rng, Fallback why, Placement& p) {
  Candidates c;
  for (std::size_t alt : a.alternatives)
    if (alt != a.upstream && !c.full() && !ups.closed(alt)) c.add(alt, ups.bulkhead(alt));
  if (c.n == 0) return false;
  moved(p, c.ids[c.pick(rng)], why);
  return true;
}

// Why a seat was not given, as the refusal names it: the hold that is the
// upstream's (it was full, its window ended) is queue_timeout.
Reason reason_of(Hold hold) {
  switch (hold) {
    case Hold::heavy_cap:
      return Reason::heavy_cap;
    case Hold::budget:
      return Reason::budget;
    case Hold::reserved:
      return Reason::reserved;
    default:
      return Reason::queue_timeout;
  }
}

// Refused `reason` at p.upstream: enforce answers 503 (Retry-After `retry`);
// observe goes on seated outside the lane rules, so the bulkhead carries the
// load it really has, counted would_shed `reason`.
void refuse(const Ask& a, Seat& s, Upstreams& ups, Micros now, Reason reason,
            std::optional<Millis> retry, Placement& p) {
  p.reason = reason;
  if (a.mode == Mode::observe) {
    ups.bulkhead(p.upstream).seat_outside(s, now);
    p.how = Placed::observed;
    p.lease = Lease(ups, p.upstream, s);
    return;
  }
  p.how = Placed::refused;
  p.retry_after = retry;
}

// Refused for what held it at p.upstream. A budget refusal is told when the
// upstream's quota window resets (its RateLimit-Reset); any other, seed 004's
// queue_retry_after.
void refuse_held(const Ask& a, Seat& s, Upstreams& ups, Micros now, Hold hold, Placement& p) {
  std::optional<Millis> retry;
  if (hold == Hold::budget)
    if (auto b = ups.bulkhead(p.upstream).budget(); b && b->until > now)
      retry = std::chrono::ceil<Millis>(b->until - now);
  if (!retry) retry = queue_retry_after(ups, a.lane, p.upstream, a.waited, now);
  refuse(a, s, ups, now, reason_of(hold), retry, p);
}

// Not seated on p.upstream: a queued seat waits (in observe mode too: a wait
// is not a refusal, and its window bounds it); any other is refused.
void wait_or_refuse(const Ask& a, Seat& s, Upstreams& ups, Micros now, Hold hold, bool queued,
                    Placement& p) {
  if (queued) {
    p.how = Placed::queued;
    p.wait_for = ups.bulkhead(p.upstream).patience(a.lane);
    p.lease = Lease(ups, p.upstream, s);
    return;
  }
  ups.bulkhead(p.upstream).cancel(s, now);  // a heavy-cap unit goes back
  refuse_held(a, s, ups, now, hold, p);
}

}  // namespace

Millis queue_retry_after(Upstreams& ups, Lane lane, std::size_t upstream, Micros waited,
                         Micros now) {
  std::optional<Micros> age;
  if (auto y = ups.youngest(lane, upstream)) age = std::max(Micros{0}, now - *y);
  Millis lease = lease_retry_after(waited, age);
  return std::max(lease, std::chrono::ceil<Millis>(ups.bulkhead(upstream).refusal_wait(lane, now)));
}

Placement place(const Ask& a, Seat& s, Upstreams& ups, Micros now, Rng& rng) {
  Placement p;
  p.upstream = a.upstream;
  s.lane = a.lane;
  s.pinned = a.pinned;
  if (a.delegated) {
    ups.bulkhead(a.upstream).seat_delegated(s, now);
    seated(p, ups, s);
    return p;
  }
  if (a.level_refused) {
    refuse(a, s, ups, now, Reason::level, std::nullopt, p);
    return p;
  }
  auto verdict = ups.ask_gate(a.upstream, now);
  if (verdict == Verdict::probe) {
    ups.bulkhead(a.upstream).seat_outside(s, now);
    seated(p, ups, s, /*probe=*/true);
    return p;
  }
  bool wait_here = !a.movable();
  if (verdict == Verdict::closed) {
    if (a.movable() && move_now(a, s, ups, now, rng, Fallback::closed, p)) return p;
    // No alternative seats it now: it waits for an open one, not for a closed upstream.
    if (!a.movable() || !wait_on_alternative(a, ups, rng, Fallback::closed, p)) {
      refuse(a, s, ups, now, Reason::pool_closed,
             std::chrono::ceil<Millis>(ups.reopen_hint(a.upstream, now)), p);
      return p;
    }
    wait_here = true;
  }
  auto& b = ups.bulkhead(p.upstream);
  Hold hold = Hold::none;
  bool queued = false;
  if (b.ask(s, now, rng, &hold, wait_here, &queued)) {
    seated(p, ups, s);
    return p;
  }
  if (!wait_here) {
    if (move_now(a, s, ups, now, rng, Fallback::full, p)) return p;
    // No alternative seats it now: it waits for its own upstream.
    if (b.ask(s, now, rng, &hold, true, &queued)) {
      seated(p, ups, s);
      return p;
    }
  }
  wait_or_refuse(a, s, ups, now, hold, queued, p);
  return p;
}

Placement timed_out(const Ask& a, Seat& s, Lease& lease, Upstreams& ups, Micros now) {
  Placement p;
  p.upstream = lease.upstream();
  Bulkhead& b = ups.bulkhead(p.upstream);
  if (a.waited < kUnmeasuredWait && b.waits_on(s)) {
    // An estimate never measured exhausted is a start, not a limit: slow
    // start grows it with every answer, and the request waits on.
    p.how = Placed::queued;
    p.wait_for = b.patience(a.lane);
    p.lease = std::move(lease);
    return p;
  }
  Hold hold = ups.bulkhead(p.upstream).cancel(s, now);
  if (s.seated) {  // seated now, or by another thread just before (its on_seated() is on the way)
    p.how = Placed::seated;
    p.lease = std::move(lease);
    return p;
  }
  lease.cancel();  // out of the queue by now: nothing left to give back
  refuse_held(a, s, ups, now, hold, p);
  return p;
}

Placement relocate(const Ask& a, Seat& s, Lease& lease, Signal signal, Micros ttfb, Fallback why,
                   Upstreams& ups, Micros now, Rng& rng) {
  Placement p;
  p.upstream = a.upstream;
  p.decreased = lease.leave(signal, ttfb, now);
  s.lane = a.lane;
  if (!a.delegated && move_now(a, s, ups, now, rng, why, p)) return p;
  if (!wait_on_alternative(a, ups, rng, why, p)) {
    ups.bulkhead(a.upstream).seat_outside(s, now);  // a seat where it was, to end there
    seated(p, ups, s);
    p.how = Placed::stayed;
    return p;
  }
  auto& b = ups.bulkhead(p.upstream);
  Hold hold = Hold::none;
  bool queued = false;
  if (a.delegated) {
    b.seat_delegated(s, now);
    seated(p, ups, s);
  } else if (b.ask(s, now, rng, &hold, true, &queued)) {
    seated(p, ups, s);
  } else {
    wait_or_refuse(a, s, ups, now, hold, queued, p);
  }
  return p;
}

Placement ask_again(const Ask& a, Seat& s, Lease& lease, Signal signal, Micros ttfb, Upstreams& ups,
                    Micros now, Rng& rng) {
  const bool decreased = lease.complete(signal, ttfb, now);
  s.front = true;
  Placement p = place(a, s, ups, now, rng);
  s.front = false;
  p.decreased = decreased;
  return p;
}

}  // namespace sluice::admission
