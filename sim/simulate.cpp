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

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  Rng r(a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull));
  return r.next();
}

class Run final : public Driver {
 public:
  Run(const Scenario& s, ModelKind model, const PolicyChoice& choice, const Settings& settings,
      std::uint64_t seed)
      : s_(s), model_rng_(mix(seed, 1)), policy_rng_(mix(seed, 2)), reqs_(s.jobs.size()) {
    for (double k : s.capacity) models_.push_back(make_model(model, k));
    std::size_t n = s.capacity.size();
    switch (choice.kind) {
      case PolicyKind::sluice: {
        SluiceSettings ss = settings.sluice;
        ss.remembered.assign(n, std::nullopt);
        if (choice.remembered)
          for (std::size_t u = 0; u < n; ++u)
            ss.remembered[u] =
                std::pair{std::max(1.0, ss.estimate.decrease * s.capacity[u]), s.capacity[u]};
        policy_ = make_sluice(ss, n, s.jobs.size(), *this, policy_rng_);
        break;
      }
      case PolicyKind::none:
        policy_ = make_no_gating();
        break;
      case PolicyKind::static_cap:
        policy_ = make_static_cap(settings.static_cap);
        break;
      case PolicyKind::aimd:
        policy_ = make_aimd(settings.aimd, n);
        break;
      case PolicyKind::gradient:
        policy_ = make_gradient(settings.gradient, n);
        break;
    }
    for (const Job& j : s.jobs) left_ += j.fixed ? 1 : 0;
  }

  RunResult go() {
    std::size_t next_job = 0;
    while (left_ > 0) {
      // The next event: an upstream's ending, the policy's clock, an arrival, a retry.
      double t_end = kNever;
      std::size_t up = 0;
      for (std::size_t u = 0; u < models_.size(); ++u)
        if (double t = models_[u]->next_end(); t < t_end) t_end = t, up = u;
      double t_timer = policy_->next_timer();
      double t_arrive = next_job < s_.jobs.size() ? s_.jobs[next_job].at : kNever;
      double t_retry = retries_.empty() ? kNever : retries_.top().at;
      double t = std::min({t_end, t_timer, t_arrive, t_retry});
      if (t > kHorizon || t == kNever) break;
      if (t_end == t) {
        end(models_[up]->finish_next());
      } else if (t_timer == t) {
        policy_->on_timer(t);
      } else if (t_arrive == t) {
        reqs_[next_job].first = t;
        attempt(next_job++, t);
      } else {
        auto r = retries_.top();
        retries_.pop();
        attempt(r.request, t);
      }
    }
    r_.drained = left_ == 0;
    r_.drain = r_.drained ? last_ : kHorizon;
    return std::move(r_);
  }

  void start(std::size_t i, double now) override {
    reqs_[i].started = now;
    const Job& j = s_.jobs[i];
    models_[j.upstream]->start(i, j.work, now, model_rng_);
  }

  void refuse(std::size_t i, std::optional<double> retry_after, double now) override {
    ++r_.policy_refusals;
    again(i, now + retry_after.value_or(kBackoff));
  }

 private:
  struct Req {
    double first = 0, started = 0;
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

  void attempt(std::size_t i, double now) {
    Verdict v = policy_->ask(attempt_of(i), now);
    if (v.answer == Answer::start) start(i, now);
    if (v.answer == Answer::refuse) refuse(i, v.retry_after, now);
  }

  void again(std::size_t i, double at) { retries_.push({at, seq_++, i}); }

  void end(const Ending& e) {
    std::size_t i = e.id;
    const Job& j = s_.jobs[i];
    policy_->ended(attempt_of(i), e, e.at - reqs_[i].started);
    if (e.status == 429) {
      ++r_.upstream_refusals;
      again(i, e.at + kBackoff);
    } else if (e.cut) {
      ++r_.cuts;
      again(i, e.at + kBackoff);
    } else {
      r_.latency[adm::index(j.lane)].push_back(e.at - reqs_[i].first);
      r_.tokens += j.work;
      if (j.fixed) {
        --left_;
        last_ = e.at;
      }
    }
  }

  const Scenario& s_;
  Rng model_rng_, policy_rng_;
  std::vector<std::unique_ptr<UpstreamModel>> models_;
  std::unique_ptr<Policy> policy_;
  std::vector<Req> reqs_;
  std::priority_queue<Retry, std::vector<Retry>, std::greater<>> retries_;
  std::uint64_t seq_ = 0;
  std::size_t left_ = 0;
  double last_ = 0;
  RunResult r_;
};

}  // namespace

RunResult run_once(const Scenario& scenario, ModelKind model, const PolicyChoice& policy,
                   const Settings& settings, std::uint64_t seed) {
  return Run(scenario, model, policy, settings, seed).go();
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

}  // namespace

Row run_row(ScenarioKind scenario, const PolicyChoice& policy, const Options& o) {
  Row row;
  row.policy = policy.label;
  row.runs = o.runs;
  std::vector<double> drain, r429, r503, cuts, goodput;
  std::array<std::vector<double>, adm::kLaneCount> p50, p99;
  for (int i = 0; i < o.runs; ++i) {
    std::uint64_t seed =
        mix(mix(o.seed, static_cast<std::uint64_t>(scenario)), static_cast<std::uint64_t>(i));
    Rng arrivals(mix(seed, 0));
    Scenario s = make_scenario(scenario, o.model, arrivals, o.quiet);
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
    std::vector<std::size_t> width(head.size(), 0);
    for (const auto& row : cells)
      for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    for (const auto& row : cells) {
      std::string line;
      for (std::size_t c = 0; c < row.size(); ++c) line += pad(row[c], width[c] + 2);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    out += "\n";
  }
  out +=
      "drain: minutes until the scenario's fixed work completed, mean (min-max) over the runs,\n"
      "  \">\" when a run had not drained at 10 h. refusals: mean 429s + 503s per run.\n"
      "cuts: requests the upstream cut. latency: first arrival to completion, retries included,\n"
      "  each run's p50 / p99, averaged. goodput: completed tokens per second until the drain.";
  return out;
}

std::string format_json(const std::vector<Table>& tables) {
  auto num = [](double v) { return fmt("%.3f", v); };
  auto sp = [&](const Spread& s) {
    return "{\"mean\":" + num(s.mean) + ",\"min\":" + num(s.min) + ",\"max\":" + num(s.max) + "}";
  };
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

}  // namespace sluice::sim
