// The bulkhead's rules, one test each, on a fake clock (Micros values).
#include "admission/bulkhead.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <deque>
#include <span>
#include <vector>

using namespace sluice::admission;
using namespace std::chrono_literals;
using Catch::Detail::Approx;

namespace {

struct TestSeat : Seat {
  explicit TestSeat(Lane l) { lane = l; }
  int seated_calls = 0;
  bool counted = false;  // seen seated by a test that tracks its seats
  void on_seated() override { ++seated_calls; }
};

struct CountCap : LeaseCap {
  explicit CountCap(int limit) : cap(limit) {}
  int cap, taken = 0;
  bool try_take() override { return taken < cap ? (++taken, true) : false; }
  void give_back() override { --taken; }
};

Census census(double estimate, bool measured, Seats running, Seats waiting = {}) {
  Census c;
  c.estimate = estimate;
  c.measured = measured;
  c.running = running;
  c.waiting = waiting;
  return c;
}

// Lanes: bulk, standard, heavy.
Seats seats(int bulk, int standard, int heavy) { return {bulk, standard, heavy}; }

Estimate measured(double k) { return Estimate(EstimatePolicy{}, k, k); }

constexpr double kCertain = 0.999999;

// No floors: every slot is borrowed, by the default weights (bulk 1, standard 4, heavy 2).
LanePolicy lend_all() {
  LanePolicy p;
  p.floors = {0, 0, 0};
  return p;
}

// A probe past K is judged on a window of its own requests before the next
// step: answers at the estimate's load, as fast as before (the probe succeeded).
// `samples` clean answers at `load` (and the request), each after `ttfb`, at
// `t`: whether any of them decreased the estimate.
bool answer_window(Estimate& e, int samples, int load, Micros ttfb, Micros t) {
  bool decreased = false;
  for (int i = 0; i < samples; ++i)
    decreased = e.observe(Signal::clean, e.next_seq(), load, ttfb, t) || decreased;
  return decreased;
}

void answer_probe(Estimate& e, Micros t, Micros ttfb = 1ms) {
  const int load = static_cast<int>(e.value()) - 1;
  for (int i = 0; i < EstimatePolicy::kProbeSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), load, ttfb, t);
}

// Asks with every seat not yet seated or queued, re-asking on ticks, until
// `running` of their lane run (chance may refuse a few asks along the way).
// Four slots, the baseline measured on four clean heads of `head`.
Estimate four_slots(Micros head, EstimatePolicy p = {}) {
  Estimate e(p, 4, 4);
  for (int i = 0; i < 4; ++i) e.observe(Signal::clean, e.next_seq(), 0, head, 1s);
  return e;
}

void fill(Bulkhead& b, std::span<TestSeat> seats, int running, Rng& rng) {
  const auto l = index(seats.front().lane);
  for (int i = 0; i < 100 && b.census().running[l] < running; ++i) {
    for (auto& s : seats)
      if (!s.seated && !s.queued) b.ask(s, 0us, rng);
    b.tick(Micros(i));
  }
}

}  // namespace

TEST_CASE("floors are shared by largest remainder among the lanes that have work",
          "[admission][bulkhead]") {
  LanePolicy p;  // floors bulk 0.1, standard 0.5, heavy 0.2
  // 7 slots: 0.7, 3.5, 1.4 -> 0, 3, 1 and the fifth seat to the largest remainder (bulk).
  CHECK(guaranteed(p, census(7, true, seats(1, 1, 1))) == seats(1, 3, 1));
  // A lane without work gets nothing: heavy is idle.
  CHECK(guaranteed(p, census(10, true, seats(1, 1, 0))) == seats(1, 5, 0));
  // The asking lane has work.
  CHECK(guaranteed(p, census(10, true, seats(1, 1, 0)), Lane::heavy) == seats(1, 5, 2));
}

TEST_CASE("a lane with waiting work and a non-zero floor gets at least one slot",
          "[admission][bulkhead]") {
  LanePolicy p;
  // 3 slots: 0.3, 1.5, 0.6 -> 0, 1, 0 + one remainder seat to heavy; bulk waits: at least one.
  CHECK(guaranteed(p, census(3, true, seats(0, 1, 1), seats(1, 0, 0))) == seats(1, 1, 1));
  p.floors = {0.0, 0.5, 0.2};
  CHECK(guaranteed(p, census(3, true, seats(0, 1, 1), seats(1, 0, 0)))[0] == 0);
}

TEST_CASE(
    "a lane below its floor is admitted while a slot is free, and beyond a never-measured estimate",
    "[admission][bulkhead]") {
  LanePolicy p;
  // Bulk borrowed 9 of 10; standard (floor 5) takes the last free slot.
  CHECK(decide(p, census(10, true, seats(9, 0, 0)), Lane::standard, kCertain) == Hold::none);
  // Full on a measured bulkhead: even the floor waits for a release.
  CHECK(decide(p, census(10, true, seats(10, 0, 0)), Lane::standard, kCertain) == Hold::full);
  // Never measured: the estimate is a conservative start, the floor is admitted.
  CHECK(decide(p, census(10, false, seats(10, 0, 0)), Lane::standard, kCertain) == Hold::none);
}

TEST_CASE("a borrower is refused while the free slots are owed to lanes below their floors",
          "[admission][bulkhead]") {
  LanePolicy p;
  p.floors = {0.5, 0.3, 0.2};
  // Standard at its floor (3), heavy at its floor (2), bulk (floor 5) waits with none running:
  // the 5 free slots are owed to bulk.
  auto c = census(10, true, seats(0, 3, 2), seats(1, 0, 0));
  CHECK(decide(p, c, Lane::standard, kCertain) == Hold::reserved);
  // One slot more than is owed (bulk runs one of its five): the borrower goes.
  c.running = seats(1, 3, 1);
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::none);
}

TEST_CASE("the borrowed part goes to the waiting lane with the least borrowed per weight",
          "[admission][bulkhead]") {
  const LanePolicy p = lend_all();
  // Standard borrowed 4 ((4 + 1) / 4 with the slot it asks for), bulk 2 ((2 + 1) / 1),
  // 14 slots free.
  auto c = census(20, true, seats(2, 4, 0), seats(1, 1, 0));
  CHECK(decide(p, c, Lane::bulk, 0.0) == Hold::fair_share);
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::none);
  // Equal borrowed per weight, the slot counted ((3 + 1) / 4 = (0 + 1) / 1): the
  // heavier weight goes first.
  c.running = seats(0, 3, 0);
  CHECK(decide(p, c, Lane::bulk, 0.0) == Hold::fair_share);
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::none);
}

TEST_CASE(
    "the borrowed part is shared by weight however few the slots: weight 4 borrows four for each "
    "one of weight 1",
    "[admission][bulkhead]") {
  const LanePolicy p = lend_all();
  // Three slots, standard borrows one of them, bulk none; both wait for the
  // last. Ranked on what each holds, bulk's none went first, and the two lanes
  // took turns at that slot.
  auto c = census(3, true, seats(0, 1, 0), seats(1, 1, 0));
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::none);
  CHECK(decide(p, c, Lane::bulk, 0.0) == Hold::fair_share);
  // Standard's fourth goes before bulk's first (a tie: the heavier weight), its fifth after.
  c = census(8, true, seats(0, 3, 0), seats(1, 1, 0));
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::none);
  CHECK(decide(p, c, Lane::bulk, 0.0) == Hold::fair_share);
  c.running = seats(0, 4, 0);
  CHECK(decide(p, c, Lane::standard, 0.0) == Hold::fair_share);
  CHECK(decide(p, c, Lane::bulk, 0.0) == Hold::none);
}

TEST_CASE(
    "a marginal admission is certain while 30 % is free, impossible at the estimate and flatter "
    "for lighter lanes",
    "[admission][bulkhead]") {
  LanePolicy p;  // weights bulk 1, standard 4: bulk's exponent is 4
  CHECK(marginal_probability(p, census(10, true, seats(7, 0, 0)), Lane::bulk) == 1.0);
  CHECK(marginal_probability(p, census(10, true, seats(10, 0, 0)), Lane::standard) == 0.0);
  double previous = 1.0;
  for (int running = 8; running <= 10; ++running) {
    double ps = marginal_probability(p, census(10, true, seats(0, running, 0)), Lane::standard);
    double pb = marginal_probability(p, census(10, true, seats(0, running, 0)), Lane::bulk);
    CHECK(ps < previous);
    if (running < 10) CHECK(pb < ps);
    previous = ps;
  }
  // Half way (15 % free): smoothstep(0.5) = 0.5 for standard, 0.5^4 for bulk.
  auto c = census(20, true, seats(2, 15, 0));  // both beyond their floors
  CHECK(marginal_probability(p, c, Lane::standard) == Approx(0.5));
  CHECK(marginal_probability(p, c, Lane::bulk) == Approx(0.0625));
  CHECK(decide(p, c, Lane::standard, 0.4) == Hold::none);
  CHECK(decide(p, c, Lane::bulk, 0.4) == Hold::chance);
}

TEST_CASE("slow start doubles the estimate once per interval, and only under demand",
          "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 4;
  p.growth_interval = 250ms;
  Estimate e(p);
  CHECK_FALSE(e.maybe_grow(1s));  // no demand: an idle pool does not grow
  e.demand();
  CHECK(e.maybe_grow(1s));
  CHECK(e.value() == 8);
  e.demand();
  CHECK_FALSE(e.maybe_grow(1s + 249ms));
  CHECK(e.maybe_grow(1s + 250ms));
  CHECK(e.value() == 16);
  CHECK(e.slow_start());
  // Never faster than the upstream answers: a baseline of 2 s stretches the interval.
  for (int i = 0; i < 20; ++i) e.observe(Signal::clean, 0, 0, 2s, 2s);
  e.demand();
  CHECK_FALSE(e.maybe_grow(3s));
  CHECK(e.maybe_grow(3s + 250ms));
}

TEST_CASE("after the first decrease the estimate grows logistically toward K, then probes by one",
          "[admission][bulkhead]") {
  EstimatePolicy p;
  Estimate e(p, 17, 20);
  std::vector<double> steps;
  Micros t = 1s;
  for (int i = 0; i < 12 && e.value() < 22; ++i, t += 1s) {
    double before = e.value();
    e.demand();
    REQUIRE(e.maybe_grow(t));
    steps.push_back(e.value() - before);
    answer_probe(e, t + 100ms);
  }
  REQUIRE(steps.size() >= 4);
  CHECK(steps[0] == Approx(0.5 * 17 * (1 - 17.0 / 20)));
  CHECK(steps[1] < steps[0]);  // slower as it nears K
  CHECK(steps[2] < steps[1]);
  CHECK(steps.back() == Approx(1.0));  // above K: one at a time
  CHECK(e.value() >= 20);
}

TEST_CASE("past K, the first probe waits probe_after from the decrease, the next its judgement",
          "[admission][bulkhead]") {
  EstimatePolicy p;  // growth 250 ms, probe_after 1 s
  Estimate e(p, 16, 0);
  e.observe(Signal::refused, e.next_seq(), 2, 1ms, 10s);  // K = 2, K̂ = 1.7 at 10 s
  e.observe(Signal::clean, e.next_seq(), 1, 50ms, 10s);   // recovered
  // Below K, logistic steps of at least 0.25: at K by 10.5 s.
  e.demand();
  REQUIRE(e.maybe_grow(10s + 250ms));
  e.demand();
  REQUIRE(e.maybe_grow(10s + 500ms));
  REQUIRE(e.value() >= 2);
  const double at_k = e.value();
  // Past K, the next growth is a probe: not before 1 s after the decrease.
  e.demand();
  CHECK_FALSE(e.maybe_grow(10s + 750ms));
  CHECK_FALSE(e.maybe_grow(10s + 999ms));
  CHECK(e.maybe_grow(11s));
  CHECK(e.value() == Approx(at_k + 1));
  e.demand();
  CHECK_FALSE(e.maybe_grow(11s + 249ms));
  CHECK_FALSE(e.maybe_grow(11s + 250ms));  // the probe's own window is not judged yet
  answer_probe(e, 11s + 250ms);
  CHECK(e.maybe_grow(11s + 250ms));  // the next probe, once this one held
  CHECK(e.value() == Approx(at_k + 2));
}

TEST_CASE("past a probe that held, the next step comes a round trip after it, not an interval",
          "[admission][bulkhead]") {
  // An upstream of 50 ms whose capacity was 4 and serves 8 again (the halve
  // shape's return): each probe that held says it grew, and nothing has said
  // "too much" since. Growth 250 ms.
  Estimate e(EstimatePolicy{}, 4, 4);
  answer_window(e, 16, 3, 50ms, 1s);  // the baseline and the floor: 50 ms
  REQUIRE(e.baseline() == 50ms);
  e.demand();
  REQUIRE(e.maybe_grow(2s));
  REQUIRE(e.value() == 5);
  answer_probe(e, 2s + 60ms, 50ms);  // 5 in flight in the floor's time: it held
  e.demand();
  CHECK(e.maybe_grow(2s + 60ms));  // a round trip after the step, not 250 ms
  CHECK(e.value() == 6);
  answer_probe(e, 2s + 100ms, 50ms);
  e.demand();
  CHECK_FALSE(e.maybe_grow(2s + 100ms));  // judged, but not a round trip after the last step
  CHECK(e.maybe_grow(2s + 110ms));
  CHECK(e.value() == 7);
  // A window that never carried past K (4 in flight: the step's slot not
  // used) says nothing of room: the probe stays open, and K̂ steps no further,
  // however long, until a window at its own load judges it.
  answer_window(e, EstimatePolicy::kProbeSamples, 3, 50ms, 2s + 150ms);
  e.demand();
  CHECK_FALSE(e.maybe_grow(2s + 360ms));
  answer_window(e, EstimatePolicy::kProbeSamples, 3, 50ms, 2s + 400ms);
  e.demand();
  CHECK_FALSE(e.maybe_grow(3s));
  CHECK(e.value() == 7);
  answer_probe(e, 3s + 10ms, 50ms);  // 7 in flight in the floor's time: it held
  e.demand();
  CHECK(e.maybe_grow(3s + 60ms));
  CHECK(e.value() == 8);
  // A probe its queue refuted: back at K, and the next waits twice probe_after.
  answer_probe(e, 3s + 100ms, 80ms);
  CHECK(e.value() == 4);
  e.observe(Signal::clean, e.next_seq(), 3, 50ms, 3s + 200ms);
  e.demand();
  CHECK_FALSE(e.maybe_grow(5s + 99ms));
  CHECK(e.maybe_grow(5s + 100ms));
}

namespace {
// Past K (8) on an upstream that answers in 50 ms: the floor, from one first window.
Estimate at_k_with_floor() {
  Estimate e(EstimatePolicy{}, 8, 8);
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, 50ms, 1s);
  return e;
}
constexpr Micros kNineOnEight{56'250};  // 9 in flight, 8 served at once: 9/8 of 50 ms
}  // namespace

TEST_CASE("a probe past K is judged on a short window of its own requests, before its next step",
          "[admission][bulkhead]") {
  Estimate e = at_k_with_floor();
  REQUIRE(e.queue_floor() == 50ms);
  const auto sent_at_k = e.next_seq();
  e.demand();
  REQUIRE(e.maybe_grow(2s));
  REQUIRE(e.value() == 9);
  // Requests sent at K, answered after the probe's queue formed: not its window.
  for (int i = 0; i < EstimatePolicy::kProbeSamples; ++i)
    CHECK_FALSE(e.observe(Signal::clean, sent_at_k, 8, kNineOnEight, 2s + 50ms));
  CHECK(e.value() == 9);
  e.demand();
  CHECK_FALSE(e.maybe_grow(2s + 500ms));  // no next step before this one is judged
  // Its own: 9 in flight answered in 9/8 of the floor, a queue. The window's
  // last answer judges it, and K̂ goes back to K.
  for (int i = 1; i < EstimatePolicy::kProbeSamples; ++i)
    CHECK_FALSE(e.observe(Signal::clean, e.next_seq(), 8, kNineOnEight, 2s + 600ms));
  CHECK(e.observe(Signal::clean, e.next_seq(), 8, kNineOnEight, 2s + 600ms));
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 8);
}

TEST_CASE(
    "a probe a stall refuted leaves a K refusals measured sharp: the next refusal under it "
    "keeps it",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  answer_window(e, EstimatePolicy::kFirstQueueSamples, 3, 50ms, 1s);  // the floor: 50 ms at 4
  // Refused above 8, twice: a sharp capacity, K̂ = K = 8.
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 8, 50ms, 2s));
  e.observe(Signal::clean, e.next_seq(), 6, 50ms, 2s + 100ms);
  for (int i = 1; i < 40 && e.value() <= 8; ++i) {
    e.demand();
    if (e.maybe_grow(2s + i * 250ms)) answer_probe(e, 2s + i * 250ms, 50ms);
  }
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 8, 50ms, 20s));
  REQUIRE(e.value() == 8);
  e.observe(Signal::clean, e.next_seq(), 7, 50ms, 20s + 100ms);
  // The next probe's window meets a stall of the upstream: 9 in flight,
  // answered in 60 ms, which reads as a queue. The probe is refuted, K stays.
  e.demand();
  REQUIRE(e.maybe_grow(22s));
  REQUIRE(e.value() == 9);
  answer_probe(e, 22s + 100ms, 60ms);
  REQUIRE(e.value() == 8);
  REQUIRE(e.carrying() == 8);
  // A refusal under K (a slot the upstream still held for an answer just
  // read): the first keeps K, as it does under any sharp K.
  CHECK_FALSE(e.observe(Signal::refused, e.next_seq(), 7, 50ms, 23s));
  CHECK(e.carrying() == 8);
  CHECK(e.value() == 8);
}

TEST_CASE("a probe's window at K that queued refutes the probe and leaves K where it was",
          "[admission][bulkhead]") {
  // The step's requests past K queued at the upstream, and the window's mean
  // load is K (the step's slot busy part of the time): the probe made that
  // queue. K̂ goes back to K, no lower, and steps no further.
  Estimate e = at_k_with_floor();
  e.demand();
  REQUIRE(e.maybe_grow(2s));
  REQUIRE(e.value() == 9);
  for (int i = 0; i < EstimatePolicy::kProbeSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, kNineOnEight, 2s + 100ms);
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 8);
  e.demand();
  CHECK_FALSE(e.maybe_grow(2s + 500ms));
}

TEST_CASE(
    "a probe past a K the queue measured that holds makes K the step: a later probe that fails "
    "comes back to it",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)  // the floor: 50 ms at 4
    e.observe(Signal::clean, e.next_seq(), 3, 50ms, 1s);
  // Slow start overshot to 20 in flight on an upstream of 7: 20/7 of the floor.
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 19, Micros(142'857), 1s + 500ms);
  REQUIRE(e.carrying() == 7);
  REQUIRE(e.value() == 7);
  e.observe(Signal::clean, e.next_seq(), 6, 50ms, 2s);  // served at K: growth may go on
  // The upstream serves 9 now: the probe to 8 holds (answered in the floor's time).
  e.demand();
  REQUIRE(e.maybe_grow(2s + 500ms));
  REQUIRE(e.value() == 8);
  answer_probe(e, 2s + 600ms, 50ms);
  CHECK(e.carrying() == 8);
  e.demand();
  REQUIRE(e.maybe_grow(2s + 850ms));  // the next step an interval later
  answer_probe(e, 2s + 950ms, 50ms);  // 9 held too
  CHECK(e.carrying() == 9);
  // 10 in flight answered in 10/9 of the floor: the probe fails, back at 9,
  // not at the 7 before the climb.
  e.demand();
  REQUIRE(e.maybe_grow(3s + 200ms));
  REQUIRE(e.value() == 10);
  answer_probe(e, 3s + 300ms, Micros(55'556));
  CHECK(e.value() == 9);
  CHECK(e.carrying() == 9);
}

TEST_CASE("a probe that held past 11 in flight is no evidence of room: K stays",
          "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 32;
  Estimate e(p);
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)  // the floor: 50 ms at 4
    e.observe(Signal::clean, e.next_seq(), 3, 50ms, 1s);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)  // 40 in flight on 20: twice the floor
    e.observe(Signal::clean, e.next_seq(), 39, 100ms, 1s + 500ms);
  REQUIRE(e.carrying() == 20);
  e.observe(Signal::clean, e.next_seq(), 19, 50ms, 2s);
  // 21 in flight on an upstream of 20 answer in 21/20 of the floor: within the
  // probe's tolerance, so the probe is not refuted, and not evidence either.
  e.demand();
  REQUIRE(e.maybe_grow(2s + 600ms));
  REQUIRE(e.value() == 21);
  answer_probe(e, 2s + 700ms, 52'500us);
  CHECK(e.carrying() == 20);
}

TEST_CASE(
    "probes its queue refuted in a row wait twice as long each time, up to 4x, until a probe "
    "holds",
    "[admission][bulkhead]") {
  Estimate e = at_k_with_floor();
  // A probe at t, judged failed 100 ms later: one past K answered in (K + 1) / K
  // of the floor.
  auto failed_probe = [&](Micros t) {
    const double k = e.carrying();
    e.demand();
    REQUIRE(e.maybe_grow(t));
    answer_probe(e, t + 100ms, Micros(static_cast<std::int64_t>(50'000 * (k + 1) / k)));
    REQUIRE(e.value() == k);
    e.observe(Signal::clean, e.next_seq(), static_cast<int>(k) - 1, 50ms,
              t + 150ms);  // served at K since
  };
  failed_probe(2s);  // judged at 2.1 s
  e.demand();
  CHECK_FALSE(e.maybe_grow(4s + 99ms));  // 2 x probe_after
  failed_probe(4s + 100ms);              // judged at 4.2 s
  e.demand();
  CHECK_FALSE(e.maybe_grow(8s + 199ms));  // 4 x
  failed_probe(8s + 200ms);               // judged at 8.3 s
  e.demand();
  CHECK_FALSE(e.maybe_grow(12s + 299ms));  // 4 x still: the most
  REQUIRE(e.maybe_grow(12s + 300ms));
  // This one held (answered as fast as the floor): the next step is an interval
  // away, and the count of failures starts over.
  answer_probe(e, 12s + 400ms, 50ms);
  REQUIRE(e.value() == 9);
  failed_probe(12s + 550ms);  // judged at 12.65 s, back at 9
  e.demand();
  CHECK_FALSE(e.maybe_grow(14s + 649ms));
  CHECK(e.maybe_grow(14s + 650ms));  // 2 x: the first failure in a row
}

TEST_CASE(
    "a K the queue rule measured one too many is lowered by one when a window at K shows a "
    "queue, once",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  answer_window(e, EstimatePolicy::kFirstQueueSamples, 3, 50ms, 1s);  // the floor: 50 ms
  // Slow start overshot: 20 in flight answered in 105.6 ms reads as 9.47 served
  // at once (Little's law), and rounds to 9 on an upstream that serves 8.
  REQUIRE(answer_window(e, EstimatePolicy::kQueueSamples, 19, 105'600us, 2s));
  REQUIRE(e.carrying() == 9);
  REQUIRE(e.value() == 9);
  // At K, 9 in flight answered in 9/8 of the floor: 8 served at once, under the
  // 1.5x line. K is one too many.
  CHECK(answer_window(e, EstimatePolicy::kQueueSamples, 8, kNineOnEight, 3s));
  CHECK(e.carrying() == 8);
  CHECK(e.value() == 8);
  // At the new K, answers as slow again: an upstream now slower, not a queue
  // (a stale floor reads the same). Once per K measured: K stays.
  CHECK_FALSE(answer_window(e, EstimatePolicy::kQueueSamples, 7, kNineOnEight, 4s));
  CHECK(e.carrying() == 8);
}

TEST_CASE(
    "on an upstream faster than the least queue acted on, a window's noise is no queue of one: "
    "K is not lowered at K, no window under K, and a probe holds",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  answer_window(e, EstimatePolicy::kFirstQueueSamples, 3, 1ms, 1s);  // the floor: 1 ms at 4
  // A busy host: 20 in flight answered in 11 ms, 10 ms over the floor. The
  // queue rule acts (Little's law: 20 x 1 / 11, 2 at once).
  REQUIRE(answer_window(e, EstimatePolicy::kQueueSamples, 19, 11ms, 2s));
  REQUIRE(e.carrying() == 2);
  REQUIRE(e.value() == 2);
  // At K, 2 in flight answered in twice the floor: 1 at once by Little's law,
  // but a queue of one would have waited 2 ms, under kQueueMinGap. K stays,
  // and K̂ with it (no window one under K).
  CHECK_FALSE(answer_window(e, EstimatePolicy::kQueueSamples, 1, 2ms, 3s));
  CHECK(e.carrying() == 2);
  CHECK(e.value() == 2);
  // A probe to 3, answered in 3 ms: a queue of one would have waited 6 ms.
  // It holds: K is the step.
  e.observe(Signal::clean, e.next_seq(), 1, 1ms, 4s);
  e.demand();
  REQUIRE(e.maybe_grow(4s));
  REQUIRE(e.value() == 3);
  answer_probe(e, 4s + 100ms, 3ms);
  CHECK(e.carrying() == 3);
  CHECK(e.value() == 3);
}

TEST_CASE(
    "a refusal's wait: after the overload so far or as the earlier ones lasted and the queues, "
    "a turn behind every client refused before it",
    "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, four_slots(100ms));
  Rng rng(1);
  std::deque<TestSeat> seats;
  for (int i = 0; i < 4; ++i) {
    seats.emplace_back(Lane::standard);
    REQUIRE(b.ask(seats.back(), 1s, rng));
  }
  for (int i = 0; i < 7; ++i) {
    seats.emplace_back(Lane::standard);
    REQUIRE_FALSE(b.ask(seats.back(), 1s, rng));
  }
  constexpr auto kTurn = 25ms;  // 100 ms over 4 slots, none busy before
  // The 7 waiting, then this one's turn.
  CHECK(b.refusal_wait(Lane::standard, 10s) == 8 * kTurn);
  // Three more at once: each a turn behind the one before.
  CHECK(b.refusal_wait(Lane::standard, 10s) == 9 * kTurn);
  CHECK(b.refusal_wait(Lane::standard, 10s) == 10 * kTurn);
  // Refusals every second since 10 s: at 15 s they have lasted 5 s, and the
  // line (due by 10.25 s) is long past: after the 5 s and the queue.
  for (int t = 11; t <= 14; ++t) b.refusal_wait(Lane::standard, Micros(std::chrono::seconds(t)));
  CHECK(b.refusal_wait(Lane::standard, 15s) == 5s + 8 * kTurn);
  // A line still ahead is joined at its end, whatever the overload's age.
  for (int i = 0; i < 400; ++i) b.refusal_wait(Lane::standard, 15s);  // due by 30.2 s
  CHECK(b.refusal_wait(Lane::standard, 16s) == 30s + 200ms + kTurn - 16s);
  // A gap longer than kRefusalGap ends the episode: the next one is told at
  // least what the last one lasted (6 s), an overload like it, and joins the
  // line if it is still ahead.
  const auto next = 16s + Bulkhead::kRefusalGap + 1ms;
  CHECK(b.refusal_wait(Lane::standard, next) == 30s + 200ms + 2 * kTurn - next);
  // That one was a blip: one client against the 409 of the 6 s, whose weight
  // it hardly moves (see the memory's own test). The 7 still waiting are no
  // turns on top: the overload remembered is the whole of one, its queues
  // come and gone in it.
  const double kept = 409 * std::exp2(-1.0 / 409);
  CHECK(b.refusal_wait(Lane::standard, 40s).count() == Approx(6e6 * kept / (kept + 1) + 25'000));
  // Per lane: bulk's line starts on its own.
  CHECK(b.refusal_wait(Lane::bulk, 50s) == 8 * kTurn);
  for (int i = 0; i < 10; ++i) b.refusal_wait(Lane::bulk, 50s);
  CHECK(b.refusal_wait(Lane::bulk, 50s) == 19 * kTurn);
  // But bulk borrows what standard leaves: standard's refused, told less, come
  // back ahead of bulk's, each a turn.
  b.refusal_wait(Lane::standard, 50s);
  b.refusal_wait(Lane::standard, 50s);
  CHECK(b.refusal_wait(Lane::bulk, 50s) == 22 * kTurn);
}

TEST_CASE(
    "the overload remembered: the episodes' mean length, each weighed by the clients it refused, "
    "the older ones' weight halved by a later one as big, hardly moved by a blip",
    "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, four_slots(100ms));
  constexpr auto kTurn = 25ms;  // 100 ms over 4 slots, none busy before
  // An overload: 100 clients refused over 9.9 s.
  for (int i = 0; i < 100; ++i) b.refusal_wait(Lane::standard, Micros(100'000 * i));
  // What the next episode will be told against, as /admin/state shows it:
  // nothing while the first goes on, then its 9.9 s and 100 clients.
  CHECK(b.view(10s).lanes[index(Lane::standard)].remembered_clients == 0);
  const auto seen = b.view(20s).lanes[index(Lane::standard)];
  CHECK(seen.remembered_overload == 9900ms);
  CHECK(seen.remembered_clients == 100);
  // The next episode, 20 s on, is told the 9.9 s first.
  CHECK(b.refusal_wait(Lane::standard, 30s) == 9900ms + kTurn);
  // That one was a blip, one client: it weighs 1 against the first's 100,
  // which it leaves 2^(-1/100) of their weight (halved per episode, a few
  // such blips erased the 9.9 s: clients refused in it, refused again when
  // they came back).
  const double first = 100 * std::exp2(-1.0 / 100);
  const double blip = 9.9 * first / (first + 1);
  CHECK(blip > 9.8);
  CHECK(b.refusal_wait(Lane::standard, 40s).count() == Approx(1e6 * blip + 25'000));
  // Another overload as big, 3 s long (40 s included): its 101 clients about
  // halve the weight of the blip's and the first's together.
  for (int i = 1; i < 101; ++i) b.refusal_wait(Lane::standard, 40s + Micros(30'000 * i));
  const double older = (first + 1) * std::exp2(-101 / (first + 1));
  CHECK(older == Approx((first + 1) / 2).epsilon(0.01));
  const double both = (blip * older + 3.0 * 101) / (older + 101);
  CHECK(b.refusal_wait(Lane::standard, 60s).count() == Approx(1e6 * both + 25'000));
  // An overload's length is the span its refusals would cover were they even,
  // twice their mean age: 100 clients refused in 1 s, then a sparse tail of
  // 10 (clients refused in it, come back early), one every 1.5 s, 16 s in all.
  double ages = 0;
  for (int i = 0; i < 100; ++i) {
    b.refusal_wait(Lane::bulk, 100s + Micros(10'000 * i));
    ages += 0.01 * i;
  }
  for (int k = 1; k <= 10; ++k) {
    b.refusal_wait(Lane::bulk, 100s + Micros(990'000 + 1'500'000 * k));
    ages += 0.99 + 1.5 * k;
  }
  const double lasted = 2 * ages / 110;
  CHECK(lasted < 3);  // not the 16 s the refusals spanned
  CHECK(b.refusal_wait(Lane::bulk, 140s).count() == Approx(1e6 * lasted + 25'000));
}

TEST_CASE(
    "a bulk overload, remembered, lasts until the other lanes' clients it saw refused are due "
    "back",
    "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, four_slots(100ms));
  constexpr auto kTurn = 25ms;  // 100 ms over 4 slots, none busy before
  // Bulk refuses 100 clients over 0.99 s; standard 40 at 0.5 s, due back by
  // 0.5 s + 40 turns = 1.5 s, after bulk's overload (0.99 s) ended.
  for (int i = 0; i < 100; ++i) {
    b.refusal_wait(Lane::bulk, Micros(10'000 * i));
    if (i == 50)
      for (int k = 0; k < 40; ++k) b.refusal_wait(Lane::standard, 500ms);
  }
  // The next bulk overload is told 1.5 s, not 0.99 s: told that, its first
  // clients would come back among standard's.
  CHECK(b.refusal_wait(Lane::bulk, 20s) == 1500ms + kTurn);
  // Standard's refused outside a bulk overload are no part of one: 40 at 30 s
  // (due by 31 s), after bulk's one refusal at 20 s ended. That one lasted 0
  // and weighs 1 against the first's 100.
  for (int k = 0; k < 40; ++k) b.refusal_wait(Lane::standard, 30s);
  const double first = 100 * std::exp2(-1.0 / 100);
  const double remembered = 1.5 * first / (first + 1);
  CHECK(b.refusal_wait(Lane::bulk, 40s).count() == Approx(1e6 * remembered + 25'000));
  // A line still ahead when bulk's overload starts reaches into it too:
  // standard's 40 at 50 s are due by 51 s; bulk's 100 at 50.5 s (after its
  // one at 40 s, which lasted 0 and weighs 1) end at once but last 0.5 s.
  for (int k = 0; k < 40; ++k) b.refusal_wait(Lane::standard, 50s);
  for (int i = 0; i < 100; ++i) b.refusal_wait(Lane::bulk, 50s + 500ms);
  const double second = (first + 1) * std::exp2(-1 / (first + 1));
  const double before = remembered * second / (second + 1);
  const double third = (second + 1) * std::exp2(-100 / (second + 1));
  const double reached = (before * third + 0.5 * 100) / (third + 100);
  CHECK(b.refusal_wait(Lane::bulk, 60s).count() == Approx(1e6 * reached + 25'000));
}

TEST_CASE("a refused stream's turn is the seat time a stream holds, in requests' holds",
          "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, four_slots(100ms));
  Rng rng(1);
  constexpr auto kTurn = 25ms;  // 100 ms over 4 slots, none busy before
  // Before a stream's hold was measured, a stream's turn is a request's.
  CHECK(b.refusal_wait(Lane::heavy, 1s) == kTurn);
  CHECK(b.refusal_wait(Lane::heavy, 1s) == 2 * kTurn);
  // A request holds its seat 100 ms, a stream 2 s: a stream's turn is 20.
  // One with no clean answer (its client left first) is no measure of one.
  std::deque<TestSeat> seats;
  auto held = [&](Lane lane, Micros from, Micros to, Signal signal = Signal::clean) {
    seats.emplace_back(lane);
    REQUIRE(b.ask(seats.back(), from, rng));
    b.release(seats.back(), signal, 100ms, to);
  };
  held(Lane::standard, 10s, 10s + 100ms);
  held(Lane::heavy, 10s, 12s);
  held(Lane::heavy, 12s, 12s + 10ms, Signal::none);
  CHECK(b.refusal_wait(Lane::heavy, 20s) == 20 * kTurn);
  CHECK(b.refusal_wait(Lane::heavy, 20s) == 40 * kTurn);
  // Standard's turn stays a request's.
  CHECK(b.refusal_wait(Lane::standard, 20s) == kTurn);
  // The mean follows the streams' lives: one of 4 s moves it an eighth of
  // the way, to 2.25 s.
  held(Lane::heavy, 30s, 34s);
  CHECK(b.refusal_wait(Lane::heavy, 40s).count() == Approx(22.5 * 25'000));
}

TEST_CASE(
    "a refusal's turn is counted on what the upstream serves while requests wait, beyond the "
    "load outside an overload",
    "[admission][bulkhead]") {
  EstimatePolicy four;
  four.max = 4;  // four slots throughout
  Rng rng(1);
  // The answers' heads come at the baseline, 50 ms: at it four slots would
  // serve 80 a second, where the estimate starts.
  constexpr auto kHead = 50ms;
  // `n` requests of 100 ms every 100 ms, evenly spaced, for 30 s, a tick a
  // round: the load outside an overload.
  // The seats live as long as the bulkhead's test: each bulkhead's in its own deque.
  auto quiet = [&](Bulkhead& b, std::deque<TestSeat>& seats, int n) {
    const auto from = seats.size();
    const auto gap = 100ms / n;
    for (int k = 0; k <= 300 * n; ++k) {
      const auto now = k * gap;
      if (k >= n)
        b.release(seats[from + static_cast<std::size_t>(k - n)], Signal::clean, kHead, now);
      if (k == 300 * n) {
        for (auto i = seats.size() - static_cast<std::size_t>(n) + 1; i < seats.size(); ++i)
          b.release(seats[i], Signal::clean, kHead, now);
        break;
      }
      seats.emplace_back(Lane::standard);
      REQUIRE(b.ask(seats.back(), now, rng));
      seats.back().counted = true;
      if (k % n == 0) b.tick(now);
    }
  };
  // An overload from 30 s for 40 s: ten come, then four more every 100 ms,
  // when the `n` seated longest are answered, and a tick. Returns the answers
  // a second.
  auto overload = [&](Bulkhead& b, std::deque<TestSeat>& seats, int n) {
    std::deque<bool> in(seats.size(), false);  // seated, not yet answered
    auto come = [&](Micros now) {
      seats.emplace_back(Lane::standard);
      in.push_back(seats.back().counted = b.ask(seats.back(), now, rng));
    };
    int answered = 0;
    for (int i = 0; i < 10; ++i) come(30s);
    for (int r = 1; r <= 400; ++r) {
      const auto now = 30s + r * 100ms;
      for (std::size_t i = 0, k = 0; i < seats.size() && k < static_cast<std::size_t>(n); ++i)
        if (in[i]) {
          in[i] = false;
          b.release(seats[i], Signal::clean, kHead, now);
          ++answered, ++k;
        }
      for (int i = 0; i < 4; ++i) come(now);
      b.tick(now);
      for (std::size_t i = 0; i < seats.size(); ++i)
        if (seats[i].seated_calls == 1 && !seats[i].counted) in[i] = seats[i].counted = true;
    }
    return answered / 40.0;
  };
  Bulkhead b(LanePolicy{}, four_slots(kHead, four));
  std::deque<TestSeat> seats;
  quiet(b, seats, 1);
  CHECK(b.rates().quiet == Approx(10).epsilon(0.01));
  // Overloaded, the upstream answers what the bulkhead seats, well under the
  // 80 a second its slots would at the baseline: that is what it serves.
  const double served = overload(b, seats, 4);
  CHECK(served < 45);
  CHECK(b.rates().full == Approx(served).epsilon(0.05));
  // The ticks while requests waited did not count as the load outside.
  CHECK(b.rates().quiet == Approx(10).epsilon(0.01));
  // The requests waiting and this one, each a turn of 1 / (served - 10) s.
  const int waiting = b.census().waiting[index(Lane::standard)];
  CHECK(b.refusal_wait(Lane::standard, 80s).count() ==
        Approx((waiting + 1) * 1e6 / (b.rates().full - 10)).epsilon(0.01));

  // A stream holds one seat throughout. The releases while requests wait come
  // from the others: what the upstream serves counts the stream's seat as
  // serving requests too (an overload's streams end). Outside an overload the
  // stream holds its share of the slots, which the line cannot have.
  Bulkhead streamed(LanePolicy{}, four_slots(kHead, four));
  std::deque<TestSeat> streamed_seats;
  TestSeat stream(Lane::heavy);
  REQUIRE(streamed.ask(stream, 0s, rng));
  quiet(streamed, streamed_seats, 1);
  CHECK(streamed.rates().quiet == Approx(10).epsilon(0.01));
  CHECK(streamed.rates().streams == Approx(1).epsilon(0.01));
  const double answered = overload(streamed, streamed_seats, 3);
  const Census held = streamed.census();
  const int seated = held.total_running();
  REQUIRE(held.running[index(Lane::heavy)] == 1);
  REQUIRE(seated >= 3);
  CHECK(streamed.rates().full == Approx(answered * seated / (seated - 1)).epsilon(0.05));
  const int queued = held.waiting[index(Lane::standard)];
  const double unstreamed = 1 - 1.0 / 4;  // the stream's share of the four slots
  CHECK(streamed.refusal_wait(Lane::standard, 80s).count() ==
        Approx((queued + 1) * 1e6 / (streamed.rates().full * unstreamed - 10)).epsilon(0.01));
  streamed.release(stream, Signal::clean, kHead, 80s);

  // Serving less than the load outside leaves nothing, counted as kLeastSpare
  // of what it serves: long, not endless.
  Bulkhead slow(LanePolicy{}, four_slots(kHead, four));
  std::deque<TestSeat> slow_seats;
  quiet(slow, slow_seats, 2);
  CHECK(slow.rates().quiet == Approx(20).epsilon(0.01));
  CHECK(overload(slow, slow_seats, 1) == Approx(10));
  CHECK(slow.rates().full == Approx(10).epsilon(0.05));
  const int behind = slow.census().waiting[index(Lane::standard)];
  const double turn = 1e6 / (slow.rates().full * Bulkhead::kLeastSpare);
  INFO(behind << " waiting, turns of " << turn << " us");
  CHECK(turn == Approx(1e6).epsilon(0.01));
  // The line ends at most kLongestLine ahead.
  CHECK(slow.refusal_wait(Lane::standard, 80s).count() ==
        Approx(std::min((behind + 1) * turn, static_cast<double>(Bulkhead::kLongestLine.count())))
            .epsilon(0.01));

  // What the upstream serves is known from an overload's first window with
  // requests waiting at both its ends: that sample is taken whole, not
  // averaged up from nothing. The window where the wait began is neither
  // full nor quiet, and a window lasts at least kRateWindow (every thread
  // ticks: two ticks a moment apart measure next to nothing).
  Bulkhead cold(LanePolicy{}, four_slots(kHead, four));
  std::deque<TestSeat> cold_seats;
  cold.tick(1s);  // nobody waits
  for (int i = 0; i < 12; ++i) {
    cold_seats.emplace_back(Lane::standard);
    cold.ask(cold_seats.back(), 1s, rng);
  }
  // One answered in the window where the wait began: counted, it would be a
  // first sample of 5 a second.
  cold.release(cold_seats[3], Signal::clean, kHead, 1s + 100ms);
  cold.tick(1s + Bulkhead::kRateWindow);  // the wait began in this window
  CHECK(cold.rates().full == 0);
  CHECK(cold.rates().quiet == 0);
  for (int i = 0; i < 2; ++i) cold.release(cold_seats[i], Signal::clean, kHead, 1s + 250ms);
  cold.tick(1s + 300ms);  // half a window: no sample
  CHECK(cold.rates().full == 0);
  cold.tick(1s + 2 * Bulkhead::kRateWindow);  // two answered in 200 ms, requests still waiting
  CHECK(cold.census().waiting[index(Lane::standard)] > 0);
  CHECK(cold.rates().full == Approx(10));
}

TEST_CASE("too much decreases the estimate once per burst and remembers the load as K",
          "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  for (int i = 0; i < 20; ++i) e.next_seq();
  CHECK(e.observe(Signal::refused, 5, 12, 1ms, 1s));
  CHECK(e.carrying() == 12);
  CHECK(e.value() == Approx(0.85 * 12));
  CHECK_FALSE(e.slow_start());
  CHECK(e.why() == Signal::refused);
  // Admitted before the decrease: the same burst, nothing changes.
  CHECK_FALSE(e.observe(Signal::timeout, 20, 16, 1ms, 2s));
  CHECK(e.value() == Approx(0.85 * 12));
  // Admitted after it: a new burst.
  auto seq = e.next_seq();
  CHECK(e.observe(Signal::slow, seq, 10, 1ms, 3s));
  CHECK(e.value() == Approx(0.85 * 10));
  CHECK(e.decreases() == 2);
}

TEST_CASE(
    "a refusal within one of the load the last refusal met confirms a sharp capacity: no margin, "
    "and the first under it keeps it",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  // Grows back (recovered, under demand) past `above`, from `t` on.
  auto regrow = [&](double above, Micros t) {
    e.observe(Signal::clean, e.next_seq(), 1, 1ms, t);
    for (int i = 1; i < 40 && e.value() <= above; ++i) {
      e.demand();
      if (e.maybe_grow(t + i * 250ms)) answer_probe(e, t + i * 250ms);
    }
    REQUIRE(e.value() > above);
  };
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 8, 1ms, 1s));
  CHECK(e.value() == Approx(0.85 * 8));  // the first: K = 8, with seed 001's margin
  regrow(8, 1s);
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 8, 1ms, 20s));
  CHECK(e.value() == 8);  // again at 8: an upstream that refuses exactly above 8
  regrow(8, 20s);
  // One under it: the upstream had not yet freed the slot of an answer that
  // had arrived (it frees it once the answer is written). K stays, and a probe
  // past it ends: K̂ = 8.
  CHECK_FALSE(e.observe(Signal::refused, e.next_seq(), 7, 1ms, 40s));
  CHECK(e.value() == 8);
  CHECK(e.carrying() == 8);
  // It served 8 at once since: the next one under is that slot again.
  e.observe(Signal::clean, e.next_seq(), 7, 1ms, 41s);
  CHECK_FALSE(e.observe(Signal::refused, e.next_seq(), 7, 1ms, 42s));
  CHECK(e.carrying() == 8);
  // Again with no answer at 8 in flight between: the capacity fell by one.
  // Still sharp: K̂ = 7.
  e.observe(Signal::clean, e.next_seq(), 5, 1ms, 43s);
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 7, 1ms, 44s));
  CHECK(e.value() == 7);
  CHECK(e.carrying() == 7);
  regrow(8, 44s);
  // Two under it, as two answers read at once on two threads leave: the first
  // keeps K too. A second with no answer at K between: the capacity fell, by
  // more than one, and the margin comes back.
  CHECK_FALSE(e.observe(Signal::refused, e.next_seq(), 5, 1ms, 60s));
  CHECK(e.carrying() == 7);
  CHECK(e.value() == 7);
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 5, 1ms, 60s + 10ms));
  CHECK(e.value() == Approx(0.85 * 5));
  // The capacity grew: the estimate climbs past 5 and is refused at 8, which
  // ends the climb where the upstream refuses now: K̂ = 8, no margin.
  regrow(7.5, 60s);
  REQUIRE(e.observe(Signal::refused, e.next_seq(), 8, 1ms, 70s));
  CHECK(e.carrying() == 8);
  CHECK(e.value() >= 7.5);  // as high as it had climbed (at most 8), not 0.85 x 8
  regrow(5, 70s);
  REQUIRE(e.observe(Signal::slow, e.next_seq(), 5, 1ms, 80s));
  CHECK(e.value() == Approx(0.85 * 5));  // slowness at that load confirms nothing
}

TEST_CASE(
    "after a decrease the estimate grows again only once a request admitted since answered cleanly",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  auto before = e.next_seq();
  auto during = e.next_seq();
  REQUIRE(e.observe(Signal::refused, during, 20, 1ms, 1s));
  double shrunk = e.value();
  e.demand();
  CHECK_FALSE(e.maybe_grow(2s));                 // no answer yet at the smaller estimate
  e.observe(Signal::clean, before, 0, 1ms, 2s);  // admitted before the decrease: proves nothing
  e.demand();
  CHECK_FALSE(e.maybe_grow(3s));
  CHECK(e.value() == shrunk);
  e.observe(Signal::clean, e.next_seq(), 0, 1ms, 3s);
  e.demand();
  CHECK(e.maybe_grow(4s));
  CHECK(e.value() > shrunk);
}

TEST_CASE(
    "a slow answer or a timeout remembers the load it ended in, a refusal the load it arrived into",
    "[admission][bulkhead]") {
  EstimatePolicy ep;
  ep.seed = 16;
  for (Signal signal : {Signal::slow, Signal::timeout, Signal::refused}) {
    INFO(to_string(signal));
    Bulkhead b(LanePolicy{}, Estimate(ep));
    Rng rng(1);
    std::vector<TestSeat> seats(5, TestSeat(Lane::standard));
    for (auto& s : seats) REQUIRE(b.ask(s, 1s, rng));
    // The first met an idle upstream; four more were in flight when it ended.
    b.release(seats[0], signal, 1ms, 2s);
    CHECK(b.estimate().carrying() == (signal == Signal::refused ? 1 : 4));
  }
}

TEST_CASE(
    "an upstream that queues: a window's mean head time over the floor sets K by Little's law",
    "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 16;
  Estimate e(p);
  // A first window at low load sets the floor: 50 ms with 4 in flight.
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
    CHECK_FALSE(e.observe(Signal::clean, e.next_seq(), 3, 50ms, 1s));
  CHECK(e.queue_floor() == 50ms);
  // 16 in flight, each answered after 100 ms: the upstream serves 8 at a time and queues the rest.
  int decreased = 0;
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    decreased += e.observe(Signal::clean, e.next_seq(), 15, 100ms, 2s) ? 1 : 0;
  CHECK(decreased == 1);
  CHECK(e.carrying() == Approx(8));
  CHECK(e.value() == Approx(8));  // Little's law measured it: no margin under it
  CHECK(e.why() == Signal::slow);
  CHECK_FALSE(e.slow_start());
  // Answers of requests admitted before the decrease are the same burst.
  for (int i = 0; i < 2 * EstimatePolicy::kQueueSamples; ++i)
    CHECK_FALSE(e.observe(Signal::clean, 1, 15, 100ms, 3s));
  CHECK(e.decreases() == 1);

  // Off with queue_factor 0.
  p.queue_factor = 0;
  Estimate off(p);
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
    off.observe(Signal::clean, off.next_seq(), 3, 50ms, 1s);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    off.observe(Signal::clean, off.next_seq(), 15, 100ms, 2s);
  CHECK(off.decreases() == 0);
  CHECK(off.value() == 16);
}

TEST_CASE(
    "a floor never seen under K is judged by one window one under K: a seed above a small "
    "upstream's capacity",
    "[admission][bulkhead]") {
  // Answers n in flight on an upstream that serves c at once in 40 ms each.
  const auto queued_ttfb = [](int n, int c) { return Micros(40'000 * std::max(n, c) / c); };
  const auto window = [](Estimate& e, int samples, int n, Micros ttfb, Micros t) {
    return answer_window(e, samples, n - 1, ttfb, t);  // n in flight, the request's own included
  };
  SECTION("an upstream of 3: the seed's 4 queued from the first window") {
    EstimatePolicy p;
    p.seed = 4;
    Estimate e(p);
    window(e, EstimatePolicy::kFirstQueueSamples, 4, queued_ttfb(4, 3), 1s);
    REQUIRE(e.queue_floor() == queued_ttfb(4, 3));  // 53.3 ms: 4 on 3, not 40
    // Slow start overshot to 8: Little's law against that floor says 4.
    REQUIRE(window(e, EstimatePolicy::kQueueSamples, 8, queued_ttfb(8, 3), 2s));
    REQUIRE(e.carrying() == 4);
    // A window at K answered in the floor's time: nothing says a queue, but the
    // floor was never seen under 4 in flight. K̂ = 3 for a window of its own.
    CHECK_FALSE(window(e, EstimatePolicy::kQueueSamples, 4, queued_ttfb(4, 3), 3s));
    CHECK(e.value() == 3);
    e.demand();
    CHECK_FALSE(e.maybe_grow(3s + 500ms));  // no growth before it is judged
    CHECK_FALSE(window(e, EstimatePolicy::kProbeSamples, 3, queued_ttfb(3, 3), 3s + 600ms));
    CHECK(e.queue_floor() == 40ms);  // the upstream's own time
    CHECK(e.value() == 4);           // back at K
    // Against it, the next window at K says 3 served at once: K = 3.
    CHECK(window(e, EstimatePolicy::kQueueSamples, 4, queued_ttfb(4, 3), 4s));
    CHECK(e.carrying() == 3);
    CHECK(e.value() == 3);
    // The floor was seen at 3, not under it: a window at 2 once, no faster,
    // and K stays 3 with no window under it again.
    CHECK_FALSE(window(e, EstimatePolicy::kQueueSamples, 3, queued_ttfb(3, 3), 5s));
    CHECK(e.value() == 2);
    CHECK_FALSE(window(e, EstimatePolicy::kProbeSamples, 2, queued_ttfb(2, 3), 5s + 200ms));
    CHECK(e.value() == 3);
    for (int i = 0; i < 3; ++i)
      CHECK_FALSE(window(e, EstimatePolicy::kQueueSamples, 3, queued_ttfb(3, 3), 6s + i * 1s));
    CHECK(e.value() == 3);
    CHECK(e.carrying() == 3);
  }
  SECTION("a window under K whose answers never come ends") {
    // (The proxy's own lateness leaves answers out of windows.)
    EstimatePolicy p;
    p.seed = 4;
    Estimate e(p);
    window(e, EstimatePolicy::kFirstQueueSamples, 4, queued_ttfb(4, 3), 1s);
    REQUIRE(window(e, EstimatePolicy::kQueueSamples, 8, queued_ttfb(8, 3), 2s));
    REQUIRE_FALSE(window(e, EstimatePolicy::kQueueSamples, 4, queued_ttfb(4, 3), 3s));
    REQUIRE(e.value() == 3);
    e.demand();
    CHECK_FALSE(e.maybe_grow(3s + 500ms));
    CHECK(e.value() == 3);
    // After max(probe_after, 16 x the baseline), at most 16 x 106.7 ms here.
    CHECK(e.maybe_grow(3s + 1800ms));
    CHECK(e.value() == 4);
  }
  SECTION("upstreams of 1 and 2: the windows under K walk K down to the capacity, one at a time") {
    for (int capacity : {1, 2}) {
      INFO("capacity " << capacity);
      EstimatePolicy p;
      p.seed = 4;
      Estimate e(p);
      window(e, EstimatePolicy::kFirstQueueSamples, 4, queued_ttfb(4, capacity), 1s);
      REQUIRE(window(e, EstimatePolicy::kQueueSamples, 8, queued_ttfb(8, capacity), 2s));
      REQUIRE(e.carrying() == 4);
      // Then answers one at a time, at what the estimate lets run, as the upstream answers them.
      Micros t = 3s;
      for (int i = 0; i < 600; ++i, t += 10ms) {
        const int n = e.slots();
        e.observe(Signal::clean, e.next_seq(), n - 1, queued_ttfb(n, capacity), t);
      }
      CHECK(e.carrying() == capacity);
      CHECK(e.value() == capacity);
      CHECK(e.queue_floor() == 40ms);
    }
  }
  SECTION("an upstream of 8 whose K is right: once, and K stays") {
    EstimatePolicy p;
    p.seed = 8;
    Estimate e(p);
    window(e, EstimatePolicy::kFirstQueueSamples, 8, queued_ttfb(8, 8), 1s);
    REQUIRE(window(e, EstimatePolicy::kQueueSamples, 16, queued_ttfb(16, 8), 2s));
    REQUIRE(e.carrying() == 8);
    CHECK_FALSE(window(e, EstimatePolicy::kQueueSamples, 8, queued_ttfb(8, 8), 3s));
    CHECK(e.value() == 7);
    CHECK_FALSE(window(e, EstimatePolicy::kProbeSamples, 7, queued_ttfb(7, 8), 3s + 600ms));
    CHECK(e.value() == 8);
    CHECK(e.queue_floor() == 40ms);
    // Seen at 7 now: the windows at K go on at K.
    for (int i = 0; i < 3; ++i)
      CHECK_FALSE(window(e, EstimatePolicy::kQueueSamples, 8, queued_ttfb(8, 8), 4s + i * 1s));
    CHECK(e.value() == 8);
    CHECK(e.carrying() == 8);
  }
}

TEST_CASE("the first queue window is short: a slow start that overshot does not set the floor",
          "[admission][bulkhead]") {
  EstimatePolicy p;
  p.seed = 4;
  Estimate e(p);
  // Eight answers met an idle upstream (slow start from 4: the seed, then one
  // more per clean head); slow start then overshot to 25 in flight on an
  // upstream that serves 8 at a time (each answered in 3x the time).
  for (int i = 0; i < 8; ++i) e.observe(Signal::clean, e.next_seq(), 3, 50ms, 100ms);
  CHECK(e.queue_floor() == 50ms);
  int decreased = 0;
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    decreased += e.observe(Signal::clean, e.next_seq(), 24, 150ms, 300ms) ? 1 : 0;
  CHECK(decreased == 1);
  CHECK(e.carrying() == Approx(8));  // 25 x 50 / 150, not a floor taken in the queue
}

TEST_CASE("no queue: a window under queue_factor x the floor, one slow head, an aged floor",
          "[admission][bulkhead]") {
  Estimate e;
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 3, 50ms, 1s);
  // 1.4 x the floor.
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, 70ms, 2s);
  // One head of 600 ms among 50 ms ones: the window's mean is 67 ms.
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, i == 0 ? 600ms : 50ms, 3s);
  CHECK(e.decreases() == 0);
  CHECK(e.slow_start());
  CHECK(e.queue_floor() == 50ms);
  // A floor older than kQueueFloorAge gives way to the current window: an upstream that
  // became slower for good is learnt, not fought.
  const auto later = 3s + EstimatePolicy::kQueueFloorAge + 1ms;
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 3, 200ms, later);
  CHECK(e.decreases() == 0);
  CHECK(e.queue_floor() == 200ms);
  // A window faster than the floor lowers it at once.
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 3, 40ms, later);
  CHECK(e.queue_floor() == 40ms);
}

TEST_CASE("an aged floor gives way only to a window within the capacity measured",
          "[admission][bulkhead]") {
  Estimate e(EstimatePolicy{}, 8, 8);  // K = 8
  for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, 50ms, 1s);
  REQUIRE(e.queue_floor() == 50ms);
  // Later, a probe's window at 10 in flight (1.25 x the floor: under queue_factor).
  const auto later = 1s + EstimatePolicy::kQueueFloorAge + 1ms;
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 9, 62ms, later);
  CHECK(e.queue_floor() == 50ms);  // kept: that window queued above K
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 7, 60ms, later);
  CHECK(e.queue_floor() == 60ms);  // within K: what the upstream does now
}

TEST_CASE("a probe past K that the upstream does not serve at once ends at its window: K̂ = K",
          "[admission][bulkhead]") {
  auto floor_at_k = [](Estimate& e, int k) {
    for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
      e.observe(Signal::clean, e.next_seq(), k - 1, 50ms, 1s);
    REQUIRE(e.queue_floor() == 50ms);
  };
  // K = 8, probing at 9: the upstream still serves 8 at a time, so 9 in
  // flight are answered in 9/8 of the floor (56.25 ms), under the 1.5x line.
  Estimate e(EstimatePolicy{}, 9, 8);
  floor_at_k(e, 8);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    e.observe(Signal::clean, e.next_seq(), 8, 56250us, 2s);
  CHECK(e.decreases() == 1);
  CHECK(e.value() == Approx(8));  // back to K, no lower
  CHECK(e.carrying() == Approx(8));
  CHECK(e.exhausted_at() == 2s);  // the next probe waits probe_after from here

  // The upstream serves all 9 at once (no slower): the probe holds.
  Estimate served(EstimatePolicy{}, 9, 8);
  floor_at_k(served, 8);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    served.observe(Signal::clean, served.next_seq(), 8, 50500us, 2s);
  CHECK(served.decreases() == 0);
  CHECK(served.value() == Approx(9));

  // A large K: 65 in flight 1 % slower than the floor is noise, not a queue.
  Estimate large(EstimatePolicy{}, 65, 64);
  floor_at_k(large, 64);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    large.observe(Signal::clean, large.next_seq(), 64, 50500us, 2s);
  CHECK(large.decreases() == 0);
}

TEST_CASE("an answer late by the proxy's own stall is served and not judged: no queue, not slow",
          "[admission][bulkhead]") {
  // A sub-millisecond upstream: its floor is 100 us.
  auto at_floor = [](Estimate& e) {
    for (int i = 0; i < EstimatePolicy::kFirstQueueSamples; ++i)
      e.observe(Signal::clean, e.next_seq(), 3, 100us, 1s);
    for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)  // a baseline, a whole window
      e.observe(Signal::clean, e.next_seq(), 3, 100us, 1s);
    REQUIRE(e.queue_floor() == 100us);
  };
  // The proxy's process stood still for 60 ms with 100 answers in flight:
  // each is read 60 ms late, and the loop ran 60 ms late as it read them.
  Estimate stalled;
  at_floor(stalled);
  const auto head = 60100us;
  REQUIRE(stalled.classify(200, head) == Signal::slow);  // as the session classifies it
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i) {
    CHECK_FALSE(stalled.observe(Signal::slow, stalled.next_seq(), 99, head, 2s, 60ms));
    CHECK_FALSE(stalled.observe(Signal::clean, stalled.next_seq(), 99, head, 2s, 60ms));
  }
  CHECK(stalled.decreases() == 0);
  CHECK(stalled.slow_start());
  CHECK(stalled.queue_floor() == 100us);
  // Its part unknown (a stall the heartbeat has not measured yet): not judged either.
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    CHECK_FALSE(stalled.observe(Signal::slow, stalled.next_seq(), 99, head, 2s, Micros::max()));
  CHECK(stalled.decreases() == 0);

  // Classified with the loop's lateness, as the session classifies them: not slow.
  CHECK(stalled.classify(200, head, 60ms) == Signal::clean);
  CHECK(stalled.classify(200, head, Micros::max()) == Signal::clean);

  // The same answers with the loop on time: the upstream's own lateness.
  Estimate late;
  at_floor(late);
  CHECK(late.classify(200, head, 50us) == Signal::slow);
  // Late by 30 ms of its own in 80: 50 ms of the upstream's, within the slow line.
  CHECK(late.classify(200, 80ms, 30ms) == Signal::clean);
  CHECK(late.classify(200, 80ms) == Signal::slow);
  CHECK(late.observe(Signal::slow, late.next_seq(), 99, head, 2s, 50us));
  CHECK(late.decreases() == 1);
  Estimate queued;
  at_floor(queued);
  int decreased = 0;
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    decreased += queued.observe(Signal::clean, queued.next_seq(), 99, 20ms, 2s, 50us) ? 1 : 0;
  CHECK(decreased == 1);
  // A share of the time the proxy's (under half): that much comes off. 16 ms
  // answers of which 7 ms were the loop's are 9 ms of the upstream's, under
  // the queue rule's 10 ms.
  Estimate partly;
  at_floor(partly);
  for (int i = 0; i < EstimatePolicy::kQueueSamples; ++i)
    CHECK_FALSE(partly.observe(Signal::clean, partly.next_seq(), 99, 16ms, 2s, 7ms));
  CHECK(partly.decreases() == 0);
}

TEST_CASE("429 and 503 are refusals, a head much slower than the baseline is too much",
          "[admission][bulkhead]") {
  Estimate e;
  CHECK(e.classify(429, 1ms) == Signal::refused);
  CHECK(e.classify(503, 1ms) == Signal::refused);
  CHECK(e.classify(200, 10s) == Signal::clean);  // no baseline yet
  for (int i = 0; i < 16; ++i) e.observe(Signal::clean, 0, 0, 20ms, 1s);
  CHECK(e.classify(200, 70ms) == Signal::clean);
  CHECK(e.classify(500, 100ms) == Signal::slow);
  Estimate slow_upstream;
  for (int i = 0; i < 16; ++i) slow_upstream.observe(Signal::clean, 0, 0, 100ms, 1s);
  CHECK(slow_upstream.classify(200, 200ms) == Signal::clean);  // 100 ms late, but only twice
  CHECK(slow_upstream.classify(200, 450ms) == Signal::slow);
  Estimate fast;
  for (int i = 0; i < 16; ++i) fast.observe(Signal::clean, 0, 0, 1ms, 1s);
  CHECK(fast.classify(200, 10ms) == Signal::clean);  // ten times, but only 9 ms: jitter
}

TEST_CASE("a newcomer queues behind the waiting requests of its lane, and the oldest goes first",
          "[admission][bulkhead]") {
  CountCap cap(1);
  LanePolicy p;
  Bulkhead a(p, measured(10), &cap), b(p, measured(10), &cap);
  Rng rng(1);
  TestSeat x(Lane::heavy), first(Lane::heavy), second(Lane::heavy);
  REQUIRE(b.ask(x, 0us, rng));  // the process-wide cap of one is taken on another bulkhead
  Hold h{};
  CHECK_FALSE(a.ask(first, 1ms, rng, &h));
  CHECK(h == Hold::heavy_cap);
  b.release(x, Signal::clean, 1ms, 2ms);  // the cap is free; a has not re-asked yet
  CHECK_FALSE(a.ask(second, 3ms, rng, &h));
  CHECK(h == Hold::behind);
  a.tick(4ms);
  CHECK(first.seated_calls == 1);
  CHECK(first.seated);
  CHECK(second.queued);
}

TEST_CASE("a release seats the oldest waiting request of the lane", "[admission][bulkhead]") {
  LanePolicy p;
  Bulkhead b(p, measured(2));
  Rng rng(1);
  std::vector<TestSeat> s(4, TestSeat(Lane::standard));
  CHECK(b.ask(s[0], 0us, rng));
  CHECK(b.ask(s[1], 0us, rng));  // 50 % free: certain
  CHECK_FALSE(b.ask(s[2], 1ms, rng));
  CHECK_FALSE(b.ask(s[3], 2ms, rng));
  CHECK(b.oldest_waiting(Lane::standard) == Micros(1ms));
  b.release(s[0], Signal::clean, 1ms, 3ms);
  CHECK(s[2].seated_calls == 1);
  CHECK(s[3].seated_calls == 0);
}

TEST_CASE(
    "a request not seated waits at least the delay target, twice the baseline, whatever its "
    "lane's window",
    "[admission][bulkhead]") {
  LanePolicy p;  // bulk: 0 s, standard 500 ms
  Estimate e = measured(1);
  CHECK(e.delay_target() == EstimatePolicy{}.growth_interval);  // no answer yet
  for (int i = 0; i < 4; ++i) e.observe(Signal::clean, e.next_seq(), 0, 40ms, 1s);
  CHECK(e.delay_target() == 80ms);
  Bulkhead b(p, e);
  CHECK(b.patience(Lane::bulk) == 80ms);
  CHECK(b.patience(Lane::standard) == 500ms);  // the longer of the two
  Rng rng(1);
  TestSeat s0(Lane::bulk), s1(Lane::bulk);
  CHECK(b.ask(s0, 0us, rng));
  bool queued = false;
  CHECK_FALSE(b.ask(s1, 0us, rng, nullptr, true, &queued));
  CHECK(queued);
  CHECK(b.census().waiting[0] == 1);
  // Bounded both ways: a fast upstream still lets a request wait 10 ms, a slow one at most 100 ms.
  Estimate fast = measured(1), slow = measured(1);
  for (int i = 0; i < 4; ++i) {
    fast.observe(Signal::clean, fast.next_seq(), 0, 1ms, 1s);
    slow.observe(Signal::clean, slow.next_seq(), 0, 3s, 1s);
  }
  CHECK(fast.delay_target() == EstimatePolicy::kTargetMin);
  CHECK(slow.delay_target() == EstimatePolicy::kTargetMax);
}

TEST_CASE("a waiting head is seated by the next release without rule 4's draw",
          "[admission][bulkhead]") {
  // A borrowing bulk request's chance at 9 of 10 running is 0.005
  // (smoothstep(1/3)^4): a newcomer is nearly always held; once waiting, a
  // release seats it for certain.
  LanePolicy p;
  Bulkhead b(p, measured(10));
  Rng rng(7);
  TestSeat own(Lane::bulk);  // bulk's floor: 1 of 10
  REQUIRE(b.ask(own, 0us, rng));
  std::vector<TestSeat> running(8, TestSeat(Lane::standard));
  for (auto& s : running) REQUIRE(b.ask(s, 0us, rng));
  int seated_by_release = 0;
  for (int i = 0; i < 50; ++i) {
    TestSeat bulk(Lane::bulk);
    bool queued = false;
    if (b.ask(bulk, 1ms, rng, nullptr, true, &queued)) {
      b.release(bulk, Signal::none, 0us, 1ms);
      continue;
    }
    REQUIRE(queued);
    // A standard request ends: the waiting bulk request takes its slot.
    TestSeat& leaving = running[static_cast<std::size_t>(i % 8)];
    b.release(leaving, Signal::none, 0us, 2ms);
    seated_by_release += bulk.seated_calls;
    if (bulk.seated) b.release(bulk, Signal::none, 0us, 3ms);
    b.seat_outside(leaving, 3ms);  // back to 9 running
  }
  CHECK(seated_by_release >= 40);
}

TEST_CASE("a budget hold is refused at once: the quota holds until its window ends",
          "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, measured(20));
  b.note_budget({0.2, 60s});  // at bulk's 30 % reserve
  Rng rng(1);
  std::vector<TestSeat> bulk(3, TestSeat(Lane::bulk));
  CHECK(b.ask(bulk[0], 1s, rng));  // bulk's floor: 2 of 20
  CHECK(b.ask(bulk[1], 1s, rng));
  Hold h{};
  bool queued = true;
  CHECK_FALSE(b.ask(bulk[2], 1s, rng, &h, true, &queued));
  CHECK(h == Hold::budget);
  CHECK_FALSE(queued);
}

TEST_CASE(
    "never measured exhausted, slow start grows by one per clean response head while requests "
    "wait, and serves them",
    "[admission][bulkhead]") {
  EstimatePolicy ep;
  ep.seed = 4;
  Bulkhead b(LanePolicy{}, Estimate(ep));
  Rng rng(1);
  std::deque<TestSeat> seats;
  for (int i = 0; i < 60; ++i) {
    seats.emplace_back(kLanes[static_cast<std::size_t>(i % 3)]);
    b.ask(seats.back(), 1ms, rng);
  }
  REQUIRE(b.unmeasured());
  int before = b.running();
  CHECK(before < 60);
  // Heads of the seated ones come back clean, round after round: each seats one more.
  for (int round = 0; round < 10 && b.running() < 60; ++round) {
    int n = b.running();
    for (int i = 0; i < n; ++i) b.note_head(Signal::clean, 50ms, 2ms);
  }
  CHECK(b.running() == 60);
  CHECK(b.estimate().value() >= 60);
  // Slow heads and refusals are no growth; without waiters nothing grows.
  double k = b.estimate().value();
  b.note_head(Signal::clean, 50ms, 3ms);
  CHECK(b.estimate().value() == k);
}

TEST_CASE("slow start does not grow on a head that queued", "[admission][bulkhead]") {
  EstimatePolicy ep;
  ep.seed = 2;
  Bulkhead b(LanePolicy{}, Estimate(ep));
  Rng rng(1);
  std::vector<TestSeat> seats(6, TestSeat(Lane::standard));
  for (auto& s : seats) b.ask(s, 1ms, rng);
  REQUIRE(b.running() < 6);
  b.note_head(Signal::clean, 50ms, 2ms);  // the fastest: grows
  double k = b.estimate().value();
  b.note_head(Signal::clean, 80ms, 3ms);  // 1.6 x the fastest: it waited at the upstream
  CHECK(b.estimate().value() == k);
  b.note_head(Signal::clean, 55ms, 4ms);
  CHECK(b.estimate().value() == k + 1);
}

TEST_CASE("freed slots go to a lane below its floor before borrowers, however long they waited",
          "[admission][bulkhead]") {
  LanePolicy p;
  p.queue_window = {1s, 1s, 1s};
  Bulkhead b(p, measured(4));
  Rng rng(3);
  std::vector<TestSeat> bulk(8, TestSeat(Lane::bulk)), standard(2, TestSeat(Lane::standard));
  int seated = 0;
  for (auto& s : bulk) seated += b.ask(s, 0us, rng) ? 1 : 0;
  // A lone flood may fill the bulkhead: idle lanes lend everything.
  CHECK(seated >= 3);
  for (int i = 0; i < 50 && b.census().running[0] < 4; ++i) b.tick(Micros(i));
  CHECK(b.census().running[0] == 4);
  CHECK_FALSE(b.ask(standard[0], 1ms, rng));
  CHECK_FALSE(b.ask(standard[1], 1ms, rng));
  // Bulk waiters are older, but standard is below its floor (2 of 4): it gets
  // the next two slots; nothing in flight was cut to make room.
  int released = 0;
  for (auto& s : bulk)
    if (s.seated && released < 2) {
      b.release(s, Signal::clean, 1ms, 2ms);
      ++released;
    }
  CHECK(standard[0].seated);
  CHECK(standard[1].seated);
  CHECK(b.census().running == seats(2, 2, 0));
}

TEST_CASE("bulkheads are independent: one exhausted upstream holds back no other",
          "[admission][bulkhead]") {
  LanePolicy p;
  Bulkhead busy(p, Estimate()), calm(p, Estimate());
  Rng rng(1);
  std::vector<TestSeat> flood(8, TestSeat(Lane::standard));
  for (auto& s : flood) busy.ask(s, 0us, rng);
  for (auto& s : flood)
    if (s.seated) busy.release(s, Signal::refused, 1ms, 1ms);
  CHECK(busy.estimate().measured());
  CHECK_FALSE(calm.estimate().measured());
  CHECK(calm.estimate().value() == Approx(EstimatePolicy{}.seed));
  TestSeat s(Lane::standard);
  CHECK(calm.ask(s, 2ms, rng));
}

TEST_CASE("a lane below its floor with work waiting longer than starved_after is starving, once",
          "[admission][bulkhead]") {
  LanePolicy p;
  p.starved_after = 5s;
  p.queue_window = {1s, 1s, 1s};
  EstimatePolicy ep;
  ep.max = 4;  // the connection pool's share: no growth past it
  Bulkhead b(p, Estimate(ep, 4, 4));
  Rng rng(1);
  std::vector<TestSeat> heavy(4, TestSeat(Lane::heavy));
  fill(b, heavy, 4, rng);
  REQUIRE(b.census().running[2] == 4);  // long streams hold every slot
  TestSeat standard(Lane::standard);
  CHECK_FALSE(b.ask(standard, 1s, rng));
  CHECK_FALSE(b.tick(5s)[1]);
  CHECK(b.tick(6s)[1]);
  CHECK_FALSE(b.tick(7s)[1]);  // counted once per episode
  CHECK(b.view(7s).lanes[1].starving);
  b.cancel(standard, 8s);
  CHECK_FALSE(b.view(8s).lanes[1].starving);
}

TEST_CASE("hard-pinned requests waiting past starved_after are starving, floor or not",
          "[admission][bulkhead]") {
  LanePolicy p;
  p.starved_after = 5s;
  p.queue_window = {1s, 1s, 1s};
  EstimatePolicy ep;
  ep.max = 4;
  Bulkhead b(p, Estimate(ep, 4, 4));
  Rng rng(1);
  std::vector<TestSeat> standard(5, TestSeat(Lane::standard));
  fill(b, std::span(standard).first(4), 4, rng);
  REQUIRE(b.census().running[1] == 4);  // at and past its floor
  TestSeat& pinned = standard.back();
  pinned.pinned = true;
  CHECK_FALSE(b.ask(pinned, 1s, rng));
  CHECK_FALSE(b.tick(5s)[1]);
  CHECK(b.tick(6s)[1]);
  CHECK(b.view(6s).lanes[1].pinned_starving);
  b.cancel(pinned, 7s);
  CHECK_FALSE(b.view(7s).lanes[1].starving);
}

TEST_CASE("a lane at its floor with work waiting is not starving", "[admission][bulkhead]") {
  LanePolicy p;
  p.starved_after = 5s;
  p.queue_window = {1s, 1s, 1s};
  EstimatePolicy ep;
  ep.max = 4;
  Bulkhead b(p, Estimate(ep, 4, 4));
  Rng rng(1);
  std::vector<TestSeat> standard(6, TestSeat(Lane::standard));
  fill(b, standard, 4, rng);
  REQUIRE(b.census().running[1] == 4);  // its floor (2) and borrowed slots
  REQUIRE(b.census().waiting[1] == 2);
  CHECK_FALSE(b.tick(10s)[1]);
  CHECK_FALSE(b.view(10s).lanes[1].starving);
}

TEST_CASE("a heavy lease is held for the whole response and the cap counts live leases",
          "[admission][bulkhead]") {
  CountCap cap(2);
  LanePolicy p;
  Bulkhead b(p, Estimate(), &cap);
  Rng rng(1);
  TestSeat s0(Lane::heavy), s1(Lane::heavy), s2(Lane::heavy);
  CHECK(b.ask(s0, 0us, rng));
  CHECK(b.ask(s1, 10s, rng));
  Hold h{};
  CHECK_FALSE(b.ask(s2, 20s, rng, &h));
  CHECK(h == Hold::heavy_cap);
  for (int m = 1; m <= 10; ++m) b.tick(Micros(std::chrono::minutes(m)));
  CHECK(b.census().running[2] == 2);  // ten minutes of ticks end no lease
  CHECK(s2.queued);
  CHECK(b.youngest(Lane::heavy) == Micros(10s));  // the youngest, not the oldest
  b.release(s1, Signal::clean, 1ms, Micros(std::chrono::minutes(11)));
  CHECK(s2.seated);
  CHECK(cap.taken == 2);
  b.release(s0, Signal::clean, 1ms, Micros(std::chrono::minutes(11)));
  b.release(s2, Signal::clean, 1ms, Micros(std::chrono::minutes(11)));
  CHECK(cap.taken == 0);
  CHECK_FALSE(b.youngest(Lane::heavy));
}

TEST_CASE(
    "a lease refusal's Retry-After is the larger of the window waited and the youngest lease's "
    "age, in the band",
    "[admission][bulkhead]") {
  CHECK(lease_retry_after(2s, Micros(44'200'000)) == Millis(44'200));
  CHECK(lease_retry_after(5s, Micros(1s)) == Millis(5'000));
  CHECK(lease_retry_after(2s, std::nullopt) == Millis(2'000));
  CHECK(lease_retry_after(Micros(1'500), std::nullopt) == Millis(2));  // rounded up
  RetryBand heavy{Millis(2'000), Millis(60'000)};
  Rng rng(7);
  for (int i = 0; i < 100; ++i) {
    CHECK(retry_after_seconds(lease_retry_after(2s, Micros(44'200'000)), heavy, rng) >= 45);
    CHECK(retry_after_seconds(lease_retry_after(2s, Micros(600s)), heavy, rng) == 60);  // the cap
    int idle = retry_after_seconds(lease_retry_after(Micros(0), std::nullopt), heavy, rng);
    CHECK(idle >= 2);  // the floor
    CHECK(idle <= 3);
  }
}

TEST_CASE("a delegated request is seated at once on its parent's lane, counted and marked",
          "[admission][bulkhead]") {
  LanePolicy p;
  Bulkhead b(p, measured(1));
  Rng rng(1);
  TestSeat parent(Lane::heavy), child(Lane::heavy), other(Lane::heavy);
  CHECK(b.ask(parent, 0us, rng));
  CHECK_FALSE(b.ask(other, 0us, rng));
  b.seat_delegated(child, 1ms);
  CHECK(child.seated);
  CHECK(b.census().running[2] == 2);
  CHECK(b.view(1ms).lanes[2].delegated == 1);
  b.release(child, Signal::clean, 1ms, 2ms);
  CHECK(b.view(2ms).lanes[2].delegated == 0);
}

TEST_CASE("plan answers how many would start now, seating nothing", "[admission][bulkhead]") {
  LanePolicy p;
  p.floors = {0.3, 0.5, 0.2};
  auto c = census(10, true, seats(0, 0, 0));
  // Standard: 5 within its floor, then borrowing while 30 % stays free: 8.
  CHECK(plan(p, c, Lane::standard, 20) == 8);
  CHECK(plan(p, c, Lane::standard, 3) == 3);
  // Bulk waits below its floor of 3: three slots stay owed.
  c.waiting = seats(1, 0, 0);
  CHECK(plan(p, c, Lane::standard, 20) == 7);
  // Newcomers queue behind standard's own waiters.
  c.waiting = seats(0, 1, 0);
  CHECK(plan(p, c, Lane::standard, 20) == 0);
  Bulkhead b(p, measured(10));
  auto before = b.census();
  CHECK(plan(p, b.census(), Lane::standard, 20) == 8);
  CHECK(b.census().running == before.running);
}

TEST_CASE("an estimate grows while never measured exhausted and below the pool's share",
          "[admission][bulkhead]") {
  EstimatePolicy ep;
  ep.seed = 4;
  ep.max = 8;
  Estimate e(ep);
  CHECK(e.growing());
  CHECK_FALSE(e.pool_bound());
  e.demand();
  REQUIRE(e.maybe_grow(1s));  // 8: the pool's share
  CHECK_FALSE(e.growing());   // a wait now is for the pool, not for slow start
  CHECK(e.pool_bound());      // and it is upstream wait for the level
  Estimate measured_one(ep, 4, 4);
  CHECK_FALSE(measured_one.growing());
  // Held at a capacity it measured: its queue is its own, not the level's.
  CHECK_FALSE(measured_one.pool_bound());
  // A request waiting on an estimate at the pool's share does not wait on.
  Bulkhead b(LanePolicy{}, e);
  Rng rng(1);
  std::vector<TestSeat> seats(9, TestSeat(Lane::standard));
  for (auto& s : seats) b.ask(s, 2s, rng);
  REQUIRE(seats[8].queued);
  CHECK_FALSE(b.waits_on(seats[8]));
  CHECK_FALSE(b.estimate().growing());
  CHECK(b.pool_bound());
}

TEST_CASE("a request asking again queues at its lane's front, without a draw",
          "[admission][bulkhead]") {
  Bulkhead b(LanePolicy{}, measured(2));
  Rng rng(1);
  std::vector<TestSeat> running(2, TestSeat(Lane::bulk));
  for (auto& s : running) REQUIRE(b.ask(s, 0us, rng));
  TestSeat newcomer(Lane::bulk), again(Lane::bulk);
  REQUIRE_FALSE(b.ask(newcomer, 1ms, rng));
  REQUIRE(newcomer.queued);
  again.front = true;  // its upstream refused it: it was seated before the newcomer came
  REQUIRE_FALSE(b.ask(again, 2ms, rng));
  REQUIRE(again.queued);
  CHECK(b.oldest_waiting(Lane::bulk) == 2ms);  // at the front
  b.release(running[0], Signal::clean, 50ms, 50ms);
  CHECK(again.seated);
  CHECK_FALSE(newcomer.seated);
  // A free slot at its ask: seated at once, whatever rule 4 would have drawn
  // (a newcomer at 3 of 4 running borrows with p = 0.73).
  Bulkhead c(LanePolicy{}, measured(4));
  std::vector<TestSeat> three(3, TestSeat(Lane::bulk));
  fill(c, three, 3, rng);
  REQUIRE(c.census().running[index(Lane::bulk)] == 3);
  REQUIRE(marginal_probability(LanePolicy{}, c.census(), Lane::bulk) < 0.8);
  int seated = 0;
  for (int i = 0; i < 50; ++i) {
    TestSeat s(Lane::bulk);
    s.front = true;
    if (c.ask(s, 1ms, rng)) {
      ++seated;
      c.release(s, Signal::none, 0us, 1ms);
    } else {
      c.cancel(s, 1ms);
    }
  }
  CHECK(seated == 50);
}

namespace {

struct PaceWaker : Waker {
  std::vector<Micros> at;
  void wake_at(Micros when) override { at.push_back(when); }
};

// Four slots that turn over together: round(hold) ends, at one instant and in
// seating order, every request seated at least a hold before (the oldest
// waiting request takes each slot the rules open), and returns how many
// requests were seated at that instant.
struct Lockstep {
  explicit Lockstep(Estimate e = measured(4)) : b(policy(), e) { b.set_waker(&waker); }
  static LanePolicy policy() {
    LanePolicy p;
    p.queue_window = {10s, 10s, 10s};
    return p;
  }
  Bulkhead b;
  PaceWaker waker;
  Rng rng{1};
  std::deque<TestSeat> seats;
  Micros now{0};
  int round(Micros hold) {
    now += hold;
    int before = seated_count();
    std::vector<TestSeat*> ending;
    for (auto& s : seats)
      if (s.seated && now - s.since >= hold - 1ms) ending.push_back(&s);
    for (auto* s : ending) b.release(*s, Signal::clean, hold, now);
    return seated_count() - before + static_cast<int>(ending.size());
  }
  int seated_count() const {
    int n = 0;
    for (auto& s : seats) n += s.seated ? 1 : 0;
    return n;
  }
  void start(int waiting, Lane lane = Lane::bulk) {
    for (int i = 0; i < waiting; ++i) {
      seats.emplace_back(lane);
      b.ask(seats.back(), now, rng);
    }
    for (int i = 0; i < 8 && b.running() < 4; ++i) b.tick(now);
  }
  // Four slots turning over at one instant for 16 holds of `hold` (steady from
  // the 16th on), 60 bulk requests waiting; the waker's record cleared. The
  // end of the next round.
  Micros one_cluster(Micros hold) {
    start(60);
    REQUIRE(b.running() == 4);
    for (int i = 0; i < 4; ++i) round(hold);
    waker.at.clear();
    return now + hold;
  }
};

}  // namespace

TEST_CASE("a slot freed in a cluster of releases opens in the widest gap, when holds are steady",
          "[admission][bulkhead]") {
  Lockstep l;
  // 16 holds of 50 ms: steady from the 16th on, which is paced already (the
  // last of its cluster): it opens at the next round, in the cluster again.
  const Micros t = l.one_cluster(50ms);
  REQUIRE(l.b.running() == 3);
  // Every slot still turns over at one instant; the first released goes on
  // at once, the next ones open in the gaps of the hold ahead.
  CHECK(l.round(50ms) == 2);
  CHECK(l.b.running() == 2);
  REQUIRE(l.waker.at.size() == 2);
  CHECK(l.waker.at[0] == t + 25ms);     // the middle of the whole hold
  CHECK(l.waker.at[1] == t + 37500us);  // then of its second half, within 3/4 of a hold
  CHECK(l.b.census().slots() == 2);     // paced slots are not open yet
  // Each opens when its time comes, to the oldest waiting request.
  CHECK(l.b.expire(t + 25ms) == t + 37500us);
  CHECK(l.b.running() == 3);
  CHECK_FALSE(l.b.expire(t + 37500us));
  CHECK(l.b.running() == 4);
}

TEST_CASE("a paced slot opens at once for a standard request, while bulk waits for its time",
          "[admission][bulkhead]") {
  Lockstep l;
  const Micros t = l.one_cluster(50ms);
  REQUIRE(l.round(50ms) == 2);  // two of the cluster paced, at t + 25 and t + 37.5 ms
  REQUIRE(l.waker.at.size() == 2);
  CHECK(l.b.running() == 2);  // the bulk waiting is not seated in them
  // A standard request would wait for a release: the paced slot that opens
  // first opens now, for it.
  TestSeat& s = l.seats.emplace_back(Lane::standard);
  CHECK(l.b.ask(s, t + 1ms, l.rng));
  CHECK(l.b.running() == 3);
  CHECK(l.b.expire(t + 25ms) == t + 37500us);  // opened already: nothing at 25 ms
  CHECK(l.b.running() == 3);
  CHECK_FALSE(l.b.expire(t + 37500us));  // the other opens at its time, to bulk
  CHECK(l.b.running() == 4);
}

TEST_CASE("one stall that held every slot at once does not stop the pacing of the cluster it left",
          "[admission][bulkhead]") {
  Lockstep l;
  const Micros t = l.one_cluster(50ms);
  REQUIRE(l.round(50ms) == 2);  // steady: two of the cluster paced
  REQUIRE(l.waker.at.size() == 2);
  l.b.expire(t + 50ms);
  REQUIRE(l.b.running() == 4);
  // The upstream stalls for 50 ms: the seats made at t are held 100 ms and
  // come back at one instant, t + 100 ms. The slots their releases free open
  // in the gaps again, not all at once.
  l.waker.at.clear();
  std::vector<TestSeat*> stalled;
  for (auto& s : l.seats)
    if (s.seated && s.since == t) stalled.push_back(&s);
  REQUIRE(stalled.size() >= 2);
  for (auto* s : stalled) l.b.release(*s, Signal::clean, 100ms, t + 100ms);
  CHECK_FALSE(l.waker.at.empty());
  CHECK(l.b.running() < 4);
}

namespace {

// Four bulk slots held `hold` each, seated `hold / 4` apart (even phases),
// with 300 bulk requests waiting: every seat is released at its start + hold
// and every paced slot opens at its time, in time order.
struct Turnover : Lockstep {
  explicit Turnover(Micros hold_each) : hold(hold_each) {
    for (int i = 0; i < 4; ++i) {
      now = i * hold / 4;
      auto& s = seats.emplace_back(Lane::bulk);
      s.front = true;  // no draw: seated at once
      REQUIRE(b.ask(s, now, rng));
    }
    for (int i = 0; i < 300; ++i) b.ask(seats.emplace_back(Lane::bulk), now, rng);
  }
  Micros hold;
  std::vector<Micros> releases;
  void run(Micros until) {
    for (;;) {
      std::optional<Micros> open = b.expire(now);
      TestSeat* next = nullptr;
      for (auto& s : seats)
        if (s.seated && s.lane == Lane::bulk && (!next || s.since < next->since)) next = &s;
      const Micros release = next ? next->since + hold : until;
      if (open && *open < release) {
        now = *open;
        continue;
      }
      if (!next || release > until) return;
      now = release;
      b.release(*next, Signal::clean, hold, now);
      releases.push_back(now);
    }
  }
  // The widest gap between releases from `from` on.
  Micros widest_gap(Micros from) const {
    Micros widest{0};
    for (std::size_t i = 1; i < releases.size(); ++i)
      if (releases[i - 1] >= from) widest = std::max(widest, releases[i] - releases[i - 1]);
    return widest;
  }
};

}  // namespace

TEST_CASE("a stream's seat that left a hole among the phases: the slots that turn over spread",
          "[admission][bulkhead]") {
  Turnover t(40ms);
  t.run(800ms);  // 20 holds each: steady, phases 10 ms apart
  REQUIRE(t.widest_gap(400ms) == 10ms);
  REQUIRE(t.b.running() == 4);
  // A stream takes the slot the next release frees (seated outside the
  // rules here: one slot fewer for bulk). Its phase leaves a hole: releases
  // 20, 10 and 10 ms apart, where three slots would be 13.3 ms apart, and a
  // standard request that comes in the hole waits up to 20 ms.
  TestSeat stream(Lane::heavy);
  t.b.seat_outside(stream, t.now);
  t.run(1600ms);
  // Each slot that turns over nearer the phase before it than the one after
  // opens between them: the gaps even out, to within the shift too small to
  // pay for (a fifth of the even gap).
  INFO("widest gap " << t.widest_gap(1200ms).count() << " us");
  CHECK(t.widest_gap(1200ms) <= 15ms);
  CHECK(t.b.running() == 4);          // three bulk seats and the stream
  CHECK(t.b.view(t.now).paced <= 4);  // each phase moved once or twice, not every turn
}

TEST_CASE("slots whose holds vary refill at once, however close their releases",
          "[admission][bulkhead]") {
  Lockstep l;
  l.start(60);
  REQUIRE(l.b.running() == 4);
  // Holds of 40 and 60 ms in turn: a phase does not last, nothing is paced.
  for (int i = 0; i < 6; ++i) l.round(i % 2 ? 40ms : 60ms);
  l.waker.at.clear();
  CHECK(l.round(40ms) == 4);
  CHECK(l.b.running() == 4);
  CHECK(l.waker.at.empty());
}

TEST_CASE("a slot the estimate grows while requests wait opens in the widest gap, not at the tick",
          "[admission][bulkhead]") {
  Lockstep l(Estimate(EstimatePolicy{}, 4.0, 8.0));  // below K: it grows
  l.start(60);
  REQUIRE(l.b.running() == 4);
  for (int i = 0; i < 4; ++i) l.round(100ms);  // the 16th hold's slot opens at 450 ms
  CHECK_FALSE(l.b.expire(450ms));
  REQUIRE(l.b.running() == 4);
  // Releases to come: three at 500 ms, one at 550 ms. A tick at 451 ms grows
  // the estimate by one: its slot opens in the middle of the widest gap (from
  // 550 to 600 ms, one hold on: 475 ms), not at once.
  const double k = l.b.estimate().value();
  l.waker.at.clear();
  l.b.tick(451ms);
  REQUIRE(l.b.estimate().slots() == 5);
  CHECK(l.b.estimate().value() > k);
  CHECK(l.b.running() == 4);
  REQUIRE(l.waker.at.size() == 1);
  CHECK(l.waker.at[0] == 475ms);
  CHECK_FALSE(l.b.expire(475ms));
  CHECK(l.b.running() == 5);
}

TEST_CASE("a probe past K opens at once, however bunched the slots", "[admission][bulkhead]") {
  Lockstep l;  // K̂ = K = 4: the next growth is a probe
  l.start(60);
  REQUIRE(l.b.running() == 4);
  for (int i = 0; i < 4; ++i) l.round(100ms);
  CHECK_FALSE(l.b.expire(450ms));
  l.waker.at.clear();
  l.b.tick(451ms);
  REQUIRE(l.b.estimate().slots() == 5);
  CHECK(l.b.running() == 5);
  CHECK(l.waker.at.empty());
}
