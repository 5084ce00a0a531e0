#pragma once
// The sampler: once per tick, readings for the admission controllers to step
// on, each scoped to what it measures.
//
// The process's reading (the proxy's own loops):
// - Lag: what every loop that took a sample in the tick that just ended shows
//   (the least of their maxima: one slow loop among several is not the
//   process lagging; every loop lagging is). Each loop tags its maximum with
//   the tick epoch it was taken in, and only this tick's epoch is fresh
//   evidence; a stalled loop takes none. No loop took one: the last fresh
//   value, repeated and marked stale (tick_lag).
// - Stalls: what every loop went through since the last tick (the least of
//   each loop's longest stall, one still going on included: all_stalled_ms);
//   a watchdog that has not looked for a while makes the reading not ok.
// Each upstream's reading (what waits on it):
// - Wait: the p95 of the connection grants' waits over the last 1.5 ticks
//   (wait_window_start; seed 000: a wait is read on at most two ticks, fewer
//   than the rise gate needs), or the age of the oldest request still queued
//   for one of its connections or a seat in its bulkhead, if larger. A wait
//   for a seat counts only while the bulkhead is held at the connection pool's
//   share (Bulkhead::pool_bound: it waits for a connection); a wait for the
//   capacity measured, or in slow start, is the bulkhead's own, bounded by it.
// - Timeouts: its response timeouts grew since the last tick (an SSE stream
//   cut for idling is not one).
// Arrivals per lane in the tick, for the tick log.
//
// Threading: the admin thread only (the ticker's). It reads the workers'
// atomics and copies their bulkhead views; the functions below are pure.
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "admission/controller.hpp"
#include "proxy/clock.hpp"
#include "proxy/wait_ring.hpp"
#include "replay/trace.hpp"

namespace sluice::proxy {

struct Runtime;
class Watchdog;

// One loop's largest lag in a tick, with the tick epoch it was taken in.
struct LagSample {
  std::uint64_t epoch;
  double ms;
};
struct TickLag {
  std::optional<double> ms;
  bool fresh = true;  // false: no loop sampled this tick; ms is the last fresh value
};
// The lag of the tick `epoch`: the least of the loops' samples tagged with it
// (what every loop that sampled shows); none: `last_fresh_ms`, marked stale
// (none before either: no lag).
TickLag tick_lag(std::span<const LagSample> loops, std::uint64_t epoch,
                 std::optional<double> last_fresh_ms);
// The stall every loop went through: the least of each loop's longest stall
// in the tick (ns); none when some loop did not stall.
std::optional<double> all_stalled_ms(std::span<const std::int64_t> loop_stall_ns);

// Where the upstream-wait window starts (steady-clock ns): 1.5 ticks before now.
std::int64_t wait_window_start(Clock::time_point now, std::chrono::milliseconds tick);
// Per upstream (0..upstreams-1), the p95 in ms of the waits in `rings` taken at
// or after `since_ns`; none for an upstream without one.
std::vector<std::optional<double>> wait_p95_ms(std::span<const WaitRing* const> rings,
                                               std::int64_t since_ns, std::size_t upstreams);

// What the sampler read for one upstream in one tick.
struct UpstreamPressure {
  std::optional<double> wait_p95_ms;     // the grants' waits in the window
  std::optional<double> oldest_wait_ms;  // the oldest request still queued (connection or seat)
  bool timeout = false;                  // a response timed out since the last tick
  // The evidence of waiting: the larger of the two.
  std::optional<double> wait_ms() const;
};
// An upstream's reading at `t`: its wait and whether it timed out.
admission::Reading upstream_reading(admission::Millis t, const UpstreamPressure& pressure);

// One tick's readings: the process's and each upstream's (by index).
struct Sample {
  admission::Reading process;
  std::vector<admission::Reading> upstreams;
};

class Sampler {
 public:
  Sampler(Runtime& rt, Watchdog& watchdog);
  // The readings from the probes, for the tick at `t` of length `tick`.
  // Advances the lag epoch: call once per tick.
  Sample sample(admission::Millis t, std::chrono::milliseconds tick);
  // The last sample's pressure, by upstream.
  const std::vector<UpstreamPressure>& upstreams() const { return upstreams_; }
  // Arrivals per lane in the last sample's tick, for the tick log.
  const replay::Requests& arrivals() const { return arrivals_; }

 private:
  Runtime& rt_;
  Watchdog& watchdog_;
  std::optional<double> last_lag_ms_;         // the last fresh lag
  std::vector<std::uint64_t> last_timeouts_;  // by upstream, as of the last tick
  std::array<std::uint64_t, admission::kLaneCount> last_arrivals_{};
  replay::Requests arrivals_{};  // in the last tick
  std::vector<UpstreamPressure> upstreams_;
};

}  // namespace sluice::proxy
