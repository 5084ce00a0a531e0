#include "admission/controller.hpp"

#include <algorithm>
#include <utility>

namespace sluice::admission {

namespace {

constexpr std::size_t idx(Level level) { return static_cast<std::size_t>(level); }
constexpr std::size_t idx(Trigger trigger) { return static_cast<std::size_t>(trigger); }

// The highest level whose entry threshold `value` reaches (0 if none).
Level evidence(const std::optional<double>& value, const std::array<double, 3>& entry) {
  if (!value) return Level::normal;
  for (std::size_t l = entry.size(); l > 0; --l)
    if (*value >= entry[l - 1]) return static_cast<Level>(l);
  return Level::normal;
}

// Below the exit line of `level` (>= 1), or not measured.
bool below_exit(const std::optional<double>& value, const std::array<double, 3>& entry, Level level,
                double ratio) {
  return !value || *value < ratio * entry[idx(level) - 1];
}

}  // namespace

std::string_view to_string(Level level) {
  switch (level) {
    case Level::normal:
      return "normal";
    case Level::constrained:
      return "constrained";
    case Level::critical:
      return "critical";
    case Level::emergency:
      return "emergency";
  }
  return "normal";
}

std::string_view to_string(Trigger trigger) {
  switch (trigger) {
    case Trigger::none:
      return "none";
    case Trigger::lag:
      return "lag";
    case Trigger::upstream_wait:
      return "upstream_wait";
    case Trigger::upstream_timeout:
      return "upstream_timeout";
    case Trigger::stall:
      return "stall";
    case Trigger::pin:
      return "pin";
    case Trigger::unpin:
      return "unpin";
    case Trigger::signal_loss:
      return "signal_loss";
    case Trigger::decay:
      return "decay";
  }
  return "none";
}

ControllerConfig ControllerConfig::fast() { return ControllerConfig{}; }

ControllerConfig ControllerConfig::sentinel() {
  ControllerConfig c;
  c.hold = {Millis{300'000}, Millis{300'000}, Millis{300'000}};
  c.exit_ratio = 1.0;
  c.spacing = Millis{300'000};
  c.emergency_dwell = Millis{180'000};
  c.emergency_rule = EmergencyRule::sustained_critical;
  return c;
}

Controller::Controller(ControllerConfig config) : config_(config) {}

void Controller::reset_streak() {
  streak_len_ = 0;
  streak_low_ = Level::normal;
  streak_low_trigger_ = Trigger::none;
}

// Sustained pressure reaches emergency only from critical (seed 003).
Level Controller::streak_target() const {
  if (level_ < Level::critical && streak_low_ > Level::critical) return Level::critical;
  return streak_low_;
}

// The gate ends the streak. An open streak has not risen (its rise resets it), so
// it is one suppressed rise.
void Controller::end_streak(Decision& d) {
  if (streak_len_ > 0) {
    Level to = streak_target();
    d.suppressed = Decision::Suppressed{to, streak_low_trigger_};
    ++stats_.suppressed[idx(to)][idx(streak_low_trigger_)];
  }
  reset_streak();
}

bool Controller::spacing_allows(Millis now) const {
  return !changed_once_ || now - last_change_ >= config_.spacing;
}

void Controller::change(Level to, Trigger trigger, Millis now, Decision& d) {
  ++stats_.changes[idx(level_)][idx(to)][idx(trigger)];
  if (!d.changed) d.from = level_;
  d.changed = true;
  d.to = to;
  d.trigger = trigger;
  level_ = to;
  trigger_ = trigger;
  last_change_ = now;
  changed_once_ = true;
  entered_level_ = now;
  // A new level judges evidence against itself: old streaks and calm do not carry over.
  calm_since_ = now;
  reset_streak();
}

Decision Controller::step(const Reading& r) {
  ++stats_.ticks;
  Decision d;
  d.t = r.t;
  d.from = d.to = level_;

  if (pin_ && pin_->expires_at && r.t >= *pin_->expires_at) {
    end_pin(r.t);
    d.trigger = Trigger::unpin;
  }
  // Remembered even while pinned or blind, so the window is right when automatic decisions resume.
  if (r.ok && r.upstream_timeout) last_timeout_ = r.t;

  const auto& c = config_;
  auto stalled = [&](double ms) { return ms >= static_cast<double>(c.emergency_stall.count()); };

  if (!r.ok) {
    ++failed_reads_;
    // A tick we could not read is not calm: protection holds, the streak is left as is.
    calm_since_ = r.t;
    if (!pin_) {
      // The watchdog's stall is seen apart from the probes: a failed read keeps it.
      if (r.stall_ms && stalled(*r.stall_ms)) {
        if (level_ != Level::emergency) change(Level::emergency, Trigger::stall, r.t, d);
      } else if (failed_reads_ >= 2 && level_ != Level::normal) {
        change(Level::normal, Trigger::signal_loss, r.t, d);
      }
    }
    d.level = level_;
    return d;
  }
  failed_reads_ = 0;

  if (pin_) {  // the pin holds against any evidence
    d.level = level_;
    return d;
  }

  const std::optional<double> fresh_lag = r.lag_fresh ? r.lag_ms : std::nullopt;

  // Stall: immediate, past the gate, spacing and dwell.
  if (stalled(std::max(r.stall_ms.value_or(0.0), fresh_lag.value_or(0.0)))) {
    // The change clears any streak; at level 3 there can be none.
    calm_since_ = r.t;
    if (level_ != Level::emergency) change(Level::emergency, Trigger::stall, r.t, d);
    d.level = level_;
    return d;
  }

  const bool sentinel = c.emergency_rule == EmergencyRule::sustained_critical;
  // Seed 003: at critical, critical pressure that lasts is evidence for emergency.
  auto gate_level = [&](Level l) {
    return sentinel && level_ == Level::critical && l >= Level::critical ? Level::emergency : l;
  };

  // This tick's level: the highest fresh evidence; ties go to the first signal listed.
  Level tick = Level::normal;
  Trigger tick_trigger = Trigger::none;
  auto consider = [&](Level l, Trigger t) {
    if (l > tick) {
      tick = l;
      tick_trigger = t;
    }
  };
  consider(evidence(fresh_lag, c.lag_ms), Trigger::lag);
  consider(evidence(r.upstream_wait_ms, c.upstream_wait_ms), Trigger::upstream_wait);
  bool timeout_recent = last_timeout_ && r.t - *last_timeout_ < c.timeout_window;
  if (timeout_recent) consider(Level::critical, Trigger::upstream_timeout);
  tick = gate_level(tick);
  bool stale_elevated = !r.lag_fresh && gate_level(evidence(r.lag_ms, c.lag_ms)) > level_;

  // Calm is judged against the current level, before any change in this tick; the
  // sentinel's emergency is held by critical readings, so its exit line is critical's.
  Level exit_of = sentinel && level_ == Level::emergency ? Level::critical : level_;
  bool calm = level_ == Level::normal ||
              (below_exit(r.lag_ms, c.lag_ms, exit_of, c.exit_ratio) &&
               below_exit(r.upstream_wait_ms, c.upstream_wait_ms, exit_of, c.exit_ratio) &&
               !(timeout_recent && exit_of <= Level::critical));
  if (!calm) calm_since_ = r.t;

  if (tick > level_) {
    if (streak_len_ == 0 || tick < streak_low_) {
      streak_low_ = tick;
      streak_low_trigger_ = tick_trigger;
    }
    ++streak_len_;
    Level target = streak_target();
    bool dwell_ok = target != Level::emergency || r.t - entered_level_ >= c.emergency_dwell;
    // Spacing and the dwell hold the streak back without ending it.
    if (streak_len_ >= c.rise_ticks && spacing_allows(r.t) && dwell_ok)
      change(target, streak_low_trigger_, r.t, d);
  } else if (!stale_elevated) {
    // A stale repeat is no new evidence either way: it neither extends nor ends it.
    end_streak(d);
  }

  if (!d.changed && level_ != Level::normal && calm &&
      r.t - calm_since_ >= c.hold[idx(level_) - 1] && spacing_allows(r.t)) {
    // Seed 003: emergency's own actions are restored first, in a tick of their
    // own; the step down comes on a later tick (calm_since stays: the next
    // calm tick steps down).
    if (level_ == Level::emergency && restore_first_)
      d.restoring = true;
    else
      change(static_cast<Level>(idx(level_) - 1), Trigger::decay, r.t, d);
  }
  d.level = level_;
  return d;
}

void Controller::end_pin(Millis now) {
  pin_.reset();
  // Automatic decisions continue from the pinned level, judged from now on (the
  // streak is already empty: pin() cleared it and nothing extends it while pinned).
  calm_since_ = now;
}

Decision Controller::pin(Level level, std::optional<Millis> ttl, Millis now, std::string reason,
                         std::string who) {
  Decision d;
  d.t = now;
  d.from = d.to = level_;
  d.trigger = Trigger::pin;
  pin_ = PinState{level, ttl ? std::optional<Millis>(now + *ttl) : std::nullopt, std::move(reason),
                  std::move(who), now};
  if (level != level_) change(level, Trigger::pin, now, d);
  reset_streak();
  calm_since_ = now;
  d.level = level_;
  return d;
}

Decision Controller::unpin(Millis now, std::string_view /*who*/) {
  Decision d;
  d.t = now;
  d.from = d.to = level_;
  d.level = level_;
  if (!pin_) return d;
  end_pin(now);
  d.trigger = Trigger::unpin;
  return d;
}

std::optional<Millis> Controller::time_to_level(Level target, Millis now) const {
  if (level_ <= target) return Millis{0};
  Millis t = now;
  Millis calm = calm_since_;
  Millis last = last_change_;
  bool changed = changed_once_;
  if (pin_) {
    if (!pin_->expires_at) return std::nullopt;
    t = std::max(now, *pin_->expires_at);
    calm = t;  // the pin's end restarts the hold
  }
  for (Level l = level_; l > target; l = static_cast<Level>(idx(l) - 1)) {
    Millis at = std::max(t, calm + config_.hold[idx(l) - 1]);
    if (changed) at = std::max(at, last + config_.spacing);
    t = calm = last = at;
    changed = true;
  }
  return t - now;
}

}  // namespace sluice::admission
