#include "sim/model.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::sim {

double exponential(Rng& rng, double mean) { return -std::log(1.0 - rng.uniform()) * mean; }

double normal(Rng& rng) {
  const double u = 1.0 - rng.uniform(), v = rng.uniform();
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
}

std::string_view to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::provider:
      return "provider";
    case ModelKind::mmc:
      return "mmc";
  }
  return "provider";
}

namespace {

// Processor sharing at a rate that falls with the number in flight. Every
// request in flight advances alike, so a linear pass per event is enough for
// the few hundred a run ever holds.
class Provider final : public UpstreamModel {
 public:
  explicit Provider(const ProviderParams& p) : p_(p) {}

  void start(std::uint64_t id, double work, double now, Rng& rng) override {
    advance(now);
    Job j{id, work, work, now, kNever};
    int n = static_cast<int>(jobs_.size()) + 1;
    if (n > p_.k) {
      double chance = std::min(p_.refuse_cap, (n - p_.k) / 10.0);
      if (rng.uniform() < chance) j.refuse_at = now + rng.uniform() * p_.refuse_within;
    }
    jobs_.push_back(j);
  }

  double next_end() const override {
    double best = kNever;
    for (const Job& j : jobs_) best = std::min(best, due(j));
    return best;
  }

  Ending finish_next() override {
    std::size_t at = 0;
    double best = kNever;
    for (std::size_t i = 0; i < jobs_.size(); ++i)
      if (double d = due(jobs_[i]); d < best) best = d, at = i;
    advance(best);
    Job j = jobs_[at];
    jobs_.erase(jobs_.begin() + static_cast<std::ptrdiff_t>(at));
    Ending e{j.id, best, 200, false, false};
    if (j.refuse_at <= best) {
      e.status = 429;
    } else if (j.started + p_.cut_after <= best) {
      e.cut = true;
    } else {
      e.slow = best - j.started > j.work / p_.slow_rate;
    }
    return e;
  }

  int in_flight() const override { return static_cast<int>(jobs_.size()); }
  double capacity() const override { return p_.k; }
  double throughput() const override { return p_.k * rate(static_cast<int>(p_.k)); }

 private:
  struct Job {
    std::uint64_t id;
    double work, left, started, refuse_at;
  };

  double rate(int n) const { return p_.alone / (1.0 + (n - 1) / (p_.spread * p_.k)); }

  double due(const Job& j) const {
    if (j.refuse_at < kNever) return j.refuse_at;
    double done = now_ + j.left / rate(static_cast<int>(jobs_.size()));
    return std::min(done, j.started + p_.cut_after);
  }

  void advance(double t) {
    if (t > now_ && !jobs_.empty()) {
      double step = (t - now_) * rate(static_cast<int>(jobs_.size()));
      for (Job& j : jobs_) j.left = std::max(0.0, j.left - step);
    }
    now_ = std::max(now_, t);
  }

  ProviderParams p_;
  std::vector<Job> jobs_;
  double now_ = 0;
};

class Mmc final : public UpstreamModel {
 public:
  explicit Mmc(const MmcParams& p) : p_(p) {}

  void start(std::uint64_t id, double work, double now, Rng& rng) override {
    bool over = static_cast<int>(ends_.size()) + 1 > p_.servers;
    Ending e{id, now, over ? 429 : 200, false, false};
    if (!over) e.at = now + exponential(rng, work / p_.rate);
    ends_.push_back(e);
  }

  double next_end() const override {
    double best = kNever;
    for (const Ending& e : ends_) best = std::min(best, e.at);
    return best;
  }

  Ending finish_next() override {
    std::size_t at = 0;
    for (std::size_t i = 1; i < ends_.size(); ++i)
      if (ends_[i].at < ends_[at].at) at = i;
    Ending e = ends_[at];
    ends_.erase(ends_.begin() + static_cast<std::ptrdiff_t>(at));
    return e;
  }

  int in_flight() const override { return static_cast<int>(ends_.size()); }
  double capacity() const override { return p_.servers; }
  double throughput() const override { return p_.servers * p_.rate; }

 private:
  MmcParams p_;
  std::vector<Ending> ends_;  // a refused request ends at once, but still in order
};

}  // namespace

std::unique_ptr<UpstreamModel> make_provider(const ProviderParams& p) {
  return std::make_unique<Provider>(p);
}
std::unique_ptr<UpstreamModel> make_mmc(const MmcParams& p) { return std::make_unique<Mmc>(p); }

std::unique_ptr<UpstreamModel> make_model(ModelKind kind, double k) {
  if (kind == ModelKind::mmc) {
    MmcParams p;
    p.servers = static_cast<int>(k);
    return make_mmc(p);
  }
  ProviderParams p;
  p.k = k;
  return make_provider(p);
}

}  // namespace sluice::sim
