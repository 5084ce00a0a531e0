#pragma once
// The estimate K̂ of one upstream: the concurrency it serves now without
// queueing or refusing (seed 001's seed-and-grow), as one state machine.
//
// The law (docs/admission.md, "The estimate"), for answers from requests
// admitted after the last change (the epoch: the same burst changes nothing):
//   too much      a 429 or 503 at load n (the requests in flight it met):
//                 K = n, K̂ = d x min(K̂, K), d = decrease (0.85); a refusal
//                 at the K refusals measured (within 1.5) or above it
//                 confirms a sharp limit: d = 1; the first one under it
//                 since an answer at K (a slot the upstream still held)
//                 keeps K: K̂ = min(K̂, K).
//                 A timeout: the same at the larger of the load at admission
//                 and at the end. Two heads or more in a window slower than
//                 slow_factor x their route's normal range (mean + 4 mean
//                 deviations): the same at the window's load.
//   a queue       a window of W answers (16; a probe's: 8) from requests of
//                 routes with a baseline, each against its own route's:
//                 R = Σ time / Σ baseline, n the mean load (with itself).
//                 R > 1 + max(queue_factor - 1, 4 v / √W) (v: the routes'
//                 mean deviation over their mean, the window's own noise;
//                 queue_factor 1.25), by a mean of kQueueMinGap or more:
//                 Little's law, the upstream serves n / R at once:
//                 K = K̂ = round(n / R).
//   growth        under demand (a request found no slot), once per
//                 max(growth_interval, baseline):
//                 start: K̂ = 2 K̂ (and +1 per clean unqueued head while
//                 requests wait: doubling per round trip);
//                 grow:  K̂ += max(1/4, K̂ (1 - K̂/K) / 2) up to K;
//                        at K, a probe: K̂ += step once probe_at has come.
//   a probe       judged on its own window: carried past K (n > K + 0.5) and
//                 R <= 1 + max(5 %, v / √W): held, K = the step's K̂, the
//                 next step twice as large, a round trip later; R above
//                 that: refuted, K̂ = K, the next probe_after x 2^refuted
//                 (up to 4x) later; neither (no demand past K): open still.
//   baseline      per route: the first kBaseSamples answers define it (and
//                 are judged by nothing), with the load they met; then a mean
//                 and mean deviation that follow answers at that load (within
//                 3 deviations at 1/16, slower at 1/64: a route slower for
//                 good is learnt, a queue hardly) or a lower one (at 1/8),
//                 and at any load answers faster than 3 deviations under it
//                 (at 1/4: a queue drained).
//
// Phases and their transitions (step() is the one transition function):
//   start --too much--> hold --clean answer after the epoch--> grow
//   grow --tick at K, probe due--> probe --held/refuted--> grow
//   any --too much--> hold
//   any --synced (the fleet's value)--> hold after a fleet decrease, grow after a
//        probe refuted elsewhere (its next probe backed off alike), else as it was
//
// Threading: none; the bulkhead holds its lock around every call. Time comes
// in as Micros since an epoch the caller picks; nothing is scheduled.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::admission {

using Micros = std::chrono::microseconds;

// What an ended request said about its upstream.
enum class Signal : std::uint8_t { clean, refused, timeout, slow, none };
std::string_view to_string(Signal signal);

struct EstimatePolicy {
  double seed = 4.0;
  double max = 256.0;
  Micros growth_interval{250'000};
  Micros probe_after{1'000'000};  // after a decrease, before the first probe past K
  double decrease = 0.85;
  double slow_factor = 4.0;    // 0: slowness is never "too much"
  double queue_factor = 1.25;  // 0: a queue at the upstream is never "too much"
  // A queue in front of the upstream (the bulkhead's) is for bursts: a line
  // whose wait stays above this many typical answer times for an interval
  // (kIntervalAnswers of them) stands, and is trimmed (0: never).
  double queue_target = 1.0;
  static constexpr double kRate = 0.5;
  static constexpr double kMinStep = 0.25;
  static constexpr int kBaseSamples = 8;        // a route's answers that define its baseline
  static constexpr int kQueueSamples = 16;      // answers per queue window
  static constexpr int kProbeSamples = 8;       // a probe's window, of its own requests
  static constexpr double kWindowNoise = 0.08;  // a window's noise held near this
  static constexpr int kMaxWindow = 128;
  static constexpr int kProbeBackoff = 2;  // probe_after doubles per refuted probe, to 4x
  static constexpr double kProbeTolerance = 0.05;
  static constexpr int kSlowInWindow = 2;  // slow answers in a window that are too much
  // The least mean queue acted on: a busy host's own noise on loopback (a
  // sub-millisecond upstream's answers a few ms late) is no queue.
  static constexpr Micros kQueueMinGap{10'000};
  static constexpr double kTargetFactor = 2.0;
  static constexpr Micros kTargetMin{1'000};
  static constexpr Micros kTargetMax{100'000};  // under level 1's upstream wait (150 ms)
};

// One route's normal answer time on this upstream, and the load it was
// learnt at. An answer at a higher load may be a queue's: it only lowers the
// baseline, and only when clearly faster (a queue drained); so a probe's
// answers, a little later each step, never carry the baseline up with them.
struct RouteBase {
  double mean_us = 0, dev_us = 0;
  double load = 0;  // the requests in flight the answers it follows met
  int samples = 0;
  int defined = 0;  // of its first samples, those its definition took
  bool known() const { return samples >= EstimatePolicy::kBaseSamples; }
  // The normal range's top: mean + 4 mean deviations.
  double range_us() const { return mean_us + 4 * dev_us; }
  void add(double us, double at_load);
};

// Classifies a head against a slow line (Estimate::slow_above_us).
Signal classify_head(int status, Micros ttfb, Micros own_delay, double slow_above_us);

class Estimate {
 public:
  enum class Phase : std::uint8_t { start, hold, grow, probe };
  // What happened, for step(): the one transition function.
  enum class Event : std::uint8_t {
    too_much,  // K measured (carrying): a decrease
    answered,  // a clean answer from a request admitted after the epoch
    grow,      // a growth step is due (interval, demand)
    held,      // the probe's window held past K
    refuted,   // the probe's window queued
    synced,    // the fleet's value (admission/fleet.hpp) wins
  };

  explicit Estimate(const EstimatePolicy& p = {});
  // An estimate that already remembers a carrying capacity (past slow start).
  Estimate(const EstimatePolicy& p, double khat, double carrying);

  Phase phase() const { return phase_; }
  double value() const { return khat_; }
  int slots() const;                      // max(1, floor(K̂))
  double carrying() const { return k_; }  // 0: never measured
  bool measured() const { return k_ > 0; }
  bool slow_start() const { return phase_ == Phase::start; }
  // Never measured exhausted and below `max`: it still grows, and what it
  // holds back waits for that growth rather than for a measured limit.
  bool growing() const { return phase_ == Phase::start && khat_ < std::max(1.0, p_.max); }
  bool pool_bound() const { return khat_ >= std::max(1.0, p_.max) - 1e-9; }
  bool probing() const { return phase_ == Phase::probe; }
  // The typical answer time of the routes answered lately (their baselines).
  Micros baseline() const { return Micros(static_cast<std::int64_t>(typical_us_)); }
  std::optional<Micros> exhausted_at() const { return exhausted_at_; }
  Signal why() const { return why_; }
  std::uint64_t decreases() const { return decreases_; }
  const RouteBase& route(std::uint16_t r) const { return routes_[r % kRoutes]; }
  const EstimatePolicy& policy() const { return p_; }

  void demand() { limited_ = true; }  // a request found no slot
  // A response head of the request admitted as `seq` at `load`, of `route`,
  // after `ttfb`: its time joins its route's baseline and the queue window
  // (a stream's head too: its lease lasts its whole life, its head says now
  // what the upstream did). In slow start, one more per clean head of a route
  // not queued (within 1.25 x its mean and kQueueMinGap) while requests wait.
  // True when a window judged the estimate down.
  bool on_head(Signal signal, std::uint64_t seq, int load, std::uint16_t route, Micros ttfb,
               Micros own_delay, bool waiting, Micros now);
  // Grows when the interval has passed and demand met the estimate since.
  bool maybe_grow(Micros now);
  // A response head of `route` after `ttfb`, the proxy's loop `own_delay`
  // late: refused (by status), slow (against its route's range), or clean.
  Signal classify(int status, std::uint16_t route, Micros ttfb, Micros own_delay = Micros{0}) const;
  // The route's slow line: a head later than this is slow (infinite before
  // its baseline is known, or with slow_factor 0).
  double slow_above_us(std::uint16_t route) const;
  // How long a request not seated at once may wait whatever its lane's
  // window: kTargetFactor x the typical baseline, within [kTargetMin, kTargetMax]
  // (the growth interval before any answer).
  Micros delay_target() const;
  // The request admitted as number `seq` at `load` ended with `signal` (its
  // time was learnt at its head). True when this decreased the estimate.
  bool observe(Signal signal, std::uint64_t seq, int load, Micros now);
  std::uint64_t next_seq() { return ++seq_; }
  // The fleet's K̂ and K win (admission/fleet.hpp). `new_epoch`: the fleet
  // decreased since the last sync; the answers of requests admitted before
  // now are of that burst and change nothing more.
  void sync(double khat, double carrying, bool new_epoch, Micros now);
  // Growth steps x scale (a fleet's member estimating alone: 1 / members).
  void set_growth_scale(double scale) { growth_scale_ = std::clamp(scale, 0.0, 1.0); }

  static constexpr std::size_t kRoutes = 256;

 private:
  // The transition function: every change of phase goes through it.
  void step(Event e, Micros now, double carrying = 0, double factor = 1, Signal why = Signal::none);
  void decrease(double carrying, double factor, Signal why, Micros now);
  bool judge_window(Micros now);  // a window is full: a queue, a probe held or refuted
  int window_size() const;        // answers the current window is judged on
  void start_window();
  Micros probe_wait() const;

  EstimatePolicy p_;
  Phase phase_ = Phase::start;
  double khat_;
  double k_ = 0.0;
  double step_ = 1.0;     // the next probe's step past K
  int refuted_ = 0;       // probes refuted in a row at this K
  int doubts_ = 0;        // refusals under a sharp K since an answer at K
  bool limited_ = false;  // demand met the estimate since the last growth
  Signal measured_by_ = Signal::none;
  Micros last_growth_{0};
  Micros probe_at_{0};  // grow: the next probe not before
  std::uint64_t seq_ = 0;
  std::uint64_t epoch_ = 0;       // answers from requests admitted at or before it: one burst
  std::uint64_t window_seq_ = 0;  // a window counts requests admitted after it
  std::optional<Micros> exhausted_at_;
  Signal why_ = Signal::none;
  std::uint64_t decreases_ = 0;
  double typical_us_ = 0;
  double growth_scale_ = 1.0;
  std::array<RouteBase, kRoutes> routes_{};
  // The current window.
  double win_time_ = 0, win_base_ = 0, win_dev_ = 0, win_load_ = 0;
  int win_n_ = 0, win_slow_ = 0;
};

}  // namespace sluice::admission
