// A fleet sharing one upstream's capacity (admission/fleet.hpp): the share
// rule, the turns, the slots that move only once free, the epoch, the expiry,
// and a member's grace and fallback, on a fake clock (Micros values). The same
// rules run in Redis (proxy/fleet_script.hpp; tests/e2e/fleet_test.cpp).
#include "admission/fleet.hpp"

#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "admission/bulkhead.hpp"

using namespace sluice::admission;
using namespace std::chrono_literals;

namespace {

FleetReport report(std::uint64_t member, int in_flight, int demand, double khat = 4) {
  FleetReport r;
  r.member = member;
  r.in_flight = in_flight;
  r.demand = demand;
  r.khat = khat;
  return r;
}

// A seat the tests own.
struct TestSeat final : Seat {};

}  // namespace

TEST_CASE("fair shares are max-min over the claims, and what they leave is spread evenly",
          "[admission][fleet]") {
  auto s = fair_shares(10, {2, 8, 8});
  CHECK(s[0] == Approx(2));
  CHECK(s[1] == Approx(4));
  CHECK(s[2] == Approx(4));
  s = fair_shares(10, {1, 1});  // 8 left: 4 more each
  CHECK(s[0] == Approx(5));
  CHECK(s[1] == Approx(5));
  s = fair_shares(3, {5, 0, 5});
  CHECK(s[0] + s[1] + s[2] == Approx(3));
  CHECK(s[1] == Approx(0));
  CHECK(fair_shares(4, {}).empty());
}

TEST_CASE("the ledger splits floor(K̂) over the members' demand, and one reporting none claims K̂/N",
          "[admission][fleet]") {
  FleetLedger ledger({});
  // The first report sets the fleet's start.
  auto a = ledger.report(report(1, 0, 10, 12), 1s);
  CHECK(ledger.khat() == 12);
  CHECK(a.slots == 12);  // alone
  // b and c join. a gives back what it no longer holds, but may run on its
  // twelve until its answer reaches it: they free at its report after.
  ledger.report(report(2, 0, 10), 1s + 10ms);
  ledger.report(report(3, 0, 0), 1s + 20ms);
  a = ledger.report(report(1, 0, 10), 1s + 100ms);
  CHECK(a.slots == 4);
  auto b = ledger.report(report(2, 0, 10), 1s + 110ms);
  CHECK(b.slots == 0);
  a = ledger.report(report(1, 0, 10), 1s + 200ms);
  b = ledger.report(report(2, 0, 10), 1s + 210ms);
  auto c = ledger.report(report(3, 0, 0), 1s + 220ms);
  // c claims 12 / 3 = 4; a and b want 10 each: 4 each as well.
  CHECK(a.slots == 4);
  CHECK(b.slots == 4);
  CHECK(c.slots == 4);
  CHECK(a.members == 3);
  CHECK(ledger.held() <= 12);
  // c now wants 1: a and b get what it leaves once it has reported twice.
  c = ledger.report(report(3, 0, 1), 1s + 300ms);
  CHECK(c.slots == 1);
  c = ledger.report(report(3, 1, 1), 1s + 400ms);
  a = ledger.report(report(1, 4, 10), 1s + 410ms);
  b = ledger.report(report(2, 4, 10), 1s + 420ms);
  CHECK(a.slots + b.slots == 11);
  CHECK(a.slots >= 5);
  CHECK(b.slots >= 5);
  CHECK(b.others == 4 + 1);  // a's in flight and c's, as last reported
}

TEST_CASE("a slot moves only once the member that gave it up can no longer run on it",
          "[admission][fleet]") {
  FleetLedger ledger({});
  auto a = ledger.report(report(1, 0, 2, 2), 0s);
  REQUIRE(a.slots == 2);
  // b joins and wants slots: a's target falls to 1, but a admitted on 2 until
  // its answer came, so both stay a's until its next report.
  ledger.report(report(2, 0, 2), 10ms);
  a = ledger.report(report(1, 2, 2), 100ms);
  CHECK(a.slots == 1);
  auto b = ledger.report(report(2, 0, 2), 110ms);
  CHECK(b.slots == 0);
  // a reports one in flight on its one slot: the other is free.
  a = ledger.report(report(1, 1, 2), 200ms);
  b = ledger.report(report(2, 0, 2), 210ms);
  CHECK(b.slots == 1);
  CHECK(ledger.held() == 2);
}

TEST_CASE("sixteen members share four slots in turns: never more than four held, each in turn",
          "[admission][fleet]") {
  FleetLedger::Policy p;
  p.hold = 1s;
  FleetLedger ledger(p);
  std::set<std::uint64_t> had;
  Micros t{0};
  std::vector<int> slots(17, 0);
  for (int round = 0; round < 200; ++round) {
    t += 100ms;
    for (std::uint64_t m = 1; m <= 16; ++m) {
      // Each runs on every slot it holds, and wants one more.
      auto r = ledger.report(report(m, slots[m], slots[m] + 1, 4), t + Micros(m * 1000));
      slots[m] = r.slots;
      if (r.slots > 0) had.insert(m);
      int held = 0;
      for (int s : slots) held += s;
      REQUIRE(held <= 4);
    }
  }
  CHECK(had.size() == 16);
}

TEST_CASE("the epoch: one decrease per burst fleet-wide, and a change measured before it is void",
          "[admission][fleet]") {
  FleetLedger ledger({});
  auto a = ledger.report(report(1, 0, 1, 20), 0s);
  const auto e = a.epoch;
  FleetReport down = report(2, 5, 5, 15);
  down.change = FleetChange::decrease;
  down.carrying = 17;
  down.epoch = e;
  auto b = ledger.report(down, 10ms);
  CHECK(b.decreased);
  CHECK(ledger.khat() == 15);
  CHECK(ledger.carrying() == 17);
  CHECK(ledger.epoch() == e + 1);
  // Another member saw the same burst: measured in the old epoch, it changes nothing.
  FleetReport again = report(1, 5, 5, 10);
  again.change = FleetChange::decrease;
  again.epoch = e;
  a = ledger.report(again, 20ms);
  CHECK_FALSE(a.decreased);
  CHECK(ledger.khat() == 15);
  // Growth: the largest of the replicas' values in the current epoch, none from an old one.
  FleetReport up = report(1, 5, 5, 16);
  up.change = FleetChange::grow;
  up.epoch = e;
  ledger.report(up, 30ms);
  CHECK(ledger.khat() == 15);
  up.epoch = e + 1;
  ledger.report(up, 40ms);
  CHECK(ledger.khat() == 16);
  up.khat = 15.5;  // grown from the same value elsewhere, less
  ledger.report(up, 50ms);
  CHECK(ledger.khat() == 16);
}

TEST_CASE("a member silent past the expiry is gone, and its slots return to the others",
          "[admission][fleet]") {
  FleetLedger::Policy p;
  p.expiry = 300ms;
  FleetLedger ledger(p);
  ledger.report(report(1, 0, 8, 8), 0s);
  ledger.report(report(2, 0, 8), 10ms);
  ledger.report(report(1, 4, 8), 100ms);
  ledger.report(report(2, 0, 8), 110ms);
  ledger.report(report(1, 4, 8), 200ms);
  auto b = ledger.report(report(2, 0, 8), 210ms);
  CHECK(b.slots == 4);
  CHECK(b.members == 2);
  // 1 is killed; 2 reports on.
  ledger.report(report(2, 4, 8), 300ms);
  b = ledger.report(report(2, 4, 8), 550ms);
  CHECK(b.members == 1);
  CHECK(b.slots == 8);
}

TEST_CASE(
    "a member holds the fleet's share, a decrease pushed cuts it at once, past the grace it "
    "estimates alone from its share, growing 1/N as fast, and answered again, the fleet's wins",
    "[admission][fleet]") {
  EstimatePolicy ep;
  ep.growth_interval = 100ms;
  Bulkhead b({}, Estimate(ep, 4, 4));
  FleetMember m(1, 300ms);
  FleetReply r;
  r.khat = 12;
  r.carrying = 12;
  r.epoch = 1;
  r.members = 3;
  r.slots = 4;
  r.others = 8;
  m.answered(b, r, 1s);
  CHECK(m.source() == FleetMember::Source::fleet);
  CHECK(b.census().slots() == 4);
  CHECK(b.estimate().value() == 12);  // the replica holds the fleet's K̂
  // Pushed: the fleet's K̂ down to 9, the share down in proportion.
  m.pushed(b, 9, 10, 2, 1s + 50ms);
  CHECK(b.census().slots() == 3);
  CHECK(b.estimate().value() == 9);
  CHECK(m.last().epoch == 2);
  // An old push changes nothing.
  m.pushed(b, 5, 5, 2, 1s + 60ms);
  CHECK(b.estimate().value() == 9);
  // Within the grace: still the fleet's.
  CHECK_FALSE(m.tick(b, 1s + 300ms));
  CHECK(b.census().slots() == 3);
  // Past it: alone, from the share (3), never from the seed.
  CHECK(m.tick(b, 1s + 400ms));
  CHECK(m.source() == FleetMember::Source::local);
  CHECK(b.estimate().value() == 3);
  CHECK(b.census().slots() == 3);
  // Growth under demand once an answer ends the hold, at a third of one
  // instance's step.
  Rng rng(1);
  TestSeat first;
  REQUIRE(b.ask(first, 1500ms, rng));
  b.release(first, Signal::clean, 10ms, 1510ms);
  std::vector<TestSeat> seats(6);
  for (auto& s : seats) b.ask(s, 2s, rng);
  b.tick(3s);
  const double grown = b.estimate().value() - 3;
  CHECK(grown > 0);
  CHECK(grown <= 1.0 / 3 + 1e-9);
  // Answered again: the fleet's value wins.
  r.khat = 10;
  r.epoch = 2;
  r.slots = 5;
  m.answered(b, r, 4s);
  CHECK(m.source() == FleetMember::Source::fleet);
  CHECK(b.estimate().value() == 10);
  CHECK(b.census().slots() == 5);
  for (auto& s : seats) b.cancel(s, 4s);
}

TEST_CASE("a decrease measured here cuts the member's share at once, before its next round",
          "[admission][fleet]") {
  Bulkhead b({}, Estimate({}, 8, 8));
  FleetMember m(1, 300ms);
  FleetReply r;
  r.khat = 8;
  r.carrying = 8;
  r.epoch = 1;
  r.members = 2;
  r.slots = 4;
  m.answered(b, r, 1s);
  REQUIRE(b.census().slots() == 4);
  Rng rng(1);
  TestSeat s;
  REQUIRE(b.ask(s, 1s + 1ms, rng));
  // The upstream refuses it: the replica decreases, and the share with it.
  CHECK(b.release(s, Signal::refused, 1ms, 1s + 2ms));
  CHECK(b.estimate().value() < 8);
  CHECK(b.census().slots() < 4);
  // The next report carries the decrease, in the epoch it was measured in.
  auto rep = m.report(b);
  CHECK(rep.change == FleetChange::decrease);
  CHECK(rep.epoch == 1);
}

TEST_CASE("a member without a slot queues a request for its turn, and seats it when the turn comes",
          "[admission][fleet]") {
  Bulkhead b({}, Estimate({}, 4, 4));
  // Seat holds measured, so the line has a pace (and a newcomer's wait a value).
  Rng rng(1);
  TestSeat warm;
  REQUIRE(b.ask(warm, 1s, rng));
  b.release(warm, Signal::clean, 20ms, 1s + 20ms);
  FleetMember m(1, 300ms);
  FleetReply r;
  r.khat = 4;
  r.carrying = 4;
  r.epoch = 1;
  r.members = 8;
  r.slots = 0;
  r.others = 4;
  r.others_held = 4;
  m.answered(b, r, 2s);
  TestSeat s;
  bool queued = false;
  CHECK_FALSE(b.ask(s, 2s + 10ms, rng, nullptr, true, &queued));
  CHECK(queued);  // not refused: its turn comes at a round
  // Its turn: the next answer gives it a slot, and the waiter is seated at once.
  r.slots = 1;
  m.answered(b, r, 2s + 100ms);
  CHECK(s.seated);
  b.release(s, Signal::clean, 20ms, 2s + 120ms);
}

TEST_CASE(
    "a probe refuted by one member backs every member's next probe off, so the fleet probes "
    "as one instance does",
    "[admission][fleet]") {
  EstimatePolicy p;
  p.growth_interval = 100ms;
  p.probe_after = 1s;
  const Micros t = 10s;
  // A replica at K = 4 learns that another member's probe past K was refuted:
  // the fleet's K̂ back at K, in a new epoch.
  Estimate b(p, 4, 4);
  b.sync(4, 4, true, t);
  // A clean answer of a request admitted after it.
  const auto seq = b.next_seq();
  b.observe(Signal::clean, seq, 3, t + 10ms);
  // Its next probe waits as long as the refuted member's own (backed off once: 2 s).
  b.demand();
  CHECK_FALSE(b.maybe_grow(t + 1500ms));
  b.demand();
  CHECK(b.maybe_grow(t + 2100ms));
  CHECK(b.probing());
  // A decrease under K elsewhere holds it, and starts the probes over.
  Estimate c(p, 4, 4);
  c.sync(3.4, 4, true, t);
  CHECK(c.phase() == Estimate::Phase::hold);
}
