// When upstream names are asked again, and how active health checks move a
// host, on test time (hosts/schedule.hpp).
#include <catch2/catch.hpp>

#include "hosts/schedule.hpp"

using namespace std::chrono_literals;
using sluice::hosts::HealthCheck;
using sluice::hosts::HealthState;
using sluice::hosts::Millis;
using sluice::hosts::TtlBounds;

TEST_CASE("an answer is kept for its TTL, held within the bounds", "[hosts]") {
  TtlBounds b{2s, 60s};
  CHECK(sluice::hosts::refresh_after(30s, b) == 30s);
  CHECK(sluice::hosts::refresh_after(0s, b) == 2s);  // TTL 0 is not asked for in a loop
  CHECK(sluice::hosts::refresh_after(24h, b) == 60s);
  CHECK(sluice::hosts::refresh_after(5s, TtlBounds{10s, 5s}) == 10s);  // the minimum wins
}

TEST_CASE("a failed lookup is retried after the minimum, doubling to 30 s or the maximum",
          "[hosts]") {
  TtlBounds b{1s, 60s};
  CHECK(sluice::hosts::retry_after(1, b) == 1s);
  CHECK(sluice::hosts::retry_after(2, b) == 2s);
  CHECK(sluice::hosts::retry_after(3, b) == 4s);
  CHECK(sluice::hosts::retry_after(6, b) == 30s);
  CHECK(sluice::hosts::retry_after(1000, b) == 30s);
  CHECK(sluice::hosts::retry_after(10, TtlBounds{1s, 5s}) == 5s);
  CHECK(sluice::hosts::retry_after(10, TtlBounds{45s, 60s}) == 45s);
}

TEST_CASE("checks come an interval apart, plus up to a tenth of it", "[hosts]") {
  HealthCheck c;
  c.interval = 1000ms;
  Millis lo = 1h, hi = 0ms;
  for (std::uint64_t r = 0; r < 5000; r += 7) {
    auto d = sluice::hosts::next_check(c, r * 0x9E3779B97F4A7C15ull);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  CHECK(lo >= 1000ms);
  CHECK(lo < 1010ms);
  CHECK(hi <= 1100ms);
  CHECK(hi > 1090ms);
}

TEST_CASE("unhealthy failures in a row take a host out, healthy passes in a row bring it back",
          "[hosts]") {
  HealthCheck c;
  c.unhealthy = 3;
  c.healthy = 2;
  HealthState s;
  CHECK(s.healthy());  // a host starts in
  CHECK_FALSE(s.record(false, c));
  CHECK_FALSE(s.record(false, c));
  CHECK_FALSE(s.record(true, c));  // a pass breaks the run
  CHECK_FALSE(s.record(false, c));
  CHECK_FALSE(s.record(false, c));
  CHECK(s.streak() == 2);
  CHECK(s.record(false, c));  // the third in a row
  CHECK_FALSE(s.healthy());
  CHECK(s.streak() == 0);
  CHECK_FALSE(s.record(true, c));
  CHECK_FALSE(s.record(false, c));  // a failure breaks the run back
  CHECK_FALSE(s.record(true, c));
  CHECK(s.record(true, c));
  CHECK(s.healthy());
}
