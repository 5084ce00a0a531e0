// The policy simulator: its models, and the relations its runs establish
// between Sluice's admission core and the other policies (sim/).
#include "sim/simulate.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "sim/model.hpp"

using namespace sluice::sim;
using Catch::Detail::Approx;
using sluice::admission::index;

namespace {

// The scenarios' clients are seed 000's agent loops, which Sluice tells with
// its opt-in bulk band (SLUICE_RETRY_AFTER=bulk=120s:180s): retried every
// second, a burst of hour-long rounds is refused thousands of times more.
Options options(int runs, std::uint64_t seed = 1) {
  Options o;
  o.runs = runs;
  o.seed = seed;
  o.settings.sluice.retry[index(sluice::admission::Lane::bulk)] = {
      sluice::admission::Millis{120'000}, sluice::admission::Millis{180'000}};
  return o;
}

Row row(ScenarioKind s, PolicyKind kind, const Options& o, bool remembered = false) {
  return run_row(s, {kind, std::string(to_string(kind)), remembered}, o);
}

double refusals(const Row& r) { return r.upstream_refusals.mean + r.policy_refusals.mean; }

}  // namespace

TEST_CASE(
    "the provider model serves 61 tokens/s alone and 20 at twenty in flight, and never refuses at "
    "or below K",
    "[sim][model]") {
  Rng rng(7);
  auto alone = make_provider({});
  alone->start(0, 610, 0, rng);
  auto e = alone->finish_next();
  CHECK(e.at == Approx(10.0));
  CHECK(e.status == 200);
  CHECK_FALSE(e.slow);

  // Twenty in flight with K = 18: 61 / (1 + 19 / 9.54) = 20.4 tokens/s each.
  ProviderParams p;
  p.refuse_cap = 0;  // the rate only
  auto busy = make_provider(p);
  for (std::uint64_t i = 0; i < 20; ++i) busy->start(i, 2040, 0, rng);
  CHECK(busy->finish_next().at == Approx(2040 / (61 / (1 + 19 / (0.53 * 18)))));

  auto at_k = make_provider({});
  for (std::uint64_t i = 0; i < 18; ++i) at_k->start(i, 10'000, 0, rng);
  for (int i = 0; i < 18; ++i) CHECK(at_k->finish_next().status == 200);
}

TEST_CASE(
    "the provider model refuses above K within 15 s, cuts at 30 minutes and reports slow rounds",
    "[sim][model]") {
  Rng rng(11);
  int refused = 0, cut = 0;
  const int trials = 50;
  for (int t = 0; t < trials; ++t) {
    auto m = make_provider({});
    for (std::uint64_t i = 0; i < 40; ++i) m->start(i, 40'000, 0, rng);
    while (m->in_flight() > 0) {
      auto e = m->finish_next();
      if (e.status == 429) {
        ++refused;
        CHECK(e.at <= 15.0);
      }
      if (e.cut) {
        ++cut;
        CHECK(e.at == Approx(1800.0));
      }
    }
  }
  // Started 19th to 40th: min(0.9, (n - 18) / 10) each, 16.2 expected per trial.
  CHECK(refused / double(trials) == Approx(16.2).epsilon(0.1));
  CHECK(cut > 0);  // the survivors run at under 22 tokens/s: 40,000 take over 30 min

  ProviderParams p;
  p.refuse_cap = 0;
  auto slow = make_provider(p);
  for (std::uint64_t i = 0; i < 25; ++i) slow->start(i, 5'000, 0, rng);
  CHECK(slow->finish_next().slow);  // 61 / (1 + 24 / 9.54) = 17 tokens/s, under 20
}

TEST_CASE("the M/M/c model answers 429 at once above c in flight", "[sim][model]") {
  Rng rng(3);
  MmcParams p;
  p.servers = 2;
  auto m = make_mmc(p);
  m->start(0, 1000, 0, rng);
  m->start(1, 1000, 0, rng);
  m->start(2, 1000, 5, rng);
  auto e = m->finish_next();
  CHECK(e.id == 2);
  CHECK(e.status == 429);
  CHECK(e.at == 5.0);
  CHECK(m->in_flight() == 2);
}

TEST_CASE("the same seed prints the same bytes, another seed other ones", "[sim]") {
  Options o = options(2, 42);
  o.scenarios = {ScenarioKind::burst, ScenarioKind::idle};
  auto a = format_text(simulate(o)) + format_json(simulate(o));
  auto b = format_text(simulate(o)) + format_json(simulate(o));
  CHECK(a == b);
  o.seed = 43;
  CHECK(format_text(simulate(o)) != format_text(simulate(options(2, 42))));
}

TEST_CASE("sluice drains the burst with fewer refusals than no gating and sooner than a static cap",
          "[sim]") {
  auto o = options(4);
  auto sluice = row(ScenarioKind::burst, PolicyKind::sluice, o);
  auto none = row(ScenarioKind::burst, PolicyKind::none, o);
  auto cap = row(ScenarioKind::burst, PolicyKind::static_cap, o);
  CHECK(sluice.drained == o.runs);
  CHECK(none.drained == 0);  // hundreds in flight: every round is cut, again and again
  CHECK(refusals(sluice) < refusals(none));
  CHECK(sluice.upstream_refusals.mean * 100 < none.upstream_refusals.mean);
  CHECK(sluice.drain.mean < cap.drain.mean);
  CHECK(sluice.cuts.max == 0);
}

TEST_CASE("on the review burst sluice is ahead of every other policy in drain time and refusals",
          "[sim]") {
  auto o = options(3);
  auto sluice = row(ScenarioKind::review, PolicyKind::sluice, o);
  REQUIRE(sluice.drained == o.runs);
  for (auto kind :
       {PolicyKind::none, PolicyKind::static_cap, PolicyKind::aimd, PolicyKind::gradient}) {
    INFO(to_string(kind));
    auto other = row(ScenarioKind::review, kind, o);
    CHECK(sluice.drain.mean < other.drain.mean);
    CHECK(refusals(sluice) < refusals(other));
  }
  // Seed 001: seed-and-grow drains it "with a handful of refusals" from the upstream.
  CHECK(sluice.upstream_refusals.mean <= 5);
}

TEST_CASE(
    "a flood that exhausts one upstream holds back no standard work on another under sluice, and "
    "does under one shared cap",
    "[sim]") {
  auto o = options(3);
  auto quiet = o;
  quiet.quiet = true;
  auto p99 = [](const Row& r) {
    return r.p99[index(sluice::admission::Lane::standard)].value_or(0);
  };
  auto sluice_flood = row(ScenarioKind::isolation, PolicyKind::sluice, o);
  auto sluice_quiet = row(ScenarioKind::isolation, PolicyKind::sluice, quiet);
  CHECK(p99(sluice_flood) <= p99(sluice_quiet) * 1.05);
  auto cap_flood = row(ScenarioKind::isolation, PolicyKind::static_cap, o);
  auto cap_quiet = row(ScenarioKind::isolation, PolicyKind::static_cap, quiet);
  CHECK(p99(cap_flood) > p99(cap_quiet) * 1.5);
  CHECK(p99(cap_flood) > p99(sluice_flood) * 1.5);
}

TEST_CASE("a never-measured pool drains within two minutes of a remembered one", "[sim]") {
  auto o = options(5);
  auto fresh = row(ScenarioKind::idle, PolicyKind::sluice, o);
  auto remembered = row(ScenarioKind::idle, PolicyKind::sluice, o, true);
  REQUIRE(fresh.drained == o.runs);
  CHECK(fresh.drain.mean <= remembered.drain.mean + 120);
  CHECK(fresh.drain.max <= remembered.drain.max + 120);
}

// ---------------------------------------------------------------- fleets

namespace {

Fleet fleet(int instances, Balance balance = Balance::round_robin) {
  Fleet f;
  f.instances = instances;
  f.balance = balance;
  return f;
}

// Every figure a policy row and a fleet row both carry, compared exactly.
void check_same(const Row& single, const FleetRow& one) {
  CHECK(one.drained == single.drained);
  for (auto [a, b] : {std::pair{one.drain, single.drain},
                      {one.goodput, single.goodput},
                      {one.upstream_refusals, single.upstream_refusals},
                      {one.policy_refusals, single.policy_refusals},
                      {one.cuts, single.cuts}}) {
    CHECK(a.mean == b.mean);
    CHECK(a.min == b.min);
    CHECK(a.max == b.max);
  }
  CHECK(one.fairness.min == 1.0);
}

}  // namespace

TEST_CASE(
    "a simulated fleet's fairness is Jain's index: 1 for equal shares, 1/n when one takes all",
    "[sim][fleet]") {
  CHECK(jain({5, 5, 5, 5}) == Approx(1.0));
  CHECK(jain({7, 0, 0, 0}) == Approx(0.25));
  CHECK(jain({1, 2, 3}) == Approx(36.0 / 42.0));
  CHECK(jain({}) == 1.0);
  CHECK(jain({0, 0}) == 1.0);
}

TEST_CASE(
    "a simulated fleet of one instance is the single proxy, run for run, under either balance",
    "[sim][fleet]") {
  auto o = options(2);
  for (auto scenario : {ScenarioKind::burst, ScenarioKind::step}) {
    auto single = row(scenario, PolicyKind::sluice, o);
    for (auto balance : {Balance::round_robin, Balance::random}) {
      INFO(to_string(scenario) << " " << to_string(balance));
      check_same(single, run_fleet_row(scenario, fleet(1, balance), o));
    }
  }
}

TEST_CASE(
    "a simulated fleet of four sends every attempt to one instance and its instances' counts add "
    "up to the run's",
    "[sim][fleet]") {
  Rng arrivals(5);
  Scenario s = make_scenario(ScenarioKind::step, ModelKind::provider, arrivals);
  double work = 0;
  for (const Job& j : s.jobs) work += j.work;  // all fixed: every one completes by the drain
  for (auto balance : {Balance::round_robin, Balance::random}) {
    INFO(to_string(balance));
    auto r = run_once(s, ModelKind::provider, {PolicyKind::sluice, "sluice", false}, Settings{}, 9,
                      fleet(4, balance));
    REQUIRE(r.drained);
    REQUIRE(r.instances.size() == 4);
    int attempts = 0, forwarded = 0, r429 = 0, r503 = 0, least = 1 << 30, most = 0;
    double tokens = 0;
    for (const auto& in : r.instances) {
      attempts += in.attempts;
      forwarded += in.forwarded;
      r429 += in.upstream_refusals;
      r503 += in.policy_refusals;
      tokens += in.tokens;
      least = std::min(least, in.attempts);
      most = std::max(most, in.attempts);
      CHECK(in.estimate >= 1.0);  // K̂ never below one slot
      // Each attempt started at the upstream or was refused by the instance it went to, once.
      CHECK(in.attempts == in.forwarded + in.policy_refusals);
    }
    CHECK(attempts == r.forwarded + r.policy_refusals);
    CHECK(forwarded == r.forwarded);
    CHECK(r429 == r.upstream_refusals);
    CHECK(r503 == r.policy_refusals);
    CHECK(tokens == work);
    CHECK(r.tokens == work);
    CHECK(r.refusal_share() == Approx(static_cast<double>(r429) / forwarded));
    if (balance == Balance::round_robin) {
      CHECK(most - least <= 1);
    } else {
      CHECK(least > attempts / 8);  // a quarter each, give or take
      CHECK(most < attempts * 3 / 8);
    }
  }
}

TEST_CASE(
    "a simulated fleet's 429 share, fairness and convergence are what the hand count of a small "
    "run gives",
    "[sim][fleet]") {
  // Two instances without gating before an M/M/c upstream of two servers. At t = 0
  // requests 0 and 2 go to instance 0, 1 and 3 to instance 1: 0 and 1 are served,
  // 2 and 3 meet three and four in flight and get a 429 at once, come back at
  // t = 10 (instance 0, then 1) and are served. Request 4 arrives alone at t = 30
  // (instance 0). Instance 0 completes 1 + 1 + 4 tokens, instance 1 3 + 1.
  Scenario s;
  s.upstreams = {"api"};
  s.capacity = {2};
  for (double w : {1.0, 3.0, 1.0, 1.0}) s.jobs.push_back({0, Lane::standard, 0, w, true});
  s.jobs.push_back({30, Lane::standard, 0, 4, true});
  Fleet f = fleet(2);
  f.window = 1;  // judged second by second
  auto r = run_once(s, ModelKind::mmc, {PolicyKind::none, "none", false}, Settings{}, 3, f);
  REQUIRE(r.drained);
  CHECK(r.forwarded == 7);
  CHECK(r.upstream_refusals == 2);
  CHECK(r.refusal_share() == Approx(2.0 / 7.0));
  REQUIRE(r.instances.size() == 2);
  CHECK(r.instances[0].tokens == 6);
  CHECK(r.instances[1].tokens == 4);
  CHECK(r.instances[0].attempts == 4);  // a retry is an attempt of its own
  CHECK(r.instances[1].attempts == 3);
  CHECK(r.fairness() == Approx(100.0 / 104.0));
  // Until t = 10 the two refused wait to retry with nothing in flight: short of
  // min(K, demand) = 2 by more than 0.25 K. From then on in flight is what is
  // asked for: the retries, nothing while nothing is asked, request 4 alone.
  CHECK(r.converge == Approx(10.0));
  CHECK(r.in_band == Approx(r.drain - 10.0));
  CHECK(r.instances[0].estimate == 0);  // no gating keeps no estimate
}

TEST_CASE("a simulated fleet prints the same bytes for the same seed", "[sim][fleet]") {
  Options o = options(1, 42);
  o.scenarios = {ScenarioKind::idle};
  o.instances = {1, 4};
  o.balance = Balance::random;
  auto a = format_text(simulate_fleet(o)) + format_json(simulate_fleet(o));
  CHECK(a == format_text(simulate_fleet(o)) + format_json(simulate_fleet(o)));
  o.seed = 43;
  CHECK(format_text(simulate_fleet(o)) != format_text(simulate_fleet(options(1, 42))));
}

TEST_CASE(
    "sixteen simulated instances, each estimating on its own, overrun a pool of four that one "
    "instance drains",
    "[sim][fleet]") {
  auto o = options(1);
  auto one = run_fleet_row(ScenarioKind::isolation, fleet(1), o);
  auto sixteen = run_fleet_row(ScenarioKind::isolation, fleet(16), o);
  CHECK(one.drained == 1);
  CHECK(one.refusal_share.mean < 0.2);
  // Every instance keeps at least one slot: sixteen together, on an upstream of four.
  CHECK(sixteen.estimate.min >= 1.0);
  CHECK(sixteen.estimate_sum.mean >= 16.0);
  CHECK(sixteen.estimate_sum.mean == Approx(16 * sixteen.estimate.mean));
  CHECK(sixteen.refusal_share.mean > 0.5);
  CHECK(sixteen.drained == 0);
  CHECK(sixteen.in_band.mean < one.in_band.mean);
  CHECK(sixteen.fairness.mean < one.fairness.mean);
}
