#pragma once
#include <atomic>
#include <cstdint>

#include "admission/bulkhead.hpp"

namespace sluice::proxy {

// SLUICE_HEAVY_MAX_IN_FLIGHT: one count for every bulkhead of the process.
// Only heavy requests touch it.
class HeavyCap final : public admission::LeaseCap {
 public:
  explicit HeavyCap(std::int64_t cap) : cap_(cap) {}
  bool try_take() override {
    if (taken_.fetch_add(1, std::memory_order_relaxed) < cap_) return true;
    taken_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  void give_back() override { taken_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t cap() const { return cap_; }

 private:
  const std::int64_t cap_;
  std::atomic<std::int64_t> taken_{0};
};

}  // namespace sluice::proxy
