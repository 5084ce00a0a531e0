#include "admission/emergency_actions.hpp"

#include <algorithm>

namespace sluice::admission {

std::string_view to_string(Action action) {
  switch (action) {
    case Action::short_timeouts:
      return "short_timeouts";
    case Action::no_keepalive:
      return "no_keepalive";
    case Action::refuse_connections:
      return "refuse_connections";
  }
  return "unknown";
}

std::optional<Action> action_from(std::string_view name) {
  for (Action a : kActions)
    if (to_string(a) == name) return a;
  return std::nullopt;
}

std::string actions_text(ActionSet set) {
  std::string out;
  for (Action a : kActions) {
    if (!has(set, a)) continue;
    if (!out.empty()) out += ',';
    out += to_string(a);
  }
  return out.empty() ? "none" : out;
}

ActionStep EmergencyActions::undo(ActionSet which) {
  ActionStep step;
  step.undone = static_cast<ActionSet>(active_ & which);
  active_ = static_cast<ActionSet>(active_ & ~which);
  for (Action a : kActions)
    if (has(step.undone, a)) applied_at_[static_cast<std::size_t>(a)].reset();
  return step;
}

ActionStep EmergencyActions::tick(const ActionsConfig& config, bool emergency, bool restoring,
                                  Millis now) {
  // Switched off since the last tick: undone at once.
  ActionStep step = undo(static_cast<ActionSet>(~config.enabled));
  if (!emergency) {
    since_.reset();
    step.undone |= undo(active_).undone;
    return step;
  }
  if (restoring) {
    step.undone |= undo(active_).undone;
    step.restoration = step.undone != 0;
    since_ = now;  // a further `after` of emergency before the first applies again
    return step;
  }
  if (!since_) since_ = now;
  if (now - *since_ < config.after) return step;
  for (Action a : kActions) {
    if (!has(config.enabled, a) || has(active_, a)) continue;
    active_ |= bit(a);
    applied_at_[static_cast<std::size_t>(a)] = now;
    step.applied = bit(a);
    break;  // one per tick
  }
  return step;
}

Level highest_level(std::span<Controller* const> controllers) {
  Level highest = Level::normal;
  for (const auto* c : controllers) highest = std::max(highest, c->level());
  return highest;
}

void prepare_restoration(const EmergencyActions& actions,
                         std::span<Controller* const> controllers) {
  int at_emergency = 0;
  for (const auto* c : controllers) at_emergency += c->level() == Level::emergency ? 1 : 0;
  // Only a controller at emergency is affected: the flag can go to all.
  for (auto* c : controllers) c->set_restore_first(actions.restore_first() && at_emergency == 1);
}

}  // namespace sluice::admission
