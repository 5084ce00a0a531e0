#pragma once
// The policy simulator: discrete events on a virtual clock (seconds), the
// scenarios' requests against modelled upstreams (sim/model.hpp) through one
// admission policy (sim/policy.hpp).
//
// A run: every request arrives at its time and asks the policy. Started, it
// runs in its upstream's model until that ends it. A clean (or slow) answer
// completes it; a 429 or a cut sends its client back after kBackoff; a
// refusal by the policy sends it back after the Retry-After it was given, or
// after kBackoff when the policy gives none. Requests are retried until they
// complete or the horizon ends the run. A run ends when every request of the
// scenario's fixed work has completed (its drain time); periodic requests
// arrive until then.
//
// Each row runs `runs` seeded runs; run i of every row sees the same arrivals
// (common random numbers), so rows differ by their policy only.
//
// Threading: none. The same options give the same bytes.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "admission/lane.hpp"
#include "sim/model.hpp"
#include "sim/policy.hpp"

namespace sluice::sim {

inline constexpr double kBackoff = 10;  // s: a client's wait after a refusal with no Retry-After
inline constexpr double kHorizon = 10 * 3600;  // s: a run that has not drained by then stops

enum class ScenarioKind : std::uint8_t { burst, idle, isolation, step, review };
inline constexpr std::array<ScenarioKind, 5> kScenarios{ScenarioKind::burst, ScenarioKind::idle,
                                                        ScenarioKind::isolation, ScenarioKind::step,
                                                        ScenarioKind::review};
std::string_view to_string(ScenarioKind kind);
std::optional<ScenarioKind> scenario_from_string(std::string_view s);
std::optional<ModelKind> model_from_string(std::string_view s);

// One request of a scenario.
struct Job {
  double at = 0;
  Lane lane = Lane::standard;
  std::size_t upstream = 0;
  double work = 0;    // tokens
  bool fixed = true;  // part of the work the drain time waits for (else periodic)
};

struct Scenario {
  ScenarioKind kind = ScenarioKind::burst;
  std::vector<std::string> upstreams;  // names
  std::vector<double> capacity;        // K (or c) per upstream
  std::vector<Job> jobs;               // in arrival order
};

// The scenario's requests for one run. `quiet` drops the isolation scenario's
// flood (its other work alone, for comparison).
Scenario make_scenario(ScenarioKind kind, ModelKind model, Rng& rng, bool quiet = false);

// One row's policy.
struct PolicyChoice {
  PolicyKind kind = PolicyKind::sluice;
  std::string label;
  bool remembered = false;  // sluice: every upstream's estimate already measured (K̂ = decrease x K)
};
std::vector<PolicyChoice> default_policies(ScenarioKind kind);

struct Settings {
  SluiceSettings sluice;
  StaticSettings static_cap;
  AimdSettings aimd;
  GradientSettings gradient;
};

struct RunResult {
  double drain = 0;  // s; kHorizon when it did not drain
  bool drained = false;
  int upstream_refusals = 0;  // 429s
  int policy_refusals = 0;    // 503s of the policy
  int cuts = 0;
  double tokens = 0;  // of completed requests, by the drain
  std::array<std::vector<double>, admission::kLaneCount> latency;  // s, first arrival to completion
  double goodput() const { return drain > 0 ? tokens / drain : 0; }
};

RunResult run_once(const Scenario& scenario, ModelKind model, const PolicyChoice& policy,
                   const Settings& settings, std::uint64_t seed);

struct Spread {
  double mean = 0, min = 0, max = 0;
};

struct Row {
  std::string policy;
  int runs = 0, drained = 0;
  Spread drain, upstream_refusals, policy_refusals, cuts, goodput;
  // Per lane: the mean over runs of each run's p50 and p99 (none: no requests).
  std::array<std::optional<double>, admission::kLaneCount> p50, p99;
};

struct Table {
  ScenarioKind scenario = ScenarioKind::burst;
  ModelKind model = ModelKind::provider;
  int runs = 0;
  std::uint64_t seed = 0;
  std::vector<Row> rows;
};

struct Options {
  std::vector<ScenarioKind> scenarios{kScenarios.begin(), kScenarios.end()};
  ModelKind model = ModelKind::provider;
  int runs = 10;
  std::uint64_t seed = 1;
  Settings settings;
  bool quiet = false;  // the isolation scenario without its flood
};

Row run_row(ScenarioKind scenario, const PolicyChoice& policy, const Options& o);
Table run_table(ScenarioKind scenario, const Options& o);
std::vector<Table> simulate(const Options& o);

std::string format_text(const std::vector<Table>& tables);
std::string format_json(const std::vector<Table>& tables);

// p in [0, 1] of v (nearest rank); v need not be sorted.
double percentile(std::vector<double> v, double p);

}  // namespace sluice::sim
