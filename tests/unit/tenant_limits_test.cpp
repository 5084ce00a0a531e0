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
  CHECK(last.remaining == Approx(0));
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
}
