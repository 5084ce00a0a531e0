#pragma once
// Emergency actions: what the proxy itself gives up when emergency lasts.
// Seed 003: after emergency has lasted five more minutes, sustained pressure
// may reduce the API's own stages, only with a switch that is off by default;
// on recovery the stages are restored first, in a tick of their own, before
// the state steps down. The proxy's stages are Envoy's overload actions:
//   short_timeouts      client header and idle timeouts cut to a tenth (at least 1 s)
//   no_keepalive        Connection: close on every response
//   refuse_connections  new client connections closed at once while the open
//                       ones are at the floor
// The schedule, once per tick after the controllers stepped (`emergency`: the
// process's level or an upstream's is 3; it has been since `since`):
//   apply     once now - since >= after, the first enabled action (in the order
//             above) not applied yet: one per tick.
//   restore   a tick on which a level's step down from emergency was held for
//             it (Controller::set_restore_first, Decision::restoring) undoes
//             every applied action; since starts again (a further `after` of
//             emergency before the first applies again).
//   release   no level at 3 any more without that tick (a pin, the signal-loss
//             release, two levels leaving 3 together): all are undone at once.
//   switched off (a reload): an applied action no longer enabled is undone at once.
// Nothing when the switch is off (no action enabled).
//
// Threading: one owner (the ticker, or `sluice replay`); plain C++, time comes in.
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "admission/controller.hpp"

namespace sluice::admission {

enum class Action : std::uint8_t { short_timeouts, no_keepalive, refuse_connections };
inline constexpr std::size_t kActionCount = 3;
inline constexpr std::array<Action, kActionCount> kActions{
    Action::short_timeouts, Action::no_keepalive, Action::refuse_connections};
std::string_view to_string(Action action);
std::optional<Action> action_from(std::string_view name);

// A set of actions, one bit each.
using ActionSet = std::uint8_t;
constexpr ActionSet bit(Action a) { return static_cast<ActionSet>(1u << static_cast<unsigned>(a)); }
constexpr bool has(ActionSet set, Action a) { return (set & bit(a)) != 0; }
// "short_timeouts,no_keepalive" (in the order they apply), or "none".
std::string actions_text(ActionSet set);

struct ActionsConfig {
  ActionSet enabled = 0;                     // SLUICE_EMERGENCY_ACTIONS; none: the switch is off
  std::chrono::milliseconds after{300'000};  // SLUICE_EMERGENCY_ACTIONS_AFTER
};

// What one tick changed.
struct ActionStep {
  ActionSet applied = 0;
  ActionSet undone = 0;
  bool restoration = false;  // undone in a restoration tick (before a step down)
};

class EmergencyActions {
 public:
  using Millis = std::chrono::milliseconds;
  // One tick. `restoring`: a level's step down from emergency was held for this tick.
  ActionStep tick(const ActionsConfig& config, bool emergency, bool restoring, Millis now);
  ActionSet active() const { return active_; }
  // A level about to step down from emergency waits one tick for the restoration.
  bool restore_first() const { return active_ != 0; }
  std::optional<Millis> emergency_since() const { return since_; }
  std::optional<Millis> applied_at(Action a) const {
    return applied_at_[static_cast<std::size_t>(a)];
  }

 private:
  ActionSet active_ = 0;
  std::optional<Millis> since_;
  std::array<std::optional<Millis>, kActionCount> applied_at_{};
  ActionStep undo(ActionSet which);
};

// Before the controllers of one process (its own and each upstream's) step:
// while actions are applied, the one at emergency, if it is the only one
// there, holds its step down for the restoration tick.
void prepare_restoration(const EmergencyActions& actions, std::span<Controller* const> controllers);
// The highest of their levels: emergency, when one of them is at 3.
Level highest_level(std::span<Controller* const> controllers);

}  // namespace sluice::admission
