#pragma once
// The watchdog: a thread outside the event loops that reads each Worker's
// heartbeat, so a stalled loop is seen while it is stalled.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "proxy/runtime.hpp"

namespace sluice::proxy {

// Sees a stalled event loop while it is stalled: a thread outside the loops that
// reads each Worker's heartbeat. stall = time since the last heartbeat minus
// the probe interval, so a loop that runs its timer on time reads 0.
class Watchdog {
 public:
  explicit Watchdog(Runtime& rt);
  ~Watchdog();
  void start();
  void stop();
  // The longest current stall of each worker, in seconds.
  double stall_seconds(std::size_t worker) const;
  std::uint64_t stalls_total() const { return stalls_total_.load(std::memory_order_relaxed); }
  // The longest stall of a worker since the last call, in ns; the ticker's reading.
  std::int64_t take_max_stall_ns(std::size_t worker) {
    return max_since_read_ns_[worker].exchange(0);
  }
  // When the watchdog last looked: a stale value means its readings are not to be trusted.
  std::int64_t heartbeat_ns() const { return heartbeat_ns_.load(std::memory_order_relaxed); }
  static constexpr double kStallEpisode = 0.25;  // a stall this long is counted once

 private:
  void loop();
  Runtime& rt_;
  std::vector<std::atomic<std::int64_t>> stall_ns_;
  std::vector<bool> in_episode_;
  std::atomic<std::uint64_t> stalls_total_{0};
  std::vector<std::atomic<std::int64_t>> max_since_read_ns_;  // per worker
  std::atomic<std::int64_t> heartbeat_ns_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sluice::proxy
