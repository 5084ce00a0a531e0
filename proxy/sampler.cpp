#include "proxy/sampler.hpp"

#include <algorithm>

#include "proxy/admin.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

namespace {
// p95 of the samples: the value at rank ceil(0.95 n).
double p95(std::vector<std::uint32_t>& v) {
  auto rank = (v.size() * 95 + 99) / 100;
  auto k = rank == 0 ? 0 : rank - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The larger of a value so far and x (what a max over none starts from: 0).
void raise(std::optional<double>& v, double x) { v = std::max(v.value_or(0.0), x); }
}  // namespace

TickLag tick_lag(std::span<const LagSample> loops, std::uint64_t epoch,
                 std::optional<double> last_fresh_ms) {
  std::optional<double> lag;
  for (const auto& l : loops) {
    if (l.epoch != epoch) continue;
    lag = lag ? std::min(*lag, l.ms) : l.ms;
  }
  if (lag) return {lag, true};
  if (last_fresh_ms) return {last_fresh_ms, false};
  return {};
}

std::int64_t wait_window_start(Clock::time_point now, std::chrono::milliseconds tick) {
  return to_ns(now) - std::chrono::duration_cast<std::chrono::nanoseconds>(tick).count() * 3 / 2;
}

std::vector<std::optional<double>> wait_p95_ms(std::span<const WaitRing* const> rings,
                                               std::int64_t since_ns, std::size_t upstreams) {
  std::vector<std::vector<std::uint32_t>> waits(upstreams);
  for (const auto* ring : rings)
    ring->for_each_since(since_ns, [&](std::uint16_t u, std::uint32_t us) {
      if (u < waits.size()) waits[u].push_back(us);
    });
  std::vector<std::optional<double>> out(upstreams);
  for (std::size_t u = 0; u < upstreams; ++u)
    if (!waits[u].empty()) out[u] = p95(waits[u]) / 1000.0;
  return out;
}

std::optional<double> UpstreamPressure::wait_ms() const {
  std::optional<double> v = wait_p95_ms;
  if (oldest_wait_ms) raise(v, *oldest_wait_ms);
  return v;
}

std::optional<double> all_stalled_ms(std::span<const std::int64_t> loop_stall_ns) {
  if (loop_stall_ns.empty()) return std::nullopt;
  auto least = *std::min_element(loop_stall_ns.begin(), loop_stall_ns.end());
  if (least <= 0) return std::nullopt;
  return static_cast<double>(least) / 1e6;
}

admission::Reading upstream_reading(admission::Millis t, const UpstreamPressure& pressure) {
  admission::Reading r;
  r.t = t;
  r.upstream_wait_ms = pressure.wait_ms();
  r.upstream_timeout = pressure.timeout;
  return r;
}

Sampler::Sampler(Runtime& rt, Watchdog& watchdog)
    : rt_(rt), watchdog_(watchdog), last_timeouts_(rt.config.upstreams.size()) {}

Sample Sampler::sample(admission::Millis t, std::chrono::milliseconds tick) {
  admission::Reading r;
  r.t = t;
  auto now = Clock::now();
  const std::size_t upstreams = rt_.config.upstreams.size();

  // Lag: what every loop shows (the least of their maxima) in the tick that just ended, from the
  // loops that took a sample in it. None took one: the last value, marked stale.
  auto epoch = rt_.tick_epoch.fetch_add(1, std::memory_order_relaxed) & 0xFFFF;
  std::vector<LagSample> loops;
  loops.reserve(rt_.workers.size());
  for (auto& w : rt_.workers) {
    auto packed = w->lag_epoch_max.load(std::memory_order_relaxed);
    loops.push_back(
        {Worker::lag_epoch(packed), static_cast<double>(Worker::lag_us(packed)) / 1000.0});
  }
  auto lag = tick_lag(loops, epoch, last_lag_ms_);
  if (lag.fresh && lag.ms) last_lag_ms_ = lag.ms;
  r.lag_ms = lag.ms;
  r.lag_fresh = lag.fresh;

  // Upstream wait: p95 per upstream over the last 1.5 ticks.
  std::vector<const WaitRing*> rings;
  rings.reserve(rt_.workers.size());
  for (auto& w : rt_.workers) rings.push_back(&w->waits);
  auto p95s = wait_p95_ms(rings, wait_window_start(now, tick), upstreams);
  upstreams_.assign(upstreams, UpstreamPressure{});
  for (std::size_t u = 0; u < upstreams; ++u) upstreams_[u].wait_p95_ms = p95s[u];
  // A request still queued has waited at least this long already: evidence now,
  // not only once a connection frees up (with a slow upstream, grants come in
  // bursts and a tick can pass with none).
  for (auto& w : rt_.workers)
    for (std::size_t u = 0; u < upstreams && u < w->stats().upstream.size(); ++u) {
      auto since = w->stats().upstream[u].oldest_waiting_since_ns.load(std::memory_order_relaxed);
      if (since == 0) continue;
      double ms = static_cast<double>(to_ns(now) - since) / 1e6;
      raise(upstreams_[u].oldest_wait_ms, ms);
    }
  // The same for requests queued for a bulkhead slot while the bulkhead is
  // held at the pool's share: they wait for a connection. A wait for the
  // capacity the bulkhead measured (or is still growing toward) is its own,
  // bounded by its patience and refusals: counted as the level's too, it shed
  // bulk for the level's hold after a halved capacity came back.
  for (std::size_t u = 0; u < upstreams && u < rt_.bulkheads.size(); ++u)
    if (rt_.bulkhead(u).pool_bound())
      for (auto lane : admission::kLanes)
        if (auto since = rt_.bulkhead(u).oldest_waiting(lane)) {
          double ms = static_cast<double>((rt_.micros(now) - *since).count()) / 1e3;
          raise(upstreams_[u].oldest_wait_ms, ms);
        }

  // Upstream timeouts since the last tick.
  for (std::size_t u = 0; u < upstreams; ++u) {
    std::uint64_t timeouts = 0;
    for (auto& w : rt_.workers)
      if (u < w->stats().upstream.size())
        timeouts += w->stats().upstream[u].timeouts.load(std::memory_order_relaxed);
    upstreams_[u].timeout = timeouts > last_timeouts_[u];
    last_timeouts_[u] = timeouts;
  }

  // The stall every loop went through since the last tick, or is still in.
  std::vector<std::int64_t> stalls(rt_.workers.size());
  for (std::size_t i = 0; i < stalls.size(); ++i)
    stalls[i] = std::max(watchdog_.take_max_stall_ns(i),
                         static_cast<std::int64_t>(watchdog_.stall_seconds(i) * 1e9));
  r.stall_ms = all_stalled_ms(stalls);

  // The watchdog itself has not looked for a while: its stall reading cannot be trusted.
  auto watchdog_age = to_ns(now) - watchdog_.heartbeat_ns();
  auto interval_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(rt_.config.lag_probe_interval).count();
  r.ok = watchdog_age < std::max<std::int64_t>(10 * interval_ns, 500'000'000);

  // Arrivals per lane in this tick, for the tick log (replay applies the gate to them).
  for (auto lane : admission::kLanes) {
    std::uint64_t n = 0;
    for (auto& w : rt_.workers)
      for (auto& outcome : w->stats().lane[admission::index(lane)].decisions)
        for (auto& c : outcome) n += c.load(std::memory_order_relaxed);
    arrivals_[admission::index(lane)] = n - last_arrivals_[admission::index(lane)];
    last_arrivals_[admission::index(lane)] = n;
  }
  Sample sample{r, {}};
  sample.upstreams.reserve(upstreams);
  for (const auto& p : upstreams_) sample.upstreams.push_back(upstream_reading(t, p));
  return sample;
}

}  // namespace sluice::proxy
