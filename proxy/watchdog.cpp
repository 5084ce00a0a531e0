#include "proxy/watchdog.hpp"

#include <algorithm>
#include <chrono>

namespace sluice::proxy {

Watchdog::Watchdog(Runtime& rt)
    : rt_(rt),
      stall_ns_(rt.workers.size()),
      in_episode_(rt.workers.size(), false),
      max_since_read_ns_(rt.workers.size()) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

double Watchdog::stall_seconds(std::size_t worker) const {
  return static_cast<double>(stall_ns_[worker].load(std::memory_order_relaxed)) / 1e9;
}

void Watchdog::loop() {
  auto interval =
      std::chrono::duration_cast<std::chrono::nanoseconds>(rt_.config.lag_probe_interval);
  auto period = std::max(interval / 2, std::chrono::nanoseconds(std::chrono::milliseconds(5)));
  while (!stop_.load()) {
    std::this_thread::sleep_for(period);
    auto now = to_ns(Clock::now());
    heartbeat_ns_.store(now, std::memory_order_relaxed);
    for (std::size_t i = 0; i < rt_.workers.size(); ++i) {
      auto beat = rt_.workers[i]->heartbeat_ns.load(std::memory_order_relaxed);
      auto stall = std::max<std::int64_t>(0, now - beat - interval.count());
      stall_ns_[i].store(stall, std::memory_order_relaxed);
      auto& max = max_since_read_ns_[i];
      auto seen = max.load(std::memory_order_relaxed);
      while (stall > seen && !max.compare_exchange_weak(seen, stall)) {
      }
      bool episode = static_cast<double>(stall) / 1e9 >= kStallEpisode;
      if (episode && !in_episode_[i]) stalls_total_.fetch_add(1, std::memory_order_relaxed);
      in_episode_[i] = episode;
    }
  }
}

}  // namespace sluice::proxy
