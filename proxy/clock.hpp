#pragma once
// The proxy's clock, and how its times cross threads.
#include <chrono>
#include <cstdint>

namespace sluice::proxy {

using Clock = std::chrono::steady_clock;

// Steady-clock nanoseconds: how times cross threads through atomics.
inline std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace sluice::proxy
