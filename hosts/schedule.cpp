#include "hosts/schedule.hpp"

#include <algorithm>

namespace sluice::hosts {

Millis refresh_after(std::chrono::seconds ttl, TtlBounds bounds) {
  return std::clamp(std::chrono::duration_cast<Millis>(ttl), bounds.min,
                    std::max(bounds.min, bounds.max));
}

Millis retry_after(std::uint32_t failures, TtlBounds bounds) {
  const Millis cap = std::max(bounds.min, std::min(bounds.max, kRetryCap));
  Millis wait = bounds.min;
  for (std::uint32_t i = 1; i < failures && wait < cap; ++i) wait *= 2;
  return std::min(wait, cap);
}

Millis next_check(const HealthCheck& check, std::uint64_t random) {
  auto spread = static_cast<std::uint64_t>(check.interval.count() / 10);
  return check.interval + Millis(static_cast<Millis::rep>(random % (spread + 1)));
}

bool HealthState::record(bool passed, const HealthCheck& check) {
  if (passed == healthy_) {
    streak_ = 0;
    return false;
  }
  ++streak_;
  if (streak_ < (healthy_ ? check.unhealthy : check.healthy)) return false;
  healthy_ = passed;
  streak_ = 0;
  return true;
}

}  // namespace sluice::hosts
