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

TEST_CASE("a tenant with ten times the queue of another gets one turn in two, not ten in eleven",
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
  // Round robin: loud, quiet, loud, quiet, then loud alone.
  CHECK(serve(q, 6) == std::vector<std::uint64_t>{7, 9, 7, 9, 7, 7});
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
  CHECK(serve(q, 8) == std::vector<std::uint64_t>{1, 1, 1, 2, 1, 1, 1, 2});
}

TEST_CASE("a sparse tenant is served before the backlogged ones, and not again before their turns",
          "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> loud;
  loud.reserve(10);
  for (int i = 0; i < 10; ++i) loud.emplace_back(Lane::bulk, 7);
  for (auto& s : loud) q.push(s, false);
  CHECK(serve(q, 1) == std::vector<std::uint64_t>{7});  // loud's first turn: now an old flow
  TestSeat p1(Lane::bulk, 9), p2(Lane::bulk, 9), p3(Lane::bulk, 9);
  q.push(p1, false);  // no request of its waiting: new, served first
  CHECK(q.next() == &p1);
  q.erase(p1, true);
  q.push(p2, false);  // emptied and back at once: not new again, behind loud's turns
  CHECK(serve(q, 3) == std::vector<std::uint64_t>{7, 7, 9});
  // Served at its old turn and empty: out of the lists, so new again.
  q.push(p3, false);
  CHECK(q.next() == &p3);
}

TEST_CASE("a cancelled request costs its tenant nothing, and an emptied flow leaves the lists",
          "[admission][fair_queue]") {
  FairQueue q;
  TestSeat a1(Lane::bulk, 1), a2(Lane::bulk, 1), b1(Lane::bulk, 2), b2(Lane::bulk, 2);
  q.push(a1, false);
  q.push(b1, false);
  q.push(a2, false);
  q.push(b2, false);
  CHECK(q.active_flows() == 2);
  q.erase(a1, false);  // a's front left unseated: a keeps its turn
  CHECK(q.next() == &a2);
  q.erase(a2, true);  // a is empty
  CHECK(q.active_flows() == 1);
  CHECK(q.next() == &b1);
  q.erase(b1, true);
  CHECK(q.next() == &b2);
  q.erase(b2, true);
  CHECK(q.empty());
  CHECK(q.next() == nullptr);
}

TEST_CASE("credit does not pile up: a flow interrupted by new ones keeps its turn, not more",
          "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> a, b, sparse;
  a.reserve(20);
  b.reserve(20);
  sparse.reserve(20);
  for (int i = 0; i < 20; ++i) a.emplace_back(Lane::bulk, 1);
  for (int i = 0; i < 20; ++i) b.emplace_back(Lane::bulk, 2);
  for (int i = 0; i < 20; ++i) sparse.emplace_back(Lane::bulk, 100 + static_cast<std::uint64_t>(i));
  for (auto& s : a) q.push(s, false);
  for (auto& s : b) q.push(s, false);
  // Between every two releases a new tenant comes with one request; a and b
  // stay one for one among themselves.
  int served_a = 0, served_b = 0;
  for (int i = 0; i < 16; ++i) {
    q.push(sparse[static_cast<std::size_t>(i)], false);
    for (int j = 0; j < 2; ++j) {
      Seat* s = q.next();
      if (s->tenant == 1) ++served_a;
      if (s->tenant == 2) ++served_b;
      q.erase(*s, true);
    }
  }
  CHECK(served_a + served_b == 16);
  CHECK(served_a - served_b <= 1);
  CHECK(served_b - served_a <= 1);
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
  // The flood's first turn, then the quiet tenant, ahead of the flood's others.
  for (int release = 0; release < 2; ++release) {
    TestSeat* running = nullptr;
    for (auto& s : loud)
      if (s.seated && s.seated_calls == release) running = &s;
    REQUIRE(running);
    b.release(*running, Signal::clean, 1ms, 2ms);
    CHECK(quiet.seated_calls == release);
  }
  CHECK(quiet.seated_calls == 1);
  CHECK(quiet.seated);
}
