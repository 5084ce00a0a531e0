#pragma once
// Closed-loop load for end-to-end tests: clients on keep-alive connections,
// each sending one request after another, and what they got, counted.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"

namespace sluice::test {

// What a group of clients got, counted as it happens.
struct Tally {
  std::atomic<std::uint64_t> ok{0};             // 200
  std::atomic<std::uint64_t> queue_timeout{0};  // 503 X-Sluice-Reject: queue_timeout
  std::atomic<std::uint64_t> other_503{0};      // any other refusal by Sluice
  std::atomic<std::uint64_t> upstream_429{0};   // the upstream's 429, forwarded
  std::atomic<std::uint64_t> other{0};          // any other status
  std::atomic<std::uint64_t> failed{0};         // no answer: connection lost or timed out
  std::atomic<bool> recording{false};           // latencies of 200s are kept while set
  std::mutex mutex;
  std::vector<double> latencies_ms;

  std::uint64_t answered() const { return ok + queue_timeout + other_503 + upstream_429 + other; }

  double median_ms() {
    std::lock_guard lock(mutex);
    if (latencies_ms.empty()) return 0;
    auto v = latencies_ms;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
};

// Closed-loop clients: each sends `target` back to back on a keep-alive
// connection until stopped, pausing `after_refusal` after a 503 or 429 so a flood
// refused at once does not spin the CPU the proxy needs. Each request carries
// `headers`. Stops by itself when destroyed.
class Load {
 public:
  Load(std::uint16_t port, std::string target, int clients, Tally& tally,
       std::chrono::milliseconds after_refusal = std::chrono::milliseconds(1),
       Headers headers = {}) {
    const auto raw = format_request("GET", target, port, headers);
    for (int i = 0; i < clients; ++i)
      threads_.emplace_back(
          [this, port, raw, &tally, after_refusal] { run(port, raw, tally, after_refusal); });
  }
  ~Load() { stop(); }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void run(std::uint16_t port, const std::string& raw, Tally& tally,
           std::chrono::milliseconds after_refusal) {
    std::optional<Conn> conn;
    while (!stop_) {
      if (!conn) {
        conn = Conn::try_open(port);
        if (!conn) {
          ++tally.failed;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      std::optional<sluice::test::Response> res;
      if (conn->send(raw)) res = conn->read_response(std::chrono::seconds(10));
      if (!res) {
        ++tally.failed;
        conn.reset();
        continue;
      }
      const auto ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (res->status == 200) {
        ++tally.ok;
        if (tally.recording) {
          std::lock_guard lock(tally.mutex);
          tally.latencies_ms.push_back(ms);
        }
      } else if (res->status == 503 && res->header("X-Sluice-Reject") == "queue_timeout") {
        ++tally.queue_timeout;
      } else if (res->status == 503 && !res->header("X-Sluice-Reject").empty()) {
        ++tally.other_503;
      } else if (res->status == 429) {
        ++tally.upstream_429;
      } else {
        ++tally.other;
      }
      if (!res->keep_alive) conn.reset();
      if (res->status == 503 || res->status == 429) std::this_thread::sleep_for(after_refusal);
    }
  }

  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace sluice::test
