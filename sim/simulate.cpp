#include "sim/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

namespace sluice::sim {

namespace adm = sluice::admission;

std::string_view to_string(ScenarioKind kind) {
  switch (kind) {
    case ScenarioKind::burst:
      return "burst";
    case ScenarioKind::idle:
      return "idle";
    case ScenarioKind::isolation:
      return "isolation";
    case ScenarioKind::step:
      return "step";
    case ScenarioKind::review:
      return "review";
  }
  return "burst";
}

std::optional<ScenarioKind> scenario_from_string(std::string_view s) {
  for (auto k : kScenarios)
    if (to_string(k) == s) return k;
  return std::nullopt;
}

std::optional<ModelKind> model_from_string(std::string_view s) {
  for (auto k : {ModelKind::provider, ModelKind::mmc})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

// ---------------------------------------------------------------- scenarios

namespace {

void add(Scenario& s, double at, Lane lane, std::size_t upstream, double work, bool fixed = true) {
  s.jobs.push_back({at, lane, upstream, work, fixed});
}

// Periodic work from t = 0 until the horizon, every `every` s.
void every(Scenario& s, double every, Lane lane, std::size_t upstream, double work) {
  for (double t = 0; t < kHorizon; t += every) add(s, t, lane, upstream, work, false);
}

}  // namespace

Scenario make_scenario(ScenarioKind kind, ModelKind model, Rng& rng, bool quiet) {
  Scenario s;
  s.kind = kind;
  auto pool = [&](std::string name, double k) {
    s.upstreams.push_back(std::move(name));
    s.capacity.push_back(k);
  };
  switch (kind) {
    case ScenarioKind::burst:
      // A backlog lands at once on one pool: 100 standard requests of 20,000 tokens.
      pool("api", 18);
      for (int i = 0; i < 100; ++i) add(s, 0, Lane::standard, 0, 20'000);
      break;
    case ScenarioKind::idle:
      // An idle pool is handed 40 standard requests of 10,000 tokens.
      pool("api", 18);
      for (int i = 0; i < 40; ++i) add(s, 0, Lane::standard, 0, 10'000);
      break;
    case ScenarioKind::isolation:
      // A bulk flood on a small pool (K 4), standard work on another (K 18)
      // arriving over the first two minutes.
      pool("small", 4);
      pool("api", 18);
      if (!quiet)
        for (int i = 0; i < 60; ++i) add(s, 0, Lane::bulk, 0, 20'000);
      for (int i = 0; i < 15; ++i) add(s, rng.uniform() * 120, Lane::standard, 1, 20'000);
      break;
    case ScenarioKind::step: {
      // Poisson arrivals of standard requests of 10,000 tokens: half the
      // pool's throughput for 30 minutes, then twice it for 30 minutes.
      pool("api", 18);
      double per_s = make_model(model, 18)->throughput() / 10'000;
      for (double t = exponential(rng, 1 / (0.5 * per_s)); t < 1800;
           t += exponential(rng, 1 / (0.5 * per_s)))
        add(s, t, Lane::standard, 0, 10'000);
      for (double t = 1800 + exponential(rng, 1 / (2 * per_s)); t < 3600;
           t += exponential(rng, 1 / (2 * per_s)))
        add(s, t, Lane::standard, 0, 10'000);
      break;
    }
    case ScenarioKind::review:
      // Seed 001's measured day: the bug backlog (bulk, 100 x 20,000), 35
      // review heads in two minutes (standard, 40,000 each), three red mains
      // five minutes in (standard, 20,000), triage every four minutes (bulk,
      // 10,000) and the babysitter every six (standard, 5,000).
      pool("api", 18);
      for (int i = 0; i < 100; ++i) add(s, 0, Lane::bulk, 0, 20'000);
      for (int i = 0; i < 35; ++i) add(s, rng.uniform() * 120, Lane::standard, 0, 40'000);
      for (int i = 0; i < 3; ++i) add(s, 300, Lane::standard, 0, 20'000);
      every(s, 240, Lane::bulk, 0, 10'000);
      every(s, 360, Lane::standard, 0, 5'000);
      break;
  }
  std::stable_sort(s.jobs.begin(), s.jobs.end(),
                   [](const Job& a, const Job& b) { return a.at < b.at; });
  return s;
}

std::vector<PolicyChoice> default_policies(ScenarioKind kind) {
  std::vector<PolicyChoice> p{{PolicyKind::sluice, "sluice", false}};
  if (kind == ScenarioKind::idle) {
    p[0].label = "sluice (never measured)";
    p.push_back({PolicyKind::sluice, "sluice (remembered)", true});
  }
  p.push_back({PolicyKind::none, "no gating", false});
  p.push_back({PolicyKind::static_cap, "static cap", false});
  p.push_back({PolicyKind::aimd, "aimd", false});
  p.push_back({PolicyKind::gradient, "gradient", false});
  return p;
}

// ---------------------------------------------------------------- one run

namespace {

class Run final : public Driver, public FleetHub {
 public:
  Run(const Scenario& s, ModelKind model, const PolicyChoice& choice, const Settings& settings,
      std::uint64_t seed, const Fleet& fleet)
      : s_(s),
        fleet_(fleet),
        model_rng_(mix(seed, 1)),
        balance_rng_(mix(seed, 3)),
        reqs_(s.jobs.size()) {
    if (!(fleet_.window > 0)) fleet_.window = kHorizon;
    for (double k : s.capacity) models_.push_back(make_model(model, k));
    std::size_t n = s.capacity.size();
    auto count = static_cast<std::size_t>(std::max(1, fleet.instances));
    // Instance 0 draws what a single proxy draws; the others draw their own streams.
    for (std::size_t k = 0; k < count; ++k)
      policy_rngs_.push_back(std::make_unique<Rng>(k == 0 ? mix(seed, 2) : mix(mix(seed, 2), k)));
    for (std::size_t k = 0; k < count; ++k) {
      switch (choice.kind) {
        case PolicyKind::sluice: {
          SluiceSettings ss = settings.sluice;
          ss.remembered.assign(n, std::nullopt);
          if (choice.remembered)
            for (std::size_t u = 0; u < n; ++u)
              ss.remembered[u] =
                  std::pair{std::max(1.0, ss.estimate.decrease * s.capacity[u]), s.capacity[u]};
          ss.phase = ss.heartbeat * static_cast<double>(k) / static_cast<double>(count);
          if (fleet.shared) {
            ss.fleet = this;
            ss.member = k + 1;
          }
          policies_.push_back(make_sluice(ss, n, s.jobs.size(), *this, *policy_rngs_[k]));
          break;
        }
        case PolicyKind::none:
          policies_.push_back(make_no_gating());
          break;
        case PolicyKind::static_cap:
          policies_.push_back(make_static_cap(settings.static_cap));
          break;
        case PolicyKind::aimd:
          policies_.push_back(make_aimd(settings.aimd, n));
          break;
        case PolicyKind::gradient:
          policies_.push_back(make_gradient(settings.gradient, n));
          break;
      }
    }
    r_.instances.resize(count);
    estimate_time_.assign(count, 0.0);
    for (std::size_t u = 0; u < n; ++u) ledgers_.emplace_back(admission::FleetLedger::Policy{});
    for (const Job& j : s.jobs) left_ += j.fixed ? 1 : 0;
  }

  RunResult go() {
    std::size_t next_job = 0;
    while (left_ > 0) {
      // The next event: an upstream's ending, a policy's clock, an arrival, a retry.
      double t_end = kNever;
      std::size_t up = 0;
      for (std::size_t u = 0; u < models_.size(); ++u)
        if (double t = models_[u]->next_end(); t < t_end) t_end = t, up = u;
      double t_timer = kNever;
      std::size_t timer = 0;
      for (std::size_t k = 0; k < policies_.size(); ++k)
        if (double t = policies_[k]->next_timer(); t < t_timer) t_timer = t, timer = k;
      double t_arrive = next_job < s_.jobs.size() ? s_.jobs[next_job].at : kNever;
      double t_retry = retries_.empty() ? kNever : retries_.top().at;
      double t = std::min({t_end, t_timer, t_arrive, t_retry});
      if (t > kHorizon || t == kNever) {
        observe(kHorizon);
        break;
      }
      observe(t);
      if (t_end == t) {
        end(models_[up]->finish_next());
      } else if (t_timer == t) {
        policies_[timer]->on_timer(t);
      } else if (t_arrive == t) {
        reqs_[next_job].first = t;
        if (s_.jobs[next_job].upstream == 0) ++demand_;
        attempt(next_job++, t);
      } else {
        auto r = retries_.top();
        retries_.pop();
        attempt(r.request, t);
      }
    }
    r_.drained = left_ == 0;
    r_.drain = r_.drained ? last_ : kHorizon;
    close_window();  // the last one ends at the drain
    for (std::size_t k = 0; k < policies_.size(); ++k)
      r_.instances[k].estimate = r_.drain > 0 ? estimate_time_[k] / r_.drain : 0;
    return std::move(r_);
  }

  void start(std::size_t i, double now) override {
    reqs_[i].started = now;
    ++r_.forwarded;
    ++r_.instances[reqs_[i].instance].forwarded;
    const Job& j = s_.jobs[i];
    models_[j.upstream]->start(i, j.work, now, model_rng_);
  }

  admission::FleetReply report(std::size_t u, const admission::FleetReport& r,
                               double now) override {
    auto reply = ledgers_[u].report(r, micros(now));
    if (reply.decreased)  // pushed to every other member at once
      for (std::size_t k = 0; k < policies_.size(); ++k)
        if (k + 1 != r.member)
          policies_[k]->pushed(u, reply.khat, reply.carrying, reply.epoch, now);
    return reply;
  }

  void refuse(std::size_t i, std::optional<double> retry_after, double now) override {
    ++r_.policy_refusals;
    ++r_.instances[reqs_[i].instance].policy_refusals;
    again(i, now + retry_after.value_or(kBackoff));
  }

 private:
  struct Req {
    double first = 0, started = 0;
    std::size_t instance = 0;  // of the current attempt
  };
  struct Retry {
    double at;
    std::uint64_t seq;
    std::size_t request;
    bool operator>(const Retry& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };

  Attempt attempt_of(std::size_t i) const {
    const Job& j = s_.jobs[i];
    return {i, j.upstream, j.lane};
  }

  // The load balancer: every attempt, a retry too, goes to one instance.
  std::size_t pick() {
    std::size_t n = policies_.size();
    if (fleet_.balance == Balance::random)
      return std::min(n - 1, static_cast<std::size_t>(balance_rng_.uniform() * n));
    std::size_t k = turn_;
    turn_ = (turn_ + 1) % n;
    return k;
  }

  void attempt(std::size_t i, double now) {
    std::size_t k = pick();
    reqs_[i].instance = k;
    ++r_.instances[k].attempts;
    Verdict v = policies_[k]->ask(attempt_of(i), now);
    if (v.answer == Answer::start) start(i, now);
    if (v.answer == Answer::refuse) refuse(i, v.retry_after, now);
  }

  void again(std::size_t i, double at) { retries_.push({at, seq_++, i}); }

  // The state since the last event held until `t`: the instances' estimates,
  // and the first upstream's in-flight count and its target, per band window.
  void observe(double t) {
    double dt = t - observed_;
    if (dt <= 0) return;
    for (std::size_t k = 0; k < policies_.size(); ++k)
      estimate_time_[k] += policies_[k]->estimate(0).value_or(0) * dt;
    double m = models_[0]->in_flight();
    double target = std::min(s_.capacity[0], static_cast<double>(demand_));
    while (observed_ < t) {
      double until = std::min(t, window_start_ + fleet_.window);
      window_.m += m * (until - observed_);
      window_.target += target * (until - observed_);
      observed_ = until;
      if (observed_ >= window_start_ + fleet_.window) close_window();
    }
  }

  // A window is in the band when its mean in-flight count is within band x K of its mean target.
  void close_window() {
    double length = observed_ - window_start_;
    if (length > 0) {
      if (std::abs(window_.m - window_.target) / length > fleet_.band * s_.capacity[0]) {
        r_.converge = observed_;
      } else {
        r_.in_band += length;
      }
    }
    window_ = {};
    window_start_ = observed_;
  }

  void end(const Ending& e) {
    std::size_t i = e.id;
    const Job& j = s_.jobs[i];
    InstanceResult& in = r_.instances[reqs_[i].instance];
    policies_[reqs_[i].instance]->ended(attempt_of(i), e, e.at - reqs_[i].started);
    if (e.status == 429) {
      ++r_.upstream_refusals;
      ++in.upstream_refusals;
      again(i, e.at + kBackoff);
    } else if (e.cut) {
      ++r_.cuts;
      again(i, e.at + kBackoff);
    } else {
      r_.latency[adm::index(j.lane)].push_back(e.at - reqs_[i].first);
      r_.tokens += j.work;
      in.tokens += j.work;
      if (j.upstream == 0) --demand_;
      if (j.fixed) {
        --left_;
        last_ = e.at;
      }
    }
  }

  const Scenario& s_;
  Fleet fleet_;
  std::vector<admission::FleetLedger> ledgers_;  // per upstream, with fleet_.shared
  Rng model_rng_, balance_rng_;
  std::vector<std::unique_ptr<Rng>> policy_rngs_;  // the policies hold references
  std::vector<std::unique_ptr<UpstreamModel>> models_;
  std::vector<std::unique_ptr<Policy>> policies_;
  std::vector<Req> reqs_;
  std::priority_queue<Retry, std::vector<Retry>, std::greater<>> retries_;
  std::uint64_t seq_ = 0;
  std::size_t left_ = 0;
  std::size_t turn_ = 0;
  double last_ = 0;
  // What observe() keeps.
  double observed_ = 0;
  std::vector<double> estimate_time_;
  int demand_ = 0;  // requests to the first upstream arrived and not completed
  double window_start_ = 0;
  struct {
    double m = 0, target = 0;  // integrals over the window so far
  } window_;
  RunResult r_;
};

}  // namespace

RunResult run_once(const Scenario& scenario, ModelKind model, const PolicyChoice& policy,
                   const Settings& settings, std::uint64_t seed, const Fleet& fleet) {
  return Run(scenario, model, policy, settings, seed, fleet).go();
}

double RunResult::refusal_share() const {
  return forwarded > 0 ? upstream_refusals / static_cast<double>(forwarded) : 0;
}

double RunResult::fairness() const {
  std::vector<double> x;
  for (const auto& in : instances) x.push_back(in.tokens);
  return jain(x);
}

double jain(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) sum += v, squares += v * v;
  if (squares <= 0) return 1;
  return sum * sum / (static_cast<double>(x.size()) * squares);
}

// ---------------------------------------------------------------- rows and tables

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

namespace {

Spread spread(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

// Run i's seed: every row of a table (policies and fleets) sees the same arrivals in run i.
std::uint64_t run_seed(const Options& o, ScenarioKind scenario, int i) {
  return mix(mix(o.seed, static_cast<std::uint64_t>(scenario)), static_cast<std::uint64_t>(i));
}

Scenario scenario_of(const Options& o, ScenarioKind scenario, std::uint64_t seed) {
  Rng arrivals(mix(seed, 0));
  return make_scenario(scenario, o.model, arrivals, o.quiet);
}

}  // namespace

Row run_row(ScenarioKind scenario, const PolicyChoice& policy, const Options& o) {
  Row row;
  row.policy = policy.label;
  row.runs = o.runs;
  std::vector<double> drain, r429, r503, cuts, goodput;
  std::array<std::vector<double>, adm::kLaneCount> p50, p99;
  for (int i = 0; i < o.runs; ++i) {
    std::uint64_t seed = run_seed(o, scenario, i);
    Scenario s = scenario_of(o, scenario, seed);
    RunResult r = run_once(s, o.model, policy, o.settings, seed);
    row.drained += r.drained ? 1 : 0;
    drain.push_back(r.drain);
    r429.push_back(r.upstream_refusals);
    r503.push_back(r.policy_refusals);
    cuts.push_back(r.cuts);
    goodput.push_back(r.goodput());
    for (std::size_t l = 0; l < adm::kLaneCount; ++l) {
      if (r.latency[l].empty()) continue;
      p50[l].push_back(percentile(r.latency[l], 0.5));
      p99[l].push_back(percentile(r.latency[l], 0.99));
    }
  }
  row.drain = spread(drain);
  row.upstream_refusals = spread(r429);
  row.policy_refusals = spread(r503);
  row.cuts = spread(cuts);
  row.goodput = spread(goodput);
  for (std::size_t l = 0; l < adm::kLaneCount; ++l) {
    if (!p50[l].empty()) row.p50[l] = spread(p50[l]).mean;
    if (!p99[l].empty()) row.p99[l] = spread(p99[l]).mean;
  }
  return row;
}

Table run_table(ScenarioKind scenario, const Options& o) {
  Table t;
  t.scenario = scenario;
  t.model = o.model;
  t.runs = o.runs;
  t.seed = o.seed;
  for (const auto& p : default_policies(scenario)) t.rows.push_back(run_row(scenario, p, o));
  return t;
}

std::vector<Table> simulate(const Options& o) {
  std::vector<Table> out;
  for (auto s : o.scenarios) out.push_back(run_table(s, o));
  return out;
}

std::string_view to_string(Balance balance) {
  return balance == Balance::random ? "random" : "round-robin";
}

std::optional<Balance> balance_from_string(std::string_view s) {
  for (auto b : {Balance::round_robin, Balance::random})
    if (to_string(b) == s) return b;
  return std::nullopt;
}

FleetRow run_fleet_row(ScenarioKind scenario, const Fleet& fleet, const Options& o) {
  FleetRow row;
  row.instances = fleet.instances;
  row.runs = o.runs;
  std::vector<double> drain, goodput, share, r429, r503, cuts, fair, sum, converge, band;
  std::vector<double> mean, low, high;
  for (int i = 0; i < o.runs; ++i) {
    std::uint64_t seed = run_seed(o, scenario, i);
    Scenario s = scenario_of(o, scenario, seed);
    RunResult r =
        run_once(s, o.model, {PolicyKind::sluice, "sluice", false}, o.settings, seed, fleet);
    row.drained += r.drained ? 1 : 0;
    drain.push_back(r.drain);
    goodput.push_back(r.goodput());
    share.push_back(r.refusal_share());
    r429.push_back(r.upstream_refusals);
    r503.push_back(r.policy_refusals);
    cuts.push_back(r.cuts);
    fair.push_back(r.fairness());
    std::vector<double> each;
    for (const auto& in : r.instances) each.push_back(in.estimate);
    Spread e = spread(each);
    sum.push_back(e.mean * static_cast<double>(each.size()));
    mean.push_back(e.mean);
    low.push_back(e.min);
    high.push_back(e.max);
    converge.push_back(r.converge);
    band.push_back(r.drain > 0 ? r.in_band / r.drain : 0);
  }
  row.drain = spread(drain);
  row.goodput = spread(goodput);
  row.refusal_share = spread(share);
  row.upstream_refusals = spread(r429);
  row.policy_refusals = spread(r503);
  row.cuts = spread(cuts);
  row.fairness = spread(fair);
  row.estimate_sum = spread(sum);
  row.estimate = {spread(mean).mean, spread(low).mean, spread(high).mean};
  row.converge = spread(converge);
  row.in_band = spread(band);
  return row;
}

FleetTable run_fleet_table(ScenarioKind scenario, const Options& o) {
  FleetTable t;
  t.scenario = scenario;
  t.model = o.model;
  t.runs = o.runs;
  t.seed = o.seed;
  t.balance = o.balance;
  t.shared = o.shared;
  Rng arrivals(0);
  t.capacity = make_scenario(scenario, o.model, arrivals, o.quiet).capacity.at(0);
  for (int n : o.instances) {
    Fleet f;
    f.instances = n;
    f.balance = o.balance;
    f.shared = o.shared;
    t.rows.push_back(run_fleet_row(scenario, f, o));
  }
  return t;
}

std::vector<FleetTable> simulate_fleet(const Options& o) {
  std::vector<FleetTable> out;
  for (auto s : o.scenarios) out.push_back(run_fleet_table(s, o));
  return out;
}

// ---------------------------------------------------------------- printing

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string minutes(double s) { return fmt("%.1f", s / 60); }

std::string spread_text(const Spread& s, bool time) {
  if (time) return minutes(s.mean) + " (" + minutes(s.min) + "-" + minutes(s.max) + ")";
  return fmt("%.1f", s.mean) + " (" + fmt("%.0f", s.min) + "-" + fmt("%.0f", s.max) + ")";
}

std::string pad(std::string s, std::size_t w) {
  // Column widths count characters, not bytes (the table is ASCII).
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

// The cells in columns two spaces apart, one line each.
std::string columns(const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::size_t> width;
  for (const auto& row : cells) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) line += pad(row[c], width[c] + 2);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string lane_text(const Row& r, std::size_t l) {
  if (!r.p50[l]) return "-";
  return minutes(*r.p50[l]) + " / " + minutes(*r.p99[l]);
}

}  // namespace

std::string format_text(const std::vector<Table>& tables) {
  std::string out;
  for (const Table& t : tables) {
    out += "scenario " + std::string(to_string(t.scenario)) + ", model " +
           std::string(to_string(t.model)) + ", " + std::to_string(t.runs) + " runs, seed " +
           std::to_string(t.seed) + "\n";
    // Lanes no row has requests of are left out.
    std::vector<std::size_t> lanes;
    for (std::size_t l = 0; l < adm::kLaneCount; ++l)
      if (std::any_of(t.rows.begin(), t.rows.end(),
                      [&](const Row& r) { return r.p50[l].has_value(); }))
        lanes.push_back(l);
    std::vector<std::vector<std::string>> cells;
    std::vector<std::string> head{"policy", "drain min", "refusals", "429s", "503s", "cuts"};
    for (auto l : lanes)
      head.push_back(std::string(adm::to_string(adm::kLanes[l])) + " p50/p99 min");
    head.push_back("goodput tok/s");
    cells.push_back(head);
    for (const Row& r : t.rows) {
      std::string drain = spread_text(r.drain, true);
      if (r.drained < r.runs) drain.insert(0, 1, '>');
      Spread total{r.upstream_refusals.mean + r.policy_refusals.mean,
                   r.upstream_refusals.min + r.policy_refusals.min,
                   r.upstream_refusals.max + r.policy_refusals.max};
      std::vector<std::string> row{r.policy,
                                   drain,
                                   fmt("%.1f", total.mean),
                                   spread_text(r.upstream_refusals, false),
                                   spread_text(r.policy_refusals, false),
                                   spread_text(r.cuts, false)};
      for (auto l : lanes) row.push_back(lane_text(r, l));
      row.push_back(fmt("%.0f", r.goodput.mean));
      cells.push_back(row);
    }
    out += columns(cells) + "\n";
  }
  out +=
      "drain: minutes until the scenario's fixed work completed, mean (min-max) over the runs,\n"
      "  \">\" when a run had not drained at 10 h. refusals: mean 429s + 503s per run.\n"
      "cuts: requests the upstream cut. latency: first arrival to completion, retries included,\n"
      "  each run's p50 / p99, averaged. goodput: completed tokens per second until the drain.";
  return out;
}

std::string format_text(const std::vector<FleetTable>& tables) {
  std::string out;
  for (const FleetTable& t : tables) {
    out += "scenario " + std::string(to_string(t.scenario)) + ", model " +
           std::string(to_string(t.model)) + ", " + std::to_string(t.runs) + " runs, seed " +
           std::to_string(t.seed) + ", sluice fleets" +
           (t.shared ? std::string(" sharing capacity") : "") + ", " +
           std::string(to_string(t.balance)) + ", K " + fmt("%.0f", t.capacity) + "\n";
    std::vector<std::vector<std::string>> cells;
    cells.push_back({"instances", "drain min", "429 share", "429s", "503s", "cuts", "goodput tok/s",
                     "fairness", "K^ per instance", "sum K^", "converge min", "in band"});
    for (const FleetRow& r : t.rows) {
      std::string drain = spread_text(r.drain, true);
      if (r.drained < r.runs) drain.insert(0, 1, '>');
      cells.push_back({std::to_string(r.instances), drain,
                       fmt("%.2f%%", 100 * r.refusal_share.mean) + " (" +
                           fmt("%.2f", 100 * r.refusal_share.min) + "-" +
                           fmt("%.2f", 100 * r.refusal_share.max) + ")",
                       spread_text(r.upstream_refusals, false),
                       spread_text(r.policy_refusals, false), spread_text(r.cuts, false),
                       fmt("%.0f", r.goodput.mean),
                       fmt("%.3f", r.fairness.mean) + " (" + fmt("%.3f", r.fairness.min) + ")",
                       fmt("%.1f", r.estimate.mean) + " (" + fmt("%.1f", r.estimate.min) + "-" +
                           fmt("%.1f", r.estimate.max) + ")",
                       fmt("%.1f", r.estimate_sum.mean), spread_text(r.converge, true),
                       fmt("%.0f%%", 100 * r.in_band.mean)});
    }
    out += columns(cells) + "\n";
  }
  out +=
      "Every attempt (retries too) goes to one instance, each with its own bulkheads and RNG.\n"
      "429 share: upstream 429s / requests forwarded, mean (min-max) over the runs, in %.\n"
      "fairness: Jain's index of per-instance goodput, mean (lowest run). K^ per instance: each\n"
      "  instance's time-weighted mean K^ on the first upstream, mean (lowest-highest instance),\n"
      "  averaged over the runs; sum K^: those added up. converge: the end of the last minute\n"
      "  whose mean in-flight count m at the first upstream was outside |m - min(K, demand)| <= " +
      fmt("%.2f", Fleet{}.band) +
      " K\n"
      "  (demand: requests to it arrived, not completed); in band: share of the run in band.";
  return out;
}

namespace {
// The JSON output's numbers and spreads.
std::string num(double v) { return fmt("%.3f", v); }
std::string sp(const Spread& s) {
  return "{\"mean\":" + num(s.mean) + ",\"min\":" + num(s.min) + ",\"max\":" + num(s.max) + "}";
}
}  // namespace

std::string format_json(const std::vector<Table>& tables) {
  std::string out = "[";
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const Table& t = tables[i];
    if (i) out += ",";
    out += "{\"scenario\":\"" + std::string(to_string(t.scenario)) + "\",\"model\":\"" +
           std::string(to_string(t.model)) + "\",\"runs\":" + std::to_string(t.runs) +
           ",\"seed\":" + std::to_string(t.seed) + ",\"rows\":[";
    for (std::size_t j = 0; j < t.rows.size(); ++j) {
      const Row& r = t.rows[j];
      if (j) out += ",";
      out += "{\"policy\":\"" + r.policy + "\",\"drained\":" + std::to_string(r.drained) +
             ",\"drain_s\":" + sp(r.drain) + ",\"upstream_refusals\":" + sp(r.upstream_refusals) +
             ",\"policy_refusals\":" + sp(r.policy_refusals) + ",\"cuts\":" + sp(r.cuts) +
             ",\"goodput_tokens_per_s\":" + sp(r.goodput) + ",\"latency_s\":{";
      for (std::size_t l = 0; l < adm::kLaneCount; ++l) {
        if (l) out += ",";
        out += "\"" + std::string(adm::to_string(adm::kLanes[l])) + "\":";
        out +=
            r.p50[l] ? "{\"p50\":" + num(*r.p50[l]) + ",\"p99\":" + num(*r.p99[l]) + "}" : "null";
      }
      out += "}}";
    }
    out += "]}";
  }
  out += "]\n";
  return out;
}

std::string format_json(const std::vector<FleetTable>& tables) {
  std::string out = "[";
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const FleetTable& t = tables[i];
    if (i) out += ",";
    out += "{\"scenario\":\"" + std::string(to_string(t.scenario)) + "\",\"model\":\"" +
           std::string(to_string(t.model)) + "\",\"runs\":" + std::to_string(t.runs) +
           ",\"seed\":" + std::to_string(t.seed) + ",\"balance\":\"" +
           std::string(to_string(t.balance)) + "\",\"capacity\":" + num(t.capacity) +
           ",\"fleet\":[";
    for (std::size_t j = 0; j < t.rows.size(); ++j) {
      const FleetRow& r = t.rows[j];
      if (j) out += ",";
      out += "{\"instances\":" + std::to_string(r.instances) +
             ",\"drained\":" + std::to_string(r.drained) + ",\"drain_s\":" + sp(r.drain) +
             ",\"upstream_refusal_share\":" + sp(r.refusal_share) +
             ",\"upstream_refusals\":" + sp(r.upstream_refusals) +
             ",\"policy_refusals\":" + sp(r.policy_refusals) + ",\"cuts\":" + sp(r.cuts) +
             ",\"goodput_tokens_per_s\":" + sp(r.goodput) + ",\"fairness\":" + sp(r.fairness) +
             ",\"estimate_per_instance\":" + sp(r.estimate) +
             ",\"estimate_sum\":" + sp(r.estimate_sum) + ",\"converge_s\":" + sp(r.converge) +
             ",\"in_band\":" + sp(r.in_band) + "}";
    }
    out += "]}";
  }
  out += "]\n";
  return out;
}

}  // namespace sluice::sim
