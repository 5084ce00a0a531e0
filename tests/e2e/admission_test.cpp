// End-to-end tests of admission: real pressure (a slow upstream, a blocked
// event loop) raises the level in the real binary and bulk gets SPEC's 503.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

const std::string kRoutes =
    R"([{"name":"bulk","prefix":"/bulk","lane":"bulk"},{"name":"api","prefix":"/","lane":"standard"}])";

std::map<std::string, std::string> env_for(const Upstream& up,
                                           std::map<std::string, std::string> extra = {}) {
  extra.emplace("SLUICE_ROUTES", kRoutes);
  extra.emplace("SLUICE_TICK", "100ms");
  return sluice::test::upstream_env(up, std::move(extra));
}

// Checks SPEC's refusal shape; returns its Retry-After.
int check_refusal(const sluice::test::Response& res, std::string_view lane, int min_level) {
  CHECK(res.status == 503);
  CHECK(res.header("Content-Type") == "application/json");
  CHECK(res.header("X-Sluice-Reject") == "level");
  CHECK_FALSE(res.header("X-Request-Id").empty());
  auto retry = std::stoi(res.header("Retry-After"));
  auto body = json::parse(res.body);
  CHECK(body["error"] == "admission_rejected");
  CHECK(body["reason"] == "level");
  CHECK(body["lane"] == lane);
  CHECK(body["level"].get<int>() >= min_level);
  CHECK(body["retry_after_s"] == retry);
  CHECK(body["request_id"] == res.header("X-Request-Id"));
  return retry;
}

}  // namespace

TEST_CASE("requests waiting for upstream connections raise the level and bulk gets 503",
          "[e2e][admission][pressure][concurrency]") {
  Upstream up(kUpstream);
  Sluice s(kSluice,
           env_for(up, {{"SLUICE_THREADS", "1"}, {"SLUICE_UPSTREAM_MAX_CONNECTIONS", "2"}}));
  CHECK(request(s.port, "GET", "/bulk/upload").status == 200);  // admitted at level 0

  // Twelve clients on two upstream connections to a 300 ms upstream: each
  // request waits for a connection far longer than the level thresholds.
  std::atomic<bool> stop{false};
  std::vector<std::thread> load;
  for (int i = 0; i < 12; ++i)
    load.emplace_back([&] {
      while (!stop) {
        try {
          request(s.port, "GET", "/slow?ms=300", {}, {}, 20s);
        } catch (...) {
        }
      }
    });
  bool raised =
      eventually([&] { return s.metric(R"(sluice_upstream_level{upstream="api"})") >= 2; }, 15s);
  auto refused = request(s.port, "GET", "/bulk/upload");
  stop = true;
  for (auto& t : load) t.join();

  REQUIRE(raised);
  int retry = check_refusal(refused, "bulk", 2);
  CHECK(retry >= 1);  // bulk's band, 1s:180s: derived from the level's way down
  CHECK(retry <= 180);
  auto metrics = s.metrics();
  INFO(metrics);
  // The wait grows as the queue fills: the level climbs, each rise on upstream_wait.
  CHECK(metrics.find(R"(to="2",trigger="upstream_wait"})") != std::string::npos);
  CHECK(s.metric(
            R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="level"})") >= 1);
  CHECK(s.metric(R"(sluice_requests_total{code="503",lane="bulk"})") >= 1);
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["level"].get<int>() == 0);  // the process's own loops are calm
  CHECK(state["upstreams"][0]["level"].get<int>() >= 2);
  CHECK(state["upstreams"][0]["trigger"] == "upstream_wait");
  CHECK(state["lanes"]["bulk"]["shed"].get<int>() >= 1);
}

TEST_CASE("blocked event loops (every one) go straight to level 3 and bulk gets 503",
          "[e2e][admission][pressure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_THREADS", "2"}, {"SLUICE_DEBUG_ENDPOINTS", "true"}}));
  REQUIRE(request(s.admin, "POST", "/admin/debug/block?thread=0&ms=1600").status == 202);
  REQUIRE(request(s.admin, "POST", "/admin/debug/block?thread=1&ms=1600").status == 202);
  REQUIRE(eventually([&] { return s.metric("sluice_admission_level") == 3; }, 5s));
  CHECK(s.metric(R"(sluice_admission_level_changes_total{from="0",to="3",trigger="stall"})") == 1);
  // Requests accepted on the blocked loop wait for it; either way bulk is refused at level 3.
  auto res = request(s.port, "GET", "/bulk/x", {}, {}, 10s);
  int retry = check_refusal(res, "bulk", 3);
  CHECK(retry >= 1);  // bulk's band, 1s:180s
  auto lines = s.wait_log_lines(1);
  REQUIRE_FALSE(lines.empty());
  auto& last = lines.back();
  CHECK(last["decision"] == "shed");
  CHECK(last["reason"] == "level");
  CHECK(last["level"] == 3);
  CHECK(last["retry_after_s"] == retry);
}

TEST_CASE("a route's retry_after band replaces its lane's in a refusal's Retry-After",
          "[e2e][admission]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_ROUTES",
                                  R"([{"prefix":"/logs","lane":"bulk","retry_after":"7s:9s"},)"
                                  R"({"prefix":"/bulk","lane":"bulk"},{"prefix":"/"}])"}}));
  // Level 2 for a minute: bulk is refused, told when the pin ends (about 60 s).
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"1m","reason":"test"})")
              .status == 200);
  int logs = check_refusal(request(s.port, "GET", "/logs/x"), "bulk", 2);
  int bulk = check_refusal(request(s.port, "GET", "/bulk/x"), "bulk", 2);
  CHECK(logs >= 7);
  CHECK(logs <= 9);   // the route's cap, jitter included
  CHECK(bulk >= 50);  // the lane's band, 1s:180s, lets the derived wait through
}

TEST_CASE("observe mode decides and counts would_shed but forwards everything",
          "[e2e][admission][observe]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_ADMISSION_MODE", "observe"}}));
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"1m","reason":"test"})")
              .status == 200);
  auto res = request(s.port, "GET", "/bulk/x");
  CHECK(res.status == 200);
  CHECK(res.header("Retry-After").empty());
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="bulk",outcome="would_shed",reason="level"})") ==
      1);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="standard",outcome="admitted",reason="none"})") ==
      0);
  auto lines = s.wait_log_lines(2);  // the audit line, then the request
  REQUIRE(lines.size() >= 2);
  CHECK(lines.back()["decision"] == "would_shed");
  CHECK(lines.back()["reason"] == "level");
  CHECK(lines.back()["status"] == 200);
}

TEST_CASE("a pin selects a level at once, is audited, and automatic decisions resume from it",
          "[e2e][admission][pins]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_ADMIN_TOKEN", "t0k"},
                                 {"SLUICE_ADMISSION_HOLD", "300ms,300ms,300ms"}}));
  CHECK(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3})").status == 401);
  auto pinned = request(s.admin, "POST", "/admin/pins", {{"Authorization", "Bearer t0k"}},
                        R"({"level":3,"ttl":"10m","reason":"incident 42","who":"oncall"})");
  REQUIRE(pinned.status == 200);
  auto state = json::parse(pinned.body);
  CHECK(state["level"] == 3);
  CHECK(state["pin"]["reason"] == "incident 42");
  CHECK(request(s.port, "GET", "/bulk/x").status == 503);
  CHECK(request(s.admin, "POST", "/admin/pins", {{"Authorization", "Bearer t0k"}}, R"({"level":7})")
            .status == 400);
  CHECK(request(s.admin, "POST", "/admin/pins", {{"Authorization", "Bearer t0k"}}, R"({"levle":1})")
            .status == 400);

  // Removal leaves the level where the pin put it; calm readings then bring it down.
  REQUIRE(request(s.admin, "DELETE", "/admin/pins", {{"Authorization", "Bearer t0k"}}).status ==
          200);
  CHECK(json::parse(request(s.admin, "GET", "/admin/state").body)["pin"].is_null());
  CHECK(eventually([&] { return s.metric("sluice_admission_level") == 0; }, 5s));
  CHECK(request(s.port, "GET", "/bulk/x").status == 200);

  std::vector<json> audits;
  for (auto& l : s.log_lines())
    if (l.contains("audit")) audits.push_back(l);
  REQUIRE(audits.size() == 2);
  CHECK(audits[0]["audit"] == "pin");
  CHECK(audits[0]["from"] == 0);
  CHECK(audits[0]["to"] == 3);
  CHECK(audits[0]["reason"] == "incident 42");
  CHECK(audits[0]["who"].get<std::string>().starts_with("oncall"));
  CHECK(audits[1]["audit"] == "unpin");
  CHECK(audits[1]["from"] == 3);
  CHECK(audits[1]["to"] == 3);
}

TEST_CASE("the pins file pins the level when it changes and unpins when emptied",
          "[e2e][admission][pins]") {
  Upstream up(kUpstream);
  auto path = std::filesystem::temp_directory_path() /
              ("sluice-pins-" + std::to_string(::getpid()) + ".json");
  { std::ofstream(path) << "{}"; }
  Sluice s(kSluice, env_for(up, {{"SLUICE_PINS_FILE", path.string()}}));
  CHECK(s.metric("sluice_admission_level") == 0);
  { std::ofstream(path) << R"({"level":2,"ttl":"1h","reason":"game day"})"; }
  REQUIRE(eventually([&] { return s.metric("sluice_admission_level") == 2; }, 5s));
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["pin"]["who"] == "pins-file");
  CHECK(state["pin"]["reason"] == "game day");
  CHECK(request(s.port, "GET", "/bulk/x").status == 503);
  { std::ofstream(path) << "{}"; }
  REQUIRE(eventually([&] { return s.metric("sluice_admission_pinned") == 0; }, 5s));
  std::filesystem::remove(path);
}

TEST_CASE("admission mode off never refuses", "[e2e][admission]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_ADMISSION_MODE", "off"}}));
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3})").status == 200);
  CHECK(request(s.port, "GET", "/bulk/x").status == 200);
  CHECK(s.metric(
            R"(sluice_admission_decisions_total{lane="bulk",outcome="admitted",reason="none"})") ==
        1);
}

TEST_CASE("admin endpoints are never gated, even at level 3", "[e2e][admission]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up));
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3})").status == 200);
  CHECK(request(s.admin, "GET", "/healthz").status == 200);
  CHECK(request(s.admin, "GET", "/readyz").status == 200);  // shedding is not unreadiness
  CHECK(request(s.admin, "GET", "/metrics").status == 200);
}

TEST_CASE("the tick log replays through sluice replay to the levels the proxy decided",
          "[e2e][admission][replay]") {
  Upstream up(kUpstream);
  auto path = std::filesystem::temp_directory_path() /
              ("sluice-ticks-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  std::map<std::string, std::string> env{{"SLUICE_TICK_LOG", path.string()},
                                         {"SLUICE_ADMISSION_HOLD", "300ms,300ms,300ms"},
                                         {"SLUICE_DEBUG_ENDPOINTS", "true"}};
  {
    Sluice s(kSluice, env_for(up, env));
    request(s.port, "GET", "/bulk/a");
    REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"400ms"})").status ==
            200);
    request(s.port, "GET", "/bulk/b");
    REQUIRE(
        request(s.admin, "POST", "/admin/pins", {}, R"({"level":1,"ttl":"700ms","upstream":"api"})")
            .status == 200);
    for (int thread = 0; thread < 2; ++thread)  // every loop: the process stalls
      REQUIRE(request(s.admin, "POST",
                      "/admin/debug/block?thread=" + std::to_string(thread) + "&ms=1200")
                  .status == 202);
    std::this_thread::sleep_for(3s);
  }
  std::vector<json> recorded;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) recorded.push_back(json::parse(line));
  }
  REQUIRE(recorded.size() >= 10);
  int max_level = 0, max_upstream_level = 0;
  for (auto& r : recorded) {
    max_level = std::max(max_level, r["level"].get<int>());
    max_upstream_level = std::max(max_upstream_level, r["upstreams"]["api"]["level"].get<int>());
  }
  CHECK(max_level == 3);           // the stall
  CHECK(max_upstream_level == 1);  // its pin

  // The replay reads the log as written and decides the same levels, twice alike.
  auto replay_env = env;
  replay_env.erase("SLUICE_TICK_LOG");
  replay_env.erase("SLUICE_DEBUG_ENDPOINTS");
  std::string outputs[2];
  for (auto& out : outputs) {
    sluice::test::Process p({kSluice, "replay", path.string()}, replay_env);
    REQUIRE(p.wait_exit(10s) == 0);
    out = p.out();
  }
  CHECK(outputs[0] == outputs[1]);
  std::vector<json> replayed;
  std::istringstream lines(outputs[0]);
  for (std::string line; std::getline(lines, line);) replayed.push_back(json::parse(line));
  REQUIRE(replayed.size() == recorded.size() + 1);  // and the summary
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    INFO("tick " << i);
    CHECK(replayed[i]["level"] == recorded[i]["level"]);
    CHECK(replayed[i]["upstreams"]["api"]["level"] == recorded[i]["upstreams"]["api"]["level"]);
  }
  CHECK(replayed.back()["summary"]["max_level"] == 3);
  CHECK(replayed.back()["summary"]["upstreams"]["api"]["max_level"] == 1);
  std::filesystem::remove(path);
}

TEST_CASE("upstream timeouts are evidence for level 2", "[e2e][admission][pressure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "100ms"}}));
  // One timeout, then quiet: the 30 s window keeps it as evidence on every tick.
  CHECK(request(s.port, "GET", "/slow?ms=1000").status == 504);
  REQUIRE(
      eventually([&] { return s.metric(R"(sluice_upstream_level{upstream="api"})") == 2; }, 5s));
  CHECK(
      s.metric(
          R"(sluice_upstream_level_changes_total{upstream="api",from="0",to="2",trigger="upstream_timeout"})") ==
      1);
  CHECK(s.metric("sluice_admission_level") == 0);  // the process's own loops are calm
  CHECK(request(s.port, "GET", "/bulk/x").status == 503);
  CHECK(request(s.port, "GET", "/api").status == 200);  // standard is whole at level 2
}

TEST_CASE("rise_suppressed counts a streak the rise gate ended once, and one that rose not at all",
          "[e2e][admission][metrics]") {
  Upstream up(kUpstream);
  // An upstream's timeouts are evidence for its own level (the process's and
  // its family count the same way, on its loops' evidence).
  const std::string series =
      R"(sluice_upstream_rise_suppressed_total{upstream="api",to="2",trigger="upstream_timeout"})";
  const std::string rise =
      R"(sluice_upstream_level_changes_total{upstream="api",from="0",to="2",trigger="upstream_timeout"})";
  const std::string level = R"(sluice_upstream_level{upstream="api"})";
  // One upstream timeout is the only evidence: the other signals' thresholds and the
  // stall length are far above anything a loaded test host shows.
  std::map<std::string, std::string> env{{"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "100ms"},
                                         {"SLUICE_ADMISSION_LAG_MS", "5000,6000,7000"},
                                         {"SLUICE_ADMISSION_UPSTREAM_WAIT_MS", "5000,6000,7000"},
                                         {"SLUICE_ADMISSION_EMERGENCY_MS", "60000"}};
  SECTION("a streak shorter than the gate: counted once, not once per tick") {
    // The timeout is evidence for level 2 on about five 100 ms ticks; the gate needs 20.
    env["SLUICE_ADMISSION_TIMEOUT_PIN"] = "500ms";
    env["SLUICE_ADMISSION_RISE_TICKS"] = "20";
    Sluice s(kSluice, env_for(up, env));
    CHECK(s.metric(series) == 0);
    CHECK(request(s.port, "GET", "/slow?ms=1000").status == 504);
    REQUIRE(eventually([&] { return s.metric(series) >= 1; }, 5s));
    std::this_thread::sleep_for(1s);  // twice the window: nothing is left to count
    auto text = s.metrics();
    INFO(text);
    CHECK(Sluice::sample(text, series) == 1);
    CHECK(Sluice::sample(text, level) == 0);
    CHECK(Sluice::sample(text, rise) == 0);
    CHECK(Sluice::sample(
              text,
              R"(sluice_admission_rise_suppressed_total{to="2",trigger="upstream_timeout"})") == 0);
  }
  SECTION("a streak that reaches the rise: nothing") {
    Sluice s(kSluice, env_for(up, env));  // a 30 s window, a 3-tick gate
    CHECK(request(s.port, "GET", "/slow?ms=1000").status == 504);
    REQUIRE(eventually([&] { return s.metric(level) == 2; }, 5s));
    auto text = s.metrics();
    INFO(text);
    CHECK(Sluice::sample(text, rise) == 1);
    CHECK(Sluice::sample(text, series) == 0);
  }
}

TEST_CASE(
    "every access-log line carries the level published when its request arrived, on a kept-alive "
    "connection too",
    "[e2e][admission][pins]") {
  Upstream up(kUpstream);
  Sluice s(kSluice,
           sluice::test::upstream_env(
               up, {{"SLUICE_ROUTES", R"([{"name":"api","prefix":"/api","lane":"standard"}])"},
                    {"SLUICE_TICK", "100ms"}}));
  auto pin = [&](int level) {
    auto body = R"({"level":)" + std::to_string(level) + R"(,"ttl":"1m","reason":"test"})";
    REQUIRE(request(s.admin, "POST", "/admin/pins", {}, body).status == 200);
    REQUIRE(eventually([&] { return s.metric("sluice_admission_level") == level; }, 5s));
  };
  auto conn = sluice::test::Conn::open(s.port);
  pin(2);
  REQUIRE(conn.send("GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto first = conn.read_response();
  REQUIRE(first);
  CHECK(first->status == 200);
  pin(0);
  // No route: a 404 that never reaches admission, on the same connection.
  REQUIRE(conn.send("GET /elsewhere HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto second = conn.read_response();
  REQUIRE(second);
  CHECK(second->status == 404);
  // A malformed request after it: 400, still on the same connection.
  pin(1);
  REQUIRE(conn.send("GET /api/y HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n"));
  auto third = conn.read_response();
  REQUIRE(third);
  CHECK(third->status == 400);
  std::map<int, int> level_by_status;  // the access-log lines, not the pins' audit lines
  REQUIRE(eventually(
      [&] {
        for (auto& line : s.log_lines())
          if (line.contains("request_id") && line.contains("status"))
            level_by_status[line["status"]] = line["level"];
        return level_by_status.size() == 3;
      },
      5s));
  CHECK(level_by_status[200] == 2);
  CHECK(level_by_status[404] == 0);
  CHECK(level_by_status[400] == 1);
}
