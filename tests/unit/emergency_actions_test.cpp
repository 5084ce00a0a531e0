// Seed 003's emergency actions on a fake clock: the schedule on its own, then
// with the controllers (the restoration tick before emergency steps down).
#include "admission/emergency_actions.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

#include "admission/controller.hpp"

using namespace std::chrono_literals;
using namespace sluice::admission;

namespace {

constexpr ActionSet kAll =
    bit(Action::short_timeouts) | bit(Action::no_keepalive) | bit(Action::refuse_connections);

ActionsConfig enabled(ActionSet set, Millis after = 300'000ms) { return {set, after}; }

}  // namespace

TEST_CASE("with the switch off no emergency action is ever applied",
          "[admission][emergency_actions]") {
  EmergencyActions a;
  for (Millis t = 0ms; t < 3'600'000ms; t += 1000ms) {
    auto step = a.tick(enabled(0), true, false, t);
    REQUIRE(step.applied == 0);
  }
  CHECK(a.active() == 0);
  CHECK_FALSE(a.restore_first());
}

TEST_CASE(
    "after five minutes of emergency the actions apply one per tick, mildest first, only "
    "those enabled",
    "[admission][emergency_actions]") {
  EmergencyActions a;
  const auto c = enabled(kAll);
  CHECK(a.tick(c, true, false, 10'000ms).applied == 0);  // emergency from here
  CHECK(a.tick(c, true, false, 309'000ms).applied == 0);
  CHECK(a.tick(c, true, false, 310'000ms).applied == bit(Action::short_timeouts));
  CHECK(a.tick(c, true, false, 311'000ms).applied == bit(Action::no_keepalive));
  CHECK(a.tick(c, true, false, 312'000ms).applied == bit(Action::refuse_connections));
  CHECK(a.tick(c, true, false, 313'000ms).applied == 0);
  CHECK(a.active() == kAll);
  CHECK(a.applied_at(Action::no_keepalive) == 311'000ms);
  CHECK(a.emergency_since() == 10'000ms);

  EmergencyActions two;
  const auto some = enabled(bit(Action::refuse_connections) | bit(Action::short_timeouts), 0ms);
  CHECK(two.tick(some, true, false, 0ms).applied == bit(Action::short_timeouts));
  CHECK(two.tick(some, true, false, 1000ms).applied == bit(Action::refuse_connections));
  CHECK(two.tick(some, true, false, 2000ms).applied == 0);
  CHECK_FALSE(has(two.active(), Action::no_keepalive));
}

TEST_CASE("emergency that ends before the five minutes applies nothing, and starts again",
          "[admission][emergency_actions]") {
  EmergencyActions a;
  const auto c = enabled(kAll);
  a.tick(c, true, false, 0ms);
  CHECK(a.tick(c, true, false, 299'000ms).applied == 0);
  CHECK(a.tick(c, false, false, 300'000ms).applied == 0);  // left emergency
  CHECK_FALSE(a.emergency_since());
  a.tick(c, true, false, 301'000ms);
  CHECK(a.tick(c, true, false, 600'000ms).applied == 0);
  CHECK(a.tick(c, true, false, 601'000ms).applied == bit(Action::short_timeouts));
}

TEST_CASE("a restoration tick undoes every action at once, and the next waits five more minutes",
          "[admission][emergency_actions]") {
  EmergencyActions a;
  const auto c = enabled(kAll, 0ms);
  a.tick(c, true, false, 0ms);
  a.tick(c, true, false, 1000ms);
  REQUIRE(a.active() == (bit(Action::short_timeouts) | bit(Action::no_keepalive)));
  CHECK(a.restore_first());
  auto step = a.tick(c, true, true, 2000ms);
  CHECK(step.undone == (bit(Action::short_timeouts) | bit(Action::no_keepalive)));
  CHECK(step.restoration);
  CHECK(step.applied == 0);
  CHECK(a.active() == 0);
  // Still at emergency (the step down did not come): a further `after` first.
  const auto later = enabled(kAll, 60'000ms);
  CHECK(a.tick(later, true, false, 3000ms).applied == 0);
  CHECK(a.tick(later, true, false, 62'000ms).applied == bit(Action::short_timeouts));
}

TEST_CASE(
    "actions are undone at once when emergency ends without a restoration tick, or when "
    "switched off",
    "[admission][emergency_actions]") {
  EmergencyActions a;
  a.tick(enabled(kAll, 0ms), true, false, 0ms);
  a.tick(enabled(kAll, 0ms), true, false, 1000ms);
  auto off = a.tick(enabled(bit(Action::short_timeouts), 0ms), true, false, 2000ms);
  CHECK(off.undone == bit(Action::no_keepalive));
  CHECK_FALSE(off.restoration);
  CHECK(a.active() == bit(Action::short_timeouts));
  auto left = a.tick(enabled(kAll, 0ms), false, false, 3000ms);  // a pin to 0, say
  CHECK(left.undone == bit(Action::short_timeouts));
  CHECK(a.active() == 0);
}

namespace {

// The process's controller and one upstream's with the actions between them,
// one tick a second, as the ticker and `sluice replay` drive them.
struct Process {
  Controller process{ControllerConfig::fast()};
  Controller upstream{ControllerConfig::fast()};
  EmergencyActions actions;
  ActionsConfig config = enabled(kAll, 0ms);
  Millis now{0};
  Decision last;
  ActionStep step;

  void tick(bool stall = false) {
    now += 1000ms;
    std::vector<Controller*> all{&process, &upstream};
    prepare_restoration(actions, all);
    Reading r;
    r.t = now;
    r.lag_ms = 1;
    if (stall) r.stall_ms = 5000;
    last = process.step(r);
    Reading u;
    u.t = now;
    auto ud = upstream.step(u);
    const bool emergency =
        process.level() == Level::emergency || upstream.level() == Level::emergency;
    step = actions.tick(config, emergency, last.restoring || ud.restoring, now);
  }
};

}  // namespace

TEST_CASE("every action is undone one tick before emergency steps down",
          "[admission][emergency_actions][controller]") {
  Process p;
  p.tick(true);  // a stall: emergency at once
  REQUIRE(p.process.level() == Level::emergency);
  CHECK(p.step.applied == bit(Action::short_timeouts));
  p.tick();
  p.tick();
  REQUIRE(p.actions.active() == kAll);
  // Calm from the stall on: emergency's hold (15 s) ends at 16 s.
  while (!p.last.restoring && p.now < 60'000ms) {
    p.tick();
    REQUIRE((p.last.restoring || p.process.level() == Level::emergency));
  }
  REQUIRE(p.last.restoring);
  CHECK(p.now == 16'000ms);
  CHECK(p.process.level() == Level::emergency);  // held for the restoration tick
  CHECK(p.step.undone == kAll);
  CHECK(p.step.restoration);
  p.tick();
  CHECK(p.last.changed);
  CHECK(p.last.from == Level::emergency);
  CHECK(p.last.to == Level::critical);
  CHECK(p.last.trigger == Trigger::decay);
  CHECK(p.actions.active() == 0);

  SECTION("the switch off: no restoration tick, emergency steps down when its hold ends") {
    Process q;
    q.config = enabled(0);
    q.tick(true);
    while (q.process.level() == Level::emergency && q.now < 60'000ms) {
      q.tick();
      REQUIRE_FALSE(q.last.restoring);
    }
    CHECK(q.now == 16'000ms);
  }
  SECTION("a pin that takes emergency away undoes them in its own tick") {
    Process q;
    q.tick(true);
    q.tick();
    REQUIRE(q.actions.active() != 0);
    q.process.pin(Level::normal, std::nullopt, q.now, "test", "tester");
    q.tick();
    CHECK(q.step.undone == (bit(Action::short_timeouts) | bit(Action::no_keepalive)));
    CHECK_FALSE(q.step.restoration);
    CHECK(q.actions.active() == 0);
  }
}

TEST_CASE(
    "seed 003's timeline on the sentinel profile: actions five minutes into emergency, a "
    "minute apart, restored in a tick of their own before emergency steps down",
    "[admission][emergency_actions][controller]") {
  Controller c(ControllerConfig::sentinel());
  EmergencyActions a;
  const ActionsConfig config{kAll, 300'000ms};  // SLUICE_EMERGENCY_ACTIONS_AFTER's default
  Millis t{0};
  std::vector<Controller*> all{&c};
  Decision d;
  ActionStep step;
  auto tick = [&](double lag_ms) {
    t += 60'000ms;  // the sentinel's tick: one minute
    prepare_restoration(a, all);
    Reading r;
    r.t = t;
    r.lag_ms = lag_ms;
    d = c.step(r);
    step = a.tick(config, c.level() == Level::emergency, d.restoring, t);
  };
  // Critical readings: critical after three, emergency once critical has lasted
  // three minutes and five since the last change (spacing).
  while (c.level() != Level::emergency && t < 60min) tick(300);
  REQUIRE(c.level() == Level::emergency);
  const Millis entered = t;
  std::vector<Millis> applied;
  while (applied.size() < 3 && t < entered + 30min) {
    tick(300);
    if (step.applied) applied.push_back(t - entered);
  }
  CHECK(applied == std::vector<Millis>{5min, 6min, 7min});
  // Calm: five below-critical readings, then the restoration tick, then the step down.
  std::vector<Millis> restored, stepped;
  while (c.level() == Level::emergency && t < entered + 60min) {
    tick(10);
    if (step.restoration) restored.push_back(t);
    if (d.changed) stepped.push_back(t);
  }
  REQUIRE(restored.size() == 1);
  REQUIRE(stepped.size() == 1);
  CHECK(stepped[0] == restored[0] + 1min);
  CHECK(c.level() == Level::critical);
  CHECK(a.active() == 0);
}
