// Upstream resilience rules on a fake clock: Thompson sampling, closure and
// probes, budget readings and the budget guard.
#include "admission/resilience.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "admission/bulkhead.hpp"

using namespace sluice::admission;
using namespace std::chrono_literals;
using Catch::Detail::Approx;

TEST_CASE("Beta samples have the distribution's mean", "[admission][resilience]") {
  Rng rng(11);
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = beta_sample(9, 3, rng);
    REQUIRE(x >= 0.0);
    REQUIRE(x <= 1.0);
    sum += x;
  }
  CHECK(sum / n == Approx(0.75).margin(0.01));
}

TEST_CASE("Thompson sampling favours the alternative that succeeds, and still explores",
          "[admission][resilience]") {
  Rng rng(5);
  std::vector<Candidate> c{{90, 10, 10ms}, {10, 90, 10ms}, {0, 0, Micros{0}}};
  std::array<int, 3> picks{};
  for (int i = 0; i < 3000; ++i) ++picks[thompson_pick(c, rng)];
  CHECK(picks[0] > picks[1] * 10);
  CHECK(picks[2] > 300);  // unexplored: Beta(1, 1) wins often enough to be tried
  CHECK(picks[1] < 100);
}

TEST_CASE("Thompson sampling discounts a slower alternative by its mean latency",
          "[admission][resilience]") {
  Rng rng(5);
  std::vector<Candidate> c{{100, 0, 40ms}, {100, 0, 10ms}};
  std::array<int, 2> picks{};
  for (int i = 0; i < 2000; ++i) ++picks[thompson_pick(c, rng)];
  CHECK(picks[1] > picks[0] * 10);  // as reliable, four times faster
}

TEST_CASE("a closed upstream lets one probe through per interval, only while nothing runs",
          "[admission][resilience]") {
  Closure c(ClosurePolicy{35min, 10s});
  CHECK(c.ask(0s, 0) == Verdict::admit);
  c.close(1s);
  CHECK(c.closed());
  CHECK(c.ask(2s, 0) == Verdict::closed);   // before the first probe time
  CHECK(c.ask(11s, 1) == Verdict::closed);  // something still runs on it
  CHECK(c.ask(11s, 0) == Verdict::probe);
  CHECK(c.ask(11s + 1ms, 0) == Verdict::closed);
  // One probe at a time: still out after its interval (another thread's view of
  // what runs can lag), no second one.
  CHECK(c.ask(21s + 1ms, 0) == Verdict::closed);
  c.probe_ended(false);
  CHECK(c.ask(22s, 0) == Verdict::probe);  // the next interval's probe
  c.probe_ended(false);
  CHECK(c.ask(25s, 0) == Verdict::closed);
  CHECK(c.reopen_hint(25s) == Micros(7s));
  CHECK(c.ask(32s, 0) == Verdict::probe);
  c.probe_ended(true);  // a clean probe reopens at once
  CHECK_FALSE(c.closed());
  CHECK(c.ask(32s, 5) == Verdict::admit);
}

TEST_CASE("a closure lasts until the upstream's own reset when it gave one, else close_for",
          "[admission][resilience]") {
  Closure c(ClosurePolicy{35min, 10min});
  c.close(0s, Micros(90s));
  CHECK(c.closed_until() == Micros(90s));
  CHECK(c.ask(91s, 0) == Verdict::admit);  // over: reopened without a probe
  Closure d(ClosurePolicy{35min, 10min});
  d.close(0s);
  CHECK(d.closed_until() == Micros(35min));
}

TEST_CASE(
    "RateLimit headers give a budget reading, and a reading from an ended window stops nobody",
    "[admission][resilience]") {
  auto b = read_budget("100", "20", "30", 1s, 1'700'000'000);
  REQUIRE(b);
  CHECK(b->remaining == Approx(0.2));
  CHECK(b->until == Micros(31s));
  // X-RateLimit-Reset as a Unix time.
  auto x = read_budget("50", "5", "1700000060", 0s, 1'700'000'000);
  REQUIRE(x);
  CHECK(x->until == Micros(60s));
  // A policy after the number, as RateLimit-Limit may carry.
  CHECK(read_budget("100, 100;w=60", "50", "10", 0s, 0));
  CHECK_FALSE(read_budget("", "20", "30", 0s, 0));
  CHECK_FALSE(read_budget("0", "0", "30", 0s, 0));
  CHECK_FALSE(read_budget("100", "x", "30", 0s, 0));
  CHECK_FALSE(budget_allows_borrowing(b, 0.3, 2s));  // 20 % left, bulk keeps 30 %
  CHECK(budget_allows_borrowing(b, 0.05, 2s));       // standard keeps 5 %
  CHECK(budget_allows_borrowing(b, 0.3, 31s));       // the window ended
  CHECK(budget_allows_borrowing(std::nullopt, 0.3, 2s));
}

TEST_CASE("the budget reserve stops the lightest lanes borrowing first, never their floors",
          "[admission][resilience]") {
  LanePolicy p;  // reserve bulk 30 %, standard 5 %, heavy 15 %
  Bulkhead b(p, Estimate(EstimatePolicy{}, 20, 20));
  Rng rng(1);
  b.note_budget({0.2, 60s});
  struct S : Seat {
    explicit S(Lane l) { lane = l; }
  };
  std::vector<S> bulk(4, S(Lane::bulk)), standard(4, S(Lane::standard));
  // Bulk's floor (2 of 20) still starts; its borrowing stops at 20 % left.
  Hold h{};
  CHECK(b.ask(bulk[0], 1s, rng, &h));
  CHECK(b.ask(bulk[1], 1s, rng, &h));
  CHECK_FALSE(b.ask(bulk[2], 1s, rng, &h));
  CHECK(h == Hold::budget);
  // Standard borrows on.
  for (auto& s : standard) CHECK(b.ask(s, 1s, rng));
  // After the window, bulk borrows again.
  CHECK(b.ask(bulk[3], 61s, rng));
  CHECK_FALSE(bulk[2].queued);  // a budget hold was refused at once, not kept waiting
}
