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
  int seated_calls = 0, dropped_calls = 0;
  bool counted = false;  // seen seated by a test that tracks its seats
  void on_seated() override { ++seated_calls; }
  void on_dropped() override { ++dropped_calls; }
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

// One answer of a request admitted now at `load`: its head (its time
// learnt) and its end. Whether it decreased the estimate.
bool answer(Estimate& e, Signal signal, int load, Micros ttfb, Micros t, std::uint16_t route = 0) {
  const std::uint64_t seq = e.next_seq();
  const bool judged = e.on_head(signal, seq, load, route, ttfb, Micros{0}, false, t);
  return e.observe(signal, seq, load, t) || judged;
}

// `samples` clean answers at `load` (and the request), each after `ttfb`, at
// `t`: whether any of them decreased the estimate.
bool answer_window(Estimate& e, int samples, int load, Micros ttfb, Micros t) {
  bool decreased = false;
  for (int i = 0; i < samples; ++i)
    decreased = answer(e, Signal::clean, load, ttfb, t) || decreased;
  return decreased;
}

// Four slots, the baseline learnt on a route's defining answers after `head`.
Estimate four_slots(Micros head, EstimatePolicy p = {}) {
  Estimate e(p, 4, 4);
  answer_window(e, EstimatePolicy::kBaseSamples, 0, head, 1s);
  return e;
}

// Asks with every seat not yet seated or queued, re-asking on ticks, until
// `running` of their lane run (chance may refuse a few asks along the way).
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
    "a request not seated waits at least a burst's wait, ten answer times, whatever its lane's "
    "window",
    "[admission][bulkhead]") {
  LanePolicy p;  // bulk: 0 s, standard 500 ms
  Estimate e = measured(1);
  CHECK(e.delay_target() == EstimatePolicy{}.growth_interval);  // no answer yet
  answer_window(e, EstimatePolicy::kBaseSamples, 0, 40ms, 1s);
  CHECK(e.delay_target() == 80ms);
  Bulkhead b(p, e);
  CHECK(b.patience(Lane::bulk) == 400ms);      // a burst's wait: 10 x 40 ms
  CHECK(b.patience(Lane::standard) == 500ms);  // the longer of the two
  Rng rng(1);
  TestSeat s0(Lane::bulk), s1(Lane::bulk);
  CHECK(b.ask(s0, 0us, rng));
  bool queued = false;
  CHECK_FALSE(b.ask(s1, 0us, rng, nullptr, true, &queued));
  CHECK(queued);
  CHECK(b.census().waiting[0] == 1);
  // Bounded: a fast upstream lets a request wait 10 answer times, a slow one at most 1 s.
  Estimate fast = measured(1), slow = measured(1);
  answer_window(fast, EstimatePolicy::kBaseSamples, 0, 1ms, 1s);
  answer_window(slow, EstimatePolicy::kBaseSamples, 0, 3s, 1s);
  CHECK(Bulkhead(p, fast).patience(Lane::bulk) == 10ms);
  CHECK(Bulkhead(p, slow).patience(Lane::bulk) == Bulkhead::kLongestBurst);
  CHECK(fast.delay_target() == 2ms);
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
  // Standard alone: 5 within its floor, then every free slot (rule 4 draws
  // only where another lane has work).
  CHECK(plan(p, c, Lane::standard, 20) == 10);
  // Bulk at work too: borrowing while 30 % stays free, 8.
  c.running = seats(0, 0, 0);
  CHECK(plan(p, census(10, true, seats(0, 0, 1)), Lane::standard, 20) == 7);
  CHECK(plan(p, c, Lane::standard, 3) == 3);
  // Bulk waits below its floor of 3: three slots stay owed.
  c.waiting = seats(1, 0, 0);
  CHECK(plan(p, c, Lane::standard, 20) == 7);
  // Newcomers queue behind standard's own waiters.
  c.waiting = seats(0, 1, 0);
  CHECK(plan(p, c, Lane::standard, 20) == 0);
  Bulkhead b(p, measured(10));
  auto before = b.census();
  CHECK(plan(p, b.census(), Lane::standard, 20) == 10);
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
// Pacing's rules, on a line that stands for as long as a test runs (the
// standing-line rule, which trims one, is off: queue_target 0).
Estimate untrimmed(double k) {
  EstimatePolicy p;
  p.queue_target = 0;
  return Estimate(p, k, k);
}

struct Lockstep {
  explicit Lockstep(Estimate e = untrimmed(4)) : b(policy(), e) { b.set_waker(&waker); }
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
  EstimatePolicy untrimmed;
  untrimmed.queue_target = 0;
  Lockstep l(Estimate(untrimmed, 4.0, 8.0));  // below K: it grows
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

namespace {

// Two slots whose seats turn over every 50 ms, answers in 10 ms learnt as the
// route's baseline (so the queue target is 10 ms, the standing interval 400
// ms, a place in line 25 ms); the standard lane's window 100 ms. The time
// after the last release.
Micros two_slots_turning(Bulkhead& b, Rng& rng) {
  Micros t{0};
  for (int round = 0; round < EstimatePolicy::kBaseSamples / 2; ++round) {
    TestSeat a(Lane::standard), c(Lane::standard);
    REQUIRE(b.ask(a, t, rng));
    REQUIRE(b.ask(c, t, rng));
    b.note_head(a, Signal::clean, 10ms, t + 10ms);
    b.note_head(c, Signal::clean, 10ms, t + 10ms);
    b.release(a, Signal::clean, 10ms, t + 50ms);
    b.release(c, Signal::clean, 10ms, t + 50ms);
    t += 50ms;
  }
  return t;
}

LanePolicy short_windows() {
  LanePolicy p = lend_all();
  p.queue_window = {100ms, 100ms, 100ms};
  return p;
}

}  // namespace

TEST_CASE(
    "refuse early: a newcomer whose wait in line would pass its patience is refused on "
    "arrival, not at the end of its window",
    "[admission][bulkhead][queue]") {
  Bulkhead b(short_windows(), measured(2));
  Rng rng(1);
  Micros t = two_slots_turning(b, rng);
  REQUIRE(b.patience(Lane::standard) == 100ms);
  std::deque<TestSeat> seats;
  for (int i = 0; i < 2; ++i) REQUIRE(b.ask(seats.emplace_back(Lane::standard), t, rng));
  // Places 1-4 wait 25, 50, 75 and 100 ms: queued. The fifth would wait 125 ms.
  for (int i = 0; i < 4; ++i) {
    bool queued = false;
    CHECK_FALSE(b.ask(seats.emplace_back(Lane::standard), t, rng, nullptr, true, &queued));
    CHECK(queued);
  }
  CHECK(b.line_wait() == 125ms);
  CHECK(b.allowed_wait(Lane::standard, t) == 100ms);  // its patience: the line does not stand
  bool queued = true;
  Hold hold = Hold::none;
  CHECK_FALSE(b.ask(seats.emplace_back(Lane::standard), t, rng, &hold, true, &queued));
  CHECK_FALSE(queued);
  CHECK(hold == Hold::behind);
  CHECK(b.census().waiting[index(Lane::standard)] == 4);
}

TEST_CASE("refuse early: a lane's line counts the lanes of no lighter weight ahead of it",
          "[admission][bulkhead][queue]") {
  Bulkhead b(short_windows(), measured(2));
  Rng rng(1);
  Micros t = two_slots_turning(b, rng);
  std::deque<TestSeat> seats;
  for (int i = 0; i < 2; ++i) REQUIRE(b.ask(seats.emplace_back(Lane::standard), t, rng));
  for (int i = 0; i < 3; ++i) b.ask(seats.emplace_back(Lane::standard), t, rng);
  // Bulk (weight 1) has standard's three ahead: 100 ms, then 125 ms.
  bool queued = false;
  b.ask(seats.emplace_back(Lane::bulk), t, rng, nullptr, true, &queued);
  CHECK(queued);
  b.ask(seats.emplace_back(Lane::bulk), t, rng, nullptr, true, &queued);
  CHECK_FALSE(queued);
  // Standard (weight 4) has only its own three ahead: 100 ms, queued.
  b.ask(seats.emplace_back(Lane::standard), t, rng, nullptr, true, &queued);
  CHECK(queued);
}

TEST_CASE(
    "a standing line: past the target for an interval, what waited past the target "
    "leaves it and newcomers are held to the target, until an interval passes calm",
    "[admission][bulkhead][queue]") {
  Bulkhead b(short_windows(), measured(2));
  Rng rng(1);
  Micros t = two_slots_turning(b, rng);
  REQUIRE(b.queue_target() == 10ms);
  REQUIRE(b.standing_interval() == 400ms);
  std::deque<TestSeat> seats;
  for (int i = 0; i < 2; ++i) REQUIRE(b.ask(seats.emplace_back(Lane::standard), t, rng));
  for (int i = 0; i < 3; ++i) b.ask(seats.emplace_back(Lane::standard), t, rng);
  CHECK_FALSE(b.standing(t + 399ms));
  b.tick(t + 400ms);  // the line has waited past the target for an interval
  CHECK(b.standing(t + 400ms));
  CHECK(b.allowed_wait(Lane::standard, t + 400ms) == 10ms);  // held to the target
  // The waiters were dropped, oldest first, but the last one alone in its
  // flow (a line of one is no standing line); the tick's probe past K may
  // have seated the oldest.
  int dropped = 0;
  for (std::size_t i = 2; i < 4; ++i) {
    CHECK_FALSE(seats[i].queued);
    CHECK(seats[i].dropped_calls + (seats[i].seated ? 1 : 0) == 1);
    if (seats[i].dropped_calls == 1) CHECK(seats[i].hold == Hold::full);
    dropped += seats[i].dropped_calls;
  }
  CHECK(dropped >= 1);
  CHECK(seats[4].dropped_calls == 0);
  CHECK(b.census().waiting[index(Lane::standard)] == (seats[4].queued ? 1 : 0));
  b.cancel(seats[4], t + 400ms);
  // A newcomer would wait 25 ms or more, past the 10 ms target: refused at once.
  bool queued = true;
  CHECK_FALSE(b.ask(seats.emplace_back(Lane::standard), t + 450ms, rng, nullptr, true, &queued));
  CHECK_FALSE(queued);
  // An interval with no newcomer past the target: it stands no more.
  CHECK_FALSE(b.standing(t + 851ms));
  CHECK_FALSE(b.ask(seats.emplace_back(Lane::standard), t + 851ms, rng, nullptr, true, &queued));
  CHECK(queued);
}

TEST_CASE("an estimate still growing refuses nobody early and trims no line",
          "[admission][bulkhead][queue]") {
  Bulkhead b(short_windows(), Estimate(EstimatePolicy{}));  // never measured: slow start
  Rng rng(1);
  // Seats held 50 ms each, measured: forty in line would wait far past the
  // 100 ms window, and a measured estimate refuses them on arrival.
  const Micros t = two_slots_turning(b, rng);
  REQUIRE(b.estimate().growing());
  std::deque<TestSeat> seats;
  int queued_n = 0;
  for (int i = 0; i < 40; ++i) {
    bool queued = false;
    if (!b.ask(seats.emplace_back(Lane::standard), t, rng, nullptr, true, &queued))
      queued_n += queued ? 1 : 0;
  }
  REQUIRE(b.line_wait() > 100ms);
  CHECK(queued_n == 40 - b.running());
  b.tick(t + 10s);
  for (auto& s : seats) CHECK(s.dropped_calls == 0);
}

TEST_CASE("rule 4 draws only where another lane has work: a lane alone takes a free slot",
          "[admission][bulkhead]") {
  LanePolicy p = lend_all();
  // 9 of 10 running, all standard: certain.
  CHECK(decide(p, census(10, true, seats(0, 9, 0)), Lane::standard, kCertain) == Hold::none);
  // One of them bulk: standard's draw at 10 % free fails a draw near 1.
  CHECK(decide(p, census(10, true, seats(1, 8, 0)), Lane::standard, kCertain) == Hold::chance);
}
