#include "sim/policy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sluice::sim {

namespace adm = sluice::admission;

std::string_view to_string(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::sluice:
      return "sluice";
    case PolicyKind::none:
      return "none";
    case PolicyKind::static_cap:
      return "static";
    case PolicyKind::aimd:
      return "aimd";
    case PolicyKind::gradient:
      return "gradient";
  }
  return "sluice";
}

double Policy::next_timer() const { return kNever; }
void Policy::on_timer(double) {}
std::optional<double> Policy::estimate(std::size_t) const { return std::nullopt; }
void Policy::pushed(std::size_t, double, double, std::uint64_t, double) {}

namespace {

// What every policy but sluice counts as "too much".
bool too_much(const Ending& e) { return e.status == 429 || e.cut || e.slow; }

// ---------------------------------------------------------------- sluice

class Sluice final : public Policy {
 public:
  Sluice(const SluiceSettings& s, std::size_t upstreams, std::size_t requests, Driver& driver,
         Rng& rng)
      : s_(s),
        driver_(driver),
        rng_(rng),
        seats_(requests),
        next_tick_(s.phase),
        next_round_(s.fleet ? 0.0 : kNever) {  // a member's first round comes before any request
    for (std::size_t u = 0; u < upstreams; ++u) {
      adm::Estimate e(s.estimate);
      if (u < s.remembered.size() && s.remembered[u])
        e = adm::Estimate(s.estimate, s.remembered[u]->first, s.remembered[u]->second);
      bulkheads_.push_back(std::make_unique<adm::Bulkhead>(s.lanes, e));
      members_.emplace_back(s.member, micros(3 * s.fleet_interval));
    }
    for (auto& seat : seats_) seat.owner = this;
  }

  Verdict ask(const Attempt& a, double now) override {
    now_ = now;
    SimSeat& s = seats_[a.request];
    s.attempt = a;
    s.lane = a.lane;
    auto& b = *bulkheads_[a.upstream];
    if (b.ask(s, micros(now), rng_)) return {Answer::start, {}};
    if (s.queued) {
      s.deadline = now + std::chrono::duration<double>(b.patience(a.lane)).count();
      waiting_.push_back(a.request);
      return {Answer::wait, {}};
    }
    return {Answer::refuse, retry_after(a, 0.0, now)};
  }

  // As the proxy: the signal is classify(status, time to the head), a cut is a
  // response timeout, and the upstream's own exhaustion report makes a clean
  // answer slow.
  void ended(const Attempt& a, const Ending& e, double ttfb) override {
    now_ = e.at;
    auto& b = *bulkheads_[a.upstream];
    Signal signal = e.cut ? Signal::timeout : b.classify(e.status, 0, micros(ttfb));
    if (e.slow && signal == Signal::clean) signal = Signal::slow;
    b.note_head(seats_[a.request], signal, micros(ttfb), micros(e.at));
    b.release(seats_[a.request], signal, micros(ttfb), micros(e.at));
  }

  double next_timer() const override { return std::min(next_tick_, next_round_); }

  void pushed(std::size_t upstream, double khat, double carrying, std::uint64_t epoch,
              double now) override {
    now_ = now;
    members_[upstream].pushed(*bulkheads_[upstream], khat, carrying, epoch, micros(now));
  }

  std::optional<double> estimate(std::size_t upstream) const override {
    const adm::FleetMember* m = s_.fleet ? &members_[upstream] : nullptr;
    if (m && m->source() == adm::FleetMember::Source::fleet) return m->last().slots;  // its share
    return bulkheads_[upstream]->estimate().value();
  }

  // The proxy's heartbeat: the queue windows that ended, then every bulkhead's tick.
  void on_timer(double now) override {
    now_ = now;
    if (now >= next_round_) {  // the fleet's round: one report per upstream
      for (std::size_t u = 0; u < bulkheads_.size(); ++u) {
        auto reply = s_.fleet->report(u, members_[u].report(*bulkheads_[u]), now);
        members_[u].answered(*bulkheads_[u], reply, micros(now));
      }
      next_round_ = (now == 0 ? s_.phase : now) + s_.fleet_interval;
      if (now < next_tick_) return;
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
      SimSeat& s = seats_[waiting_[i]];
      if (!s.queued) continue;
      if (s.deadline > now) {
        waiting_[kept++] = waiting_[i];
        continue;
      }
      auto& b = *bulkheads_[s.attempt.upstream];
      b.cancel(s, micros(now));
      if (s.seated) continue;  // asked once more at its window's end: seated (on_seated started it)
      double waited = now - std::chrono::duration<double>(s.since).count();  // seconds queued
      driver_.refuse(s.attempt.request, retry_after(s.attempt, waited, now), now);
    }
    waiting_.resize(kept);
    for (auto& b : bulkheads_) b->tick(micros(now));
    next_tick_ = now + s_.heartbeat;
  }

 private:
  struct SimSeat final : adm::Seat {
    Sluice* owner = nullptr;
    Attempt attempt;
    double deadline = 0;
    void on_seated() override { owner->driver_.start(attempt.request, owner->now_); }
  };

  // The proxy's queue_timeout Retry-After: the larger of the window waited and
  // the age of the lane's youngest live seat (heavy: on every upstream), in the
  // lane's band, with its jitter.
  double retry_after(const Attempt& a, double waited, double now) {
    std::optional<adm::Micros> youngest;
    for (std::size_t u = 0; u < bulkheads_.size(); ++u) {
      if (a.lane != Lane::heavy && u != a.upstream) continue;
      if (auto y = bulkheads_[u]->youngest(a.lane); y && (!youngest || *y > *youngest))
        youngest = y;
    }
    std::optional<adm::Micros> age;
    if (youngest) age = std::max(adm::Micros{0}, micros(now) - *youngest);
    auto derived = adm::lease_retry_after(micros(waited), age);
    return adm::retry_after_seconds(derived, s_.retry[adm::index(a.lane)], rng_);
  }

  SluiceSettings s_;
  Driver& driver_;
  Rng& rng_;
  std::vector<std::unique_ptr<adm::Bulkhead>> bulkheads_;
  std::vector<adm::FleetMember> members_;  // per upstream (with s_.fleet)
  std::vector<SimSeat> seats_;
  std::vector<std::size_t> waiting_;  // queued at some point, in order
  double now_ = 0;
  double next_tick_ = 0;
  double next_round_ = kNever;
};

// ---------------------------------------------------------------- the others

class NoGating final : public Policy {
 public:
  Verdict ask(const Attempt&, double) override { return {Answer::start, {}}; }
  void ended(const Attempt&, const Ending&, double) override {}
};

class StaticCap final : public Policy {
 public:
  explicit StaticCap(const StaticSettings& s) : s_(s) {}
  Verdict ask(const Attempt&, double) override {
    if (running_ >= s_.limit) return {Answer::refuse, {}};
    ++running_;
    return {Answer::start, {}};
  }
  void ended(const Attempt&, const Ending&, double) override { --running_; }

 private:
  StaticSettings s_;
  int running_ = 0;
};

class Aimd final : public Policy {
 public:
  Aimd(const AimdSettings& s, std::size_t upstreams)
      : s_(s), u_(upstreams, Limit{s.initial, 0, 0}) {}

  Verdict ask(const Attempt& a, double) override {
    Limit& l = u_[a.upstream];
    if (l.running >= static_cast<int>(l.limit)) return {Answer::refuse, {}};
    ++l.running;
    return {Answer::start, {}};
  }

  void ended(const Attempt& a, const Ending& e, double) override {
    Limit& l = u_[a.upstream];
    int load = l.running--;
    if (too_much(e)) {
      l.limit = std::max(s_.min, l.limit * s_.backoff);
      l.clean = 0;
      return;
    }
    // Only a limit that was used grows (at least half of it in flight).
    if (2 * load < static_cast<int>(l.limit)) return;
    if (++l.clean >= static_cast<int>(l.limit)) {
      l.limit = std::min(s_.max, l.limit + 1);
      l.clean = 0;
    }
  }

 private:
  struct Limit {
    double limit;
    int running;
    int clean;
  };
  AimdSettings s_;
  std::vector<Limit> u_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

class Gradient final : public Policy {
 public:
  Gradient(const GradientSettings& s, std::size_t upstreams) : s_(s), u_(upstreams) {
    for (auto& l : u_) {
      l.limit = l.saved = s.min;
      l.next_update = s.interval;
    }
  }

  Verdict ask(const Attempt& a, double) override {
    Limit& l = u_[a.upstream];
    if (l.running >= static_cast<int>(l.limit)) return {Answer::refuse, {}};
    ++l.running;
    return {Answer::start, {}};
  }

  void ended(const Attempt& a, const Ending& e, double ttfb) override {
    Limit& l = u_[a.upstream];
    --l.running;
    if (e.status != 200 || e.cut) return;  // latency is sampled from answers only
    if (l.measuring) {
      l.min_samples.push_back(ttfb);
      if (static_cast<int>(l.min_samples.size()) >= s_.min_rtt_requests) {
        l.min_rtt = median(l.min_samples);
        l.min_samples.clear();
        l.measuring = false;
        l.limit = l.saved;
        l.next_min_rtt = e.at + s_.min_rtt_every;
      }
      return;
    }
    l.samples.push_back(ttfb);
  }

  double next_timer() const override {
    double t = kNever;
    for (const auto& l : u_) t = std::min({t, l.next_update, l.next_min_rtt});
    return t;
  }

  void on_timer(double now) override {
    for (auto& l : u_) {
      if (l.next_min_rtt <= now) {  // pin the limit and measure minRTT again
        l.next_min_rtt = kNever;
        l.measuring = true;
        l.saved = l.limit;
        l.limit = s_.min;
        l.samples.clear();
      }
      if (l.next_update > now) continue;
      l.next_update = now + s_.interval;
      if (l.measuring || l.samples.empty()) continue;
      double sample = median(l.samples);
      l.samples.clear();
      double gradient = std::clamp(l.min_rtt * (1 + s_.buffer) / sample, 0.5, 2.0);
      double next = gradient * l.limit;
      l.limit = std::clamp(next + std::sqrt(next), s_.min, s_.max);
    }
  }

 private:
  struct Limit {
    double limit = 3, saved = 3, min_rtt = 0;
    int running = 0;
    bool measuring = true;
    double next_update = 0, next_min_rtt = kNever;
    std::vector<double> samples, min_samples;
  };
  GradientSettings s_;
  std::vector<Limit> u_;
};

}  // namespace

std::unique_ptr<Policy> make_sluice(const SluiceSettings& s, std::size_t upstreams,
                                    std::size_t requests, Driver& driver, Rng& rng) {
  return std::make_unique<Sluice>(s, upstreams, requests, driver, rng);
}
std::unique_ptr<Policy> make_no_gating() { return std::make_unique<NoGating>(); }
std::unique_ptr<Policy> make_static_cap(const StaticSettings& s) {
  return std::make_unique<StaticCap>(s);
}
std::unique_ptr<Policy> make_aimd(const AimdSettings& s, std::size_t upstreams) {
  return std::make_unique<Aimd>(s, upstreams);
}
std::unique_ptr<Policy> make_gradient(const GradientSettings& s, std::size_t upstreams) {
  return std::make_unique<Gradient>(s, upstreams);
}

}  // namespace sluice::sim
