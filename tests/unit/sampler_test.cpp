// The sampler's rules on test time: only lag tagged with this tick's epoch is
// fresh evidence, and the upstream-wait p95 reads the last 1.5 ticks only.
#include "proxy/sampler.hpp"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

using namespace sluice::proxy;
using namespace std::chrono_literals;
using Catch::Detail::Approx;
using sluice::admission::Reading;

namespace {
const Clock::time_point t0 = Clock::time_point{} + 1h;  // test time
}  // namespace

TEST_CASE("the tick's lag is what every loop that sampled in its epoch shows", "[proxy][sampler]") {
  std::vector<LagSample> loops{{7, 12.0}, {7, 30.0}, {6, 250.0}};
  auto lag = tick_lag(loops, 7, 5.0);
  CHECK(lag.fresh);
  REQUIRE(lag.ms);
  CHECK(*lag.ms == 12.0);  // the least; the loop still at epoch 6 is not this tick's evidence
  // One loop far behind among several is not the process lagging; all of them are.
  std::vector<LagSample> one{{8, 900.0}, {8, 1.0}};
  CHECK(*tick_lag(one, 8, std::nullopt).ms == 1.0);
  std::vector<LagSample> every{{8, 900.0}, {8, 700.0}};
  CHECK(*tick_lag(every, 8, std::nullopt).ms == 700.0);
}

TEST_CASE("a lag tagged with a past epoch is not fresh evidence: the last value, marked stale",
          "[proxy][sampler]") {
  std::vector<LagSample> loops{{6, 250.0}, {6, 40.0}};
  auto lag = tick_lag(loops, 7, 12.0);
  CHECK_FALSE(lag.fresh);
  REQUIRE(lag.ms);
  CHECK(*lag.ms == 12.0);

  // Nothing fresh ever: no lag at all.
  auto none = tick_lag(loops, 7, std::nullopt);
  CHECK_FALSE(none.ms);
  CHECK(none.fresh);
}

TEST_CASE("an upstream wait older than 1.5 ticks is left out of the p95", "[proxy][sampler]") {
  auto ring = std::make_unique<WaitRing>();
  const auto now = t0 + 10s;
  ring->add(now - 1600ms, 900ms, 0);  // older than the window: left out
  ring->add(now - 1500ms, 40ms, 1);   // at the window's start: read
  ring->add(now - 100ms, 20ms, 0);
  const WaitRing* rings[] = {ring.get()};
  auto p95 = wait_p95_ms(rings, wait_window_start(now, 1000ms), 3);
  REQUIRE(p95.size() == 3);
  CHECK(p95[0] == Approx(20.0));
  CHECK(p95[1] == Approx(40.0));
  CHECK_FALSE(p95[2]);  // no sample: no wait

  // The window follows the tick: with 2 s ticks, 1.6 s ago is inside it.
  p95 = wait_p95_ms(rings, wait_window_start(now, 2000ms), 3);
  CHECK(p95[0] == Approx(900.0));
}

TEST_CASE("the upstream-wait p95 is taken per upstream over every loop's samples",
          "[proxy][sampler]") {
  auto a = std::make_unique<WaitRing>();
  auto b = std::make_unique<WaitRing>();
  const auto now = t0 + 10s;
  for (int i = 1; i <= 10; ++i) a->add(now - 500ms, std::chrono::milliseconds(i), 0);
  for (int i = 11; i <= 20; ++i) b->add(now - 400ms, std::chrono::milliseconds(i), 0);
  b->add(now - 300ms, 700ms, 1);
  const WaitRing* rings[] = {a.get(), b.get()};
  auto p95 = wait_p95_ms(rings, wait_window_start(now, 1000ms), 2);
  CHECK(p95[0] == Approx(19.0));  // rank ceil(0.95 x 20) of 1..20 ms
  CHECK(p95[1] == Approx(700.0));
}

TEST_CASE("an upstream's reading is its own wait and its own timeout, nothing of the loops'",
          "[proxy][sampler]") {
  std::vector<UpstreamPressure> upstreams(2);
  upstreams[0].wait_p95_ms = 30.0;
  upstreams[0].oldest_wait_ms = 80.0;  // a request still queued is evidence too
  upstreams[1].timeout = true;
  auto a = upstream_reading(sluice::admission::Millis{5000}, upstreams[0]);
  REQUIRE(a.upstream_wait_ms);
  CHECK(*a.upstream_wait_ms == 80.0);
  CHECK_FALSE(a.upstream_timeout);
  CHECK_FALSE(a.lag_ms);
  CHECK_FALSE(a.stall_ms);
  CHECK(a.t.count() == 5000);
  auto b = upstream_reading(sluice::admission::Millis{5000}, upstreams[1]);
  CHECK_FALSE(b.upstream_wait_ms);  // the other upstream's wait is not this one's
  CHECK(b.upstream_timeout);
}

TEST_CASE("the process stalls when every loop stalls, not when one does", "[proxy][sampler]") {
  const std::int64_t second = 1'000'000'000;
  std::vector<std::int64_t> one{second, 0};
  CHECK_FALSE(all_stalled_ms(one));
  std::vector<std::int64_t> every{second, 3 * second / 2};
  REQUIRE(all_stalled_ms(every));
  CHECK(*all_stalled_ms(every) == Approx(1000.0));  // what every loop went through
  CHECK_FALSE(all_stalled_ms(std::vector<std::int64_t>{}));
}
