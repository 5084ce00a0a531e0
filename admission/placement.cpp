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
  }
  return "closed";
}

// ---------------------------------------------------------------- Lease

void Lease::end_probe(bool clean) {
  if (std::exchange(probe_, false)) ups_->probe_ended(upstream_, clean);
}

bool Lease::complete(Signal signal, Micros ttfb, Micros now, Rng& rng, bool closes) {
  if (!seat_) return false;
  if (!seat_->seated) {  // unseated (observe): only a heavy-cap unit, if any, goes back
    abandon();
    return false;
  }
  Seat& s = *std::exchange(seat_, nullptr);
  end_probe(!closes && (signal == Signal::clean || signal == Signal::slow));
  return ups_->bulkhead(upstream_).release(s, signal, ttfb, now, rng);
}

bool Lease::leave(Signal signal, Micros ttfb, Micros now, Rng& rng) {
  if (!seat_) return false;
  Seat& s = *std::exchange(seat_, nullptr);
  end_probe(false);
  return ups_->bulkhead(upstream_).release(s, signal, ttfb, now, rng, /*keep_cap=*/true);
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
    known[n++] = {b.successes(), b.failures(), b.mean_latency()};
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
      ups.bulkhead(alt).seat_probe(s, now);
      moved(p, alt, why);
      seated(p, ups, s, /*probe=*/true);
      return true;
    }
    if (verdict == Verdict::closed) continue;
    auto& b = ups.bulkhead(alt);
    if (decide(b.lanes(), b.census(now), a.lane, 0.0) == Hold::none) c.add(alt, b);
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

// Not seated on p.upstream: observe goes on unseated; a queued seat waits; any
// other is refused queue_timeout.
void wait_or_refuse(const Ask& a, Seat& s, Upstreams& ups, Micros now, Placement& p) {
  if (s.queued && a.mode != Mode::observe) {
    p.how = Placed::queued;
    p.lease = Lease(ups, p.upstream, s);
    return;
  }
  ups.bulkhead(p.upstream).cancel(s, now);  // out of the queue; a heavy-cap unit goes back
  p.reason = Reason::queue_timeout;
  if (a.mode == Mode::observe) {
    p.how = Placed::unseated;
    return;
  }
  p.how = Placed::refused;
  p.retry_after = queue_retry_after(ups, a.lane, p.upstream, a.waited, now);
}

}  // namespace

Millis queue_retry_after(Upstreams& ups, Lane lane, std::size_t upstream, Micros waited,
                         Micros now) {
  std::optional<Micros> age;
  if (auto y = ups.youngest(lane, upstream)) age = std::max(Micros{0}, now - *y);
  return lease_retry_after(waited, age);
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
  auto verdict = ups.ask_gate(a.upstream, now);
  if (verdict == Verdict::probe) {
    ups.bulkhead(a.upstream).seat_probe(s, now);
    seated(p, ups, s, /*probe=*/true);
    return p;
  }
  bool wait_here = !a.movable();
  if (verdict == Verdict::closed) {
    if (a.movable() && move_now(a, s, ups, now, rng, Fallback::closed, p)) return p;
    // No alternative seats it now: it waits for an open one, not for a closed upstream.
    if (!a.movable() || !wait_on_alternative(a, ups, rng, Fallback::closed, p)) {
      p.reason = Reason::pool_closed;
      if (a.mode == Mode::observe) {
        p.how = Placed::unseated;
        return p;
      }
      p.how = Placed::refused;
      p.retry_after = std::chrono::ceil<Millis>(ups.reopen_hint(a.upstream, now));
      return p;
    }
    wait_here = true;
  }
  auto& b = ups.bulkhead(p.upstream);
  if (b.ask(s, now, rng, nullptr, wait_here)) {
    seated(p, ups, s);
    return p;
  }
  if (!wait_here) {
    if (move_now(a, s, ups, now, rng, Fallback::full, p)) return p;
    // No alternative seats it now: it waits for its own upstream.
    if (b.ask(s, now, rng)) {
      seated(p, ups, s);
      return p;
    }
  }
  wait_or_refuse(a, s, ups, now, p);
  return p;
}

Placement relocate(const Ask& a, Seat& s, Lease& lease, Signal signal, Micros ttfb, Fallback why,
                   Upstreams& ups, Micros now, Rng& rng) {
  Placement p;
  p.upstream = a.upstream;
  p.decreased = lease.leave(signal, ttfb, now, rng);
  s.lane = a.lane;
  if (!a.delegated && move_now(a, s, ups, now, rng, why, p)) return p;
  if (!wait_on_alternative(a, ups, rng, why, p)) {
    ups.bulkhead(a.upstream).seat_probe(s, now);  // a seat where it was, to end there
    seated(p, ups, s);
    p.how = Placed::stayed;
    return p;
  }
  auto& b = ups.bulkhead(p.upstream);
  if (a.delegated) {
    b.seat_delegated(s, now);
    seated(p, ups, s);
  } else if (a.mode == Mode::observe) {  // it went out counted admitted: it goes on unseated
    p.how = Placed::unseated;
    p.lease = Lease(ups, p.upstream, s);  // a heavy-cap unit it kept goes back with it
  } else if (b.ask(s, now, rng)) {
    seated(p, ups, s);
  } else {
    wait_or_refuse(a, s, ups, now, p);
  }
  return p;
}

}  // namespace sluice::admission
