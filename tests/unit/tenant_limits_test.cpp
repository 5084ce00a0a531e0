// Per-tenant limits and their bounded table, on test time.
#include <catch2/catch.hpp>
#include <vector>

#include "tenants/limits.hpp"

using namespace sluice::tenants;
using namespace std::chrono_literals;

TEST_CASE("a tenant at its concurrency is refused until a request of its ends",
          "[tenants][limits]") {
  Table t(1024);
  Limits l;
  l.concurrency = 2;
  Grant a = t.acquire(1, l, 0us), b = t.acquire(1, l, 0us);
  CHECK(a.limited == Limited::no);
  CHECK(b.limited == Limited::no);
  Grant c = t.acquire(1, l, 0us);
  CHECK(c.limited == Limited::concurrency);
  CHECK(t.acquire(2, l, 0us).limited == Limited::no);  // another tenant is not held by it
  t.release(c);                                        // a refusal holds nothing
  t.release(a);
  Grant d = t.acquire(1, l, 1ms);
  CHECK(d.limited == Limited::no);
  t.release(b);
  t.release(d);
}

TEST_CASE("a tenant's token bucket refills at its rate, and tells the wait for the next token",
          "[tenants][limits]") {
  Table t(1024);
  Limits l;
  l.rate = 10;  // a token every 100 ms
  l.burst = 2;
  CHECK(t.acquire(7, l, 0us).limited == Limited::no);
  Grant last = t.acquire(7, l, 0us);
  CHECK(last.limited == Limited::no);
  Grant refused = t.acquire(7, l, 0us);
  CHECK(refused.limited == Limited::rate);
  CHECK(refused.retry_after == 100ms);
  CHECK(t.acquire(7, l, 60ms).retry_after == 40ms);
  CHECK(t.acquire(7, l, 100ms).limited == Limited::no);
  CHECK(t.acquire(7, l, 100ms).limited == Limited::rate);
  // 10 s idle fill the bucket to its size, no more.
  CHECK(t.acquire(7, l, 10s).limited == Limited::no);
  CHECK(t.acquire(7, l, 10s).limited == Limited::no);
  CHECK(t.acquire(7, l, 10s).limited == Limited::rate);
}

TEST_CASE("a request refused after it took a token gives the token back", "[tenants][limits]") {
  Table t(1024);
  Limits l;
  l.rate = 1;  // burst: one second of it
  Grant g = t.acquire(3, l, 0us);
  REQUIRE(g.limited == Limited::no);
  CHECK(t.acquire(3, l, 0us).limited == Limited::rate);
  t.release(g, /*refund=*/true);  // refused by its lane afterwards
  CHECK(t.acquire(3, l, 0us).limited == Limited::no);
}

TEST_CASE("the table holds at most its capacity: the least recent idle tenant is evicted",
          "[tenants][limits]") {
  Table t(16);  // one tenant per stripe
  Limits l;
  l.rate = 1;
  for (std::uint64_t k = 1; k <= 200; ++k) t.acquire(k, l, 0us);
  CHECK(t.size() == 16);
  CHECK(t.evictions() == 200 - 16);
  // Evicted, a tenant comes back with a full bucket (its state is forgotten).
  CHECK(t.acquire(1, l, 0us).limited == Limited::no);
}

TEST_CASE("eviction takes the least recently used tenant of the stripe", "[tenants][limits]") {
  Table t(32);  // two tenants per stripe
  std::vector<std::uint64_t> same;
  for (std::uint64_t k = 1; same.size() < 3; ++k)
    if (Table::stripe_of(k) == Table::stripe_of(1)) same.push_back(k);
  Limits l;
  l.rate = 1;  // one token, one per second
  CHECK(t.acquire(same[0], l, 0us).limited == Limited::no);
  CHECK(t.acquire(same[1], l, 0us).limited == Limited::no);
  CHECK(t.acquire(same[0], l, 0us).limited == Limited::rate);  // same[0] is the most recent now
  CHECK(t.acquire(same[2], l, 0us).limited == Limited::no);    // evicts same[1]
  CHECK(t.evictions() == 1);
  CHECK(t.acquire(same[0], l, 0us).limited == Limited::rate);  // remembered: kept
  CHECK(t.acquire(same[1], l, 0us).limited == Limited::no);    // forgotten: a full bucket
}

TEST_CASE("a tenant with requests in flight is never evicted, and a newcomer then goes untracked",
          "[tenants][limits]") {
  Table t(16);
  Limits l;
  l.concurrency = 1;
  Grant held = t.acquire(42, l, 0us);
  REQUIRE(held.holds);
  for (std::uint64_t k = 1000; k < 1200; ++k) {
    Grant g = t.acquire(k, l, 0us);
    CHECK(g.limited != Limited::concurrency);
    t.release(g);
  }
  CHECK(t.untracked() > 0);                                      // those that met 42's stripe
  CHECK(t.acquire(42, l, 0us).limited == Limited::concurrency);  // still counted
  t.release(held);
  CHECK(t.acquire(42, l, 0us).limited == Limited::no);
}

TEST_CASE("a route's own limits count a tenant apart from its other routes", "[tenants][limits]") {
  CHECK(Table::scoped(5, 0) != Table::scoped(5, 1));
  CHECK(Table::scoped(5, 0) != Table::scoped(6, 0));
  CHECK(Table::scoped(5, 0) != 5);
  // Under its scoped key a tenant's bucket is its own: one route's exhausted
  // rate holds back neither its other route nor the process's.
  Table t(1024);
  Limits l;
  l.rate = 1;
  REQUIRE(t.acquire(Table::scoped(5, 0), l, 0us).limited == Limited::no);
  CHECK(t.acquire(Table::scoped(5, 0), l, 0us).limited == Limited::rate);
  CHECK(t.acquire(Table::scoped(5, 1), l, 0us).limited == Limited::no);
  CHECK(t.acquire(5, l, 0us).limited == Limited::no);
}

// ---------------------------------------------------------------- the fleet

TEST_CASE(
    "a fleet allowance is the limit left in the sliding window, and what the next interval "
    "frees, at this instance's share",
    "[tenants][limits][fleet]") {
  FleetReading r;
  r.limit = 100;
  r.instances = 3;
  r.interval = 0.1;
  // A fresh window, nothing counted: an even third of the whole limit.
  CHECK(fleet_allowance(r).admissions == Approx(100.0 / 3));
  // Steady at the limit, spread evenly: the previous window's 100 slide out
  // at 10 per interval; a third of them is this instance's.
  r.previous = 100;
  r.current = 50;
  r.elapsed = 0.5;
  r.mine = 50;
  CHECK(fleet_allowance(r).admissions == Approx(10.0 / 3));
  // The same counts, all of them this instance's: all of what is freed.
  r.mine = 150;
  CHECK(fleet_allowance(r).admissions == Approx(10.0));
  // Over the limit: nothing, told when the sliding count is under it again.
  r.current = 80;
  auto over = fleet_allowance(r);
  CHECK(over.admissions == 0);
  // sliding 130: 31 must slide out, of the previous window's 100 a window.
  CHECK(over.retry == std::chrono::microseconds(310'000));
}

TEST_CASE("with the fleet link down, a tenant's bucket refills at its share of the rate",
          "[tenants][limits][fleet]") {
  Table t(1024);
  Limits l;
  l.rate = 30;  // a bucket of 30
  t.set_fleet(Table::Fleet::down, 3);
  int admitted = 0;
  for (int i = 0; i < 40; ++i) admitted += t.acquire(9, l, 0us).limited == Limited::no ? 1 : 0;
  CHECK(admitted == 10);                                 // a third of the bucket
  CHECK(t.acquire(9, l, 100ms).limited == Limited::no);  // 10 per second
  CHECK(t.acquire(9, l, 100ms).limited == Limited::rate);
}

TEST_CASE(
    "the fleet's allowance gates a tenant until the next reconcile, and counts are reported "
    "once, by window",
    "[tenants][limits][fleet]") {
  Table t(1024);
  Limits l;
  l.rate = 1000;
  t.set_fleet(Table::Fleet::up, 2);
  // Before its first reconcile: its share of the rate (a bucket of 500).
  for (int i = 0; i < 3; ++i) REQUIRE(t.acquire(5, l, 100ms).limited == Limited::no);
  std::vector<FleetItem> items;
  t.collect(150ms, items);
  REQUIRE(items.size() == 1);
  CHECK(items[0].key == 5);
  CHECK(items[0].window == 0);
  CHECK(items[0].pending[0] == 3);
  CHECK(items[0].reported[0] == 0);
  t.set_allowance(5, {2.0, 300ms}, 150ms, 200ms);
  CHECK(t.acquire(5, l, 200ms).limited == Limited::no);
  Grant refused_later = t.acquire(5, l, 200ms);
  CHECK(refused_later.limited == Limited::no);
  Grant out = t.acquire(5, l, 200ms);
  CHECK(out.limited == Limited::rate);
  CHECK(out.retry_after == 250ms);            // told at 150 ms: 300 ms from then
  t.release(refused_later, /*refund=*/true);  // its lane refused it: not counted, allowance back
  CHECK(t.acquire(5, l, 200ms).limited == Limited::no);
  // Nothing reported twice; the report failed: its counts come back for the next one.
  items.clear();
  t.collect(250ms, items);
  REQUIRE(items.size() == 1);
  CHECK(items[0].pending[0] == 2);
  CHECK(items[0].reported[0] == 3);
  t.restore(items);
  items.clear();
  t.collect(1'100ms, items);  // the next window: those counts are the previous window's
  REQUIRE(items.size() == 1);
  CHECK(items[0].window == 1);
  CHECK(items[0].pending[0] == 0);
  CHECK(items[0].pending[1] == 2);
  CHECK(items[0].reported[1] == 3);
  items.clear();
  t.collect(1'200ms, items);
  CHECK(items.empty());  // not asked since
}

TEST_CASE(
    "when the link goes down, a tenant's bucket holds what the fleet last allowed, then "
    "refills at its share",
    "[tenants][limits][fleet]") {
  Table t(1024);
  Limits l;
  l.rate = 300;  // a bucket of 300
  t.set_fleet(Table::Fleet::up, 3);
  REQUIRE(t.acquire(4, l, 0us).limited == Limited::no);
  std::vector<FleetItem> items;
  t.collect(0us, items);
  t.set_allowance(4, {5.0, 100ms}, 0us, 200ms);
  t.set_fleet(Table::Fleet::down, 3);
  int admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += t.acquire(4, l, 0us).limited == Limited::no ? 1 : 0;
  CHECK(admitted == 5);                                 // not a third of the bucket (100) at once
  CHECK(t.acquire(4, l, 10ms).limited == Limited::no);  // 100 a second
  CHECK(t.acquire(4, l, 10ms).limited == Limited::rate);
}

TEST_CASE("a fleet allowance goes stale after its validity: the tenant's share applies again",
          "[tenants][limits][fleet]") {
  Table t(1024);
  Limits l;
  l.rate = 30;
  t.set_fleet(Table::Fleet::up, 3);
  REQUIRE(t.acquire(6, l, 0us).limited == Limited::no);
  std::vector<FleetItem> items;
  t.collect(0us, items);
  t.set_allowance(6, {0.0, 2s}, 0us, 200ms);  // none left, for 2 s
  CHECK(t.acquire(6, l, 100ms).limited == Limited::rate);
  // 300 ms later no round has renewed it: the share (10 a second) from what
  // the fleet allowed (none), not the stale refusal with its 2 s.
  CHECK(t.acquire(6, l, 300ms).limited == Limited::no);
  CHECK(t.acquire(6, l, 300ms).limited == Limited::rate);
}

TEST_CASE("a refund after the count was reported lowers the next total, and is collected",
          "[tenants][limits][fleet]") {
  Table t(1024);
  Limits l;
  l.rate = 100;
  t.set_fleet(Table::Fleet::up, 1);
  Grant g = t.acquire(8, l, 10ms);
  REQUIRE(g.limited == Limited::no);
  std::vector<FleetItem> items;
  t.collect(20ms, items);
  REQUIRE(items.size() == 1);
  CHECK(items[0].pending[0] == 1);
  // Other tenants are used since; 8 is not among the most recent any more.
  for (std::uint64_t k = 100; k < 140; ++k) t.acquire(k, l, 30ms);
  items.clear();
  t.collect(30ms, items);
  t.release(g, /*refund=*/true);  // refused by its lane after the report
  items.clear();
  t.collect(40ms, items);
  REQUIRE(items.size() == 1);
  CHECK(items[0].key == 8);
  CHECK(items[0].reported[0] + items[0].pending[0] == 0);  // the total it writes: none
}

TEST_CASE("a tenant held at its concurrency hides no other tenant from the fleet's report",
          "[tenants][limits][fleet]") {
  Table t(32);  // two tenants a stripe
  std::uint64_t a = 1, b = 2;
  while (Table::stripe_of(b) != Table::stripe_of(a)) ++b;
  Limits both;
  both.concurrency = 1;
  both.rate = 100;
  t.set_fleet(Table::Fleet::up, 1);
  Grant held = t.acquire(b, both, 0us);
  REQUIRE(held.limited == Limited::no);
  std::vector<FleetItem> items;
  t.collect(1ms, items);
  REQUIRE(t.acquire(a, both, 2ms).limited == Limited::no);         // a counts one
  CHECK(t.acquire(b, both, 3ms).limited == Limited::concurrency);  // b is the most recent
  items.clear();
  t.collect(4ms, items);
  bool found = false;
  for (const auto& item : items) found = found || (item.key == a && item.pending[0] == 1);
  CHECK(found);
  t.release(held);
}
