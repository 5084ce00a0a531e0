// Tenants through the real binary: the key read, hashed and logged, and
// fairness between tenants inside a lane at production shape (two I/O
// threads, two upstreams, a cold start). Counts measured in one run.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/load.hpp"
#include "tests/support/process.hpp"
#include "tests/support/redis.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Load;
using sluice::test::Redis;
using sluice::test::request;
using sluice::test::Response;
using sluice::test::Sluice;
using sluice::test::Tally;
using sluice::test::Upstream;

namespace {

// Sluice in front of `api` and `search`, every route in the bulk lane, with `extra`.
std::map<std::string, std::string> bulk_env(const Upstream& api, const Upstream& search,
                                            std::map<std::string, std::string> extra) {
  extra.emplace(
      "SLUICE_ROUTES",
      R"([{"prefix":"/search","upstream":"search","lane":"bulk"},)"
      R"({"prefix":"/jwt","lane":"bulk","tenant_key":"jwt:sub"},{"prefix":"/","lane":"bulk"}])");
  extra.emplace("SLUICE_THREADS", "2");
  return sluice::test::two_upstreams(api, search, std::move(extra));
}

// The fleet link as an instance's /admin/state shows it.
json redis_state(Sluice& s) {
  return json::parse(request(s.admin, "GET", "/admin/state").body)["tenants"]["redis"];
}

// What `clients` closed-loop clients per instance of tenant "shared" got
// admitted over about `seconds`, and how long that took, measured after a
// second of warm-up.
struct Admitted {
  double count = 0, seconds = 0;
  std::uint64_t failed = 0;
};
Admitted admitted(std::vector<Sluice*> fleet, std::chrono::seconds seconds) {
  Tally tally;
  Admitted out;
  {
    std::vector<std::unique_ptr<Load>> loads;
    for (auto* s : fleet)
      loads.push_back(std::make_unique<Load>(s->port, "/", 2, tally, 20ms,
                                             sluice::test::Headers{{"X-Api-Key", "shared"}}));
    std::this_thread::sleep_for(1s);
    const auto start = std::chrono::steady_clock::now();
    const auto before = tally.ok.load();
    std::this_thread::sleep_for(seconds);
    out.count = static_cast<double>(tally.ok.load() - before);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  out.failed = tally.failed;
  return out;
}

}  // namespace

TEST_CASE("a tenant's key is hashed before it is logged, by header, by route and by JWT claim",
          "[e2e][tenants]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, bulk_env(api, search, {{"SLUICE_TENANT_KEY", "header:X-Api-Key"}}));
  REQUIRE(request(s.port, "GET", "/", {{"X-Api-Key", "key-a"}}).status == 200);
  REQUIRE(request(s.port, "GET", "/search/x").status == 200);  // no key: the shared tenant
  // {"sub":"tenant-42"}, unsigned: read without verification (no SLUICE_TENANT_JWT_KEY).
  REQUIRE(request(s.port, "GET", "/jwt",
                  {{"Authorization", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ0ZW5hbnQtNDIifQ."},
                   {"X-Api-Key", "key-a"}})
              .status == 200);
  auto lines = s.wait_log_lines(3);
  REQUIRE(lines.size() == 3);
  std::map<std::string, json> by_path;
  for (const auto& l : lines) by_path[l["path"].get<std::string>()] = l;
  CHECK(by_path["/"]["tenant"] == "f10f781241e22466");  // SHA-256("key-a"), first 8 bytes
  CHECK_FALSE(by_path["/search/x"].contains("tenant"));
  CHECK(by_path["/jwt"]["tenant"] == "f71d3741b2bc6cc8");  // SHA-256("tenant-42"): the route's key
  for (const auto& l : lines) CHECK(l.dump().find("key-a") == std::string::npos);
}

TEST_CASE(
    "a tenant at ten times another's load in the bulk lane is refused itself while the other "
    "keeps its share",
    "[e2e][tenants][concurrency]") {
  // The api serves 4 at a time for 50 ms; the loud tenant's 20 clients want
  // five times that, the quiet tenant's 2 clients half of its fair share.
  Upstream api(kUpstream, {"--capacity", "4", "--service-ms", "50", "--threads", "2"});
  Upstream search(kUpstream);
  Sluice s(kSluice,
           bulk_env(api, search,
                    {{"SLUICE_TENANT_KEY", "header:X-Api-Key"}, {"SLUICE_ACCESS_LOG", "off"}}));
  Tally loud, quiet;
  {
    Load flood(s.port, "/", 20, loud, 1ms, {{"X-Api-Key", "loud"}});
    Load steady(s.port, "/", 2, quiet, 1ms, {{"X-Api-Key", "quiet"}});
    std::this_thread::sleep_for(6s);
  }
  INFO("loud: ok " << loud.ok << " queue_timeout " << loud.queue_timeout << " other 503 "
                   << loud.other_503 << " 429 " << loud.upstream_429 << " failed " << loud.failed
                   << "; quiet: ok " << quiet.ok << " queue_timeout " << quiet.queue_timeout
                   << " other 503 " << quiet.other_503 << " 429 " << quiet.upstream_429
                   << " failed " << quiet.failed);
  REQUIRE(quiet.answered() > 50);
  // The quiet tenant keeps nearly all of its share. With the estimate's law
  // of admission/estimate.hpp and the standing line, it lost 0-16 of about
  // 245 requests (queue_timeout) across runs (the most under ctest -j2, with
  // other tests beside it), 22 of 212 under TSan: a loss the core before it did
  // not have (99 % held), not yet traced to its rule. Without tenants it
  // loses 35-65 %.
  const double kept = sluice::test::kSanitized ? 0.85 : 0.90;
  CHECK(static_cast<double>(quiet.ok) >= kept * static_cast<double>(quiet.answered()));
  CHECK(loud.queue_timeout + loud.other_503 > loud.answered() / 4);  // the flood was refused
  CHECK(loud.ok > quiet.ok);  // and kept the rest of the capacity
  CHECK(loud.failed + quiet.failed == 0);
}

TEST_CASE("a tenant at its concurrency is answered 429 tenant_limit while another tenant is served",
          "[e2e][tenants][concurrency]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, bulk_env(api, search,
                             {{"SLUICE_TENANT_KEY", "header:X-Api-Key"},
                              {"SLUICE_TENANT_CONCURRENCY", "2"}}));
  auto slow = [&](const std::string& key) {
    return std::async(std::launch::async, [&s, key] {
      return request(s.port, "GET", "/slow?ms=1500", {{"X-Api-Key", key}});
    });
  };
  auto a1 = slow("a"), a2 = slow("a");
  // Both of a's requests are in flight once the upstream holds them.
  REQUIRE(sluice::test::eventually(
      [&] { return s.metric("sluice_lane_in_flight{lane=\"bulk\"}") == 2; }, 5s));
  Response third = request(s.port, "GET", "/", {{"X-Api-Key", "a"}});
  CHECK(third.status == 429);
  CHECK(third.header("X-Sluice-Reject") == "tenant_limit");
  CHECK_FALSE(third.header("Retry-After").empty());
  CHECK(json::parse(third.body)["reason"] == "tenant_limit");
  CHECK(request(s.port, "GET", "/", {{"X-Api-Key", "b"}}).status == 200);
  CHECK(a1.get().status == 200);
  CHECK(a2.get().status == 200);
  CHECK(request(s.port, "GET", "/", {{"X-Api-Key", "a"}}).status == 200);  // one ended
  CHECK(s.metric(R"(sluice_tenant_limited_total{limit="concurrency"})") == 1);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="tenant_limit"})") ==
      1);
}

TEST_CASE(
    "a tenant out of its rate is told when its next token comes, with the RateLimit fields, and a "
    "request refused by its lane keeps its token",
    "[e2e][tenants][concurrency]") {
  Upstream api(kUpstream), search(kUpstream);
  // Two tokens, one more every 100 s: what the counts show takes no timing.
  Sluice s(kSluice, bulk_env(api, search,
                             {{"SLUICE_TENANT_KEY", "header:X-Api-Key"},
                              {"SLUICE_TENANT_RATE", "0.01:2"},
                              {"SLUICE_HEAVY_MAX_IN_FLIGHT", "1"},
                              {"SLUICE_QUEUE_WINDOW", "heavy=0s"},
                              {"SLUICE_ROUTES",
                               R"([{"header":{"name":"X-Lane","value":"heavy"},"lane":"heavy"},)"
                               R"({"prefix":"/search","upstream":"search"},{"prefix":"/"}])"}}));
  // Another tenant holds the only heavy lease: a's heavy request is refused
  // by its lane (503 heavy_cap), after its tenant's bucket let it through.
  auto held = std::async(std::launch::async, [&s] {
    return request(s.port, "GET", "/slow?ms=1500", {{"X-Api-Key", "z"}, {"X-Lane", "heavy"}});
  });
  REQUIRE(sluice::test::eventually(
      [&] { return s.metric("sluice_lane_in_flight{lane=\"heavy\"}") == 1; }, 5s));
  Response capped = request(s.port, "GET", "/", {{"X-Api-Key", "a"}, {"X-Lane", "heavy"}});
  CHECK(capped.status == 503);
  CHECK(capped.header("X-Sluice-Reject") == "heavy_cap");
  CHECK(held.get().status == 200);
  // Its token came back: two requests go through, the third is out of tokens.
  CHECK(request(s.port, "GET", "/", {{"X-Api-Key", "a"}}).status == 200);
  CHECK(request(s.port, "GET", "/search/x", {{"X-Api-Key", "a"}}).status == 200);
  Response out = request(s.port, "GET", "/", {{"X-Api-Key", "a"}});
  CHECK(out.status == 429);
  CHECK(out.header("X-Sluice-Reject") == "tenant_limit");
  CHECK(std::stoi(out.header("Retry-After")) >= 100);  // a token per 100 s
  CHECK(out.header("RateLimit-Policy") == "\"tenant\";q=2;w=200");
  CHECK_THAT(out.header("RateLimit"), Catch::StartsWith("\"tenant\";r=0;t="));
  CHECK(request(s.port, "GET", "/", {{"X-Api-Key", "b"}}).status == 200);  // b has its own bucket
  CHECK(s.metric(R"(sluice_tenant_limited_total{limit="rate"})") == 1);
  CHECK(s.metric("sluice_tenants") == 3);
}

TEST_CASE("three instances hold a tenant to one rate for the fleet through Redis",
          "[e2e][tenants][redis][concurrency]") {
  Redis redis;
  Upstream api(kUpstream), search(kUpstream);
  const auto env = bulk_env(api, search,
                            {{"SLUICE_TENANT_KEY", "header:X-Api-Key"},
                             {"SLUICE_TENANT_RATE", "40"},
                             {"SLUICE_REDIS_URL", redis.url()},
                             {"SLUICE_REDIS_INTERVAL", "100ms"},
                             {"SLUICE_ACCESS_LOG", "off"}});
  Sluice a(kSluice, env), b(kSluice, env), c(kSluice, env);
  std::vector<Sluice*> fleet{&a, &b, &c};
  REQUIRE(sluice::test::eventually(
      [&] {
        for (auto* s : fleet)
          if (redis_state(*s)["instances"] != 3) return false;
        return true;
      },
      5s));
  // Six clients at about 250 requests a second against a rate of 40.
  auto got = admitted(fleet, 5s);
  INFO("admitted " << got.count << " in " << got.seconds << " s");
  CHECK(got.count <= 1.1 * 40 * got.seconds + 2);
  CHECK(got.count >= 0.5 * 40 * got.seconds);  // each instance admits its part, not nothing
  CHECK(got.failed == 0);
  // Each instance wrote its own total into the tenant's window hashes.
  auto keys = redis.cli({"--scan", "--pattern", "sluice:rate:*"});
  CHECK_FALSE(keys.empty());
}

TEST_CASE(
    "with Redis frozen no request waits on it and each instance holds a tenant to its share, and "
    "back the fleet's rate is in force again",
    "[e2e][tenants][redis][concurrency]") {
  Redis redis;
  Upstream api(kUpstream), search(kUpstream);
  const auto env = bulk_env(api, search,
                            {{"SLUICE_TENANT_KEY", "header:X-Api-Key"},
                             {"SLUICE_TENANT_RATE", "40"},
                             {"SLUICE_REDIS_URL", redis.url()},
                             {"SLUICE_ACCESS_LOG", "off"}});
  Sluice a(kSluice, env), b(kSluice, env), c(kSluice, env);
  std::vector<Sluice*> fleet{&a, &b, &c};
  auto all = [&](bool up) {
    return sluice::test::eventually(
        [&] {
          for (auto* s : fleet) {
            auto r = redis_state(*s);
            if (r["up"] != up || r["instances"] != 3) return false;
          }
          return true;
        },
        5s);
  };
  REQUIRE(all(true));
  redis.pause();
  REQUIRE(all(false));  // each fell back on its own (its round went unanswered)
  auto down = admitted(fleet, 3s);
  INFO("Redis frozen: admitted " << down.count << " in " << down.seconds << " s");
  CHECK(down.failed == 0);  // every request answered: none waited on Redis
  // A third of the rate each, and at most a third of a bucket each to start.
  CHECK(down.count <= 1.1 * 40 * down.seconds + 40);
  CHECK(down.count >= 0.5 * 40 * down.seconds);
  CHECK(a.metric(R"(sluice_redis_up)") == 0);
  CHECK(a.metric(R"(sluice_redis_reconciles_total{result="failed"})") > 0);

  redis.resume();
  REQUIRE(all(true));
  auto back = admitted(fleet, 3s);
  INFO("Redis back: admitted " << back.count << " in " << back.seconds << " s");
  CHECK(back.count <= 1.1 * 40 * back.seconds + 2);
  CHECK(back.count >= 0.5 * 40 * back.seconds);
  CHECK(back.failed == 0);
}

TEST_CASE("two tenants flooding one lane are served in proportion to their weights",
          "[e2e][tenants][concurrency]") {
  Upstream api(kUpstream, {"--capacity", "4", "--service-ms", "50", "--threads", "2"});
  Upstream search(kUpstream);
  Sluice s(kSluice, bulk_env(api, search,
                             {{"SLUICE_TENANT_KEY", "header:X-Api-Key"},
                              {"SLUICE_TENANT_WEIGHTS", "heavy-user=3"},
                              {"SLUICE_ACCESS_LOG", "off"}}));
  Tally three, one;
  {
    Load a(s.port, "/", 10, three, 1ms, {{"X-Api-Key", "heavy-user"}});
    Load b(s.port, "/", 10, one, 1ms, {{"X-Api-Key", "light-user"}});
    std::this_thread::sleep_for(6s);
  }
  INFO("weight 3: ok " << three.ok << " refused " << three.queue_timeout << "; weight 1: ok "
                       << one.ok << " refused " << one.queue_timeout);
  REQUIRE(one.ok > 20);
  const double ratio = static_cast<double>(three.ok) / static_cast<double>(one.ok);
  CHECK(ratio >= 2.0);
  CHECK(ratio <= 4.5);
}
