// A fleet sharing each upstream's capacity through a real redis-server
// (admission/fleet.hpp, proxy/fleet_script.hpp): real processes at production
// shape (two I/O threads, two upstreams, cold), clients spread evenly over
// the instances. Counts measured in one run.
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/load.hpp"
#include "tests/support/redis.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Load;
using sluice::test::Redis;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Tally;
using sluice::test::Upstream;

namespace {

// The fleet as an instance's /admin/state shows it, for the api upstream.
json fleet_of(Sluice& s) {
  auto f = json::parse(request(s.admin, "GET", "/admin/state").body)["fleet"];
  return f.is_null() ? f : f["upstreams"]["api"];
}

std::map<std::string, std::string> fleet_env(const Upstream& api, const Upstream& search,
                                             const Redis& redis, const std::string& sharing) {
  return sluice::test::two_upstreams(api, search,
                                     {{"SLUICE_THREADS", "2"},
                                      {"SLUICE_REDIS_URL", redis.url()},
                                      {"SLUICE_REDIS_INTERVAL", "100ms"},
                                      {"SLUICE_FLEET_CAPACITY", sharing},
                                      {"SLUICE_ACCESS_LOG", "off"}});
}

bool all_members(std::vector<Sluice*>& fleet, int n, const std::string& source) {
  return eventually(
      [&] {
        for (auto* s : fleet) {
          auto f = fleet_of(*s);
          if (f.is_null() || f["members"] != n || f["source"] != source) return false;
        }
        return true;
      },
      10s);
}

struct Counts {
  double ok = 0, upstream_429 = 0, failed = 0;
};

// Four clients on each instance for `warm`, then counted for `measured`.
Counts flood(std::vector<Sluice*>& fleet, std::chrono::milliseconds warm,
             std::chrono::milliseconds measured) {
  std::vector<std::unique_ptr<Tally>> tallies;
  std::vector<std::unique_ptr<Load>> loads;
  for (auto* s : fleet) {
    tallies.push_back(std::make_unique<Tally>());
    loads.push_back(std::make_unique<Load>(s->port, "/", 4, *tallies.back(), 5ms));
  }
  std::this_thread::sleep_for(warm);
  Counts before;
  for (auto& t : tallies) {
    before.ok += static_cast<double>(t->ok);
    before.upstream_429 += static_cast<double>(t->upstream_429);
  }
  std::this_thread::sleep_for(measured);
  Counts after;
  for (auto& t : tallies) {
    after.ok += static_cast<double>(t->ok);
    after.upstream_429 += static_cast<double>(t->upstream_429);
    after.failed += static_cast<double>(t->failed);
  }
  loads.clear();
  return {after.ok - before.ok, after.upstream_429 - before.upstream_429, after.failed};
}

}  // namespace

TEST_CASE(
    "three instances share an upstream of two slots through Redis: its 429s stay under 2 % of "
    "what they forward, where estimating alone they overrun it",
    "[e2e][fleet][redis][concurrency]") {
  Redis redis;
  Upstream api(kUpstream, {"--capacity", "2", "--service-ms", "20", "--threads", "2"});
  Upstream search(kUpstream);
  double shared_429 = 0, alone_429 = 0;
  {
    const auto env = fleet_env(api, search, redis, "on");
    Sluice a(kSluice, env), b(kSluice, env), c(kSluice, env);
    std::vector<Sluice*> fleet{&a, &b, &c};
    REQUIRE(all_members(fleet, 3, "fleet"));
    auto got = flood(fleet, 2s, 4s);
    shared_429 = got.upstream_429 / std::max(1.0, got.ok + got.upstream_429);
    INFO("shared: ok " << got.ok << ", upstream 429s " << got.upstream_429);
    CHECK(got.ok > 100);
    CHECK(shared_429 < 0.02);
    CHECK(got.failed == 0);
    // No instance holds more than the fleet's slots.
    int held = 0;
    for (auto* s : fleet) held += fleet_of(*s)["share"].get<int>();
    CHECK(held <= 3);  // floor(K̂), K̂ within a probe of 2
  }
  {
    const auto env = fleet_env(api, search, redis, "off");
    Sluice a(kSluice, env), b(kSluice, env), c(kSluice, env);
    std::vector<Sluice*> fleet{&a, &b, &c};
    CHECK(fleet_of(a).is_null());
    auto got = flood(fleet, 2s, 4s);
    alone_429 = got.upstream_429 / std::max(1.0, got.ok + got.upstream_429);
    INFO("alone: ok " << got.ok << ", upstream 429s " << got.upstream_429);
  }
  // Each alone keeps at least one slot: three slots on an upstream of two.
  CHECK(alone_429 > 5 * shared_429);
  CHECK(alone_429 > 0.05);
}

TEST_CASE(
    "Redis frozen: no request waits on it and each instance estimates alone from its share, "
    "back, the fleet's share again, and an instance killed, its share returns to the others",
    "[e2e][fleet][redis][concurrency]") {
  Redis redis;
  Upstream api(kUpstream, {"--capacity", "8", "--service-ms", "20", "--threads", "2"});
  Upstream search(kUpstream);
  const auto env = fleet_env(api, search, redis, "on");
  std::optional<Sluice> a(std::in_place, kSluice, env), b(std::in_place, kSluice, env),
      c(std::in_place, kSluice, env);
  std::vector<Sluice*> fleet{&*a, &*b, &*c};
  REQUIRE(all_members(fleet, 3, "fleet"));
  {
    std::vector<std::unique_ptr<Tally>> tallies;
    std::vector<std::unique_ptr<Load>> loads;
    for (auto* s : fleet) {
      tallies.push_back(std::make_unique<Tally>());
      loads.push_back(std::make_unique<Load>(s->port, "/", 4, *tallies.back(), 5ms));
    }
    std::this_thread::sleep_for(2s);
    redis.pause();
    // Past the grace (3 intervals) each estimates alone, from its share.
    REQUIRE(eventually(
        [&] {
          for (auto* s : fleet)
            if (fleet_of(*s)["source"] != "local") return false;
          return true;
        },
        5s));
    CHECK(a->metric(R"(sluice_fleet_local{upstream="api"})") == 1);
    std::this_thread::sleep_for(1s);
    redis.resume();
    REQUIRE(all_members(fleet, 3, "fleet"));
    loads.clear();
    double ok = 0, failed = 0;
    for (auto& t : tallies) {
      ok += static_cast<double>(t->ok);
      failed += static_cast<double>(t->failed);
    }
    INFO("ok " << ok << ", failed " << failed);
    CHECK(ok > 100);
    CHECK(failed == 0);  // every request answered while Redis was frozen: none waited on it
  }
  // c killed: its heartbeat expires and its share goes to a and b.
  Tally ta, tb;
  Load la(a->port, "/", 6, ta, 5ms), lb(b->port, "/", 6, tb, 5ms);
  c.reset();
  fleet = {&*a, &*b};
  REQUIRE(all_members(fleet, 2, "fleet"));
  REQUIRE(eventually(
      [&] {
        return fleet_of(*a)["share"].get<int>() + fleet_of(*b)["share"].get<int>() >=
               static_cast<int>(fleet_of(*a)["khat"].get<double>());
      },
      5s));
}
