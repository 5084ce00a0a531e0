#pragma once
// The tick controller: one reading per tick in, one admission level out.
//
// Levels 0 normal, 1 constrained, 2 critical, 3 emergency. Seeds 000 (the tick
// controller) and 003 (the capacity sentinel) merged; the profile changes the
// timing defaults and the emergency rule.
//
// Per tick, with thresholds E_s[L] per signal s and level L (strictly increasing in L):
//   evidence(s)   = the highest L with value(s) >= E_s[L], 0 if none
//                   signals: lag (fresh or stale), upstream_wait (p95 over 1.5 ticks),
//                   upstream_timeout (evidence for level 2 while the last upstream
//                   timeout is younger than timeout_window)
//   tick level    = max evidence over the FRESH signals; its trigger is the signal
//                   that gave it (ties: lag, then upstream_wait, then upstream_timeout)
//   stall         = max(stall_ms, fresh lag_ms) >= emergency_stall  -> level 3 at once
//                   (trigger stall; no gate, no spacing, no dwell; clears the streak;
//                   SPEC excepts stalls from the dwell, so this is the one automatic
//                   way from below 2 straight to 3)
// Emergency rule (emergency_rule):
//   evidence (fast): as above; level 3 is held by readings above its own exit line.
//   sustained_critical (sentinel, seed 003): at level 2 a tick level of 2 or more
//     counts as 3, so critical that has lasted emergency_dwell enters emergency on
//     rise_ticks critical readings (spacing permitting) with no level-3 evidence;
//     at level 3 the exit line is level 2's (and a timeout in its window is not
//     calm), so emergency steps down after hold[3] of below-critical readings.
// Rise gate: a tick whose level is above the current level extends the streak; a
//   tick whose only elevated reading is a stale lag holds it (neither extends nor
//   ends it); any other tick ends it. When the streak reaches rise_ticks, the
//   level becomes the LOWEST tick level in the streak, with the trigger of the
//   earliest tick that had that level. Sustained pressure enters 3 only from 2,
//   and only once 2 has lasted emergency_dwell (seed 003: no automatic jump to
//   emergency); a rise above 2 from below 2 stops at 2. Spacing and the dwell hold
//   a streak that reached rise_ticks without ending it: it rises on the first
//   extending tick they allow. Rises are decided only on ticks that extend the streak.
// Suppressed rises (seed 000's counter of what the gate absorbed): a streak the gate
//   ends without its rise is reported once, on the tick that ends it, as
//   `suppressed {to, trigger}` and counted: to = the level its rise would have
//   entered, trigger = the streak's. A streak that rises counts nothing, however
//   long spacing or the dwell held it back; nor does one a level change ends (a
//   stall, a pin, a signal-loss release: the level moved for another reason), nor
//   one still open. Nothing while a pin holds the level: the gate held nothing.
// Exit line of level L: every signal below exit_ratio * E_s[L] (a stale lag
//   counts with its value; no upstream timeout in the window when L <= 2).
//   calm_since = the time of the last tick that was not calm (a failed read is
//   not calm), of the last level change, or of the last pin or unpin. The level
//   steps down ONE level (trigger decay) when
//   now - calm_since >= hold[L]; then calm_since = now.
// Restoration (seed 003): while emergency actions are applied (set_restore_first),
//   the tick on which emergency would decay does not step down; it reports
//   `restoring` (the actions are undone in it) and the step down comes on the
//   next calm tick, the hold and spacing being met already.
// Spacing: no automatic change (rise or decay) within `spacing` of the last change
//   (of any kind, pins included; none before the first change).
// Signal loss: a reading with ok == false holds the level and the streak and is not
//   calm; its lag, upstream wait and timeout are not read. The second consecutive
//   one releases to 0 (trigger signal_loss, no spacing) unless a pin holds the
//   level. The watchdog's stall_ms is seen apart from the probes, so a failed read
//   keeps it: a stall on a failed read goes to 3 as any stall does, and that tick
//   does not release (the next failed read without one does).
// Pins select any level at once (trigger pin) and hold it until they expire or are
//   removed (trigger unpin); automatic decisions then continue from the pinned
//   level with an empty streak and calm_since = now. A pin or unpin that leaves the
//   level as it was still reports its trigger, with changed == false.
//
// Threading: not thread-safe; one owner calls it (the proxy's ticker thread, or
// `sluice replay`). Plain C++: time comes in with each reading, nothing is scheduled.
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::admission {

using Millis = std::chrono::milliseconds;

enum class Level : std::uint8_t { normal = 0, constrained = 1, critical = 2, emergency = 3 };
inline constexpr std::size_t kLevelCount = 4;
std::string_view to_string(Level level);

enum class Trigger : std::uint8_t {
  none,
  lag,
  upstream_wait,
  upstream_timeout,
  stall,
  pin,
  unpin,  // a pin was removed or expired
  signal_loss,
  decay,
};
inline constexpr std::size_t kTriggerCount = 9;
std::string_view to_string(Trigger trigger);

// One tick's measurements. Absent optionals were not measured.
struct Reading {
  Millis t{0};     // time of the tick (ms from start)
  bool ok = true;  // false: the probes could not be read
  std::optional<double> lag_ms;
  bool lag_fresh = true;  // false: no new lag sample in this tick (the value is repeated)
  std::optional<double> upstream_wait_ms;
  bool upstream_timeout = false;   // an upstream timed out since the last tick
  std::optional<double> stall_ms;  // a stall seen by the watchdog while it lasts
};

// How sustained pressure enters emergency and what holds it there (see above).
enum class EmergencyRule : std::uint8_t {
  evidence,            // fast: level-3 evidence, level 3's own exit line
  sustained_critical,  // sentinel: critical lasting the dwell, level 2's exit line
};

struct ControllerConfig {
  std::array<double, 3> lag_ms{200, 250, 600};            // entry thresholds of levels 1..3
  std::array<double, 3> upstream_wait_ms{150, 200, 600};  // entry thresholds of levels 1..3
  int rise_ticks = 3;
  Millis emergency_stall{1000};
  std::array<Millis, 3> hold{Millis{5000}, Millis{15000}, Millis{15000}};  // levels 1..3
  double exit_ratio = 0.6;
  Millis spacing{0};
  Millis emergency_dwell{0};
  Millis timeout_window{30000};
  EmergencyRule emergency_rule = EmergencyRule::evidence;

  static ControllerConfig fast();  // seed 000's defaults (SPEC: profile fast)
  // Seed 003's timings and emergency rule (SPEC: profile sentinel).
  static ControllerConfig sentinel();
};

struct Decision {
  Millis t{0};
  Level level = Level::normal;  // after this tick
  bool changed = false;
  Level from = Level::normal;
  Level to = Level::normal;
  // Of the change; when unchanged: pin or unpin if a pin was set, removed or expired
  // at this time, none otherwise.
  Trigger trigger = Trigger::none;
  struct Suppressed {
    Level to;
    Trigger trigger;
  };
  // A streak the gate ended in this tick without its rise (what stats().suppressed counts).
  std::optional<Suppressed> suppressed;
  // Emergency would have stepped down now, and was held for a restoration tick
  // (set_restore_first): the emergency actions are undone in this one.
  bool restoring = false;
};

struct PinState {
  Level level;
  std::optional<Millis> expires_at;  // none: until removed
  std::string reason;
  std::string who;
  Millis since{0};
};

// What the controller has decided so far, for the read model and the metrics.
struct ControllerStats {
  // [from][to][trigger]
  std::array<std::array<std::array<std::uint64_t, kTriggerCount>, kLevelCount>, kLevelCount>
      changes{};
  // [to][trigger]: streaks the gate ended without their rise
  std::array<std::array<std::uint64_t, kTriggerCount>, kLevelCount> suppressed{};
  std::uint64_t ticks = 0;
};

class Controller {
 public:
  explicit Controller(ControllerConfig config);

  // One tick. Readings come in time order.
  Decision step(const Reading& reading);

  // Pins: at once, whatever the automatic state. ttl none: until removed.
  Decision pin(Level level, std::optional<Millis> ttl, Millis now, std::string reason,
               std::string who);
  // Removes the pin (no-op Decision when none); the level stays, automatic decisions resume.
  Decision unpin(Millis now, std::string_view who);
  // A pin taken away between two ticks: automatic decisions are judged from
  // the tick that follows (`now`), as the replay of the tick log judges them,
  // which sees the unpin on that tick's line.
  void unpinned_at(Millis now) {
    if (!pin_) calm_since_ = now;
  }

  Level level() const { return level_; }
  Trigger trigger() const { return trigger_; }  // of the last change
  Millis last_change() const { return last_change_; }
  int streak() const { return streak_len_; }
  const std::optional<PinState>& pin_state() const { return pin_; }
  const ControllerStats& stats() const { return stats_; }
  const ControllerConfig& config() const { return config_; }
  // A new configuration (live reload): the level, the pin, the streak and the
  // calm time carry on; the new thresholds and timings apply from the next tick.
  void reconfigure(const ControllerConfig& config) { config_ = config; }
  // Emergency actions are applied (admission/emergency_actions.hpp): a decay
  // from emergency waits one tick, the restoration tick (Decision::restoring).
  void set_restore_first(bool on) { restore_first_ = on; }

  // The least time from `now` until the level could be at or below `target`, if
  // every reading from now on were calm: the remaining hold of the current level,
  // then each lower level's full hold, each step no sooner than spacing allows;
  // a pin adds its remaining time (none if it has no expiry: returns nullopt).
  // Zero when the level is already at or below target.
  std::optional<Millis> time_to_level(Level target, Millis now) const;

 private:
  ControllerConfig config_;
  Level level_ = Level::normal;
  Trigger trigger_ = Trigger::none;
  Millis last_change_{0};
  Millis entered_level_{0};  // when the current level was entered (for the dwell)
  Millis calm_since_{0};
  std::optional<Millis> last_timeout_;
  int failed_reads_ = 0;
  // The streak: its length and, for the lowest tick level seen in it, the level
  // and the trigger of the earliest tick that had it.
  int streak_len_ = 0;
  Level streak_low_ = Level::normal;
  Trigger streak_low_trigger_ = Trigger::none;
  std::optional<PinState> pin_;
  bool changed_once_ = false;  // spacing applies only after a first change
  bool restore_first_ = false;
  ControllerStats stats_;

  void change(Level to, Trigger trigger, Millis now, Decision& d);
  void end_pin(Millis now);
  void reset_streak();
  void end_streak(Decision& d);
  Level streak_target() const;
  bool spacing_allows(Millis now) const;
};

}  // namespace sluice::admission
