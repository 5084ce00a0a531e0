// Upstream resilience through the real binary, with several real upstream
// processes on loopback: alternatives, closures and probes, pins, budgets.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using Catch::Detail::Approx;
using nlohmann::json;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

std::string hosts(const Upstream& a, const Upstream& b) {
  return "a=127.0.0.1:" + std::to_string(a.port) + ";b=127.0.0.1:" + std::to_string(b.port);
}

// A port nothing listens on (connections to it are refused).
std::uint16_t dead_port() {
  Upstream probe(kUpstream);
  return probe.port;  // stopped when `probe` goes
}

}  // namespace

TEST_CASE(
    "an upstream stopped mid-load: its requests move to the alternative, one probe per interval "
    "finds it back",
    "[e2e][resilience]") {
  auto a = std::make_unique<Upstream>(kUpstream);
  const auto a_port = a->port;
  Upstream b(kUpstream);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", hosts(*a, b)},
                     {"SLUICE_THREADS", "2"},
                     {"SLUICE_PROBE_EVERY", "500ms"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/","upstream":"a","alternatives":["b"]}])"}});
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0}, on_b{0}, posts_ok{0}, posts_failed{0};
  std::vector<std::thread> load;
  // Two clients POST (not idempotent): only a request already on its way to the
  // dead upstream may fail: the one in flight at the kill, and one written to a
  // pooled connection (each thread has its own pool) before the kill's close
  // reached Sluice. At most two each; a POST that kept going to the dead
  // upstream, or was not moved to the alternative, would fail by the hundred.
  for (int i = 0; i < 2; ++i)
    load.emplace_back([&] {
      while (!stop) {
        try {
          auto r = request(s.port, "POST", "/echo", {}, "payload", 5s);
          (r.status == 200 ? posts_ok : posts_failed)++;
        } catch (...) {
          posts_failed++;
        }
      }
    });
  for (int i = 0; i < 4; ++i)
    load.emplace_back([&] {
      while (!stop) {
        try {
          auto r = request(s.port, "GET", "/slow?ms=5", {}, {}, 5s);
          (r.status == 200 ? ok : failed)++;
          if (r.header("X-Upstream-Port") == std::to_string(b.port)) on_b++;
        } catch (...) {
          failed++;
        }
      }
    });
  REQUIRE(eventually([&] { return ok > 50; }, 10s));
  a.reset();  // SIGKILL: connections reset, the port refuses
  REQUIRE(
      eventually([&] { return s.metric(R"(sluice_upstream_closed{upstream="a"})") == 1; }, 10s));
  auto probes_before = s.metric(R"(sluice_upstream_probes_total{upstream="a",result="failed"})");
  std::this_thread::sleep_for(3s);
  auto probes =
      s.metric(R"(sluice_upstream_probes_total{upstream="a",result="failed"})") - probes_before;
  int on_b_while_down = on_b;
  // Restart on the same port: the next probe reopens it.
  a = std::make_unique<Upstream>(
      kUpstream, std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(a_port)});
  bool back =
      eventually([&] { return s.metric(R"(sluice_upstream_closed{upstream="a"})") == 0; }, 5s);
  stop = true;
  for (auto& t : load) t.join();

  CHECK(failed == 0);  // idempotent requests: none lost
  CHECK(posts_failed <= 4);
  CHECK(posts_ok > 0);
  CHECK(on_b_while_down > 0);
  // About one probe per 500 ms while down: 3 s gives ~6 (not one per request).
  CHECK(probes >= 2);
  CHECK(probes <= 10);
  CHECK(back);
  CHECK(s.metric(R"(sluice_upstream_fallbacks_total{from="a",to="b",why="closed"})") >= 1);
  CHECK(request(s.port, "GET", "/").header("X-Upstream-Port") == std::to_string(a_port));
}

TEST_CASE("a declared quota status closes the upstream and a 429 does not", "[e2e][resilience]") {
  Upstream a(kUpstream);
  Upstream b(kUpstream);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", hosts(a, b)},
                     {"SLUICE_CLOSE_STATUSES", "403"},
                     {"SLUICE_PROBE_EVERY", "1h"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/","upstream":"a","alternatives":["b"]}])"}});
  CHECK(request(s.port, "GET", "/status/429").status == 429);
  CHECK(s.metric(R"(sluice_upstream_closed{upstream="a"})") == 0);
  CHECK(request(s.port, "GET", "/").header("X-Upstream-Port") == std::to_string(a.port));
  // The 429 left a one seat; the last request gives it back once logged, just
  // after its client has the answer: until then the next would move to b.
  REQUIRE(
      eventually([&] { return s.metric(R"(sluice_lane_in_flight{lane="standard"})") == 0; }, 2s));
  CHECK(request(s.port, "GET", "/status/403").status == 403);  // the client gets the answer
  CHECK(s.metric(R"(sluice_upstream_closed{upstream="a"})") == 1);
  auto moved = request(s.port, "GET", "/");
  CHECK(moved.status == 200);
  CHECK(moved.header("X-Upstream-Port") == std::to_string(b.port));
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["starving"][0]["upstream"] == "a");  // a closed upstream comes first
  CHECK(state["upstreams"][0]["closed"] == true);
}

TEST_CASE("a pinned route waits for its upstream and gets pool_closed while it is closed",
          "[e2e][resilience]") {
  Upstream b(kUpstream);
  auto port = dead_port();
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(port) +
                                              ";b=127.0.0.1:" + std::to_string(b.port)},
                     {"SLUICE_PROBE_EVERY", "20s"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/","upstream":"a","pin":true}])"}});
  CHECK(request(s.port, "GET", "/").status == 502);  // every host refuses: closed
  auto r = request(s.port, "GET", "/");
  CHECK(r.status == 503);
  CHECK(r.header("X-Sluice-Reject") == "pool_closed");
  int retry = std::stoi(r.header("Retry-After"));
  CHECK(retry >= 1);
  CHECK(retry <= 30);  // until the next probe, in the standard band
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="standard",outcome="shed",reason="pool_closed"})") ==
      1);
}

TEST_CASE("a connect refused before anything was sent moves even a POST to the alternative",
          "[e2e][resilience]") {
  Upstream b(kUpstream);
  auto port = dead_port();
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(port) +
                                              ";b=127.0.0.1:" + std::to_string(b.port)},
                     {"SLUICE_ROUTES", R"([{"prefix":"/","upstream":"a","alternatives":["b"]}])"}});
  auto r = request(s.port, "POST", "/echo", {}, "payload");
  CHECK(r.status == 200);
  CHECK(r.body == "payload");
  CHECK(r.header("X-Upstream-Port") == std::to_string(b.port));
  CHECK(s.metric(R"(sluice_upstream_fallbacks_total{from="a",to="b",why="connect_failed"})") == 1);
}

TEST_CASE("the budget reserve stops bulk borrowing first when the upstream's quota runs low",
          "[e2e][resilience]") {
  Upstream a(kUpstream);
  Sluice s(kSluice,
           {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(a.port)},
            {"SLUICE_THREADS", "1"},
            {"SLUICE_BULKHEAD_SEED", "20"},
            {"SLUICE_RETRY_AFTER", "bulk=1s:180s"},
            {"SLUICE_ROUTES", R"([{"header":{"name":"X-Lane","value":"bulk"},"lane":"bulk"},)"
                              R"({"prefix":"/","lane":"standard"}])"}});
  // The upstream says 20 % of its quota is left for the next minute.
  CHECK(request(s.port, "GET", "/status/200?ratelimit=100,20,60").status == 200);
  json state;
  REQUIRE(eventually(
      [&] {
        state = json::parse(request(s.admin, "GET", "/admin/state").body);
        return state["upstreams"][0]["budget_remaining"].is_number();
      },
      2s));
  CHECK(state["upstreams"][0]["budget_remaining"].get<double>() == Approx(0.2));
  // Hold slots with slow requests: bulk's floor (2 of 20) still starts, its
  // borrowing stops at its 30 % reserve; standard (reserve 5 %) borrows on.
  std::vector<std::jthread> held;
  auto slow = [&](bool bulk) {
    held.emplace_back([&s, bulk] {
      sluice::test::Headers h;
      if (bulk) h.emplace_back("X-Lane", "bulk");
      request(s.port, "GET", "/slow?ms=1500", h, {}, 10s);
    });
  };
  slow(true);
  slow(true);
  CHECK(eventually([&] { return s.metric(R"(sluice_lane_in_flight{lane="bulk"})") == 2; }, 5s));
  auto bulk = request(s.port, "GET", "/", {{"X-Lane", "bulk"}});
  CHECK(bulk.status == 503);
  CHECK(bulk.header("X-Sluice-Reject") == "budget");
  // Told when the quota window resets (RateLimit-Reset: 60 s), plus jitter
  // that only adds: not the lane's 1 s floor, not the queue rule's 0 s.
  const int retry =
      std::stoi(bulk.header("Retry-After").empty() ? "-1" : bulk.header("Retry-After"));
  CHECK(retry >= 55);
  CHECK(retry <= 60 + 12);
  CHECK(
      s.metric(R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="budget"})") ==
      1);
  for (int i = 0; i < 12; ++i) slow(false);
  CHECK(
      eventually([&] { return s.metric(R"(sluice_lane_in_flight{lane="standard"})") == 12; }, 5s));
}

TEST_CASE(
    "an upstream closed while only an alternative is probed and reopened through the route that "
    "falls back to it",
    "[e2e][resilience]") {
  Upstream b(kUpstream);
  auto port = dead_port();
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(port) +
                                              ";b=127.0.0.1:" + std::to_string(b.port)},
                     {"SLUICE_THREADS", "1"},
                     {"SLUICE_CLOSE_STATUSES", "403"},
                     {"SLUICE_PROBE_EVERY", "200ms"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/status","upstream":"b"},)"
                                       R"({"prefix":"/","upstream":"a","alternatives":["b"]}])"}});
  CHECK(request(s.port, "GET", "/status/403").status == 403);  // b closes
  REQUIRE(s.metric(R"(sluice_upstream_closed{upstream="b"})") == 1);
  // a is dead (closed after its first refused connect); its requests fall back
  // to b, whose probe goes with one of them and reopens it.
  bool served = eventually([&] { return request(s.port, "GET", "/").status == 200; }, 5s);
  CHECK(served);
  // The probe's outcome is taken when its exchange ends, just after its client
  // has the answer.
  CHECK(eventually([&] { return s.metric(R"(sluice_upstream_closed{upstream="b"})") == 0; }, 2s));
  CHECK(s.metric(R"(sluice_upstream_probes_total{upstream="b",result="ok"})") >= 1);
}

TEST_CASE("one exhausted upstream holds back no other: each has its own bulkhead", "[e2e][lanes]") {
  Upstream a(kUpstream, {"--capacity", "2", "--service-ms", "20"});
  Upstream b(kUpstream);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", hosts(a, b)},
                     {"SLUICE_THREADS", "1"},
                     {"SLUICE_ROUTES",
                      R"([{"prefix":"/b","upstream":"b"},{"prefix":"/","upstream":"a"}])"}});
  std::atomic<bool> stop{false};
  std::vector<std::thread> flood;
  for (int i = 0; i < 8; ++i)
    flood.emplace_back([&] {
      while (!stop) {
        try {
          request(s.port, "GET", "/slow?ms=20", {}, {}, 5s);
        } catch (...) {
        }
      }
    });
  // a's estimate shrinks (the views are published every heartbeat, 50 ms).
  bool shrunk = eventually(
      [&] {
        return s.metric(R"(sluice_upstream_exhausted_total{upstream="a",why="refused"})") >= 1 &&
               s.metric(R"(sluice_upstream_capacity_estimate{upstream="a"})") > 0 &&
               s.metric(R"(sluice_upstream_capacity_estimate{upstream="a"})") < 4;
      },
      10s);
  int ok = 0;
  for (int i = 0; i < 20; ++i) ok += request(s.port, "GET", "/b/x").status == 200 ? 1 : 0;
  std::this_thread::sleep_for(100ms);  // two heartbeats
  auto estimate_b = s.metric(R"(sluice_upstream_capacity_estimate{upstream="b"})");
  // b's answers were counted in b's own bulkhead, not in a's.
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["upstreams"][1]["name"] == "b");
  CHECK(state["upstreams"][1]["successes"].get<int>() >= 20);
  CHECK(state["upstreams"][1]["exhausted"] == false);
  stop = true;
  for (auto& t : flood) t.join();
  CHECK(shrunk);
  CHECK(ok == 20);
  CHECK(s.metric(R"(sluice_upstream_exhausted_total{upstream="b",why="refused"})") == 0);
  CHECK(s.metric(R"(sluice_upstream_carrying_capacity{upstream="b"})") == 0);  // never measured
  CHECK(estimate_b >= 4);  // not shrunk by a's refusals
}
