// The level gate and the refusal's Retry-After: factors, modes, the seeded RNG,
// the level a refused lane is admitted again at, and the clamp and jitter.
#include "admission/gate.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <set>

using namespace std::chrono_literals;
using sluice::admission::Controller;
using sluice::admission::ControllerConfig;
using sluice::admission::default_lane_factors;
using sluice::admission::default_retry_bands;
using sluice::admission::Gate;
using sluice::admission::GateDecision;
using sluice::admission::index;
using sluice::admission::Lane;
using sluice::admission::LaneFactors;
using sluice::admission::Level;
using sluice::admission::level_wait;
using sluice::admission::Millis;
using sluice::admission::Mode;
using sluice::admission::Outcome;
using sluice::admission::Reading;
using sluice::admission::Reason;
using sluice::admission::retry_after_seconds;
using sluice::admission::RetryBand;
using sluice::admission::Rng;

namespace {

// Admitted out of n requests of one lane at one level.
int admitted_of(const Gate& gate, Lane lane, Level level, int n, Rng& rng) {
  int admitted = 0;
  for (int i = 0; i < n; ++i)
    if (gate.admit(lane, level, rng).outcome == Outcome::admitted) ++admitted;
  return admitted;
}

Reading lag_reading(Millis t, double lag_ms) {
  Reading r;
  r.t = t;
  r.lag_ms = lag_ms;
  return r;
}

}  // namespace

TEST_CASE("modes, outcomes and reasons have the names SPEC uses", "[admission][gate]") {
  CHECK(to_string(Mode::enforce) == "enforce");
  CHECK(to_string(Mode::observe) == "observe");
  CHECK(to_string(Mode::off) == "off");
  CHECK(to_string(Outcome::admitted) == "admitted");
  CHECK(to_string(Outcome::shed) == "shed");
  CHECK(to_string(Outcome::would_shed) == "would_shed");
  CHECK(to_string(Reason::none) == "none");
  CHECK(to_string(Reason::level) == "level");
  CHECK(to_string(Reason::queue_timeout) == "queue_timeout");
  CHECK(to_string(Reason::pool_closed) == "pool_closed");
}

TEST_CASE("the default factors and Retry-After bands are SPEC's", "[admission][gate]") {
  LaneFactors f = default_lane_factors();
  CHECK(f[index(Lane::bulk)] == std::array<double, 4>{1, 0.5, 0, 0});
  CHECK(f[index(Lane::standard)] == std::array<double, 4>{1, 1, 1, 0.5});
  CHECK(f[index(Lane::heavy)] == std::array<double, 4>{1, 0.5, 0.25, 0.25});
  auto b = default_retry_bands();
  CHECK(b[index(Lane::bulk)].floor == 1s);
  CHECK(b[index(Lane::bulk)].cap == 180s);
  CHECK(b[index(Lane::standard)].floor == 1s);
  CHECK(b[index(Lane::standard)].cap == 30s);
  CHECK(b[index(Lane::heavy)].floor == 2s);
  CHECK(b[index(Lane::heavy)].cap == 60s);
}

TEST_CASE("a factor of 1 admits every request and a factor of 0 refuses every one",
          "[admission][gate]") {
  Gate gate(Mode::enforce, default_lane_factors());
  Rng rng(7);
  CHECK(admitted_of(gate, Lane::bulk, Level::normal, 10'000, rng) == 10'000);
  CHECK(admitted_of(gate, Lane::standard, Level::critical, 10'000, rng) == 10'000);
  CHECK(admitted_of(gate, Lane::bulk, Level::critical, 10'000, rng) == 0);
  CHECK(admitted_of(gate, Lane::bulk, Level::emergency, 10'000, rng) == 0);
  GateDecision d = gate.admit(Lane::bulk, Level::critical, rng);
  CHECK(d.outcome == Outcome::shed);
  CHECK(d.reason == Reason::level);
}

TEST_CASE("a fractional factor admits that fraction of new requests", "[admission][gate]") {
  Gate gate(Mode::enforce, default_lane_factors());
  Rng rng(11);
  int heavy = admitted_of(gate, Lane::heavy, Level::critical, 100'000, rng);  // 0.25
  CHECK(heavy > 24'000);
  CHECK(heavy < 26'000);
  int bulk = admitted_of(gate, Lane::bulk, Level::constrained, 100'000, rng);  // 0.5
  CHECK(bulk > 49'000);
  CHECK(bulk < 51'000);
  int standard = admitted_of(gate, Lane::standard, Level::emergency, 100'000, rng);  // 0.5
  CHECK(standard > 49'000);
  CHECK(standard < 51'000);
}

TEST_CASE("observe mode decides and counts would_shed, off mode decides nothing",
          "[admission][gate]") {
  Rng rng(3);
  Gate observe(Mode::observe, default_lane_factors());
  GateDecision d = observe.admit(Lane::bulk, Level::emergency, rng);
  CHECK(d.outcome == Outcome::would_shed);
  CHECK(d.reason == Reason::level);
  CHECK(observe.admit(Lane::bulk, Level::normal, rng).outcome == Outcome::admitted);

  Gate off(Mode::off, default_lane_factors());
  d = off.admit(Lane::bulk, Level::emergency, rng);
  CHECK(d.outcome == Outcome::admitted);
  CHECK(d.reason == Reason::none);
}

TEST_CASE("the same seed gives the same decisions", "[admission][gate]") {
  Gate gate(Mode::enforce, default_lane_factors());
  auto run = [&](std::uint64_t seed) {
    Rng rng(seed);
    std::vector<bool> out;
    for (int i = 0; i < 2'000; ++i)
      out.push_back(gate.admit(Lane::heavy, Level::critical, rng).outcome == Outcome::admitted);
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("a refused lane is admitted again at the highest level at or below with a factor",
          "[admission][gate]") {
  Gate gate(Mode::enforce, default_lane_factors());
  CHECK(gate.readmit_level(Lane::bulk, Level::emergency) == Level::constrained);
  CHECK(gate.readmit_level(Lane::bulk, Level::critical) == Level::constrained);
  CHECK(gate.readmit_level(Lane::bulk, Level::constrained) == Level::constrained);
  CHECK(gate.readmit_level(Lane::heavy, Level::emergency) == Level::emergency);  // a coin flip
  CHECK(gate.readmit_level(Lane::standard, Level::emergency) == Level::emergency);
  LaneFactors never = default_lane_factors();
  never[index(Lane::bulk)] = {0, 0, 0, 0};
  CHECK(Gate(Mode::enforce, never).readmit_level(Lane::bulk, Level::emergency) == Level::normal);
}

TEST_CASE("the level wait is the controller's time until the lane is admitted again",
          "[admission][gate]") {
  Gate gate(Mode::enforce, default_lane_factors());
  Controller c(ControllerConfig::fast());
  for (int i = 1; i <= 3; ++i) c.step(lag_reading(Millis{i * 1000}, 300));
  REQUIRE(c.level() == Level::critical);  // at 3 s
  // bulk is refused at 2 and admitted at 1: the rest of level 2's 15 s hold.
  CHECK(level_wait(c, gate, Lane::bulk, 3s) == 15s);
  CHECK(level_wait(c, gate, Lane::bulk, 10s) == 8s);
  // heavy's refusal at 2 was a coin flip: nothing to wait for.
  CHECK(level_wait(c, gate, Lane::heavy, 3s) == 0ms);
  c.pin(Level::emergency, std::nullopt, 3s, "incident", "ops");
  CHECK_FALSE(level_wait(c, gate, Lane::bulk, 3s));
}

TEST_CASE("Retry-After is clamped into the lane's band", "[admission][gate][retry]") {
  const RetryBand standard{1s, 30s};
  const RetryBand bulk{120s, 180s};
  Rng rng(5);
  for (int i = 0; i < 200; ++i) {
    int v = retry_after_seconds(0ms, standard, rng);  // below the floor
    CHECK(v >= 1);
    CHECK(v <= 2);
    CHECK(retry_after_seconds(1h, standard, rng) == 30);  // above the cap: the cap, no jitter
    int b = retry_after_seconds(15s, bulk, rng);
    CHECK(b >= 120);
    CHECK(b <= 144);  // jitter at most a fifth
  }
}

TEST_CASE("Retry-After rounds the derived wait up to whole seconds", "[admission][gate][retry]") {
  const RetryBand band{1s, 300s};
  Rng rng(9);
  int lowest = 1000;
  for (int i = 0; i < 500; ++i) lowest = std::min(lowest, retry_after_seconds(10'001ms, band, rng));
  CHECK(lowest == 11);
  lowest = 1000;
  for (int i = 0; i < 500; ++i) lowest = std::min(lowest, retry_after_seconds(10'000ms, band, rng));
  CHECK(lowest == 10);
}

TEST_CASE("Retry-After jitter only adds, spreads clients, and never passes the cap",
          "[admission][gate][retry]") {
  const RetryBand band{1s, 60s};
  Rng rng(1);
  std::set<int> seen;
  for (int i = 0; i < 2'000; ++i) {
    int v = retry_after_seconds(20s, band, rng);
    CHECK(v >= 20);  // never below the derived value
    CHECK(v <= 24);  // at most a fifth more
    seen.insert(v);
  }
  CHECK(seen.size() == 5);  // 20..24: refused clients do not return together
  for (int i = 0; i < 500; ++i) {
    int v = retry_after_seconds(58s, band, rng);
    CHECK(v >= 58);
    CHECK(v <= 60);  // the cap bounds the jitter
  }
}

TEST_CASE("an unforeseeable wait (a pin without expiry) gives the lane's cap",
          "[admission][gate][retry]") {
  Rng rng(2);
  CHECK(retry_after_seconds(std::nullopt, RetryBand{120s, 180s}, rng) == 180);
  CHECK(retry_after_seconds(std::nullopt, RetryBand{1s, 30s}, rng) == 30);
}
