// A lane's queue shared between tenants (max-min fairness on the slots they
// hold), on its own and inside a bulkhead, on a fake clock.
#include "admission/fair_queue.hpp"

#include <catch2/catch.hpp>
#include <deque>
#include <map>
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

Estimate measured(double k) { return Estimate(EstimatePolicy{}, k, k); }

// `slots` slots, every tenant's requests waiting; each step the oldest slot
// is released and the queue's next request seated. The slots each tenant
// holds at the end.
std::map<std::uint64_t, int> share(FairQueue& q, std::deque<Seat*> running, int steps) {
  for (int i = 0; i < steps && q.next(); ++i) {
    Seat* done = running.front();
    running.pop_front();
    q.held(*done, -1);
    Seat* s = q.next();
    q.erase(*s);
    q.held(*s, +1);
    running.push_back(s);
  }
  std::map<std::uint64_t, int> out;
  for (auto* s : running) ++out[s->tenant];
  return out;
}

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
  q.erase(s[2]);
  q.held(s[2], +1);
  CHECK(q.next() == &s[0]);  // holding more changes nothing for a lone tenant
  q.erase(s[0]);             // its window ended
  CHECK(q.next() == &s[1]);
  q.erase(s[1]);
  CHECK(q.empty());
  CHECK(q.next() == nullptr);
  CHECK(q.active_flows() == 0);
}

TEST_CASE("a free slot goes to the waiting tenant that holds the fewest slots",
          "[admission][fair_queue]") {
  FairQueue q;
  std::vector<TestSeat> loud, quiet;
  loud.reserve(23);
  quiet.reserve(2);
  for (int i = 0; i < 23; ++i) loud.emplace_back(Lane::bulk, 7);
  for (int i = 0; i < 2; ++i) quiet.emplace_back(Lane::bulk, 9);
  for (int i = 0; i < 3; ++i) q.held(loud[static_cast<std::size_t>(20 + i)], +1);  // loud holds 3
  for (int i = 0; i < 20; ++i) q.push(loud[static_cast<std::size_t>(i)], false);
  q.push(quiet[0], false);  // came last, holds none: first
  q.push(quiet[1], false);
  CHECK(q.active_flows() == 2);
  CHECK(q.oldest() == &loud[0]);
  CHECK(q.next() == &quiet[0]);
  q.erase(quiet[0]);
  q.held(quiet[0], +1);
  CHECK(q.next() == &quiet[1]);  // 1 against 3: still the quiet one
  q.erase(quiet[1]);
  q.held(quiet[1], +1);
  CHECK(q.next() == &loud[0]);
}

TEST_CASE("tenants that all want more end up holding as many slots, by weight",
          "[admission][fair_queue]") {
  auto run = [](double weight_a) {
    FairQueue q;
    std::vector<TestSeat> a, b;
    a.reserve(200);
    b.reserve(200);
    for (int i = 0; i < 200; ++i) a.emplace_back(Lane::standard, 1, weight_a);
    for (int i = 0; i < 200; ++i) b.emplace_back(Lane::standard, 2);
    // b holds all 8 slots when a comes.
    std::deque<Seat*> running;
    for (int i = 0; i < 8; ++i) {
      q.held(b[static_cast<std::size_t>(i)], +1);
      running.push_back(&b[static_cast<std::size_t>(i)]);
    }
    for (int i = 8; i < 200; ++i) q.push(b[static_cast<std::size_t>(i)], false);
    for (auto& s : a) q.push(s, false);
    return share(q, running, 100);
  };
  auto even = run(1.0);
  CHECK(even[1] == 4);
  CHECK(even[2] == 4);
  auto weighted = run(3.0);
  CHECK(weighted[1] == 6);
  CHECK(weighted[2] == 2);
}

TEST_CASE("among tenants holding as many, the one that got there first goes first",
          "[admission][fair_queue]") {
  FairQueue q;
  TestSeat a1(Lane::bulk, 1), a2(Lane::bulk, 1), b1(Lane::bulk, 2), b2(Lane::bulk, 2);
  q.push(a1, false);
  q.push(b1, false);
  q.push(a2, false);
  q.push(b2, false);
  CHECK(q.next() == &a1);
  q.erase(a1);
  q.held(a1, +1);
  CHECK(q.next() == &b1);  // a holds one now
  q.erase(b1);
  q.held(b1, +1);
  CHECK(q.next() == &a2);  // both hold one: a reached that level first
  q.held(a1, -1);          // a's slot is released: a holds none
  CHECK(q.next() == &a2);
}

TEST_CASE("a request that leaves unseated changes nothing of its tenant's place",
          "[admission][fair_queue]") {
  FairQueue q;
  TestSeat a1(Lane::bulk, 1), a2(Lane::bulk, 1), b1(Lane::bulk, 2);
  q.push(a1, false);
  q.push(a2, false);
  q.push(b1, false);
  q.erase(a1);  // its window ended
  CHECK(q.next() == &a2);
  q.erase(a2);
  CHECK(q.active_flows() == 1);
  CHECK(q.next() == &b1);
}

TEST_CASE(
    "in a full bulkhead, the next release seats the quiet tenant's request ahead of the "
    "flood",
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
  TestSeat* running = nullptr;
  for (auto& s : loud)
    if (s.seated) running = &s;
  b.release(*running, Signal::clean, 1ms, 2ms);
  CHECK(quiet.seated_calls == 1);
  CHECK(quiet.seated);
}

namespace {

struct RecordingWaker : Waker {
  std::vector<Micros> at;
  void wake_at(Micros when) override { at.push_back(when); }
};

// A bulkhead of 4 slots, 3 held by a flood (tenant 7, `backlog` more waiting)
// and 1 by a quiet tenant (9): the quiet tenant was seated ahead of the flood.
struct QuietBesideFlood {
  LanePolicy p;
  Bulkhead b{p, measured(4)};
  Rng rng{1};
  RecordingWaker waker;
  std::vector<TestSeat> loud;
  TestSeat quiet{Lane::bulk, 9};
  explicit QuietBesideFlood(int backlog = 10, Lane lane = Lane::bulk) {
    quiet.lane = lane;
    b.set_waker(&waker);
    loud.reserve(static_cast<std::size_t>(4 + backlog));
    for (int i = 0; i < 4 + backlog; ++i) loud.emplace_back(lane, std::uint64_t{7});
    for (auto& s : loud) b.ask(s, 0us, rng);
    REQUIRE_FALSE(b.ask(quiet, 0us, rng));
    b.release(*first_seated(), Signal::clean, 1ms, 1ms);
    REQUIRE(quiet.seated);
  }
  TestSeat* first_seated() {
    for (auto& s : loud)
      if (s.seated) return &s;
    return nullptr;
  }
  int loud_seated_calls() const {
    int n = 0;
    for (const auto& s : loud) n += s.seated_calls;
    return n;
  }
};

}  // namespace

TEST_CASE(
    "a quiet tenant's released slot is kept for its next request, ahead of the flood, for "
    "the anticipation",
    "[admission][bulkhead][fair_queue]") {
  QuietBesideFlood f;
  const int before = f.loud_seated_calls();
  f.b.release(f.quiet, Signal::clean, 50ms, 51ms);
  CHECK(f.loud_seated_calls() == before);  // the slot waits for the quiet tenant
  CHECK(f.b.census().running[0] == 4);
  REQUIRE(f.waker.at.size() == 1);
  CHECK(f.waker.at[0] == 51ms + f.b.anticipation());

  SECTION("its next request, within the anticipation, is seated at once") {
    TestSeat again(Lane::bulk, 9);
    Hold h = Hold::full;
    CHECK(f.b.ask(again, 51ms + f.b.anticipation() / 2, f.rng, &h));
    CHECK(h == Hold::none);
    CHECK(f.b.census().running[0] == 4);
    CHECK(f.loud_seated_calls() == before);
  }
  SECTION("unclaimed, the slot goes to the flood when the anticipation ends") {
    f.b.expire(51ms + f.b.anticipation() - 1us);
    CHECK(f.loud_seated_calls() == before);
    f.b.expire(51ms + f.b.anticipation());
    CHECK(f.loud_seated_calls() == before + 1);
    CHECK(f.b.census().running[0] == 4);
    TestSeat late(Lane::bulk, 9);
    Hold h{};
    CHECK_FALSE(f.b.ask(late, 52ms + f.b.anticipation(), f.rng, &h));
    CHECK(h == Hold::behind);  // ahead of the flood again at the next release
  }
  SECTION("another tenant's request does not take it") {
    TestSeat other(Lane::bulk, 7);
    Hold h{};
    CHECK_FALSE(f.b.ask(other, 52ms, f.rng, &h));
    CHECK(h == Hold::behind);
  }
}

TEST_CASE(
    "a released slot is kept only for a tenant below every waiting one, after a clean "
    "answer, outside the heavy lane",
    "[admission][bulkhead][fair_queue]") {
  SECTION("one tenant (tenants off): the next request of the lane is seated at once") {
    LanePolicy p;
    Bulkhead b(p, measured(4));
    Rng rng(1);
    std::vector<TestSeat> all;
    all.reserve(8);
    for (int i = 0; i < 8; ++i) all.emplace_back(Lane::bulk, 0);
    for (auto& s : all) b.ask(s, 0us, rng);
    TestSeat* done = nullptr;
    for (auto& s : all)
      if (s.seated && !done) done = &s;
    b.release(*done, Signal::clean, 1ms, 1ms);
    int seated_later = 0;
    for (const auto& s : all) seated_later += s.seated_calls;
    CHECK(seated_later == 1);
  }
  SECTION("the flood's own release goes to its waiters") {
    QuietBesideFlood f;
    const int before = f.loud_seated_calls();
    f.b.release(*f.first_seated(), Signal::clean, 50ms, 51ms);
    CHECK(f.loud_seated_calls() == before + 1);
    CHECK(f.waker.at.empty());
  }
  SECTION("a refusal is not kept") {
    QuietBesideFlood f;
    const int before = f.loud_seated_calls();
    f.b.release(f.quiet, Signal::refused, 50ms, 51ms);
    CHECK(f.waker.at.empty());
    CHECK(f.loud_seated_calls() == before);  // the estimate fell under the 3 still running
    CHECK(f.b.census().running[0] == 3);
  }
  SECTION("not in the heavy lane") {
    QuietBesideFlood f(10, Lane::heavy);
    const int before = f.loud_seated_calls();
    f.b.release(f.quiet, Signal::clean, 50ms, 51ms);
    CHECK(f.waker.at.empty());
    CHECK(f.loud_seated_calls() == before + 1);
  }
  SECTION("nobody waiting: nothing to keep it from") {
    QuietBesideFlood f(0);
    f.b.release(f.quiet, Signal::clean, 50ms, 51ms);
    CHECK(f.waker.at.empty());
    CHECK(f.b.census().running[0] == 3);
  }
}
