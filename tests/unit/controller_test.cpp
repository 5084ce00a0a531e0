// The tick controller's rules, one test each, on a fake clock: every reading
// carries its own time, so a five-minute hold takes microseconds to test.
#include "admission/controller.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>

using namespace std::chrono_literals;
using sluice::admission::Controller;
using sluice::admission::ControllerConfig;
using sluice::admission::Decision;
using sluice::admission::EmergencyRule;
using sluice::admission::Level;
using sluice::admission::Millis;
using sluice::admission::Reading;
using sluice::admission::Trigger;

namespace {

// Drives a controller one tick at a time; each call is the next tick.
class Ticker {
 public:
  explicit Ticker(ControllerConfig config = ControllerConfig::fast(), Millis tick = 1000ms)
      : controller(config), tick_(tick) {}

  Decision step(Reading r) {
    now_ += tick_;
    r.t = now_;
    return controller.step(r);
  }
  Decision quiet() { return step(idle()); }
  Decision lag(double ms, bool fresh = true) {
    Reading r = idle();
    r.lag_ms = ms;
    r.lag_fresh = fresh;
    return step(r);
  }
  Decision wait(double ms) {
    Reading r = idle();
    r.upstream_wait_ms = ms;
    return step(r);
  }
  Decision stall(double ms) {
    Reading r = idle();
    r.stall_ms = ms;
    return step(r);
  }
  Decision timeout() {
    Reading r = idle();
    r.upstream_timeout = true;
    return step(r);
  }
  // A read that failed; the watchdog's stall, if any, comes with it.
  Decision failed(std::optional<double> stall_ms = std::nullopt) {
    Reading r;
    r.ok = false;
    r.stall_ms = stall_ms;
    return step(r);
  }
  // Pins act at the time of the last tick, as an admin call between ticks would.
  Decision pin(Level level, std::optional<Millis> ttl = std::nullopt) {
    return controller.pin(level, ttl, now_, "test", "tester");
  }
  Decision unpin() { return controller.unpin(now_, "tester"); }

  // Repeats `tick` n times and returns the last decision.
  template <class F>
  Decision repeat(int n, F tick) {
    Decision d;
    for (int i = 0; i < n; ++i) d = tick(*this);
    return d;
  }

  Level level() const { return controller.level(); }
  Millis now() const { return now_; }

  Controller controller;

 private:
  // An idle instance: a few ms of lag, a short upstream wait, both far below every exit line.
  static Reading idle() {
    Reading r;
    r.lag_ms = 5;
    r.upstream_wait_ms = 2;
    return r;
  }
  Millis tick_;
  Millis now_{0};
};

auto quiet = [](Ticker& t) { return t.quiet(); };
auto lag = [](double ms) { return [ms](Ticker& t) { return t.lag(ms); }; };

std::uint64_t suppressed_total(const Controller& c) {
  std::uint64_t n = 0;
  for (const auto& to : c.stats().suppressed)
    for (auto v : to) n += v;
  return n;
}

std::uint64_t changes_total(const Controller& c) {
  std::uint64_t n = 0;
  for (const auto& from : c.stats().changes)
    for (const auto& to : from)
      for (auto v : to) n += v;
  return n;
}

void require_change(const Decision& d, Level from, Level to, Trigger trigger) {
  REQUIRE(d.changed);
  REQUIRE(d.from == from);
  REQUIRE(d.to == to);
  REQUIRE(d.level == to);
  REQUIRE(d.trigger == trigger);
}

// Fast profile: into level 1 at t = 3 s by three 220 ms lag ticks.
Ticker at_constrained(ControllerConfig config = ControllerConfig::fast()) {
  Ticker t(config);
  t.repeat(3, lag(220));
  REQUIRE(t.level() == Level::constrained);
  return t;
}

// Sentinel profile, one reading a minute (SPEC: SLUICE_TICK 1m in sentinel).
Ticker sentinel() { return Ticker(ControllerConfig::sentinel(), 60'000ms); }

// Sentinel: into critical at 3 min by three critical-only readings (lag 300:
// level 2's entry is 250 ms, level 3's 600 ms).
Ticker sentinel_at_critical(ControllerConfig config = ControllerConfig::sentinel(),
                            Millis tick = 60'000ms) {
  Ticker t(config, tick);
  t.repeat(3, lag(300));
  REQUIRE(t.level() == Level::critical);
  return t;
}

// Sentinel: into critical at 3 min (three critical readings), then into
// emergency at 8 min, when spacing first allows it.
Ticker sentinel_at_emergency() {
  Ticker t = sentinel();
  t.repeat(3, lag(700));
  REQUIRE(t.level() == Level::critical);
  t.repeat(5, lag(700));
  REQUIRE(t.level() == Level::emergency);
  REQUIRE(t.now() == 480'000ms);
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------
// Names and profiles

TEST_CASE("levels and triggers have the names SPEC uses", "[admission][controller]") {
  CHECK(to_string(Level::normal) == "normal");
  CHECK(to_string(Level::constrained) == "constrained");
  CHECK(to_string(Level::critical) == "critical");
  CHECK(to_string(Level::emergency) == "emergency");
  CHECK(to_string(Trigger::none) == "none");
  CHECK(to_string(Trigger::lag) == "lag");
  CHECK(to_string(Trigger::upstream_wait) == "upstream_wait");
  CHECK(to_string(Trigger::upstream_timeout) == "upstream_timeout");
  CHECK(to_string(Trigger::stall) == "stall");
  CHECK(to_string(Trigger::pin) == "pin");
  CHECK(to_string(Trigger::unpin) == "unpin");
  CHECK(to_string(Trigger::signal_loss) == "signal_loss");
  CHECK(to_string(Trigger::decay) == "decay");
}

TEST_CASE(
    "the fast profile has SPEC's defaults and sentinel changes the timings and the emergency rule",
    "[admission][controller]") {
  auto f = ControllerConfig::fast();
  CHECK(f.lag_ms == std::array<double, 3>{200, 250, 600});
  CHECK(f.upstream_wait_ms == std::array<double, 3>{150, 200, 600});
  CHECK(f.rise_ticks == 3);
  CHECK(f.emergency_stall == 1000ms);
  CHECK(f.hold == std::array<Millis, 3>{5s, 15s, 15s});
  CHECK(f.exit_ratio == 0.6);
  CHECK(f.spacing == 0ms);
  CHECK(f.emergency_dwell == 0ms);
  CHECK(f.timeout_window == 30s);
  CHECK(f.emergency_rule == EmergencyRule::evidence);

  auto s = ControllerConfig::sentinel();
  CHECK(s.hold == std::array<Millis, 3>{5min, 5min, 5min});
  CHECK(s.exit_ratio == 1.0);
  CHECK(s.spacing == 5min);
  CHECK(s.emergency_dwell == 3min);
  CHECK(s.lag_ms == f.lag_ms);
  CHECK(s.upstream_wait_ms == f.upstream_wait_ms);
  CHECK(s.rise_ticks == f.rise_ticks);
  CHECK(s.emergency_stall == f.emergency_stall);
  CHECK(s.timeout_window == f.timeout_window);
  CHECK(s.emergency_rule == EmergencyRule::sustained_critical);
}

// ---------------------------------------------------------------------------
// Seed 000: the required cases (e is in replay_test.cpp: it runs through replay)

TEST_CASE("(a) one 300 ms lag sample at idle stays at level 0 and counts one suppressed rise",
          "[admission][controller][seed000]") {
  Ticker t;
  t.repeat(5, quiet);
  Decision d = t.lag(300);
  CHECK(d.level == Level::normal);
  CHECK_FALSE(d.changed);
  CHECK_FALSE(d.suppressed);  // the streak is open: it could still rise
  d = t.quiet();              // the gate ends it: one suppressed rise, reported here
  REQUIRE(d.suppressed);
  CHECK(d.suppressed->to == Level::critical);  // 300 ms reaches level 2's 250 ms entry
  CHECK(d.suppressed->trigger == Trigger::lag);
  t.repeat(20, quiet);
  CHECK(t.level() == Level::normal);
  CHECK(suppressed_total(t.controller) == 1);
  CHECK(t.controller.stats().suppressed[2][static_cast<int>(Trigger::lag)] == 1);
  CHECK(changes_total(t.controller) == 0);
}

TEST_CASE("(b) three consecutive 220 ms lag samples raise the level to 1",
          "[admission][controller][seed000]") {
  Ticker t;
  CHECK(t.lag(220).level == Level::normal);
  CHECK(t.lag(220).level == Level::normal);
  Decision d = t.lag(220);
  require_change(d, Level::normal, Level::constrained, Trigger::lag);
  CHECK_FALSE(d.suppressed);
  CHECK(suppressed_total(t.controller) == 0);  // the streak reached its rise: nothing suppressed
  CHECK(t.controller.trigger() == Trigger::lag);
  CHECK(t.controller.last_change() == 3s);
}

TEST_CASE("(c) the emergency path is still immediate: one 1 s stall at idle goes to level 3",
          "[admission][controller][seed000]") {
  SECTION("a stall reported by the watchdog") {
    Ticker t;
    t.repeat(3, quiet);
    require_change(t.stall(1000), Level::normal, Level::emergency, Trigger::stall);
  }
  SECTION("a fresh lag sample of the stall's length") {
    Ticker t;
    require_change(t.lag(1200), Level::normal, Level::emergency, Trigger::stall);
  }
  SECTION("a stale repeat of a stall-length lag is not a new stall") {
    Ticker t;
    CHECK(t.lag(1500, /*fresh=*/false).level == Level::normal);
  }
  SECTION("just under the stall length is ordinary evidence") {
    Ticker t;
    Decision d = t.stall(999);
    CHECK(d.level == Level::normal);
  }
}

TEST_CASE("(d) level 1 decays to 0 within its 5 s hold", "[admission][controller][seed000]") {
  Ticker t = at_constrained();  // entered at 3 s
  for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::constrained);
  Decision d = t.quiet();  // 5 s after the change, every reading calm
  require_change(d, Level::constrained, Level::normal, Trigger::decay);
  CHECK(t.now() == 8s);
}

// Seed 000's review follow-ups

TEST_CASE("a 1 -> 2 rise also waits for three ticks of fresh evidence",
          "[admission][controller][seed000]") {
  Ticker t = at_constrained();
  Decision d = t.lag(300);
  CHECK(d.level == Level::constrained);
  CHECK_FALSE(d.suppressed);
  CHECK(t.controller.streak() == 1);
  CHECK(t.lag(300).level == Level::constrained);
  require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
  CHECK(suppressed_total(t.controller) == 0);
}

TEST_CASE("a stale lag repeat at level 1 holds the streak: it neither extends nor resets it",
          "[admission][controller][seed000]") {
  Ticker t = at_constrained();
  t.lag(300);
  t.lag(300);
  Decision stale = t.lag(300, /*fresh=*/false);
  CHECK(stale.level == Level::constrained);  // a repeat is not a third tick of evidence
  CHECK_FALSE(stale.suppressed);
  CHECK(t.controller.streak() == 2);  // ... and does not reset the two before it
  require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
}

TEST_CASE("a stale lag repeat at idle never raises the level however long it repeats",
          "[admission][controller][seed000]") {
  Ticker t;
  t.lag(300);
  for (int i = 0; i < 10; ++i) CHECK(t.lag(300, false).level == Level::normal);
  CHECK(t.controller.streak() == 1);           // only the fresh sample: held, not extended
  CHECK(suppressed_total(t.controller) == 0);  // ... and still open
  Decision d = t.quiet();
  REQUIRE(d.suppressed);  // the first fresh calm tick ends it: once, however long it was held
  CHECK(d.suppressed->to == Level::critical);
  CHECK(suppressed_total(t.controller) == 1);
}

TEST_CASE("a mixed streak enters its lowest level with the trigger of the first tick at that level",
          "[admission][controller][seed000]") {
  SECTION("2 (upstream wait), 1 (lag), 2 (lag): enters 1 by lag") {
    Ticker t;
    t.wait(210);
    t.lag(220);
    require_change(t.lag(300), Level::normal, Level::constrained, Trigger::lag);
  }
  SECTION("1 (lag), 1 (upstream wait), 2 (lag): enters 1 by the earlier lag") {
    Ticker t;
    t.lag(220);
    t.wait(160);
    require_change(t.lag(300), Level::normal, Level::constrained, Trigger::lag);
  }
  SECTION("1 (upstream wait), 1 (lag), 1 (lag): enters 1 by upstream_wait") {
    Ticker t;
    t.wait(160);
    t.lag(220);
    require_change(t.lag(220), Level::normal, Level::constrained, Trigger::upstream_wait);
  }
  SECTION("the same tick's signals tie to lag first") {
    Ticker t;
    Reading r;
    r.lag_ms = 220;
    r.upstream_wait_ms = 160;
    t.step(r);
    t.step(r);
    require_change(t.step(r), Level::normal, Level::constrained, Trigger::lag);
  }
}

TEST_CASE("an emergency stall clears an unfinished streak", "[admission][controller][seed000]") {
  Ticker t;
  t.lag(300);
  t.lag(300);
  REQUIRE(t.controller.streak() == 2);
  require_change(t.stall(1500), Level::normal, Level::emergency, Trigger::stall);
  CHECK(t.controller.streak() == 0);
}

TEST_CASE("a stale-only first tick is not reported as a suppressed rise",
          "[admission][controller][seed000]") {
  Ticker t;
  Decision d = t.lag(300, /*fresh=*/false);
  CHECK(d.level == Level::normal);
  CHECK_FALSE(d.suppressed);
  CHECK(suppressed_total(t.controller) == 0);
  CHECK(t.controller.streak() == 0);
}

TEST_CASE("a non-default level-1 hold keeps level 1 that long",
          "[admission][controller][seed000]") {
  auto c = ControllerConfig::fast();
  c.hold[0] = 15s;
  Ticker t = at_constrained(c);  // entered at 3 s
  for (int i = 0; i < 14; ++i) CHECK(t.quiet().level == Level::constrained);
  require_change(t.quiet(), Level::constrained, Level::normal, Trigger::decay);
  CHECK(t.now() == 18s);
}

// ---------------------------------------------------------------------------
// Seed 003: the capacity sentinel's ten transitions and its invalid one

TEST_CASE(
    "sentinel: normal -> constrained after three supporting readings, and no second "
    "change within five minutes",
    "[admission][controller][seed003]") {
  Ticker t = sentinel();
  CHECK(t.lag(220).level == Level::normal);
  CHECK(t.lag(220).level == Level::normal);
  require_change(t.lag(220), Level::normal, Level::constrained, Trigger::lag);  // 3 min
  // Critical readings from now on: three of them complete at 6 min, but spacing
  // holds the change to 8 min (5 min after the last one).
  for (int i = 0; i < 4; ++i) {
    Decision d = t.lag(300);
    CHECK(d.level == Level::constrained);
  }
  CHECK(t.now() == 7min);
  CHECK(t.controller.streak() == 4);  // spacing holds the streak back without ending it
  require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
  CHECK(t.now() == 8min);
  CHECK(suppressed_total(t.controller) == 0);  // both streaks rose
}

TEST_CASE("sentinel: constrained -> critical after three critical readings once spacing permits",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.repeat(3, lag(220));
  REQUIRE(t.level() == Level::constrained);
  t.repeat(6, lag(220));  // pressure stays at the constrained level: no change either way
  REQUIRE(t.level() == Level::constrained);
  CHECK(t.lag(300).level == Level::constrained);
  CHECK(t.lag(300).level == Level::constrained);
  require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
}

TEST_CASE(
    "sentinel: critical -> emergency on critical readings alone once critical has lasted "
    "three minutes and spacing permits",
    "[admission][controller][seed003]") {
  Ticker t = sentinel_at_critical();  // 3 min
  // Critical readings, none of them level-3 evidence: the sustained critical state
  // is what escalates. Spacing (5 min from 3 min) is the later of the two guards.
  for (int i = 0; i < 4; ++i) {
    Decision d = t.lag(300);
    CHECK(d.level == Level::critical);
    CHECK_FALSE(d.suppressed);
  }
  CHECK(t.controller.streak() == 4);
  require_change(t.lag(300), Level::critical, Level::emergency, Trigger::lag);
  CHECK(t.now() == 8min);
  CHECK(suppressed_total(t.controller) == 0);
}

TEST_CASE("sentinel: level-3 evidence escalates from critical under the same guards",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.repeat(3, lag(700));
  REQUIRE(t.level() == Level::critical);  // sustained pressure from normal stops at critical
  t.repeat(4, lag(700));
  CHECK(t.level() == Level::critical);
  require_change(t.lag(700), Level::critical, Level::emergency, Trigger::lag);
  CHECK(t.now() - 3min == 5min);
}

TEST_CASE("sentinel: critical -> emergency waits until critical has lasted three minutes",
          "[admission][controller][seed003]") {
  // Spacing of 1 min and 30 s readings, so the three-minute dwell is the guard that binds.
  auto c = ControllerConfig::sentinel();
  c.spacing = 1min;
  Ticker t = sentinel_at_critical(c, 30s);  // critical at 90 s
  for (int i = 0; i < 5; ++i) {  // 120 s .. 240 s: three critical readings and spacing are met
    Decision d = t.lag(300);
    CHECK(d.level == Level::critical);
  }
  CHECK(t.now() == 240s);
  require_change(t.lag(300), Level::critical, Level::emergency, Trigger::lag);
  CHECK(t.now() == 270s);  // 90 s + 3 min
}

TEST_CASE("sentinel: critical escalates only on sustained critical readings",
          "[admission][controller][seed003]") {
  SECTION("calmer readings at critical never escalate, however long critical lasted") {
    Ticker t = sentinel_at_critical();
    for (int i = 0; i < 4; ++i) {
      Decision d = t.lag(220);  // level-1 evidence: below critical
      CHECK(d.level == Level::critical);
      CHECK(t.controller.streak() == 0);
    }
    // ... and five of them are the recovery from critical.
    require_change(t.lag(220), Level::critical, Level::constrained, Trigger::decay);
  }
  SECTION("a calmer reading ends the escalating streak") {
    auto c = ControllerConfig::sentinel();
    c.spacing = 0ms;
    c.emergency_dwell = 0ms;
    Ticker t = sentinel_at_critical(c);
    t.repeat(2, lag(300));
    Decision d = t.lag(220);
    CHECK(d.level == Level::critical);
    REQUIRE(d.suppressed);  // the gate ended a streak toward emergency
    CHECK(d.suppressed->to == Level::emergency);
    CHECK(d.suppressed->trigger == Trigger::lag);
    t.repeat(2, lag(300));
    CHECK(t.level() == Level::critical);  // a fresh streak needs three readings again
    require_change(t.lag(300), Level::critical, Level::emergency, Trigger::lag);
  }
  SECTION("an upstream timeout is critical pressure too") {
    auto c = ControllerConfig::sentinel();
    c.spacing = 0ms;
    c.emergency_dwell = 0ms;
    c.timeout_window = 10min;
    Ticker t = sentinel_at_critical(c);
    t.timeout();
    t.quiet();
    require_change(t.quiet(), Level::critical, Level::emergency, Trigger::upstream_timeout);
  }
}

TEST_CASE(
    "sentinel: emergency -> critical after five below-critical readings, and critical readings "
    "hold emergency",
    "[admission][controller][seed003]") {
  SECTION("critical readings hold it, five below-critical readings release it") {
    Ticker t = sentinel_at_emergency();                                        // 8 min
    for (int i = 0; i < 10; ++i) CHECK(t.lag(400).level == Level::emergency);  // critical
    for (int i = 0; i < 4; ++i) CHECK(t.lag(220).level == Level::emergency);
    require_change(t.lag(220), Level::emergency, Level::critical, Trigger::decay);
    CHECK(t.now() == 23min);
  }
  SECTION("a reading at critical's entry is not below it") {
    Ticker t = sentinel_at_emergency();
    t.repeat(4, quiet);
    CHECK(t.lag(250).level == Level::emergency);  // 13 min: the hold starts again
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::emergency);
    require_change(t.quiet(), Level::emergency, Level::critical, Trigger::decay);
    CHECK(t.now() == 18min);
  }
  SECTION("an upstream timeout in its window is critical, not below it") {
    Ticker t = sentinel_at_emergency();
    t.repeat(4, quiet);
    CHECK(t.timeout().level == Level::emergency);
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::emergency);
    require_change(t.quiet(), Level::emergency, Level::critical, Trigger::decay);
  }
  SECTION("spacing permits the recovery") {
    auto c = ControllerConfig::sentinel();
    c.spacing = 7min;
    Ticker t(c, 60'000ms);
    t.repeat(3, lag(300));  // critical at 3 min: the first change is not spaced
    t.repeat(7, lag(300));
    REQUIRE(t.level() == Level::emergency);  // 10 min: 7 min after the last change
    REQUIRE(t.now() == 10min);
    for (int i = 0; i < 6; ++i) CHECK(t.quiet().level == Level::emergency);  // hold met at 15
    require_change(t.quiet(), Level::emergency, Level::critical, Trigger::decay);
    CHECK(t.now() == 17min);
  }
}

TEST_CASE("sentinel: critical -> constrained after five calmer readings",
          "[admission][controller][seed003]") {
  SECTION("right after critical was entered: spacing and the hold end together") {
    Ticker t = sentinel_at_critical();
    for (int i = 0; i < 4; ++i) CHECK(t.lag(220).level == Level::critical);
    require_change(t.lag(220), Level::critical, Level::constrained, Trigger::decay);
  }
  SECTION("long after: five calmer readings from the last that was not") {
    Ticker t = sentinel_at_critical();  // 3 min
    // A repeated critical lag is no evidence to escalate on, but it is not calmer.
    for (int i = 0; i < 6; ++i) CHECK(t.lag(300, /*fresh=*/false).level == Level::critical);
    for (int i = 0; i < 4; ++i) CHECK(t.lag(220).level == Level::critical);  // 10..13 min
    require_change(t.lag(220), Level::critical, Level::constrained, Trigger::decay);
    CHECK(t.now() == 14min);
  }
}

TEST_CASE("sentinel: constrained -> normal after five calm readings, or after two failed reads",
          "[admission][controller][seed003]") {
  SECTION("recovery") {
    Ticker t = sentinel();
    t.repeat(3, lag(220));
    REQUIRE(t.level() == Level::constrained);
    for (int i = 0; i < 4; ++i) CHECK(t.lag(150).level == Level::constrained);
    require_change(t.lag(150), Level::constrained, Level::normal, Trigger::decay);
  }
  SECTION("recovery long after the rise: five calm readings from the last that was not") {
    Ticker t = sentinel();
    t.repeat(3, lag(220));  // constrained at 3 min
    t.repeat(6, lag(210));  // pressure at the constrained level to 9 min
    for (int i = 0; i < 4; ++i) CHECK(t.lag(150).level == Level::constrained);
    require_change(t.lag(150), Level::constrained, Level::normal, Trigger::decay);
    CHECK(t.now() == 14min);
  }
  SECTION("signal loss, without waiting for spacing") {
    Ticker t = sentinel();
    t.repeat(3, lag(220));
    CHECK(t.failed().level == Level::constrained);
    require_change(t.failed(), Level::constrained, Level::normal, Trigger::signal_loss);
  }
}

TEST_CASE("sentinel: normal -> emergency by a staff pin, overriding spacing",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.repeat(3, lag(220));
  t.failed();
  t.failed();  // an automatic change just now: spacing would hold the next one
  REQUIRE(t.level() == Level::normal);
  Decision d = t.pin(Level::emergency, 10min);
  require_change(d, Level::normal, Level::emergency, Trigger::pin);
  CHECK(t.controller.pin_state()->level == Level::emergency);
}

TEST_CASE("sentinel: normal -> critical directly after three critical readings",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.lag(300);
  t.lag(300);
  require_change(t.lag(300), Level::normal, Level::critical, Trigger::lag);
}

TEST_CASE("sentinel: critical -> normal when two consecutive reads fail and no pin holds it",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.repeat(3, lag(300));
  REQUIRE(t.level() == Level::critical);
  CHECK(t.failed().level == Level::critical);
  require_change(t.failed(), Level::critical, Level::normal, Trigger::signal_loss);
}

TEST_CASE("sentinel: emergency -> normal when two consecutive reads fail and no pin holds it",
          "[admission][controller][seed003]") {
  Ticker t = sentinel_at_emergency();
  CHECK(t.failed().level == Level::emergency);
  require_change(t.failed(), Level::emergency, Level::normal, Trigger::signal_loss);
}

TEST_CASE("sentinel: constrained never goes to emergency automatically, a pin can select it",
          "[admission][controller][seed003]") {
  Ticker t = sentinel();
  t.repeat(3, lag(220));
  t.repeat(5, lag(220));
  REQUIRE(t.level() == Level::constrained);
  REQUIRE(t.now() == 8min);  // spacing and dwell both long satisfied
  // Sustained emergency pressure (below a stall) from constrained.
  bool passed_critical = false;
  for (int i = 0; i < 30; ++i) {
    Decision d = t.lag(900);
    if (d.changed) {
      CHECK_FALSE((d.from == Level::constrained && d.to == Level::emergency));
      if (d.to == Level::critical) passed_critical = true;
    }
  }
  CHECK(passed_critical);
  CHECK(t.level() == Level::emergency);  // eventually, through critical

  Ticker p = sentinel();
  p.repeat(3, lag(220));
  require_change(p.pin(Level::emergency), Level::constrained, Level::emergency, Trigger::pin);
}

// ---------------------------------------------------------------------------
// The remaining rules

TEST_CASE("a rise above critical from below critical stops at critical",
          "[admission][controller]") {
  SECTION("from normal") {
    Ticker t;
    t.repeat(2, lag(700));
    require_change(t.lag(700), Level::normal, Level::critical, Trigger::lag);
  }
  SECTION("from constrained") {
    Ticker t = at_constrained();
    t.repeat(2, lag(700));
    require_change(t.lag(700), Level::constrained, Level::critical, Trigger::lag);
  }
  SECTION("from critical, sustained pressure enters emergency") {
    Ticker t;
    t.repeat(3, lag(700));
    t.repeat(2, lag(700));
    require_change(t.lag(700), Level::critical, Level::emergency, Trigger::lag);
  }
}

TEST_CASE("a suppressed rise reports the level the streak's rise would have entered",
          "[admission][controller]") {
  SECTION("evidence for 3 from 0 would have stopped at 2") {
    Ticker t;
    t.lag(700);
    Decision d = t.quiet();
    REQUIRE(d.suppressed);
    CHECK(d.suppressed->to == Level::critical);
    CHECK(t.controller.stats().suppressed[2][static_cast<int>(Trigger::lag)] == 1);
  }
  SECTION("a mixed streak: its lowest level and that level's first trigger") {
    Ticker t;
    t.lag(700);
    t.wait(160);  // the streak's lowest is now 1, by upstream_wait
    Decision d = t.quiet();
    REQUIRE(d.suppressed);
    CHECK(d.suppressed->to == Level::constrained);
    CHECK(d.suppressed->trigger == Trigger::upstream_wait);
    CHECK(suppressed_total(t.controller) == 1);
  }
}

TEST_CASE("a streak the gate ends without its rise counts once, on the tick that ends it",
          "[admission][controller][seed000]") {
  Ticker t;
  for (int i = 0; i < 2; ++i) {  // two ticks of evidence, one short of the gate
    Decision d = t.lag(300);
    CHECK_FALSE(d.suppressed);
  }
  Decision end = t.lag(150);  // evidence falls away below level 1's entry
  REQUIRE(end.suppressed);
  CHECK(end.suppressed->to == Level::critical);
  CHECK(end.suppressed->trigger == Trigger::lag);
  CHECK(t.controller.streak() == 0);
  for (int i = 0; i < 5; ++i) CHECK_FALSE(t.quiet().suppressed);
  CHECK(suppressed_total(t.controller) == 1);
  // A second blip is a second streak.
  t.wait(210);
  CHECK(t.quiet().suppressed->trigger == Trigger::upstream_wait);
  CHECK(suppressed_total(t.controller) == 2);
  CHECK(changes_total(t.controller) == 0);
}

TEST_CASE("a streak still open counts nothing", "[admission][controller][seed000]") {
  Ticker t;
  t.lag(300);
  t.lag(300);
  CHECK(t.controller.streak() == 2);
  CHECK(suppressed_total(t.controller) == 0);
}

TEST_CASE("a streak that a level change ends counts nothing", "[admission][controller][seed000]") {
  SECTION("a stall") {
    Ticker t;
    t.repeat(2, lag(300));
    t.stall(1500);
    t.quiet();
    CHECK(suppressed_total(t.controller) == 0);
  }
  SECTION("a pin") {
    Ticker t;
    t.repeat(2, lag(300));
    t.pin(Level::normal);
    t.quiet();
    t.unpin();
    t.quiet();
    CHECK(suppressed_total(t.controller) == 0);
  }
  SECTION("a signal-loss release") {
    Ticker t = at_constrained();
    t.repeat(2, lag(300));
    t.failed();
    require_change(t.failed(), Level::constrained, Level::normal, Trigger::signal_loss);
    t.quiet();
    CHECK(suppressed_total(t.controller) == 0);
  }
}

TEST_CASE("no automatic change within the spacing of the last change", "[admission][controller]") {
  auto c = ControllerConfig::fast();
  c.spacing = 10s;
  SECTION("a rise waits, and its streak counts nothing when it rises") {
    Ticker t = at_constrained(c);  // at 3 s
    for (int i = 0; i < 9; ++i) {
      Decision d = t.lag(300);
      CHECK(d.level == Level::constrained);
      CHECK_FALSE(d.suppressed);
    }
    require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
    CHECK(t.now() == 13s);
    CHECK(suppressed_total(t.controller) == 0);
  }
  SECTION("a streak spacing held past the gate counts once if it ends without its rise") {
    Ticker t = at_constrained(c);  // at 3 s
    t.repeat(5, lag(300));         // 4..8 s: three ticks and more, but spacing holds
    CHECK(t.controller.streak() == 5);
    Decision d = t.lag(210);  // 9 s: evidence for 1 only, no longer above the level
    REQUIRE(d.suppressed);
    CHECK(d.suppressed->to == Level::critical);
    CHECK(suppressed_total(t.controller) == 1);
    CHECK(t.level() == Level::constrained);
  }
  SECTION("a decay waits") {
    Ticker t = at_constrained(c);
    for (int i = 0; i < 9; ++i) CHECK(t.quiet().level == Level::constrained);  // hold is 5 s
    require_change(t.quiet(), Level::constrained, Level::normal, Trigger::decay);
  }
  SECTION("the first change of all is not spaced from the start") {
    Ticker t(c);
    t.repeat(2, lag(220));
    CHECK(t.lag(220).changed);
  }
}

TEST_CASE("sustained pressure enters emergency only after critical has lasted the dwell",
          "[admission][controller]") {
  auto c = ControllerConfig::fast();
  c.emergency_dwell = 10s;
  Ticker t(c);
  t.repeat(3, lag(700));
  REQUIRE(t.level() == Level::critical);  // at 3 s
  SECTION("the rise waits, and its streak counts nothing when it rises") {
    for (int i = 0; i < 9; ++i) {
      Decision d = t.lag(700);
      CHECK(d.level == Level::critical);
      CHECK_FALSE(d.suppressed);  // held back, not ended
    }
    require_change(t.lag(700), Level::critical, Level::emergency, Trigger::lag);
    CHECK(t.now() == 13s);
    CHECK(suppressed_total(t.controller) == 0);
  }
  SECTION("a streak the dwell held counts once if it ends without its rise") {
    t.repeat(5, lag(700));  // 4..8 s: the dwell runs to 13 s
    Decision d = t.lag(300);
    REQUIRE(d.suppressed);
    CHECK(d.suppressed->to == Level::emergency);
    CHECK(suppressed_total(t.controller) == 1);
  }
}

TEST_CASE("fast: only level-3 evidence enters emergency, and level 3 holds on its own exit line",
          "[admission][controller][seed000]") {
  SECTION("critical readings however long never escalate") {
    Ticker t;
    t.repeat(3, lag(300));
    REQUIRE(t.level() == Level::critical);
    for (int i = 0; i < 60; ++i) CHECK(t.lag(300).level == Level::critical);
    CHECK(t.controller.streak() == 0);
  }
  SECTION("critical readings below level 3's exit line (360 ms) let it step down") {
    Ticker t;
    t.stall(1500);  // 3 at 1 s
    for (int i = 0; i < 14; ++i) CHECK(t.lag(300).level == Level::emergency);
    require_change(t.lag(300), Level::emergency, Level::critical, Trigger::decay);
    CHECK(t.now() == 16s);
  }
}

TEST_CASE("a stall is not held by the gate, spacing or dwell", "[admission][controller]") {
  auto c = ControllerConfig::fast();
  c.spacing = 1h;
  c.emergency_dwell = 1h;
  Ticker t = at_constrained(c);
  require_change(t.stall(2000), Level::constrained, Level::emergency, Trigger::stall);
}

TEST_CASE("a reading above the exit line restarts the hold", "[admission][controller]") {
  SECTION("lag between the exit line (120 ms) and the entry (200 ms)") {
    Ticker t = at_constrained();  // 3 s
    t.repeat(3, quiet);
    CHECK(t.lag(150).level == Level::constrained);  // 7 s: not calm
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::constrained);
    require_change(t.quiet(), Level::constrained, Level::normal, Trigger::decay);
    CHECK(t.now() == 12s);
  }
  SECTION("upstream wait above its exit line (90 ms)") {
    Ticker t = at_constrained();
    t.repeat(3, quiet);
    t.wait(100);
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::constrained);
    CHECK(t.quiet().level == Level::normal);
  }
  SECTION("a stale lag counts with its value") {
    Ticker t = at_constrained();
    t.repeat(3, quiet);
    t.lag(150, /*fresh=*/false);
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::constrained);
    CHECK(t.quiet().level == Level::normal);
  }
  SECTION("just under the exit line is calm") {
    Ticker t = at_constrained();
    t.repeat(4, lag(119));
    require_change(t.lag(119), Level::constrained, Level::normal, Trigger::decay);
  }
}

TEST_CASE("levels step down one at a time, each after its own hold", "[admission][controller]") {
  Ticker t;
  t.stall(1000);  // level 3 at 1 s
  Decision d = t.repeat(15, quiet);
  require_change(d, Level::emergency, Level::critical, Trigger::decay);
  CHECK(t.now() == 16s);
  d = t.repeat(15, quiet);
  require_change(d, Level::critical, Level::constrained, Trigger::decay);
  CHECK(t.now() == 31s);
  d = t.repeat(5, quiet);
  require_change(d, Level::constrained, Level::normal, Trigger::decay);
  CHECK(t.now() == 36s);
  CHECK(changes_total(t.controller) == 4);
}

TEST_CASE("an upstream timeout is evidence for level 2 within its window",
          "[admission][controller]") {
  SECTION("one timeout at idle raises to 2 on the third tick") {
    Ticker t;
    CHECK(t.timeout().level == Level::normal);
    CHECK(t.quiet().level == Level::normal);
    require_change(t.quiet(), Level::normal, Level::critical, Trigger::upstream_timeout);
  }
  SECTION("outside the window it is no evidence") {
    auto c = ControllerConfig::fast();
    c.timeout_window = 2s;
    Ticker t(c);
    t.timeout();
    t.quiet();
    CHECK(t.quiet().level == Level::normal);
    CHECK_FALSE(t.quiet().suppressed);
  }
  SECTION("a timeout in the window keeps level 2 from stepping down") {
    Ticker t;
    t.timeout();  // 1 s; in the window up to 30 s
    t.repeat(2, quiet);
    REQUIRE(t.level() == Level::critical);  // 3 s
    for (int i = 0; i < 41; ++i) CHECK(t.quiet().level == Level::critical);
    require_change(t.quiet(), Level::critical, Level::constrained, Trigger::decay);
    CHECK(t.now() == 45s);  // 15 s hold after the window ended (last non-calm tick: 30 s)
  }
}

TEST_CASE("one failed read holds the level, the second consecutive one releases to 0",
          "[admission][controller]") {
  SECTION("two in a row") {
    Ticker t;
    t.repeat(3, lag(300));
    CHECK(t.failed().level == Level::critical);
    require_change(t.failed(), Level::critical, Level::normal, Trigger::signal_loss);
    CHECK_FALSE(t.failed().changed);
  }
  SECTION("not consecutive") {
    Ticker t;
    t.repeat(3, lag(300));
    t.failed();
    t.lag(300);
    CHECK(t.failed().level == Level::critical);
  }
  SECTION("a pin holds the level") {
    Ticker t;
    t.pin(Level::critical);
    t.repeat(3, [](Ticker& x) { return x.failed(); });
    CHECK(t.level() == Level::critical);
  }
}

TEST_CASE("a failed read keeps its stall: it goes to level 3 at once, and does not release",
          "[admission][controller]") {
  SECTION("one failed read with a stall, in either profile") {
    Ticker f;
    require_change(f.failed(1500), Level::normal, Level::emergency, Trigger::stall);
    Ticker s = sentinel();
    require_change(s.failed(1500), Level::normal, Level::emergency, Trigger::stall);
  }
  SECTION("the second failed read with a stall goes to 3, the next without one releases") {
    Ticker t;
    t.repeat(3, lag(300));
    CHECK(t.failed().level == Level::critical);
    require_change(t.failed(1200), Level::critical, Level::emergency, Trigger::stall);
    require_change(t.failed(), Level::emergency, Level::normal, Trigger::signal_loss);
  }
  SECTION("a stall on a failed read at level 3 keeps it there") {
    Ticker t;
    t.stall(1500);
    t.failed();
    Decision d = t.failed(1500);
    CHECK_FALSE(d.changed);
    CHECK(d.level == Level::emergency);
  }
  SECTION("under the stall length it is no stall, and the failed read counts as ever") {
    Ticker t;
    t.repeat(3, lag(300));
    CHECK(t.failed(999).level == Level::critical);
    require_change(t.failed(999), Level::critical, Level::normal, Trigger::signal_loss);
  }
  SECTION("a failed read's lag is not read, however long") {
    Ticker t;
    Reading r;
    r.ok = false;
    r.lag_ms = 1500;
    CHECK_FALSE(t.step(r).changed);
  }
  SECTION("a pin holds against it") {
    Ticker t;
    t.pin(Level::constrained);
    CHECK(t.failed(1500).level == Level::constrained);
  }
}

TEST_CASE("a failed read holds the streak and restarts the hold", "[admission][controller]") {
  SECTION("streak") {
    Ticker t;
    t.lag(220);
    t.lag(220);
    t.failed();
    require_change(t.lag(220), Level::normal, Level::constrained, Trigger::lag);
  }
  SECTION("hold") {
    Ticker t = at_constrained();  // 3 s
    t.repeat(3, quiet);
    t.failed();  // 7 s: we could not see, so not calm
    for (int i = 0; i < 4; ++i) CHECK(t.quiet().level == Level::constrained);
    CHECK(t.quiet().level == Level::normal);
    CHECK(t.now() == 12s);
  }
}

TEST_CASE("a pin selects any level at once and holds it against evidence",
          "[admission][controller][pin]") {
  Ticker t;
  t.quiet();
  require_change(t.pin(Level::constrained), Level::normal, Level::constrained, Trigger::pin);
  CHECK(t.stall(2000).level == Level::constrained);
  t.repeat(10, lag(700));
  CHECK(t.level() == Level::constrained);
  t.repeat(60, quiet);
  CHECK(t.level() == Level::constrained);
  CHECK(suppressed_total(t.controller) == 0);  // the pin held it, not the gate
  require_change(t.pin(Level::normal), Level::constrained, Level::normal, Trigger::pin);
}

TEST_CASE("removing a pin leaves the pinned level and automatic decisions continue from it",
          "[admission][controller][pin]") {
  SECTION("decay from the pinned level, after a full hold from the removal") {
    Ticker t;
    t.pin(Level::emergency);
    t.repeat(20, quiet);
    Decision u = t.unpin();  // 20 s
    CHECK_FALSE(u.changed);
    CHECK(u.trigger == Trigger::unpin);
    CHECK(u.level == Level::emergency);
    CHECK_FALSE(t.controller.pin_state());
    for (int i = 0; i < 14; ++i) CHECK(t.quiet().level == Level::emergency);
    require_change(t.quiet(), Level::emergency, Level::critical, Trigger::decay);
    CHECK(t.now() == 35s);
  }
  SECTION("a rise from the pinned level with a fresh streak") {
    Ticker t;
    t.lag(300);
    t.lag(300);
    t.pin(Level::constrained);
    t.unpin();
    CHECK(t.lag(300).level == Level::constrained);
    CHECK(t.lag(300).level == Level::constrained);
    require_change(t.lag(300), Level::constrained, Level::critical, Trigger::lag);
  }
  SECTION("unpin without a pin is a no-op") {
    Ticker t;
    Decision u = t.unpin();
    CHECK_FALSE(u.changed);
    CHECK(u.trigger == Trigger::none);
  }
}

TEST_CASE("a pin expires at its ttl and automatic decisions resume",
          "[admission][controller][pin]") {
  Ticker t;
  t.quiet();
  t.pin(Level::critical, 10s);  // at 1 s, until 11 s
  REQUIRE(t.controller.pin_state()->expires_at == 11s);
  for (int i = 0; i < 9; ++i) CHECK(t.quiet().trigger == Trigger::none);
  Decision d = t.quiet();  // 11 s
  CHECK(d.trigger == Trigger::unpin);
  CHECK_FALSE(d.changed);
  CHECK(d.level == Level::critical);
  CHECK_FALSE(t.controller.pin_state());
  for (int i = 0; i < 14; ++i) CHECK(t.quiet().level == Level::critical);
  require_change(t.quiet(), Level::critical, Level::constrained, Trigger::decay);
}

TEST_CASE("a pin at the current level reports pin without a change",
          "[admission][controller][pin]") {
  Ticker t;
  Decision d = t.pin(Level::normal, 1min);
  CHECK_FALSE(d.changed);
  CHECK(d.trigger == Trigger::pin);
  CHECK(t.controller.pin_state());
  CHECK(changes_total(t.controller) == 0);
}

TEST_CASE("time_to_level adds the remaining hold, each lower hold, spacing and a pin",
          "[admission][controller]") {
  SECTION("at or below the target: zero") {
    Ticker t;
    CHECK(t.controller.time_to_level(Level::normal, t.now()) == 0ms);
    Ticker u = at_constrained();
    CHECK(u.controller.time_to_level(Level::constrained, u.now()) == 0ms);
  }
  SECTION("remaining hold, then full holds") {
    Ticker t;
    t.stall(1000);  // 3 at 1 s
    CHECK(t.controller.time_to_level(Level::normal, 1s) == 35s);
    CHECK(t.controller.time_to_level(Level::constrained, 1s) == 30s);
    CHECK(t.controller.time_to_level(Level::critical, 1s) == 15s);
    t.repeat(4, quiet);
    CHECK(t.controller.time_to_level(Level::normal, t.now()) == 31s);
    t.lag(400, false);  // above level 3's exit line (360 ms): the hold starts again
    CHECK(t.controller.time_to_level(Level::critical, t.now()) == 15s);
  }
  SECTION("spacing longer than the holds") {
    auto c = ControllerConfig::fast();
    c.spacing = 20s;
    Ticker t(c);
    t.stall(1000);
    CHECK(t.controller.time_to_level(Level::normal, 1s) == 60s);
  }
  SECTION("a pin with an expiry adds its remaining time; without one, not foreseeable") {
    Ticker t;
    t.quiet();
    t.pin(Level::emergency, 60s);
    CHECK(t.controller.time_to_level(Level::normal, t.now()) == 95s);
    t.pin(Level::emergency);
    CHECK_FALSE(t.controller.time_to_level(Level::normal, t.now()));
    CHECK(t.controller.time_to_level(Level::emergency, t.now()) == 0ms);
  }
  SECTION("it matches what the controller then does") {
    Ticker t;
    t.stall(1000);
    Millis expected = *t.controller.time_to_level(Level::normal, t.now()) + t.now();
    while (t.level() != Level::normal) t.quiet();
    CHECK(t.now() == expected);
  }
}

TEST_CASE(
    "the stats count ticks, changes by (from, to, trigger) and suppressed rises by (to, "
    "trigger)",
    "[admission][controller]") {
  Ticker t;
  t.wait(160);
  t.wait(160);
  t.wait(160);  // rises to 1: nothing suppressed
  t.wait(210);  // a streak toward 2 ...
  t.quiet();    // ... that the gate ends: one suppressed rise
  const auto& s = t.controller.stats();
  CHECK(s.ticks == 5);
  CHECK(s.changes[0][1][static_cast<int>(Trigger::upstream_wait)] == 1);
  CHECK(s.suppressed[1][static_cast<int>(Trigger::upstream_wait)] == 0);
  CHECK(s.suppressed[2][static_cast<int>(Trigger::upstream_wait)] == 1);
  CHECK(suppressed_total(t.controller) == 1);
}
