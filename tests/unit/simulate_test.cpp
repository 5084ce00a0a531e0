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

Options options(int runs, std::uint64_t seed = 1) {
  Options o;
  o.runs = runs;
  o.seed = seed;
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
