#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "proxy/clock.hpp"

namespace sluice::proxy {

// Upstream-wait samples of one Worker, newest last, for the sampler's p95 over
// the last 1.5 ticks. Single writer; the sampler reads slots racily, which at
// worst mixes one sample's fields: it is a sample either way.
class WaitRing {
 public:
  static constexpr std::size_t kSize = 1024;
  void add(Clock::time_point at, Clock::duration wait, std::size_t upstream) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(wait).count();
    auto wait_us = static_cast<std::uint32_t>(std::clamp<std::int64_t>(us, 0, UINT32_MAX));
    auto i = next_.load(std::memory_order_relaxed);
    slots_[i % kSize].t_ns.store(to_ns(at), std::memory_order_relaxed);
    slots_[i % kSize].value.store((std::uint64_t{upstream} << 32) | wait_us,
                                  std::memory_order_relaxed);
    next_.store(i + 1, std::memory_order_release);
  }
  // Calls f(upstream, wait_us) for every sample taken at or after since_ns.
  template <class F>
  void for_each_since(std::int64_t since_ns, F f) const {
    auto end = next_.load(std::memory_order_acquire);
    auto begin = end > kSize ? end - kSize : 0;
    for (auto i = end; i-- > begin;) {
      const auto& s = slots_[i % kSize];
      if (s.t_ns.load(std::memory_order_relaxed) < since_ns) break;
      auto v = s.value.load(std::memory_order_relaxed);
      f(static_cast<std::uint16_t>(v >> 32), static_cast<std::uint32_t>(v));
    }
  }

 private:
  struct Slot {
    std::atomic<std::int64_t> t_ns{0};
    std::atomic<std::uint64_t> value{0};
  };
  std::array<Slot, kSize> slots_{};
  std::atomic<std::uint64_t> next_{0};
};

}  // namespace sluice::proxy
