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
// A fleet: N instances of the proxy in front of the same upstreams, each with
// its own policy (its own bulkheads and estimates, its own RNG, its heartbeat
// out of step with the others'), and a load balancer that sends every attempt,
// a retry as much as a first arrival, to one of them: round robin over the
// attempts, or a uniform draw from its own RNG. One instance is the single
// proxy exactly. Its figures (estimate and converge: on the scenario's first upstream):
//   429 share    upstream 429s / requests forwarded to the upstreams
//   fairness     Jain's index of per-instance goodput, (sum x)^2 / (N sum x^2):
//                1 when every instance completes the same tokens, 1/N when one does all
//   estimate     each instance's K̂, time-weighted mean over the run
//   converge     the end of the last window (60 s, from t = 0; the last ends at
//                the drain) whose mean in-flight count m at the upstream is outside
//                the band |m - min(K, d)| <= band K, d the window's mean number of
//                requests to it that have arrived and not completed (those waiting
//                to retry included): at capacity while demand lasts, then at
//                demand. Means of windows, so a wave of answers ending together
//                and coming back within the window is not an exit.
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

// How the fleet's load balancer picks an instance for each attempt.
enum class Balance : std::uint8_t { round_robin, random };
std::string_view to_string(Balance balance);
std::optional<Balance> balance_from_string(std::string_view s);

struct Fleet {
  int instances = 1;
  Balance balance = Balance::round_robin;
  double band = 0.25;   // of K: the convergence band
  double window = 60;   // s: in-flight counts are judged by their mean over a window
  bool shared = false;  // the instances share each upstream's capacity (admission/fleet.hpp)
};

// What one instance of a fleet did in a run.
struct InstanceResult {
  int attempts = 0;           // the balancer sent it
  int forwarded = 0;          // it started at an upstream
  int upstream_refusals = 0;  // 429s to what it forwarded
  int policy_refusals = 0;    // its own 503s
  double tokens = 0;          // completed through it, by the drain
  double estimate = 0;        // K̂ on the first upstream, time-weighted mean (0: no estimate)
};

struct RunResult {
  double drain = 0;  // s; kHorizon when it did not drain
  bool drained = false;
  int upstream_refusals = 0;  // 429s
  int policy_refusals = 0;    // 503s of the policy
  int cuts = 0;
  int forwarded = 0;  // requests started at an upstream, retries included
  double tokens = 0;  // of completed requests, by the drain
  std::array<std::vector<double>, admission::kLaneCount> latency;  // s, first arrival to completion
  std::vector<InstanceResult> instances;                           // one per instance of the fleet
  double converge = 0;  // s: the first upstream's in-flight count stays in the band from here on
  double in_band = 0;   // s of the run in windows in the band
  double goodput() const { return drain > 0 ? tokens / drain : 0; }
  // Upstream 429s per request forwarded (0: none forwarded).
  double refusal_share() const;
  // Jain's index of the instances' goodput.
  double fairness() const;
};

// Jain's fairness index of x: (sum x)^2 / (n sum x^2); 1 for an empty or all-zero x.
double jain(const std::vector<double>& x);

RunResult run_once(const Scenario& scenario, ModelKind model, const PolicyChoice& policy,
                   const Settings& settings, std::uint64_t seed, const Fleet& fleet = {});

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

// One fleet size under Sluice, over the runs. Spreads are over the runs.
struct FleetRow {
  int instances = 1;
  int runs = 0, drained = 0;
  Spread drain, goodput, refusal_share, upstream_refusals, policy_refusals, cuts, fairness;
  Spread estimate_sum;       // the instances' mean K̂ added up
  Spread converge, in_band;  // s, and the fraction of the run in the band
  // Per instance, means over the runs of the mean, the lowest and the highest instance's K̂.
  Spread estimate;
};

struct FleetTable {
  ScenarioKind scenario = ScenarioKind::burst;
  ModelKind model = ModelKind::provider;
  int runs = 0;
  std::uint64_t seed = 0;
  Balance balance = Balance::round_robin;
  bool shared = false;
  double capacity = 0;  // K (or c) of the first upstream
  std::vector<FleetRow> rows;
};

struct Options {
  std::vector<ScenarioKind> scenarios{kScenarios.begin(), kScenarios.end()};
  ModelKind model = ModelKind::provider;
  int runs = 10;
  std::uint64_t seed = 1;
  Settings settings;
  bool quiet = false;  // the isolation scenario without its flood
  // Fleet sizes: one fleet table per scenario instead of the policies (empty: the policies).
  std::vector<int> instances;
  Balance balance = Balance::round_robin;
  bool shared = false;  // the fleets share capacity (SLUICE_FLEET_CAPACITY)
};

Row run_row(ScenarioKind scenario, const PolicyChoice& policy, const Options& o);
Table run_table(ScenarioKind scenario, const Options& o);
std::vector<Table> simulate(const Options& o);

// Run i of every fleet row sees the arrivals run i of run_row sees.
FleetRow run_fleet_row(ScenarioKind scenario, const Fleet& fleet, const Options& o);
FleetTable run_fleet_table(ScenarioKind scenario, const Options& o);
std::vector<FleetTable> simulate_fleet(const Options& o);

std::string format_text(const std::vector<Table>& tables);
std::string format_json(const std::vector<Table>& tables);
std::string format_text(const std::vector<FleetTable>& tables);
std::string format_json(const std::vector<FleetTable>& tables);

// p in [0, 1] of v (nearest rank); v need not be sorted.
double percentile(std::vector<double> v, double p);

}  // namespace sluice::sim
