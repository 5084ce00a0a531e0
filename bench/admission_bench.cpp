// Micro-benchmark of the admission core's two costs:
//  - the per-request decision, as the proxy makes it: the level from an atomic
//    (relaxed), Gate::admit with a thread-local Rng and, for a refusal, the
//    precomputed Retry-After base from an atomic and retry_after_seconds;
//  - Controller::step, the tick's work. It takes one reading and no per-request
//    input, so its cost does not grow with the request rate.
//  - a bulkhead slot: Bulkhead::ask and release for one request, with 0 to
//    100,000 requests of another lane waiting in the same bulkhead (each
//    release re-offers the slot to the waiting lane's oldest request): the
//    cost must not grow with the queue.
// Plain C++ and std::chrono; run the RelWithDebInfo build: sluice_admission_bench.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/controller.hpp"
#include "admission/gate.hpp"

using namespace sluice::admission;
using Clock = std::chrono::steady_clock;

namespace {

// What the ticker publishes once per tick and every request reads.
std::atomic<std::uint8_t> g_level{0};
std::array<std::atomic<std::int64_t>, kLaneCount> g_retry_base_ms{};  // -1: not foreseeable

thread_local Rng t_rng{0x5eed};

// A request mix: mostly standard, some bulk and heavy.
constexpr std::array<Lane, 8> kMix{Lane::standard, Lane::bulk,     Lane::standard, Lane::heavy,
                                   Lane::standard, Lane::standard, Lane::bulk,     Lane::standard};

struct Sink {
  std::uint64_t refused = 0;
  std::uint64_t retry_sum = 0;
};

// One decision exactly as the data path makes it.
inline void decide(const Gate& gate, const RetryBands& bands, Lane lane, Sink& sink) {
  auto level = static_cast<Level>(g_level.load(std::memory_order_relaxed));
  GateDecision d = gate.admit(lane, level, t_rng);
  if (d.outcome == Outcome::admitted) return;
  ++sink.refused;
  std::int64_t base = g_retry_base_ms[index(lane)].load(std::memory_order_relaxed);
  std::optional<Millis> derived = base < 0 ? std::nullopt : std::optional<Millis>(Millis{base});
  sink.retry_sum +=
      static_cast<std::uint64_t>(retry_after_seconds(derived, bands[index(lane)], t_rng));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int batches = 10;
  const std::uint64_t per_batch = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  const Gate gate(Mode::enforce, default_lane_factors());
  const RetryBands bands = default_retry_bands();
  volatile std::uint64_t keep = 0;  // so the loop's work is not optimised away

  std::printf(
      "per-request decision: %d batches x %llu decisions, lane mix 5 standard : 2 bulk : 1 heavy\n",
      batches, static_cast<unsigned long long>(per_batch));
  std::printf("%-6s %12s %10s %10s %10s\n", "level", "median ns", "min ns", "max ns", "refused");
  for (int level = 0; level < 4; ++level) {
    // What the ticker would publish at this level: the wait until each lane is admitted again.
    g_level.store(static_cast<std::uint8_t>(level), std::memory_order_relaxed);
    for (Lane lane : kLanes) g_retry_base_ms[index(lane)].store(level * 15'000);
    std::vector<double> ns;
    Sink sink;
    for (int b = 0; b < batches; ++b) {
      auto start = Clock::now();
      for (std::uint64_t i = 0; i < per_batch; ++i) decide(gate, bands, kMix[i & 7], sink);
      auto elapsed = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
      ns.push_back(elapsed / static_cast<double>(per_batch));
    }
    keep = keep + sink.retry_sum;
    std::printf(
        "%-6d %12.2f %10.2f %10.2f %9.1f%%\n", level, median(ns),
        *std::min_element(ns.begin(), ns.end()), *std::max_element(ns.begin(), ns.end()),
        100.0 * static_cast<double>(sink.refused) / (static_cast<double>(per_batch) * batches));
  }

  // A bulkhead slot with a queue beside it: heavy requests wait (their cap is
  // taken), standard requests come and go.
  struct NoCap : LeaseCap {
    bool try_take() override { return false; }
    void give_back() override {}
  } no_cap;
  std::printf("\nBulkhead::ask + release of one standard request, heavy requests waiting\n");
  std::printf("%-8s %12s %10s %10s\n", "waiting", "median ns", "min ns", "max ns");
  for (int waiting : {0, 100, 10'000, 100'000}) {
    LanePolicy lanes;
    lanes.queue_window = {Micros{0}, Micros{500'000}, Micros{3'600'000'000}};
    Bulkhead bulkhead(lanes, Estimate(EstimatePolicy{}, 64, 64), &no_cap);
    Rng rng(3);
    std::vector<Seat> queued(static_cast<std::size_t>(waiting));
    for (auto& q : queued) {
      q.lane = Lane::heavy;
      bulkhead.ask(q, Micros{0}, rng);
    }
    std::vector<Seat> running(16);
    for (auto& r : running) bulkhead.ask(r, Micros{0}, rng);  // standard, within its floor
    std::vector<double> per;
    Seat s;
    const int n = 1'000'000;
    for (int b = 0; b < batches; ++b) {
      auto start = Clock::now();
      for (int i = 0; i < n; ++i) {
        keep = keep + (bulkhead.ask(s, Micros{i}, rng) ? 1 : 0);
        bulkhead.release(s, Signal::clean, Micros{100}, Micros{i});
      }
      per.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n);
    }
    std::printf("%-8d %12.2f %10.2f %10.2f\n", waiting, median(per),
                *std::min_element(per.begin(), per.end()),
                *std::max_element(per.begin(), per.end()));
  }

  // The tick: a day's worth of one-second readings through one controller.
  const int ticks = 86'400;
  std::printf(
      "\nController::step: %d batches x %d ticks (no per-request input: the same work at "
      "any request rate)\n",
      batches, ticks);
  std::vector<double> ns;
  Rng readings(7);
  for (int b = 0; b < batches; ++b) {
    Controller controller(ControllerConfig::fast());
    std::vector<Reading> trace(ticks);
    for (int i = 0; i < ticks; ++i) {
      Reading& r = trace[static_cast<std::size_t>(i)];
      r.t = Millis{(i + 1) * 1000LL};
      double u = readings.uniform();
      r.lag_ms = u < 0.05 ? 300.0 : 5.0 + 20.0 * u;  // idle with 5% blips
      r.upstream_wait_ms = 2.0 + 10.0 * readings.uniform();
      r.lag_fresh = readings.uniform() > 0.1;
    }
    auto start = Clock::now();
    for (const Reading& r : trace)
      keep = keep + static_cast<std::uint64_t>(controller.step(r).level);
    auto elapsed = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    ns.push_back(elapsed / ticks);
  }
  std::printf("%-6s %12s %10s %10s\n", "", "median ns", "min ns", "max ns");
  std::printf("%-6s %12.2f %10.2f %10.2f\n", "step", median(ns),
              *std::min_element(ns.begin(), ns.end()), *std::max_element(ns.begin(), ns.end()));
  return keep == 42 ? 1 : 0;
}
