// A lane's queue shared between tenants (deficit round robin), on its own and
// inside a bulkhead, on a fake clock.
#include "admission/fair_queue.hpp"

#include <catch2/catch.hpp>
#include <vector>

#include "admission/bulkhead.hpp"

using namespace sluice::admission;
using namespace std::chrono_literals;

namespace {

struct TestSeat : Seat {
  TestSeat(Lane l, std::uint64_t t, double w = 1.0) {
    lane = l;
    tenant = t;
    weight = w;
  }
  int seated_calls = 0;
  void on_seated() override { ++seated_calls; }
};

// Serves the queue `n` times (a release each), returning the tenants in order.
std::vector<std::uint64_t> serve(FairQueue& q, int n) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < n && q.next(); ++i) {
    Seat* s = q.next();
    out.push_back(s->tenant);
    q.erase(*s, true);
  }
  return out;
}

Estimate measured(double k) { return Estimate(EstimatePolicy{}, k, k); }

}  // namespace

TEST_CASE("one tenant's queue is oldest first, a request asking again at its front",
          "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> s;
  for (int i = 0; i < 3; ++i) s.emplace_back(Lane::bulk, 0);
  q.push(s[0], false);
  q.push(s[1], false);
  q.push(s[2], true);
  CHECK(q.next() == &s[2]);
  CHECK(q.oldest() == &s[2]);
  q.erase(s[2], true);
  CHECK(q.next() == &s[0]);
  q.erase(s[0], false);  // its window ended
  CHECK(q.next() == &s[1]);
  q.erase(s[1], true);
  CHECK(q.empty());
  CHECK(q.next() == nullptr);
  CHECK(q.active_flows() == 0);
}

TEST_CASE(
    "a tenant that comes is served next, then each tenant in turn: one turn in two for a tenant "
    "with a tenth of the queue, not one in eleven",
    "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> loud, quiet;
  loud.reserve(20);
  quiet.reserve(2);
  for (int i = 0; i < 20; ++i) loud.emplace_back(Lane::bulk, 7);
  for (int i = 0; i < 2; ++i) quiet.emplace_back(Lane::bulk, 9);
  for (auto& s : loud) q.push(s, false);
  for (auto& s : quiet) q.push(s, false);  // arrived last
  CHECK(q.active_flows() == 2);
  CHECK(q.oldest() == &loud[0]);
  // Quiet came last and is served first (a new flow); then in turn: loud,
  // quiet, then loud alone.
  CHECK(serve(q, 6) == std::vector<std::uint64_t>{9, 7, 9, 7, 7, 7});
}

TEST_CASE("a tenant's weight is its requests per turn", "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> a, b;
  a.reserve(10);
  b.reserve(10);
  for (int i = 0; i < 10; ++i) a.emplace_back(Lane::standard, 1, 3.0);
  for (int i = 0; i < 10; ++i) b.emplace_back(Lane::standard, 2, 1.0);
  for (int i = 0; i < 10; ++i) {
    q.push(a[static_cast<std::size_t>(i)], false);
    q.push(b[static_cast<std::size_t>(i)], false);
  }
  // b came second and is served first; a resumes with its three, then b's one.
  CHECK(serve(q, 8) == std::vector<std::uint64_t>{2, 1, 1, 1, 2, 1, 1, 1});
}

TEST_CASE("a cancelled request costs its tenant nothing, and an emptied flow leaves the round",
          "[admission][fair_queue]") {
  FairQueue q;
  TestSeat a1(Lane::bulk, 1), a2(Lane::bulk, 1), b1(Lane::bulk, 2), b2(Lane::bulk, 2);
  q.push(a1, false);
  q.push(a2, false);
  q.push(b1, false);  // b comes: its turn
  q.push(b2, false);
  CHECK(q.active_flows() == 2);
  q.erase(b1, false);  // b's front left unseated: b keeps its turn
  CHECK(q.next() == &b2);
  q.erase(b2, true);  // b is empty: out of the round, a resumes
  CHECK(q.active_flows() == 1);
  CHECK(q.next() == &a1);
  q.erase(a1, true);
  CHECK(q.next() == &a2);
}

TEST_CASE("in a full bulkhead, a release seats the quiet tenant's request ahead of the flood",
          "[admission][bulkhead][fair_queue]") {
  LanePolicy p;
  Bulkhead b(p, measured(4));
  Rng rng(1);
  std::vector<TestSeat> loud;
  loud.reserve(40);
  for (int i = 0; i < 40; ++i) loud.emplace_back(Lane::bulk, 7);
  int seated = 0;
  for (auto& s : loud) seated += b.ask(s, 0us, rng) ? 1 : 0;
  REQUIRE(seated >= 1);
  REQUIRE(b.census().waiting[0] == 40 - seated);
  TestSeat quiet(Lane::bulk, 9);
  Hold h{};
  CHECK_FALSE(b.ask(quiet, 1ms, rng, &h));
  CHECK(h == Hold::behind);
  // The next release seats the quiet tenant, ahead of the flood's 36 waiting.
  TestSeat* running = nullptr;
  for (auto& s : loud)
    if (s.seated) running = &s;
  b.release(*running, Signal::clean, 1ms, 2ms);
  CHECK(quiet.seated_calls == 1);
  CHECK(quiet.seated);
}
