// Placement's rules and the lease's, one test each, on test time: real
// bulkheads and closures behind a plain Upstreams.
#include "admission/placement.hpp"

#include <catch2/catch.hpp>
#include <deque>
#include <vector>

using namespace sluice::admission;
using namespace std::chrono_literals;

namespace {

struct TestSeat : Seat {
  explicit TestSeat(Lane l = Lane::standard) { lane = l; }
  int seated_calls = 0;
  void on_seated() override { ++seated_calls; }
};

struct CountCap : LeaseCap {
  explicit CountCap(int limit) : cap(limit) {}
  int cap, taken = 0;
  bool try_take() override { return taken < cap ? (++taken, true) : false; }
  void give_back() override { --taken; }
};

// Upstreams of `slots` each, measured exhausted (so a full one seats nothing
// more) unless said otherwise, with closures that probe every 10 s.
struct TestUpstreams : Upstreams {
  explicit TestUpstreams(std::size_t n, double slots = 1.0, LanePolicy lanes = {},
                         bool measured = true) {
    for (std::size_t i = 0; i < n; ++i) {
      bulkheads.emplace_back(lanes, Estimate(EstimatePolicy{}, slots, measured ? slots : 0), &cap);
      closures.emplace_back(ClosurePolicy{35min, 10s});
    }
  }
  Bulkhead& bulkhead(std::size_t u) override { return bulkheads[u]; }
  Verdict ask_gate(std::size_t u, Micros now) override {
    return closures[u].ask(now, bulkheads[u].census().total_running());
  }
  bool closed(std::size_t u) const override { return closures[u].closed(); }
  void probe_ended(std::size_t u, bool clean) override {
    closures[u].probe_ended(clean);
    probes.push_back(clean);
  }
  Micros reopen_hint(std::size_t u, Micros now) override { return closures[u].reopen_hint(now); }
  std::optional<Micros> youngest(Lane lane, std::size_t u) override {
    return bulkheads[u].youngest(lane);
  }
  int running(std::size_t u) const { return bulkheads[u].census().total_running(); }
  int waiting(std::size_t u) const {
    auto c = bulkheads[u].census();
    return c.waiting[0] + c.waiting[1] + c.waiting[2];
  }

  CountCap cap{100};
  std::deque<Bulkhead> bulkheads;
  std::deque<Closure> closures;
  std::vector<bool> probes;
};

const std::vector<std::size_t> kOne{1}, kNone{};

Ask ask_for(std::size_t upstream, const std::vector<std::size_t>& alternatives = kNone,
            Lane lane = Lane::standard) {
  Ask a;
  a.lane = lane;
  a.upstream = upstream;
  a.alternatives = alternatives;
  return a;
}

}  // namespace

TEST_CASE("a free upstream seats the request where its route sends it", "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  TestSeat s;
  auto p = place(ask_for(0, kOne), s, ups, 0us, rng);
  CHECK(p.how == Placed::seated);
  CHECK(p.upstream == 0);
  CHECK_FALSE(p.fell_back);
  CHECK(p.lease.seated());
  CHECK(ups.running(0) == 1);
}

TEST_CASE("a delegated request is seated at once on a full upstream", "[admission][placement]") {
  TestUpstreams ups(1);
  Rng rng(1);
  TestSeat first, child;
  auto a = place(ask_for(0), first, ups, 0us, rng);
  REQUIRE(a.how == Placed::seated);
  auto ask = ask_for(0);
  ask.delegated = true;
  auto p = place(ask, child, ups, 1us, rng);
  CHECK(p.how == Placed::seated);
  CHECK(child.delegated);
  CHECK(ups.running(0) == 2);
}

TEST_CASE("a full upstream sends a movable request to an alternative that seats it now",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  TestSeat first, second;
  auto a = place(ask_for(0, kOne), first, ups, 0us, rng);
  auto p = place(ask_for(0, kOne), second, ups, 1us, rng);
  CHECK(p.how == Placed::seated);
  CHECK(p.upstream == 1);
  CHECK(p.fell_back == Fallback::full);
  CHECK(ups.running(1) == 1);
}

TEST_CASE("a pinned request never moves: it waits for its own upstream", "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  TestSeat first, second;
  auto a = place(ask_for(0, kOne), first, ups, 0us, rng);
  auto ask = ask_for(0, kOne);
  ask.pinned = true;
  auto p = place(ask, second, ups, 1us, rng);
  CHECK(p.how == Placed::queued);
  CHECK(p.upstream == 0);
  CHECK_FALSE(p.fell_back);
  CHECK(ups.running(1) == 0);
  CHECK(second.pinned);
}

TEST_CASE("a request no upstream seats now waits in its lane's queue and is seated by a release",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  TestSeat a, b, c;
  auto pa = place(ask_for(0, kOne), a, ups, 0us, rng);
  auto pb = place(ask_for(0, kOne), b, ups, 0us, rng);  // to the alternative
  auto pc = place(ask_for(0, kOne), c, ups, 1us, rng);
  REQUIRE(pc.how == Placed::queued);
  CHECK(pc.upstream == 0);  // it waits at its own upstream, not the alternative
  CHECK(pc.lease.queued());
  pa.lease.complete(Signal::clean, 1ms, 2ms);
  CHECK(c.seated_calls == 1);
  CHECK(pc.lease.seated());
}

TEST_CASE(
    "with a zero queue window a request not seated waits the delay target, then is refused "
    "queue_timeout",
    "[admission][placement]") {
  // Bulk's default window is 0 s; Retry-After is the youngest live bulk lease's age.
  TestUpstreams ups(1);
  Rng rng(1);
  TestSeat a(Lane::bulk), b(Lane::bulk);
  auto pa = place(ask_for(0, kNone, Lane::bulk), a, ups, 1s, rng);
  REQUIRE(pa.how == Placed::seated);
  auto pq = place(ask_for(0, kNone, Lane::bulk), b, ups, 4s - 250ms, rng);
  REQUIRE(pq.how == Placed::queued);
  CHECK(pq.wait_for == ups.bulkheads[0].patience(Lane::bulk));
  auto pb = timed_out(ask_for(0, kNone, Lane::bulk), b, pq.lease, ups, 4s);
  CHECK(pb.how == Placed::refused);
  CHECK(pb.reason == Reason::queue_timeout);
  REQUIRE(pb.retry_after);
  CHECK(*pb.retry_after == 3000ms);
  CHECK_FALSE(pb.lease);
  CHECK(ups.waiting(0) == 0);
  // A request that already waited in a queue (then moved on) is told at least that.
  auto waited = ask_for(0, kNone, Lane::bulk);
  waited.waited = 5s;
  auto pw = timed_out(waited, b, pq.lease, ups, 4s);
  REQUIRE(pw.retry_after);
  CHECK(*pw.retry_after == 5000ms);
}

TEST_CASE(
    "on an estimate never measured exhausted a request whose wait ended waits on, up to "
    "kUnmeasuredWait; the heavy cap still refuses",
    "[admission][placement]") {
  TestUpstreams ups(1, 1.0, {}, /*measured=*/false);
  Rng rng(1);
  TestSeat a, b;
  auto pa = place(ask_for(0), a, ups, 0us, rng);
  REQUIRE(pa.how == Placed::seated);
  auto pb = place(ask_for(0), b, ups, 1us, rng);
  REQUIRE(pb.how == Placed::queued);
  auto waited = ask_for(0);
  waited.waited = 500ms;
  auto on = timed_out(waited, b, pb.lease, ups, 501ms);
  CHECK(on.how == Placed::queued);
  CHECK(on.wait_for == ups.bulkheads[0].patience(Lane::standard));
  CHECK(ups.waiting(0) == 1);
  waited.waited = kUnmeasuredWait;
  auto off = timed_out(waited, b, on.lease, ups, 30s);
  CHECK(off.how == Placed::refused);
  CHECK(off.reason == Reason::queue_timeout);

  ups.cap.cap = 0;  // SLUICE_HEAVY_MAX_IN_FLIGHT reached: an operator's limit, not the estimate
  TestSeat h(Lane::heavy);
  auto ph = place(ask_for(0, kNone, Lane::heavy), h, ups, 31s, rng);
  REQUIRE(ph.how == Placed::queued);
  auto heavy = ask_for(0, kNone, Lane::heavy);
  heavy.waited = 2s;
  auto th = timed_out(heavy, h, ph.lease, ups, 33s);
  CHECK(th.how == Placed::refused);
  CHECK(th.reason == Reason::heavy_cap);
}

TEST_CASE("a closed upstream's due probe is the request, seated outside the lane rules",
          "[admission][placement]") {
  TestUpstreams ups(1);
  Rng rng(1);
  ups.closures[0].close(0us);
  TestSeat s;
  auto p = place(ask_for(0), s, ups, 10s, rng);
  CHECK(p.how == Placed::seated);
  CHECK(p.lease.probe());
  SECTION("a clean answer reopens the upstream") {
    p.lease.complete(Signal::clean, 1ms, 11s);
    CHECK(ups.probes == std::vector<bool>{true});
    CHECK_FALSE(ups.closed(0));
  }
  SECTION("a status that closes the upstream keeps it closed") {
    p.lease.complete(Signal::clean, 1ms, 11s, /*closes=*/true);
    CHECK(ups.probes == std::vector<bool>{false});
    CHECK(ups.closed(0));
  }
  SECTION("a probe dropped without its outcome failed") {
    p.lease = Lease();
    CHECK(ups.probes == std::vector<bool>{false});
    CHECK(ups.running(0) == 0);
  }
}

TEST_CASE("a closed upstream refuses a request that may not move pool_closed, told the reopen hint",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  ups.closures[0].close(0us);  // next probe at 10 s
  TestSeat s;
  auto ask = ask_for(0, kOne);
  ask.pinned = true;
  auto p = place(ask, s, ups, 4s, rng);
  CHECK(p.how == Placed::refused);
  CHECK(p.reason == Reason::pool_closed);
  REQUIRE(p.retry_after);
  CHECK(*p.retry_after == 6000ms);
  CHECK(ups.running(0) + ups.running(1) == 0);
}

TEST_CASE(
    "a closed upstream sends a movable request to an alternative that seats it now, else one it "
    "waits on",
    "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  ups.closures[0].close(0us);
  TestSeat a, b;
  auto pa = place(ask_for(0, kOne), a, ups, 1s, rng);
  CHECK(pa.how == Placed::seated);
  CHECK(pa.upstream == 1);
  CHECK(pa.fell_back == Fallback::closed);
  auto pb = place(ask_for(0, kOne), b, ups, 1s, rng);  // the alternative is full now
  CHECK(pb.how == Placed::queued);
  CHECK(pb.upstream == 1);
  CHECK(pb.fell_back == Fallback::closed);
}

TEST_CASE("a closed upstream's request becomes a closed alternative's due probe",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  ups.closures[0].close(0us);
  ups.closures[1].close(0us);  // both probe every 10 s
  TestSeat s;
  auto ask = ask_for(0, kOne);
  ask.pinned = false;
  REQUIRE(ups.closures[0].ask(10s, 0) == Verdict::probe);  // its own probe is taken already
  auto p = place(ask, s, ups, 10s, rng);
  CHECK(p.how == Placed::seated);
  CHECK(p.upstream == 1);
  CHECK(p.lease.probe());
  CHECK(p.fell_back == Fallback::closed);
}

TEST_CASE("when every alternative is closed too the request is refused pool_closed",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  ups.closures[0].close(0us);
  ups.closures[1].close(0us);
  TestSeat s;
  auto p = place(ask_for(0, kOne), s, ups, 1s, rng);
  CHECK(p.how == Placed::refused);
  CHECK(p.reason == Reason::pool_closed);
}

TEST_CASE(
    "observe mode decides as enforce: it waits as enforce waits, and what enforce refuses "
    "goes on seated outside the rules with the same reason",
    "[admission][placement]") {
  TestUpstreams ups(1);
  Rng rng(1);
  TestSeat a, b, c, d;
  auto ask = ask_for(0);
  ask.mode = Mode::observe;
  auto pa = place(ask, a, ups, 0us, rng);
  CHECK(pa.how == Placed::seated);
  auto pb = place(ask, b, ups, 1us, rng);
  CHECK(pb.how == Placed::queued);  // a wait is not a refusal
  CHECK(ups.waiting(0) == 1);
  // Its window ends: enforce would refuse queue_timeout; observe forwards, and
  // the bulkhead carries it.
  ask.waited = 500ms;
  auto pt = timed_out(ask, b, pb.lease, ups, 501ms);
  CHECK(pt.how == Placed::observed);
  CHECK(pt.reason == Reason::queue_timeout);
  CHECK(ups.waiting(0) == 0);
  CHECK(ups.running(0) == 2);
  // A bulk request (no window) waits the delay target, then is refused under enforce.
  auto bulk = ask_for(0, kNone, Lane::bulk);
  bulk.mode = Mode::observe;
  auto pq = place(bulk, d, ups, 502ms, rng);
  REQUIRE(pq.how == Placed::queued);
  auto pd = timed_out(bulk, d, pq.lease, ups, 502ms + pq.wait_for);
  CHECK(pd.how == Placed::observed);
  CHECK(ups.running(0) == 3);
  ups.closures[0].close(600ms);
  auto pc = place(ask, c, ups, 601ms, rng);
  CHECK(pc.how == Placed::observed);
  CHECK(pc.reason == Reason::pool_closed);
  CHECK(ups.running(0) == 4);
  pc.lease.complete(Signal::clean, 1ms, 602ms);
  CHECK(ups.running(0) == 3);
}

TEST_CASE(
    "observe mode forwards what the level gate refused at once, seated outside the rules, "
    "never queued",
    "[admission][placement]") {
  TestUpstreams ups(1);
  Rng rng(1);
  TestSeat a, b;
  auto pa = place(ask_for(0), a, ups, 0us, rng);
  REQUIRE(pa.how == Placed::seated);  // the one slot
  auto ask = ask_for(0);
  ask.mode = Mode::observe;
  ask.level_refused = true;
  auto p = place(ask, b, ups, 1us, rng);
  CHECK(p.how == Placed::observed);
  CHECK(p.reason == Reason::level);
  CHECK(ups.waiting(0) == 0);  // enforce would not have queued it: it was refused
  CHECK(ups.running(0) == 2);  // the upstream carries it
}

TEST_CASE("a refusal names what held the request: heavy cap, budget, reserved slots",
          "[admission][placement]") {
  SECTION("heavy_cap") {
    TestUpstreams ups(1, 8.0);
    ups.cap.cap = 1;
    Rng rng(1);
    TestSeat h1(Lane::heavy), h2(Lane::heavy);
    auto p1 = place(ask_for(0, kNone, Lane::heavy), h1, ups, 0us, rng);
    REQUIRE(p1.how == Placed::seated);
    auto ask = ask_for(0, kNone, Lane::heavy);
    auto p2 = place(ask, h2, ups, 1us, rng);
    REQUIRE(p2.how == Placed::queued);
    TestSeat h3(Lane::heavy);
    auto p3 = place(ask, h3, ups, 2us, rng);  // behind h2
    REQUIRE(p3.how == Placed::queued);
    ask.waited = 2s;
    auto t = timed_out(ask, h2, p2.lease, ups, 2s);
    CHECK(t.how == Placed::refused);
    CHECK(t.reason == Reason::heavy_cap);
    // h3 waited behind h2, and is held by the cap too, not by a full upstream.
    auto t3 = timed_out(ask, h3, p3.lease, ups, 2s);
    CHECK(t3.how == Placed::refused);
    CHECK(t3.reason == Reason::heavy_cap);
  }
  SECTION("budget: Retry-After is the quota's reset") {
    TestUpstreams ups(1, 8.0);
    Rng rng(1);
    ups.bulkheads[0].note_budget({0.01, 42s});
    TestSeat s(Lane::standard), bulk(Lane::bulk);
    auto std_seat = place(ask_for(0), s, ups, 0us, rng);  // within its floor
    REQUIRE(std_seat.how == Placed::seated);
    auto p = place(ask_for(0, kNone, Lane::bulk), bulk, ups, 1s, rng);
    // bulk's floor (0.1 x 8) gives it one seat of its own; a second borrows.
    REQUIRE(p.how == Placed::seated);
    TestSeat bulk2(Lane::bulk);
    auto p2 = place(ask_for(0, kNone, Lane::bulk), bulk2, ups, 2s, rng);
    CHECK(p2.how == Placed::refused);
    CHECK(p2.reason == Reason::budget);
    REQUIRE(p2.retry_after);
    CHECK(*p2.retry_after == 40s);
  }
  SECTION("reserved") {
    TestUpstreams ups(1, 2.0);
    Rng rng(1);
    std::deque<TestSeat> seats;
    auto seat_one = [&](Lane lane, Micros now) {
      seats.emplace_back(lane);
      return place(ask_for(0, kNone, lane), seats.back(), ups, now, rng);
    };
    auto b1 = seat_one(Lane::bulk, 0us);  // bulk fills both slots while alone
    auto b2 = seat_one(Lane::bulk, 1us);
    REQUIRE(b1.how == Placed::seated);
    REQUIRE(b2.how == Placed::seated);
    auto st = seat_one(Lane::standard, 2us);  // standard waits for its floor
    REQUIRE(st.how == Placed::queued);
    b1.lease = Lease{};  // dropped: the slot is free, no waiter served yet, and standard's
    auto b3 = seat_one(Lane::bulk, 4us);
    REQUIRE(b3.how == Placed::queued);  // it may wait: the next release may free a slot for it
    auto t3 = timed_out(ask_for(0, kNone, Lane::bulk), seats.back(), b3.lease, ups, 5us);
    CHECK(t3.how == Placed::refused);
    CHECK(t3.reason == Reason::reserved);
  }
}

TEST_CASE("a window that ends as another thread seats the request keeps the seat",
          "[admission][placement]") {
  TestUpstreams ups(1);
  Rng rng(1);
  TestSeat a, b;
  auto pa = place(ask_for(0), a, ups, 0us, rng);
  auto pb = place(ask_for(0), b, ups, 1us, rng);
  REQUIRE(pb.how == Placed::queued);
  pa.lease.complete(Signal::clean, 1ms, 2us);  // seats b (its on_seated is called)
  REQUIRE(b.seated_calls == 1);
  auto t = timed_out(ask_for(0), b, pb.lease, ups, 500ms);
  CHECK(t.how == Placed::seated);
  CHECK(ups.running(0) == 1);
  t.lease.complete(Signal::clean, 1ms, 501ms);
  CHECK(ups.running(0) == 0);
}

TEST_CASE("a request whose connect failed moves to an alternative that seats it, else stays",
          "[admission][placement]") {
  TestUpstreams ups(2);
  Rng rng(1);
  TestSeat s;
  auto p = place(ask_for(0, kOne), s, ups, 0us, rng);
  REQUIRE(p.upstream == 0);
  auto q = relocate(ask_for(0, kOne), s, p.lease, Signal::timeout, 0us, Fallback::connect_failed,
                    ups, 1s, rng);
  CHECK(q.how == Placed::seated);
  CHECK(q.upstream == 1);
  CHECK(q.fell_back == Fallback::connect_failed);
  CHECK(ups.running(0) == 0);                     // its seat where it was went back
  CHECK(ups.bulkheads[0].known().failures == 1);  // teaching what it learnt
  ups.closures[0].close(1s);
  auto r = relocate(ask_for(1, {}), s, q.lease, Signal::timeout, 0us, Fallback::connect_failed, ups,
                    2s, rng);
  CHECK(r.how == Placed::stayed);
  CHECK(r.upstream == 1);
  CHECK(r.lease.seated());
}

TEST_CASE("a heavy-cap unit stays with a request that moves on and goes back with its lease",
          "[admission][placement][lease]") {
  TestUpstreams ups(2, 4.0);
  Rng rng(1);
  TestSeat s(Lane::heavy);
  auto p = place(ask_for(0, kOne, Lane::heavy), s, ups, 0us, rng);
  REQUIRE(p.how == Placed::seated);
  CHECK(ups.cap.taken == 1);
  auto q = relocate(ask_for(0, kOne, Lane::heavy), s, p.lease, Signal::none, 0us,
                    Fallback::connect_failed, ups, 1s, rng);
  CHECK(q.upstream == 1);
  CHECK(ups.cap.taken == 1);  // kept, not taken twice
  q.lease.complete(Signal::clean, 1ms, 2s);
  CHECK(ups.cap.taken == 0);
}

TEST_CASE("a heavy request that moves on keeps its heavy-cap unit while it waits there",
          "[admission][placement][lease]") {
  TestUpstreams ups(2, 1.0);
  Rng rng(1);
  TestSeat s(Lane::heavy), other(Lane::heavy);
  auto p = place(ask_for(0, kOne, Lane::heavy), s, ups, 0us, rng);
  auto o = place(ask_for(1, {}, Lane::heavy), other, ups, 0us, rng);  // the alternative is full
  REQUIRE(ups.cap.taken == 2);
  ups.closures[0].close(0us);
  auto q = relocate(ask_for(0, kOne, Lane::heavy), s, p.lease, Signal::none, 0us,
                    Fallback::connect_failed, ups, 1s, rng);
  REQUIRE(q.how == Placed::queued);
  CHECK(q.upstream == 1);
  CHECK(ups.cap.taken == 2);  // its unit stayed with it
  q.lease.cancel();
  CHECK(ups.cap.taken == 1);
}

TEST_CASE("a lease dropped without its outcome gives everything back and teaches nothing",
          "[admission][lease]") {
  TestUpstreams ups(1, 1.0);
  Rng rng(1);
  TestSeat a(Lane::heavy), b(Lane::heavy);
  auto estimate = ups.bulkheads[0].estimate().value();
  {
    auto pa = place(ask_for(0, kNone, Lane::heavy), a, ups, 0us, rng);
    REQUIRE(pa.lease.seated());
    auto pb = place(ask_for(0, kNone, Lane::heavy), b, ups, 0us, rng);
    REQUIRE(pb.lease.queued());
    CHECK(ups.cap.taken == 1);
  }
  CHECK(ups.running(0) == 0);
  CHECK(ups.waiting(0) == 0);
  CHECK(ups.cap.taken == 0);
  CHECK_FALSE(a.seated);
  CHECK(ups.bulkheads[0].known().successes + ups.bulkheads[0].known().failures == 0);
  CHECK(ups.bulkheads[0].estimate().value() == estimate);
}

TEST_CASE("a lease completes once: a moved-from or completed lease gives nothing back again",
          "[admission][lease]") {
  TestUpstreams ups(1, 2.0);
  Rng rng(1);
  TestSeat a, b;
  auto pa = place(ask_for(0), a, ups, 0us, rng);
  auto pb = place(ask_for(0), b, ups, 0us, rng);
  REQUIRE(ups.running(0) == 2);
  Lease moved = std::move(pa.lease);
  CHECK_FALSE(pa.lease);
  pa.lease.complete(Signal::clean, 1ms, 1ms);
  CHECK(ups.running(0) == 2);
  moved.complete(Signal::clean, 1ms, 1ms);
  CHECK(ups.running(0) == 1);
  moved.complete(Signal::clean, 1ms, 1ms);
  moved = Lease();
  CHECK(ups.running(0) == 1);
  CHECK(ups.bulkheads[0].known().successes == 1);
}

TEST_CASE("a completed lease left behind never touches its seat's next lease",
          "[admission][lease]") {
  TestUpstreams ups(1, 2.0);
  Rng rng(1);
  TestSeat s;
  auto first = place(ask_for(0), s, ups, 0us, rng);
  first.lease.complete(Signal::clean, 1ms, 1ms);
  auto second = place(ask_for(0), s, ups, 2ms, rng);  // the same request's next exchange
  REQUIRE(second.lease.seated());
  first.lease = Lease();
  CHECK(second.lease.seated());
  CHECK(ups.running(0) == 1);
}
