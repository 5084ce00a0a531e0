#include "admission/estimate.hpp"

#include <cmath>
#include <limits>

namespace sluice::admission {

namespace {

// A slow head is also at least this much later than its route's normal range:
// a fast upstream's jitter is many times its own time.
constexpr double kSlowMinGapUs = 50'000;
// Slow start: a head within this of its route's mean (and kQueueMinGap) did not queue.
constexpr double kHeadQueued = 1.25;
constexpr double kTypicalAlpha = 1.0 / 16.0;
constexpr double kLeastDev = 0.02;          // of the mean: a deviation never reads as zero
constexpr double kDefiningBand = 0.25 / 3;  // a defining answer a quarter slower queued

// The upstream's part of an answer's time: what is known of the proxy's own
// lateness (`own_delay`, its loop's when the head was read) comes off. None
// when the proxy ran late by more than half of it: that answer says nothing
// of the upstream's time.
std::optional<Micros> upstream_part(Micros ttfb, Micros own_delay) {
  if (own_delay.count() > ttfb.count() / 2) return std::nullopt;
  return ttfb - own_delay;
}

}  // namespace

std::string_view to_string(Signal signal) {
  switch (signal) {
    case Signal::clean:
      return "clean";
    case Signal::refused:
      return "refused";
    case Signal::timeout:
      return "timeout";
    case Signal::slow:
      return "slow";
    case Signal::none:
      return "none";
  }
  return "none";
}

void RouteBase::add(double us, double at_load) {
  if (samples < EstimatePolicy::kBaseSamples) {
    // The route's first answers define it: their mean, mean deviation and
    // load; but for an answer at a load above the first ones' and more than
    // a quarter slower (a seed above a small upstream's capacity: the first
    // answers beyond it queued), which only counts.
    const bool queued = samples > 0 && at_load > load + 0.5 &&
                        us > mean_us + 3 * std::max(dev_us, kDefiningBand * mean_us);
    const int n = defined + 1;
    ++samples;
    if (queued) return;
    defined = n;
    mean_us += (us - mean_us) / n;
    dev_us += (std::abs(us - mean_us) - dev_us) / n;
    load += (at_load - load) / n;
    return;
  }
  const double d = us - mean_us;
  const double band = 3 * std::max(dev_us, kLeastDev * mean_us);
  double a = 0;
  if (d < -band)
    a = 1.0 / 4;  // clearly faster, at any load: a queue drained
  else if (at_load < load - 0.5)
    a = 1.0 / 8;  // at a lower load: nearer what the route takes alone
  else if (at_load <= load + 0.5)
    a = d > band ? 1.0 / 64 : 1.0 / 16;  // at its load: slower for good is followed, slowly
  if (a == 0) return;
  mean_us += a * d;
  if (d >= -band) dev_us += a * (std::abs(d) - dev_us);  // a queue drained is no spread
  if (at_load <= load + 0.5) load += a * (at_load - load);
}

Estimate::Estimate(const EstimatePolicy& p)
    : p_(p), khat_(std::clamp(p.seed, 1.0, std::max(1.0, p.max))) {}

Estimate::Estimate(const EstimatePolicy& p, double khat, double carrying) : Estimate(p) {
  khat_ = std::clamp(khat, 1.0, std::max(1.0, p.max));
  k_ = std::max(0.0, carrying);
  phase_ = k_ > 0 ? Phase::grow : Phase::start;
}

int Estimate::slots() const { return std::max(1, static_cast<int>(std::floor(khat_ + 1e-9))); }

Micros Estimate::probe_wait() const { return p_.probe_after * (1 << refuted_); }

void Estimate::step(Event e, Micros now, double carrying, double factor, Signal why) {
  switch (e) {
    case Event::too_much:
      epoch_ = seq_;
      k_ = carrying;
      khat_ = std::max(1.0, factor * std::min(khat_, k_));
      exhausted_at_ = now;
      why_ = measured_by_ = why;
      ++decreases_;
      doubts_ = 0;
      refuted_ = 0;
      step_ = 1;
      probe_at_ = now + p_.probe_after;
      phase_ = Phase::hold;
      start_window();
      return;
    case Event::answered:
      if (phase_ == Phase::hold) phase_ = Phase::grow;
      return;
    case Event::grow:
      limited_ = false;
      last_growth_ = now;
      if (phase_ == Phase::start) {
        khat_ *= 2;
      } else if (khat_ < k_) {
        khat_ = std::min(
            k_, khat_ + growth_scale_ * std::max(EstimatePolicy::kMinStep,
                                                 EstimatePolicy::kRate * khat_ * (1 - khat_ / k_)));
      } else {
        khat_ += growth_scale_ * step_;
        phase_ = Phase::probe;
        start_window();
      }
      khat_ = std::min(khat_, std::max(1.0, p_.max));
      return;
    case Event::held:
      // The upstream served the step at once: K is the step, and the next
      // step, twice as large, comes a round trip later.
      k_ = std::max(k_, std::floor(khat_ + 1e-9));
      step_ = std::min(2 * step_, std::max(1.0, k_));
      refuted_ = 0;
      probe_at_ = now + baseline();
      phase_ = Phase::grow;
      start_window();
      return;
    case Event::synced:
      // `factor` carries the fleet's K̂. A decrease elsewhere holds this
      // replica as its own would have, without counting one more.
      if (carrying > 0) k_ = carrying;
      if (why == Signal::refused) {
        // A probe past K refuted elsewhere (the fleet back at K): this replica's
        // next probe backs off as its own refutation's would, so the fleet
        // probes as one instance does; a decrease under K starts over.
        const bool refuted_elsewhere = k_ > 0 && factor >= k_ - 1e-9;
        refuted_ = refuted_elsewhere ? std::min(refuted_ + 1, EstimatePolicy::kProbeBackoff) : 0;
        epoch_ = seq_;
        exhausted_at_ = now;
        step_ = 1;
        probe_at_ = now + probe_wait();
        phase_ = refuted_elsewhere ? Phase::grow : Phase::hold;
        start_window();
      } else if (phase_ == Phase::start && k_ > 0) {
        phase_ = Phase::grow;
      }
      if (factor > khat_ + 1e-9) {  // the fleet grew: that was this interval's growth
        last_growth_ = now;
        limited_ = false;
      }
      khat_ = std::clamp(factor, 1.0, std::max(1.0, p_.max));
      return;
    case Event::refuted:
      khat_ = std::max(1.0, k_);
      refuted_ = std::min(refuted_ + 1, EstimatePolicy::kProbeBackoff);
      step_ = 1;
      probe_at_ = now + probe_wait();
      exhausted_at_ = now;
      ++decreases_;
      phase_ = Phase::grow;
      start_window();
      return;
  }
}

void Estimate::sync(double khat, double carrying, bool new_epoch, Micros now) {
  step(Event::synced, now, carrying, khat, new_epoch ? Signal::refused : Signal::none);
}

bool Estimate::maybe_grow(Micros now) {
  if (!limited_ || phase_ == Phase::hold || phase_ == Phase::probe) return false;
  const bool climbing = phase_ == Phase::grow && khat_ >= k_ && step_ > 1;
  const Micros interval = climbing ? baseline() : std::max(p_.growth_interval, baseline());
  if (now - last_growth_ < interval) return false;
  if (phase_ == Phase::grow && khat_ >= k_ && now < probe_at_) return false;
  const double before = khat_;
  step(Event::grow, now);
  return khat_ != before;
}

Micros Estimate::delay_target() const {
  if (typical_us_ <= 0) return p_.growth_interval;
  auto t = Micros(static_cast<std::int64_t>(EstimatePolicy::kTargetFactor * typical_us_));
  return std::clamp(t, EstimatePolicy::kTargetMin, EstimatePolicy::kTargetMax);
}

double Estimate::slow_above_us(std::uint16_t route) const {
  const RouteBase& r = routes_[route % kRoutes];
  if (p_.slow_factor <= 0 || !r.known()) return std::numeric_limits<double>::infinity();
  return std::max(p_.slow_factor * r.range_us(), r.range_us() + kSlowMinGapUs);
}

Signal classify_head(int status, Micros ttfb, Micros own_delay, double slow_above_us) {
  if (status == 429 || status == 503) return Signal::refused;
  const auto part = upstream_part(ttfb, own_delay);
  return part && static_cast<double>(part->count()) > slow_above_us ? Signal::slow : Signal::clean;
}

Signal Estimate::classify(int status, std::uint16_t route, Micros ttfb, Micros own_delay) const {
  return classify_head(status, ttfb, own_delay, slow_above_us(route));
}

bool Estimate::on_head(Signal signal, std::uint64_t seq, int load, std::uint16_t route, Micros ttfb,
                       Micros own_delay, bool waiting, Micros now) {
  if (signal != Signal::clean && signal != Signal::slow) return false;
  // Only the upstream's part of its time is judged; a head without one (the
  // proxy's own lateness was most of it) joins neither its route's baseline
  // nor a window.
  const auto part = upstream_part(ttfb, own_delay);
  if (!part) return false;
  RouteBase& r = routes_[route % kRoutes];
  const auto us = static_cast<double>(part->count());
  const bool known = r.known();
  const double gap = static_cast<double>(EstimatePolicy::kQueueMinGap.count());
  const bool queued = known && us > kHeadQueued * r.mean_us + gap;
  if (known && seq > window_seq_) {
    win_time_ += us;
    win_base_ += r.mean_us;
    win_dev_ += std::max(r.dev_us, kLeastDev * r.mean_us);
    win_load_ += load + 1;  // the request itself was in flight too
    ++win_n_;
    if (signal == Signal::slow) ++win_slow_;
  }
  r.add(us, load + 1);
  typical_us_ =
      typical_us_ <= 0 ? r.mean_us : typical_us_ + kTypicalAlpha * (r.mean_us - typical_us_);
  // Slow start, clocked by answers.
  if (phase_ == Phase::start && signal == Signal::clean && waiting && limited_ && !queued)
    khat_ = std::min(khat_ + 1.0, std::max(1.0, p_.max));
  return win_n_ >= window_size() && judge_window(now);
}

bool Estimate::observe(Signal signal, std::uint64_t seq, int load, Micros now) {
  // A slow answer is judged in its window (on_head), not alone: at thousands
  // of answers a second, any line a single answer crosses is crossed often.
  if (signal == Signal::none || signal == Signal::slow) return false;
  if (signal == Signal::clean) {
    if (load + 1 >= k_) doubts_ = 0;  // it served K at once
    if (seq > epoch_) step(Event::answered, now);
    return false;
  }
  if (seq <= epoch_) return false;  // admitted before the last decrease: the same burst
  const double carrying = std::max(1.0, static_cast<double>(load));
  // A refusal within one of the load the last one met confirms a sharp
  // capacity: no margin under it (an upstream frees a slot only once its
  // answer is written, so a request sent as the answer arrived can meet a
  // slot still held). One above it ends a climb past it: the capacity grew.
  const bool sharp = signal == Signal::refused && measured_by_ == Signal::refused;
  const bool confirmed = sharp && (std::abs(carrying - k_) < 1.5 || carrying > k_);
  // Under it, the first such refusal since the upstream last served K at
  // once keeps K (a slot still held); a second lowers it.
  if (sharp && carrying < k_ - 0.5 && doubts_ == 0) {
    doubts_ = 1;
    khat_ = std::min(khat_, k_);
    return false;
  }
  step(Event::too_much, now, carrying, confirmed ? 1.0 : p_.decrease, signal);
  return true;
}

int Estimate::window_size() const {
  // Noisier routes take longer windows: the answers' own spread (their mean
  // deviation over their mean, v) over √W is the window's noise, and it is
  // held near kWindowNoise (up to kMaxWindow answers).
  const int least =
      phase_ == Phase::probe ? EstimatePolicy::kProbeSamples : EstimatePolicy::kQueueSamples;
  if (win_n_ < least || win_base_ <= 0) return least;
  const double v = win_dev_ / win_base_;
  const double want = v * v / (EstimatePolicy::kWindowNoise * EstimatePolicy::kWindowNoise);
  return static_cast<int>(std::clamp(want, static_cast<double>(least),
                                     static_cast<double>(EstimatePolicy::kMaxWindow)));
}

bool Estimate::judge_window(Micros now) {
  const double w = win_n_;
  const double ratio = win_time_ / win_base_;
  const double load = win_load_ / w;
  const double noise = win_dev_ / win_base_ / std::sqrt(w);
  // A queue worth acting on: its mean wait at least kQueueMinGap; a probe's,
  // the wait a queue of one adds (n x the mean excess, as n in flight share it).
  const double excess = (win_time_ - win_base_) / w;
  const double least = static_cast<double>(EstimatePolicy::kQueueMinGap.count());
  const bool gap = excess >= least;
  const bool probe_gap = load * excess >= least;
  const int slow = win_slow_;
  win_time_ = win_base_ = win_dev_ = win_load_ = 0;
  win_n_ = win_slow_ = 0;
  if (phase_ == Phase::probe) {
    // A probe is judged at its own load: an upstream that still serves K at
    // a time answers n in flight in n / K of their time (Little's law).
    if (probe_gap && ratio > 1 + std::max(EstimatePolicy::kProbeTolerance, noise)) {
      step(Event::refuted, now);
      return true;
    }
    if (load > k_ + 0.5) step(Event::held, now);
    return false;  // no demand past K: the probe stays open for the next window
  }
  // Slow answers, beyond their routes' ranges slow_factor times over, more
  // than once in a window: too much, at the window's load.
  if (slow >= EstimatePolicy::kSlowInWindow) {
    step(Event::too_much, now, std::max(1.0, std::floor(load)), p_.decrease, Signal::slow);
    return true;
  }
  if (p_.queue_factor <= 0 || !gap || ratio <= 1 + std::max(p_.queue_factor - 1, 4 * noise))
    return false;
  step(Event::too_much, now, std::max(1.0, std::round(load / ratio)), 1.0, Signal::slow);
  return true;
}

void Estimate::start_window() {
  window_seq_ = seq_;
  win_time_ = win_base_ = win_dev_ = win_load_ = 0;
  win_n_ = win_slow_ = 0;
}

}  // namespace sluice::admission
