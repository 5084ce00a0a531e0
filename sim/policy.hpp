#pragma once
// Admission policies the simulator runs side by side. Each decides, for one
// attempt of a request to one upstream, whether it starts now, waits, or is
// refused, and learns from how started requests ended.
//
//   sluice      the real admission core: one admission::Bulkhead per upstream
//               (lanes, queue windows, the estimate K̂ and its signals), called
//               as the proxy calls it (ask, release with the classified
//               signal, cancel at the window's end, tick every heartbeat) and
//               refusing with the proxy's Retry-After.
//   none        no gating: every attempt starts.
//   static      one fixed limit of in-flight requests for the whole proxy,
//               every upstream and lane together; 503 without Retry-After above it.
//   aimd        per upstream, in the style of Netflix concurrency-limits'
//               AIMDLimit: limit += 1 after each window of `limit` clean
//               answers while at least half the limit was in flight;
//               limit = max(min, backoff x limit) on a refusal, cut or slow
//               report; 503 without Retry-After at the limit.
//   gradient    per upstream, in the style of Envoy's adaptive concurrency
//               filter: every `interval` the limit becomes
//               clamp(limit x clamp((minRTT (1 + buffer)) / sampleRTT, 0.5, 2) + sqrt(limit), min,
//               max), sampleRTT the median of the clean answers' times in the interval; every
//               `min_rtt_every` the limit is pinned to `min` until `min_rtt_requests` answers
//               measured minRTT again (their median). 503 without Retry-After at the limit.
//
// Threading: none; one simulation run owns its policy.
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/fleet.hpp"
#include "admission/gate.hpp"
#include "sim/model.hpp"

namespace sluice::sim {

using admission::Lane;
using admission::Signal;

// Virtual seconds as the admission core's microseconds.
inline admission::Micros micros(double seconds) {
  return admission::Micros(static_cast<std::int64_t>(std::llround(seconds * 1e6)));
}

// What the simulator tells a policy about one request.
struct Attempt {
  std::size_t request = 0;  // index into the run's requests
  std::size_t upstream = 0;
  Lane lane = Lane::standard;
};

enum class Answer : std::uint8_t { start, wait, refuse };
struct Verdict {
  Answer answer = Answer::start;
  std::optional<double> retry_after;  // seconds, with a refusal (none: the policy gives none)
};

// The policy's way back into the run, for requests that waited.
class Driver {
 public:
  virtual ~Driver() = default;
  virtual void start(std::size_t request, double now) = 0;
  virtual void refuse(std::size_t request, std::optional<double> retry_after, double now) = 0;
};

// A fleet's shared ledgers, one per upstream (Redis, in the proxy): each
// member's round goes to report(); a decrease it makes is pushed to every
// member (Policy::pushed).
class FleetHub {
 public:
  virtual ~FleetHub() = default;
  virtual admission::FleetReply report(std::size_t upstream, const admission::FleetReport& r,
                                       double now) = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual Verdict ask(const Attempt& a, double now) = 0;
  // A started request ended as `e` says, `ttfb` after it started.
  virtual void ended(const Attempt& a, const Ending& e, double ttfb) = 0;
  // The policy's own clock (kNever: none due).
  virtual double next_timer() const;
  virtual void on_timer(double now);
  // Its estimate of what `upstream` serves now (none: it keeps none).
  virtual std::optional<double> estimate(std::size_t upstream) const;
  // A fleet's decrease of `upstream`, pushed.
  virtual void pushed(std::size_t upstream, double khat, double carrying, std::uint64_t epoch,
                      double now);
};

// The estimate one proxy I/O thread keeps (SLUICE_THREADS=1): the seed whole,
// and at most the upstream's connection pool (SLUICE_UPSTREAM_MAX_CONNECTIONS, 512).
inline admission::EstimatePolicy one_thread_estimate(admission::EstimatePolicy p = {}) {
  p.max = 512;
  return p;
}

struct SluiceSettings {
  admission::LanePolicy lanes;
  admission::EstimatePolicy estimate = one_thread_estimate();
  admission::RetryBands retry = admission::default_retry_bands();
  double heartbeat = 0.05;  // s: SLUICE_LAG_PROBE_INTERVAL
  double phase = 0;         // s: the first heartbeat (a fleet's instances beat out of step)
  // A member of a fleet sharing capacity (null: alone), its id, and its
  // rounds (SLUICE_REDIS_INTERVAL; the first at `phase`).
  FleetHub* fleet = nullptr;
  std::uint64_t member = 0;
  double fleet_interval = 0.1;
  // A remembered estimate per upstream: K̂ and K (empty: never measured).
  std::vector<std::optional<std::pair<double, double>>> remembered;
};

struct AimdSettings {
  double initial = 20, min = 1, max = 200, backoff = 0.9;
};

struct GradientSettings {
  double min = 3, max = 1000, buffer = 0.25;
  double interval = 10;        // s between limit updates
  double min_rtt_every = 900;  // s between minRTT measurements
  int min_rtt_requests = 5;
};

struct StaticSettings {
  int limit = 18;
};

enum class PolicyKind : std::uint8_t { sluice, none, static_cap, aimd, gradient };
std::string_view to_string(PolicyKind kind);

// `upstreams` upstreams; the driver outlives the policy; `rng` draws for sluice.
std::unique_ptr<Policy> make_sluice(const SluiceSettings& s, std::size_t upstreams,
                                    std::size_t requests, Driver& driver, Rng& rng);
std::unique_ptr<Policy> make_no_gating();
std::unique_ptr<Policy> make_static_cap(const StaticSettings& s);
std::unique_ptr<Policy> make_aimd(const AimdSettings& s, std::size_t upstreams);
std::unique_ptr<Policy> make_gradient(const GradientSettings& s, std::size_t upstreams);

}  // namespace sluice::sim
