// The estimate's law (admission/estimate.hpp), one test per transition and
// rule, on a fake clock (Micros values).
#include "admission/estimate.hpp"

#include <catch2/catch.hpp>

#include "admission/bulkhead.hpp"

using namespace sluice::admission;
using namespace std::chrono_literals;
using Phase = Estimate::Phase;

namespace {

// One answer of a request admitted now at `load` on `route`: its head and its end.
bool answer(Estimate& e, Signal signal, int load, Micros ttfb, Micros t, std::uint16_t route = 0) {
  const std::uint64_t seq = e.next_seq();
  const bool judged = e.on_head(signal, seq, load, route, ttfb, Micros{0}, false, t);
  return e.observe(signal, seq, load, t) || judged;
}

bool answers(Estimate& e, int n, int load, Micros ttfb, Micros t, std::uint16_t route = 0) {
  bool decreased = false;
  for (int i = 0; i < n; ++i)
    decreased = answer(e, Signal::clean, load, ttfb, t, route) || decreased;
  return decreased;
}

// An estimate past slow start at K̂ = K = k, route 0's baseline learnt at `ttfb`.
Estimate at_k(double k, Micros ttfb = 50ms, EstimatePolicy p = {}) {
  Estimate e(p, k, k);
  answers(e, EstimatePolicy::kBaseSamples, static_cast<int>(k) - 1, ttfb, 1s);
  return e;
}

}  // namespace

TEST_CASE("start: the estimate doubles once per interval under demand, and never without",
          "[admission][estimate]") {
  EstimatePolicy p;
  p.seed = 4;
  Estimate e(p);
  REQUIRE(e.phase() == Phase::start);
  CHECK_FALSE(e.maybe_grow(1s));  // no demand
  e.demand();
  CHECK(e.maybe_grow(1s));
  CHECK(e.value() == 8);
  e.demand();
  CHECK_FALSE(e.maybe_grow(1s + p.growth_interval - 1us));  // within the interval
  CHECK(e.maybe_grow(1s + p.growth_interval));
  CHECK(e.value() == 16);
  CHECK(e.phase() == Phase::start);
  CHECK(e.growing());
}

TEST_CASE("start: one more per clean head while requests wait, none on a head that queued",
          "[admission][estimate]") {
  Estimate e;
  e.demand();
  // The route's first answers define its baseline (50 ms); each grows slow start.
  for (int i = 0; i < EstimatePolicy::kBaseSamples; ++i)
    e.on_head(Signal::clean, e.next_seq(), 0, 0, 50ms, Micros{0}, true, 1s);
  CHECK(e.value() == 4 + EstimatePolicy::kBaseSamples);
  const double before = e.value();
  // No request waits: no growth.
  e.on_head(Signal::clean, e.next_seq(), 0, 0, 50ms, Micros{0}, false, 1s);
  CHECK(e.value() == before);
  // A head later than 1.25 x its route's mean (and 10 ms): it queued.
  e.on_head(Signal::clean, e.next_seq(), 0, 0, 80ms, Micros{0}, true, 1s);
  CHECK(e.value() == before);
  e.on_head(Signal::clean, e.next_seq(), 0, 0, 55ms, Micros{0}, true, 1s);
  CHECK(e.value() == before + 1);
}

TEST_CASE("too much: a 429 sets K to the load it met and K̂ to 0.85 of it, once per burst",
          "[admission][estimate]") {
  Estimate e;
  const auto before_burst = e.next_seq();  // admitted before the refusal below
  CHECK(answer(e, Signal::refused, 10, 1ms, 1s));
  CHECK(e.phase() == Phase::hold);
  CHECK(e.carrying() == 10);
  CHECK(e.value() == Catch::Detail::Approx(3.4));  // 0.85 x min(K̂ 4, K 10)
  CHECK(e.why() == Signal::refused);
  // The same burst: a refusal of a request admitted before the decrease changes nothing.
  CHECK_FALSE(e.observe(Signal::refused, before_burst, 3, 1s));
  CHECK(e.decreases() == 1);
}

TEST_CASE("too much: refusals at the K they measured confirm a sharp limit: no margin",
          "[admission][estimate]") {
  EstimatePolicy p;
  p.growth_interval = 10ms;
  Estimate e(p, 20, 20);
  CHECK(answer(e, Signal::refused, 8, 1ms, 1s));  // K 8, K̂ 0.85 x 8
  CHECK(e.value() == Catch::Detail::Approx(6.8));
  e.observe(Signal::clean, e.next_seq(), 7, 1s);  // hold -> grow
  for (int i = 1; i < 20 && e.value() < 8; ++i) {
    e.demand();
    e.maybe_grow(1s + Micros(i * 20'000));
  }
  REQUIRE(e.value() == 8);
  CHECK(answer(e, Signal::refused, 8, 1ms, 2s));  // at K again: sharp, no margin
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 8);
  CHECK(answer(e, Signal::refused, 10, 1ms, 3s));  // above it: a climb ended there
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 10);
}

TEST_CASE("too much: the first refusal under a sharp K keeps K, a second lowers it",
          "[admission][estimate]") {
  Estimate e(EstimatePolicy{}, 20, 20);
  answer(e, Signal::refused, 8, 1ms, 1s);
  e.observe(Signal::clean, e.next_seq(), 7, 1s);
  answer(e, Signal::refused, 8, 1ms, 2s);  // sharp at 8
  REQUIRE(e.carrying() == 8);
  CHECK_FALSE(answer(e, Signal::refused, 6, 1ms, 3s));  // a slot still held
  CHECK(e.carrying() == 8);
  CHECK(answer(e, Signal::refused, 6, 1ms, 4s));  // again: the capacity fell
  CHECK(e.carrying() == 6);
}

TEST_CASE("hold: growth waits for a clean answer from a request admitted after the decrease",
          "[admission][estimate]") {
  Estimate e(EstimatePolicy{}, 8, 8);
  const auto old = e.next_seq();
  answer(e, Signal::refused, 8, 1ms, 1s);
  REQUIRE(e.phase() == Phase::hold);
  e.demand();
  CHECK_FALSE(e.maybe_grow(10s));
  e.observe(Signal::clean, old, 7, 10s);  // admitted before: the same burst
  CHECK(e.phase() == Phase::hold);
  e.observe(Signal::clean, e.next_seq(), 5, 10s);
  CHECK(e.phase() == Phase::grow);
  CHECK(e.maybe_grow(10s));
}

TEST_CASE("grow: logistic toward K, then at K a probe once probe_after has passed",
          "[admission][estimate]") {
  EstimatePolicy p;
  Estimate e(p, 4, 8);
  REQUIRE(e.phase() == Phase::grow);
  e.demand();
  REQUIRE(e.maybe_grow(1s));
  CHECK(e.value() == Catch::Detail::Approx(4 + 0.5 * 4 * (1 - 4.0 / 8)));  // 5
  for (int i = 2; i < 40 && e.value() < 8; ++i) {
    e.demand();
    e.maybe_grow(Micros(i * 1'000'000));
  }
  CHECK(e.value() == 8);  // up to K, never past it by growth
  CHECK(e.phase() == Phase::grow);
  // A decrease sets probe_at: no probe before probe_after.
  EstimatePolicy quick = p;
  quick.growth_interval = 10ms;
  Estimate d(quick, 8, 8);
  answer(d, Signal::refused, 8, 1ms, 100s);
  d.observe(Signal::clean, d.next_seq(), 5, 100s);
  for (int i = 1; i < 20 && d.value() < 8; ++i) {
    d.demand();
    d.maybe_grow(100s + Micros(i * 20'000));
  }
  REQUIRE(d.value() == 8);
  d.demand();
  CHECK_FALSE(d.maybe_grow(100s + p.probe_after - 1us));
  CHECK(d.maybe_grow(100s + p.probe_after));
  CHECK(d.value() == 9);
  CHECK(d.phase() == Phase::probe);
}

TEST_CASE("probe: held past K with no queue, K is the step and the next step doubles",
          "[admission][estimate]") {
  Estimate e = at_k(8);
  e.demand();
  REQUIRE(e.maybe_grow(10s));
  REQUIRE(e.phase() == Phase::probe);
  REQUIRE(e.value() == 9);
  CHECK_FALSE(e.maybe_grow(20s));  // no step while this one is judged
  // Its window: 9 in flight, each as fast as the baseline.
  answers(e, EstimatePolicy::kProbeSamples, 8, 50ms, 11s);
  CHECK(e.phase() == Phase::grow);
  CHECK(e.carrying() == 9);
  e.demand();
  CHECK(e.maybe_grow(11s + 50ms));  // a round trip later, not an interval
  CHECK(e.value() == 11);           // a step of two
}

TEST_CASE("probe: refuted by its window's queue, K̂ back at K and the next probe backs off",
          "[admission][estimate]") {
  EstimatePolicy p;
  Estimate e = at_k(8, 100ms, p);
  e.demand();
  REQUIRE(e.maybe_grow(10s));
  // 9 in flight on an upstream that serves 8: each answer 9/8 of the time.
  CHECK(answers(e, EstimatePolicy::kProbeSamples, 8, Micros(100'000 * 9 / 8), 11s));
  CHECK(e.phase() == Phase::grow);
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 8);
  e.demand();
  CHECK_FALSE(e.maybe_grow(11s + p.probe_after));  // twice probe_after now
  CHECK(e.maybe_grow(11s + 2 * p.probe_after));
  CHECK(e.phase() == Phase::probe);
}

TEST_CASE("probe: a window that never carried past K says nothing: the probe stays open",
          "[admission][estimate]") {
  Estimate e = at_k(8);
  e.demand();
  REQUIRE(e.maybe_grow(10s));
  answers(e, EstimatePolicy::kProbeSamples, 5, 50ms, 11s);  // 6 in flight: no demand past K
  CHECK(e.phase() == Phase::probe);
  CHECK(e.carrying() == 8);
}

TEST_CASE("a queue: a window slower than queue_factor x its baseline sets K by Little's law",
          "[admission][estimate]") {
  Estimate e = at_k(16);
  // 16 in flight, each answer twice the baseline: the upstream serves 8 at once.
  CHECK(answers(e, EstimatePolicy::kQueueSamples, 15, 100ms, 5s));
  CHECK(e.phase() == Phase::hold);
  CHECK(e.carrying() >= 8);  // 8, or 9: the baseline creeps up a little over the window
  CHECK(e.carrying() <= 9);
  CHECK(e.value() == e.carrying());
  CHECK(e.why() == Signal::slow);
  // 1.2 x: under the line, no queue acted on.
  Estimate f = at_k(16);
  CHECK_FALSE(answers(f, EstimatePolicy::kQueueSamples, 15, 60ms, 5s));
  CHECK(f.carrying() == 16);
}

TEST_CASE("a queue is judged per route: a slow route at its own pace is no queue",
          "[admission][estimate]") {
  // Route 0 answers in 0.1 ms, route 4 in 50 ms; both at their own baselines.
  Estimate e(EstimatePolicy{}, 200, 0);
  answers(e, EstimatePolicy::kBaseSamples, 0, 100us, 1s, 0);
  answers(e, EstimatePolicy::kBaseSamples, 0, 50ms, 1s, 4);
  // 200 at once on the slow route, each at its own 50 ms: no queue, no slowness.
  for (int i = 0; i < 200; ++i) {
    REQUIRE(e.classify(200, 4, 50ms) == Signal::clean);
    CHECK_FALSE(answer(e, Signal::clean, 199, 50ms, 2s, 4));
  }
  CHECK(e.decreases() == 0);
  CHECK(e.phase() == Phase::start);
  // Judged against the fast route's baseline, a 60 ms answer is slow; on its own, not.
  CHECK(e.classify(200, 0, 60ms) == Signal::slow);
  CHECK(e.classify(200, 4, 60ms) == Signal::clean);
}

TEST_CASE("a route's first answers define its baseline and never lower the estimate",
          "[admission][estimate]") {
  Estimate e = at_k(8);
  // A new route whose first answers take 500 ms, ten times route 0's.
  CHECK_FALSE(answers(e, EstimatePolicy::kBaseSamples, 7, 500ms, 3s, 8));
  CHECK(e.route(8).known());
  CHECK(e.route(8).mean_us == Catch::Detail::Approx(500'000));
  CHECK(e.decreases() == 0);
}

TEST_CASE("a route's baseline follows answers at its load, not a probe's later ones",
          "[admission][estimate]") {
  RouteBase r;
  for (int i = 0; i < EstimatePolicy::kBaseSamples; ++i) r.add(50'000, 8);
  REQUIRE(r.mean_us == Catch::Detail::Approx(50'000));
  // Later answers at a higher load never carry it up...
  for (int i = 0; i < 100; ++i) r.add(53'000, 12);
  CHECK(r.mean_us == Catch::Detail::Approx(50'000));
  // ...clearly faster ones, at any load, bring it down to within 3 deviations
  // of them (a queue drained)...
  for (int i = 0; i < 20; ++i) r.add(40'000, 12);
  CHECK(r.mean_us < 44'000);
  // ...and at its load it follows the route both ways (slower for good).
  for (int i = 0; i < 400; ++i) r.add(60'000, 8);
  CHECK(r.mean_us > 59'000);
}

TEST_CASE("slow heads: one in a window is noise, two are too much at the window's load",
          "[admission][estimate]") {
  Estimate e = at_k(8);
  const double line = e.slow_above_us(0);
  REQUIRE(line >= 4 * 50'000);
  const auto slow = Micros(static_cast<std::int64_t>(line) + 1000);
  REQUIRE(e.classify(200, 0, slow) == Signal::slow);
  // One slow head among normal ones: not a decrease (alone, nothing at all).
  CHECK_FALSE(answer(e, Signal::slow, 7, slow, 2s));
  CHECK_FALSE(answers(e, EstimatePolicy::kQueueSamples - 1, 7, 50ms, 2s));
  CHECK(e.decreases() == 0);
  // Two in the next window.
  answer(e, Signal::slow, 7, slow, 3s);
  answer(e, Signal::slow, 7, slow, 3s);
  CHECK(answers(e, EstimatePolicy::kQueueSamples - 2, 7, 50ms, 3s));
  CHECK(e.why() == Signal::slow);
  CHECK(e.carrying() == 8);
}

TEST_CASE("an answer late by the proxy's own stall is not judged", "[admission][estimate]") {
  Estimate e = at_k(8);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i) {
    const auto seq = e.next_seq();
    // 300 ms late, of which 260 ms were the proxy's own loop.
    CHECK_FALSE(e.on_head(Signal::clean, seq, 7, 0, 300ms, 260ms, false, 2s));
    e.observe(Signal::clean, seq, 7, 2s);
  }
  CHECK(e.decreases() == 0);
  CHECK(e.route(0).mean_us == Catch::Detail::Approx(50'000));
}

TEST_CASE("429 and 503 are refusals, and a timeout is too much at the load it ended in",
          "[admission][estimate]") {
  Estimate e = at_k(8);
  CHECK(e.classify(429, 0, 1ms) == Signal::refused);
  CHECK(e.classify(503, 0, 1ms) == Signal::refused);
  CHECK(e.classify(500, 0, 1ms) == Signal::clean);
  CHECK(answer(e, Signal::timeout, 6, 30s, 40s));
  CHECK(e.carrying() == 6);
  CHECK(e.why() == Signal::timeout);
}
