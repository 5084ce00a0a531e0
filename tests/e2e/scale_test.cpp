// Admission at production shape: several I/O threads, several upstreams, a
// cold start. One capacity per upstream for the whole process, pressure
// scoped to what it measures, every worker accepting, observe mode deciding
// as enforce does. Counts measured in one run, generous bounds, no timings.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/load.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::eventually;
using sluice::test::kSanitized;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Load;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Tally;
using sluice::test::two_upstreams;
using sluice::test::Upstream;
using sluice::test::upstream_stats;

namespace {

const std::string kLaneRoutes = R"([{"header":{"name":"X-Lane","value":"bulk"},"lane":"bulk"},)"
                                R"({"header":{"name":"X-Lane","value":"heavy"},"lane":"heavy"},)"
                                R"({"prefix":"/","lane":"standard"}])";

double decisions(Sluice& s, const std::string& lane, const std::string& outcome,
                 const std::string& reason) {
  return s.metric(R"(sluice_admission_decisions_total{lane=")" + lane + R"(",outcome=")" + outcome +
                  R"(",reason=")" + reason + "\"}");
}

// The series of the metric family that `prefix` starts ("name{" or "name{label=..."), and
// their sum.
std::pair<int, double> family_sum(const std::string& metrics, const std::string& prefix) {
  int series = 0;
  double sum = 0;
  for (std::size_t at = metrics.find(prefix); at != std::string::npos;
       at = metrics.find(prefix, at + 1)) {
    ++series;
    sum += std::stod(metrics.substr(metrics.find(' ', at) + 1));
  }
  return {series, sum};
}

// How much a counter of an upstream's /stats grew between two readings.
double grew(const json& after, const json& before, const char* field) {
  return after[field].get<double>() - before[field].get<double>();
}

// Upstream `upstream`'s entry of /admin/state, read now.
json upstream_state(const Sluice& s, int upstream) {
  return json::parse(request(s.admin, "GET", "/admin/state").body)["upstreams"][upstream];
}

// Five seconds of the two loads, then every request answered, none lost.
void all_answered(Load& one, Load& other, Tally& a, Tally& b) {
  std::this_thread::sleep_for(5s);
  one.stop();
  other.stop();
  CHECK(a.ok + b.ok > 0);
  CHECK(a.failed + b.failed == 0);
  CHECK(a.other + b.other == 0);
}

}  // namespace

TEST_CASE(
    "eight threads hold an upstream that takes 4 at a time at 4 in flight (one probe above), "
    "with few of its 429s",
    "[e2e][scale][concurrency]") {
  Upstream up(kUpstream, {"--capacity", "4", "--service-ms", "20", "--threads", "2"});
  Sluice s(kSluice,
           sluice::test::upstream_env(up, {{"SLUICE_THREADS", "8"}, {"SLUICE_ACCESS_LOG", "off"}}));
  Tally tally;
  Load load(s.port, "/", 12, tally);  // three times what the upstream takes
  std::this_thread::sleep_for(3s);    // past slow start and the first "too much"
  const auto before = json::parse(request(up.port, "GET", "/stats?reset_max=1").body);
  std::this_thread::sleep_for(3s);
  const auto after = upstream_stats(up);
  load.stop();

  const double forwarded = after["requests"].get<double>() - before["requests"].get<double>();
  const double refused = after["rejected"].get<double>() - before["rejected"].get<double>();
  INFO("forwarded " << forwarded << ", the upstream's 429s " << refused << ", highest offered "
                    << after["max_offered"] << "; clients: ok " << tally.ok << " queue_timeout "
                    << tally.queue_timeout << " other 503 " << tally.other_503 << " failed "
                    << tally.failed << "; estimate "
                    << s.metric(R"(sluice_upstream_capacity_estimate{upstream="api"})"));
  REQUIRE(forwarded > 50);
  CHECK(after["max_offered"].get<int>() <= 5);
  CHECK(refused < 0.05 * forwarded);
  CHECK(tally.failed == 0);
}

TEST_CASE("observe and enforce over the same load make the same decisions, under the same names",
          "[e2e][scale][concurrency]") {
  // At a pinned level 2 bulk is refused by its factor (0) and standard admitted
  // (1); heavy (factor 1 here) meets a cap of 2 leases while 6 ask at once.
  auto run = [](const std::string& mode) {
    Upstream up(kUpstream);
    Sluice s(kSluice, sluice::test::upstream_env(up, {{"SLUICE_THREADS", "2"},
                                                      {"SLUICE_ADMISSION_MODE", mode},
                                                      {"SLUICE_ROUTES", kLaneRoutes},
                                                      {"SLUICE_HEAVY_MAX_IN_FLIGHT", "2"},
                                                      {"SLUICE_QUEUE_WINDOW", "heavy=300ms"},
                                                      {"SLUICE_LANE_FACTORS", "heavy=1,1,1,1"}}));
    std::map<int, int> statuses;
    {
      std::vector<std::jthread> heavy;
      std::mutex m;
      for (int i = 0; i < 6; ++i)
        heavy.emplace_back([&] {
          auto res = request(s.port, "GET", "/slow?ms=1500", {{"X-Lane", "heavy"}}, {}, 10s);
          std::lock_guard lock(m);
          ++statuses[res.status];
        });
    }
    REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"reason":"test"})").status ==
            200);
    for (int i = 0; i < 10; ++i) {
      ++statuses[request(s.port, "GET", "/", {{"X-Lane", "bulk"}}).status];
      ++statuses[request(s.port, "GET", "/").status];
    }
    std::map<std::string, double> counts;
    for (std::string lane : {"bulk", "standard", "heavy"}) {
      counts[lane + " admitted"] = decisions(s, lane, "admitted", "none");
      for (std::string reason : {"level", "queue_timeout", "heavy_cap", "budget", "reserved"})
        counts[lane + " refused " + reason] =
            decisions(s, lane, "shed", reason) + decisions(s, lane, "would_shed", reason);
    }
    counts["shed"] = 0;
    for (std::string lane : {"bulk", "standard", "heavy"})
      for (std::string reason : {"level", "heavy_cap"})
        counts["shed"] += decisions(s, lane, "shed", reason);
    return std::pair(counts, statuses);
  };
  auto [enforce, enforce_statuses] = run("enforce");
  auto [observe, observe_statuses] = run("observe");
  CHECK(enforce["bulk refused level"] == 10);
  CHECK(enforce["standard admitted"] == 10);
  CHECK(enforce["heavy admitted"] == 2);
  CHECK(enforce["heavy refused heavy_cap"] == 4);
  CHECK(enforce_statuses[503] == 14);
  // The same decisions; observe refused nobody.
  auto same = enforce;
  same["shed"] = 0;
  for (const auto& [name, n] : same) {
    INFO(name);
    CHECK(observe[name] == n);
  }
  CHECK(observe_statuses[200] == 26);
}

TEST_CASE("a stalled worker does not stop the others from accepting and serving new connections",
          "[e2e][scale][concurrency]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, sluice::test::upstream_env(up, {{"SLUICE_THREADS", "2"},
                                                    {"SLUICE_DEBUG_ENDPOINTS", "true"},
                                                    {"SLUICE_ACCESS_LOG", "off"}}));
  for (int blocked = 0; blocked < 2; ++blocked) {
    INFO("blocked worker " << blocked);
    REQUIRE(request(s.admin, "POST",
                    "/admin/debug/block?thread=" + std::to_string(blocked) + "&ms=4000")
                .status == 202);
    std::this_thread::sleep_for(200ms);  // the block has begun
    // New connections, each one request, all while the worker is stalled: the
    // other accepts and serves them (one that waited for the stalled worker
    // would answer only after the block, past the 2 s allowed).
    const auto start = std::chrono::steady_clock::now();
    int ok = 0;
    for (int i = 0; i < 20; ++i) {
      try {
        ok += request(s.port, "GET", "/", {}, {}, 2s).status == 200;
      } catch (const std::runtime_error&) {
      }
    }
    CHECK(ok == 20);
    CHECK(std::chrono::steady_clock::now() - start < 3800ms);
    std::this_thread::sleep_for(4s);  // the block is over
  }
}

TEST_CASE(
    "an upstream that times out sheds only what is bound to it: the other's lanes are all served "
    "and its level stays 0",
    "[e2e][scale][concurrency]") {
  Upstream good(kUpstream), slow(kUpstream);
  Sluice s(kSluice,
           {{"SLUICE_UPSTREAMS", "good=127.0.0.1:" + std::to_string(good.port) +
                                     ";slow=127.0.0.1:" + std::to_string(slow.port)},
            {"SLUICE_THREADS", "2"},
            {"SLUICE_TICK", "200ms"},
            {"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "300ms"},
            {"SLUICE_ROUTES", R"([{"prefix":"/slow","upstream":"slow"},)"
                              R"({"header":{"name":"X-Lane","value":"bulk"},"lane":"bulk"},)"
                              R"({"prefix":"/","lane":"standard"}])"}});
  // The slow upstream answers after 2 s: every request to it times out (504).
  std::vector<std::jthread> timing_out;
  std::atomic<int> gateway_timeouts{0};
  std::atomic<bool> stop{false};
  for (int i = 0; i < 2; ++i)
    timing_out.emplace_back([&] {
      while (!stop) gateway_timeouts += request(s.port, "GET", "/slow?ms=2000").status == 504;
    });
  REQUIRE(
      eventually([&] { return s.metric(R"(sluice_upstream_level{upstream="slow"})") >= 2; }, 10s));
  // Meanwhile both lanes bound to the good upstream are served, bulk too
  // (whose factor at level 2 is 0: a process-wide level 2 would refuse it all).
  int sent = 0, ok = 0;
  double good_level = 0;
  for (int i = 0; i < 40; ++i) {
    sluice::test::Headers h;
    if (i % 2 == 0) h.emplace_back("X-Lane", "bulk");
    ok += request(s.port, "GET", "/", h).status == 200;
    ++sent;
    good_level = std::max(good_level, s.metric(R"(sluice_upstream_level{upstream="good"})"));
    std::this_thread::sleep_for(20ms);
  }
  const double slow_level = s.metric(R"(sluice_upstream_level{upstream="slow"})");
  const double process_level = s.metric("sluice_admission_level");
  stop = true;
  timing_out.clear();
  INFO("slow level " << slow_level << ", process level " << process_level << ", 504s "
                     << gateway_timeouts);
  CHECK(ok == sent);
  CHECK(good_level == 0);
  CHECK(process_level == 0);
  CHECK(slow_level >= 2);
  CHECK(gateway_timeouts > 0);
}

TEST_CASE("an SSE stream cut for idling is not an upstream timeout", "[e2e][scale]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, sluice::test::upstream_env(
                        up, {{"SLUICE_SSE_IDLE_TIMEOUT", "200ms"}, {"SLUICE_TICK", "100ms"}}));
  // Events 1 s apart: the stream is cut after its first event.
  auto conn = sluice::test::Conn::open(s.port);
  REQUIRE(conn.send(sluice::test::format_request("GET", "/sse?n=3&interval_ms=1000", s.port,
                                                 {{"Accept", "text/event-stream"}})));
  sluice::test::BodyReader reader(conn);
  auto head = reader.read_head(5s);
  REQUIRE(head);
  REQUIRE(head->status == 200);
  reader.read_all(5s);
  CHECK(eventually([&] { return s.metric("sluice_client_connections") == 0; }, 5s));
  std::this_thread::sleep_for(300ms);  // a few ticks
  CHECK(s.metric(R"(sluice_upstream_timeouts_total{upstream="api"})") == 0);
  CHECK(s.metric(R"(sluice_upstream_level{upstream="api"})") == 0);
}

// A fresh instance, two threads, two healthy upstreams that never refuse: its
// estimates start at their seed and were never measured exhausted, so they
// are no reason to refuse anyone (slow start grows them while requests wait).
TEST_CASE(
    "a cold start at production shape refuses nothing from healthy upstreams: a burst of 200 "
    "requests and 50 SSE streams at once are all served",
    "[e2e][scale][concurrency]") {
  Upstream api(kUpstream, {"--service-ms", "50", "--threads", "2"});
  Upstream search(kUpstream, {"--service-ms", "50", "--threads", "2"});
  const auto env =
      two_upstreams(api, search,
                    {{"SLUICE_THREADS", "2"},
                     {"SLUICE_ACCESS_LOG", "off"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/search","upstream":"search"},)"
                                       R"({"prefix":"/bulk","lane":"bulk"},)"
                                       R"({"prefix":"/sse","sse":true,"lane":"heavy"},)"
                                       R"({"prefix":"/","lane":"standard"}])"}});
  using sluice::test::Conn;
  using sluice::test::format_request;
  SECTION("200 requests: standard and bulk to one upstream, standard to the other") {
    Sluice s(kSluice, env);
    const char* targets[] = {"/api/item", "/bulk/job", "/search?q=x"};
    std::vector<Conn> conns;
    for (int i = 0; i < 200; ++i) conns.push_back(Conn::open(s.port));
    for (int i = 0; i < 200; ++i)
      REQUIRE(conns[i].send(format_request("GET", targets[i % 3], s.port)));
    std::map<int, int> statuses;
    for (auto& c : conns) {
      auto r = c.read_response(20s);
      ++statuses[r ? r->status : 0];
    }
    INFO("statuses 200: " << statuses[200] << ", 503: " << statuses[503]);
    CHECK(statuses[200] == 200);
    CHECK(
        s.metric(
            R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="queue_timeout"})") ==
        0);
  }
  SECTION("50 SSE streams of 2 s on the heavy lane") {
    Sluice s(kSluice, env);
    std::vector<Conn> conns;
    for (int i = 0; i < 50; ++i) conns.push_back(Conn::open(s.port));
    for (auto& c : conns)
      REQUIRE(
          c.send("GET /sse?n=20&interval_ms=100 HTTP/1.1\r\nHost: x\r\nAccept: "
                 "text/event-stream\r\n\r\n"));
    int streaming = 0;
    for (auto& c : conns) {
      sluice::test::BodyReader reader(c);
      auto head = reader.read_head(20s);
      streaming += head && head->status == 200;
    }
    CHECK(streaming == 50);
  }
}

// Waiting for slow start is no pressure: requests queued for a seat on an
// estimate never measured exhausted are not upstream-wait evidence.
TEST_CASE("waiting for slow start raises no level, at production shape",
          "[e2e][scale][concurrency]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search,
                                  {{"SLUICE_THREADS", "2"},
                                   {"SLUICE_ACCESS_LOG", "off"},
                                   {"SLUICE_TICK", "100ms"},
                                   {"SLUICE_BULKHEAD_SEED", "1"},
                                   // slow start by answers only
                                   {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "1h"}}));
  // Six at a time to each upstream, each answered after 400 ms: at one seat,
  // the others wait 400 ms and more (level 2's upstream wait is 200 ms).
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::jthread> clients;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&, i] {
      const std::string target = i % 2 ? "/search/slow?ms=400" : "/slow?ms=400";
      while (!stop) {
        int status = request(s.port, "GET", target, {}, {}, 20s).status;
        (status == 200 ? ok : refused) += 1;
      }
    });
  std::this_thread::sleep_for(3s);
  stop = true;
  clients.clear();
  const std::string metrics = s.metrics();
  const auto [series, changes] = family_sum(metrics, "sluice_upstream_level_changes_total{");
  INFO(metrics);
  CHECK(series > 0);
  CHECK(changes == 0);
  CHECK(refused == 0);
  CHECK(ok > 12);
}

// A queue for the capacity the bulkhead measured is the bulkhead's own: it
// bounds that wait itself (patience, then queue_timeout), so the wait is not
// upstream-wait evidence. Counted, it raised the upstream's level when a
// capacity halved, and the level's hold shed bulk after the capacity came back.
TEST_CASE("waiting for a measured capacity raises no level, at production shape",
          "[e2e][scale][concurrency]") {
  Upstream api(kUpstream, {"--capacity", "2", "--service-ms", "300"}), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(
               api, search,
               {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}, {"SLUICE_TICK", "100ms"}}));
  // Ten standard clients at a time to an upstream that serves 2, each in 300 ms:
  // once K is measured, requests wait for seats up to standard's 500 ms window
  // (level 2's upstream wait is 200 ms). Two more keep the other upstream busy.
  std::atomic<bool> stop{false};
  std::atomic<int> search_ok{0};
  std::vector<std::jthread> clients;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&, i] {
      while (!stop) {
        auto res = request(s.port, "GET", i < 10 ? "/" : "/search/x", {}, {}, 20s);
        if (i >= 10 && res.status == 200) ++search_ok;
      }
    });
  std::this_thread::sleep_for(4s);
  stop = true;
  clients.clear();
  REQUIRE(s.metric(R"(sluice_upstream_carrying_capacity{upstream="api"})") > 0);  // measured
  REQUIRE(decisions(s, "standard", "shed", "queue_timeout") > 0);  // waited out whole windows
  const std::string metrics = s.metrics();
  const auto [series, changes] =
      family_sum(metrics, R"(sluice_upstream_level_changes_total{upstream="api")");
  INFO(metrics);
  CHECK(series > 0);
  CHECK(changes == 0);
  CHECK(s.metric(R"(sluice_upstream_level{upstream="api"})") == 0);
  CHECK(search_ok > 0);
}

// An upstream that refuses above a capacity the estimate has not yet found:
// its 429s are the estimate's to learn, not the client's to receive. A GET
// asks for a seat again (at the front of its lane) and is served; a POST,
// which Sluice may not send twice, gets the upstream's 429.
TEST_CASE("an upstream's refusal of a request that can be sent again is asked again, once",
          "[e2e][scale][concurrency]") {
  Upstream api(kUpstream, {"--capacity", "2", "--service-ms", "200"}), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(api, search,
                         {{"SLUICE_THREADS", "2"}, {"SLUICE_QUEUE_WINDOW", "standard=10s"}}));
  // Cold: K̂ starts at 4, so the first wave puts 4 in flight on an upstream of 2.
  auto burst = [&](const std::string& method) {
    std::map<int, int> statuses;
    std::mutex m;
    {
      std::vector<std::jthread> clients;
      for (int i = 0; i < 8; ++i)
        clients.emplace_back([&, i] {
          auto res =
              request(s.port, i < 6 ? method : "GET", i < 6 ? "/" : "/search/x", {}, {}, 20s);
          std::lock_guard lock(m);
          ++statuses[i < 6 ? res.status : -res.status];
        });
    }
    return statuses;
  };
  auto gets = burst("GET");
  INFO("GET statuses: " << gets[200] << " 200, " << gets[429] << " 429, " << gets[503] << " 503");
  const double asked = s.metric(R"(sluice_upstream_asked_again_total{upstream="api"})");
  const auto refused_by_api = upstream_stats(api)["rejected"].get<int>();
  REQUIRE(refused_by_api >= 1);    // the upstream did refuse some
  CHECK(asked == refused_by_api);  // and each of those asked again
  CHECK(gets[200] == 6);           // every GET served
  CHECK(gets[-200] == 2);          // the other upstream's, untouched
  CHECK(s.metric(R"(sluice_upstream_asked_again_total{upstream="search"})") == 0);

  // POSTs are not sent twice: once the estimate probes past 2 again, the
  // upstream's 429 goes to the client as it came.
  Upstream narrow(kUpstream, {"--capacity", "1", "--service-ms", "200"});
  Sluice t(kSluice, sluice::test::upstream_env(narrow, {{"SLUICE_THREADS", "2"},
                                                        {"SLUICE_QUEUE_WINDOW", "standard=10s"}}));
  std::map<int, int> posts;
  {
    std::mutex m;
    std::vector<std::jthread> clients;
    for (int i = 0; i < 4; ++i)
      clients.emplace_back([&] {
        auto res = request(t.port, "POST", "/", {}, {}, 20s);
        std::lock_guard lock(m);
        ++posts[res.status];
      });
  }
  INFO("POST statuses: " << posts[200] << " 200, " << posts[429] << " 429");
  CHECK(posts[429] >= 1);
  CHECK(t.metric(R"(sluice_upstream_asked_again_total{upstream="api"})") == 0);
}

// A stall of Sluice's own process (stopped here, as a busy host or a burst of
// page faults would) makes every answer in flight late by the stall. The
// lateness is Sluice's: the estimate of a healthy upstream does not fall for
// it (it fell to a few slots, the queue rule taking the stall for a queue at
// the upstream, and stayed there). With heartbeats a second apart, a stall
// falls between two of them: the answers' own time in their sockets tells it.
TEST_CASE("a stall of the proxy's own process does not lower a healthy upstream's estimate",
          "[e2e][scale][concurrency][serial]") {
  for (const char* heartbeat : {"50ms", "1s"}) {
    INFO("SLUICE_LAG_PROBE_INTERVAL=" << heartbeat);
    Upstream api(kUpstream), search(kUpstream);
    Sluice s(kSluice, two_upstreams(api, search,
                                    {{"SLUICE_THREADS", "2"},
                                     {"SLUICE_ACCESS_LOG", "off"},
                                     {"SLUICE_LAG_PROBE_INTERVAL", heartbeat}}));
    Tally a, b;
    Load on_api(s.port, "/", 24, a), on_search(s.port, "/search/q", 24, b);
    const std::uint64_t answered = kSanitized ? 200 : 2000;  // estimates with answers behind them
    REQUIRE(eventually([&] { return a.ok > answered && b.ok > answered; }, 20s));
    for (int i = 0; i < 3; ++i) {
      REQUIRE(kill(s.process.pid(), SIGSTOP) == 0);
      std::this_thread::sleep_for(100ms);
      REQUIRE(kill(s.process.pid(), SIGCONT) == 0);
      std::this_thread::sleep_for(300ms);
    }
    on_api.stop();
    on_search.stop();
    CHECK(a.failed + b.failed == 0);
    // A sanitized Sluice is slow enough that its own backlog after a stall,
    // between heartbeats and under 10 ms an answer, reads as a queue.
    if (kSanitized) continue;
    auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
    REQUIRE(state["upstreams"].size() == 2);
    for (const auto& u : state["upstreams"]) {
      INFO(u.dump());
      CHECK(u["why"].is_null());  // never measured exhausted
      CHECK_FALSE(u["exhausted"].get<bool>());
    }
    CHECK(a.queue_timeout + b.queue_timeout + a.other_503 + b.other_503 == 0);
  }
}

// Slot phases at production shape: two upstreams, each with its own bulkhead and
// phases, both paced by timers of the workers' loops. A paced slot is a slot the
// upstream does not serve until a timer opens it: the paced ones open (each
// upstream kept busy), and pacing happened on both.
TEST_CASE("slots paced on two upstreams at once open, at production shape",
          "[e2e][scale][concurrency]") {
  // Holds are steady when they vary by under a tenth: a sanitized Sluice adds
  // milliseconds of its own, so its upstream takes longer.
  const int service_ms = kSanitized ? 100 : 40;
  const std::vector<std::string> shape{
      "--capacity", "4", "--service-ms", std::to_string(service_ms), "--threads", "2"};
  Upstream api(kUpstream, shape), search(kUpstream, shape);
  Sluice s(kSluice,
           two_upstreams(api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}}));
  // Three times what each upstream takes, standard (its 500 ms window): requests
  // wait for seats, and steady holds let the bulkheads pace.
  Tally a, b;
  Load on_api(s.port, "/", 12, a), on_search(s.port, "/search/q", 12, b);
  const auto paced = [&](const std::string& upstream) {
    return s.metric(R"(sluice_upstream_paced_slots_total{upstream=")" + upstream + "\"}");
  };
  REQUIRE(eventually([&] { return paced("api") > 0 && paced("search") > 0; }, 20s));
  // Past the first paced slots: what each upstream serves over the next two seconds.
  const auto api_before = upstream_stats(api)["requests"].get<double>();
  const auto search_before = upstream_stats(search)["requests"].get<double>();
  const auto paced_before = paced("api") + paced("search");
  std::this_thread::sleep_for(2s);
  const double api_served = upstream_stats(api)["requests"].get<double>() - api_before;
  const double search_served = upstream_stats(search)["requests"].get<double>() - search_before;
  const double paced_after = paced("api") + paced("search");
  on_api.stop();
  on_search.stop();
  INFO("served api " << api_served << ", search " << search_served << "; paced " << paced_before
                     << " then " << paced_after << "; estimates "
                     << s.metric(R"(sluice_upstream_capacity_estimate{upstream="api"})") << ", "
                     << s.metric(R"(sluice_upstream_capacity_estimate{upstream="search"})"));
  // 4 slots: 200 in 2 s each at 40 ms. A paced slot no timer opens is lost to
  // its upstream for good: one is a quarter of it.
  const double each = 4 * 2000.0 / service_ms;
  CHECK(api_served > 0.75 * each);
  CHECK(search_served > 0.75 * each);
  CHECK(paced_after > paced_before);  // pacing goes on, on the slots that opened
  CHECK(a.failed + b.failed == 0);
  CHECK(a.other + b.other == 0);
}

// Upstreams that queue above their capacity never say "too much": the estimate
// finds each one's capacity from its answers slowing (the queue rule), and once
// found it keeps what it forwards out of the upstream's queue, waiting in Sluice
// where its lanes decide who goes first. Two capacities, so a capacity measured
// for the process and not for its upstream shows.
TEST_CASE(
    "queueing upstreams at production shape: each capacity is found from its answers, "
    "and what is forwarded stays out of the upstream's queue",
    "[e2e][scale][concurrency]") {
  const int service_ms = kSanitized ? 100 : 40;
  const auto shape = [&](int capacity) {
    return std::vector<std::string>{
        "--capacity",   std::to_string(capacity),   "--over-capacity", "queue",
        "--service-ms", std::to_string(service_ms), "--threads",       "2"};
  };
  Upstream api(kUpstream, shape(3)), search(kUpstream, shape(6));
  Sluice s(kSluice,
           two_upstreams(api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}}));
  // Three times what each upstream serves at once, standard (its 500 ms window).
  Tally a, b;
  Load on_api(s.port, "/", 9, a), on_search(s.port, "/search/q", 18, b);
  // A sanitized Sluice adds tens of milliseconds of its own to each answer
  // (mean answers of 185 ms on a 100 ms upstream of 3 under ASan): the
  // windows' means say little of the upstream's queue. Only: all answered.
  if (kSanitized) return all_answered(on_api, on_search, a, b);
  const auto carrying = [&](const std::string& upstream) {
    return s.metric(R"(sluice_upstream_carrying_capacity{upstream=")" + upstream + "\"}");
  };
  REQUIRE(eventually([&] { return carrying("api") > 0 && carrying("search") > 0; }, 20s));
  // Settled past slow start's overshoot: what each upstream served over the
  // next 3 s, and how many waited in its queue, sampled every 50 ms.
  std::this_thread::sleep_for(3s);
  const auto api_before = upstream_stats(api), search_before = upstream_stats(search);
  double api_waiting = 0, search_waiting = 0;
  constexpr int kSamples = 60;
  for (int i = 0; i < kSamples; ++i) {
    std::this_thread::sleep_for(50ms);
    api_waiting += upstream_stats(api)["waiting"].get<double>() / kSamples;
    search_waiting += upstream_stats(search)["waiting"].get<double>() / kSamples;
  }
  const auto api_after = upstream_stats(api), search_after = upstream_stats(search);
  const auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  on_api.stop();
  on_search.stop();
  const double api_served = grew(api_after, api_before, "requests");
  const double search_served = grew(search_after, search_before, "requests");
  const double api_queued = grew(api_after, api_before, "queued");
  const double search_queued = grew(search_after, search_before, "queued");
  INFO("api: K " << carrying("api") << ", served " << api_served << ", queued " << api_queued
                 << ", waiting " << api_waiting << "; search: K " << carrying("search")
                 << ", served " << search_served << ", queued " << search_queued << ", waiting "
                 << search_waiting << "; state " << state["upstreams"].dump());
  for (const auto& u : state["upstreams"]) CHECK(u["why"] == "slow");  // measured by the queue
  CHECK(carrying("api") >= 2);
  CHECK(carrying("api") <= 4);
  CHECK(carrying("search") >= 5);
  CHECK(carrying("search") <= 7);
  // One over the capacity (or no queue rule) and a request waits in the
  // upstream's queue all the time; each probe past K queues a few for a
  // window. (Its count of arrivals that met every slot held also counts a
  // request that arrives the moment before the slot of the answer that made
  // room for it is freed: a race of microseconds, not a queue.)
  CHECK(api_waiting < 0.5);
  CHECK(search_waiting < 0.5);
  // And the upstreams stay busy: 3 s at 3 and 6 at once.
  const double seconds = 3.0, per_slot = 1000.0 / service_ms;
  CHECK(api_served > 0.75 * 3 * per_slot * seconds);
  CHECK(search_served > 0.75 * 6 * per_slot * seconds);
  CHECK(a.failed + b.failed == 0);
  CHECK(a.other + b.other == 0);
}

// A queueing upstream whose capacity grows says nothing: its answers stay as
// fast while the probes past K find the room. Each probe that holds is the
// capacity now; a probe back at the K before the climb left the new slots
// unused but for the probes (3 on an upstream that had grown to 6).
TEST_CASE("a queueing upstream whose capacity grows is followed, at production shape",
          "[e2e][scale][concurrency]") {
  const int service_ms = kSanitized ? 100 : 40;
  // 3 slots, 6 from 4 s after its first request; the other upstream keeps 4.
  Upstream api(kUpstream, {"--capacity", "3", "--over-capacity", "queue", "--capacity-schedule",
                           "4:6", "--service-ms", std::to_string(service_ms), "--threads", "2"});
  Upstream search(kUpstream, {"--capacity", "4", "--over-capacity", "queue", "--service-ms",
                              std::to_string(service_ms), "--threads", "2"});
  Sluice s(kSluice,
           two_upstreams(api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}}));
  Tally a, b;
  Load on_api(s.port, "/", 18, a), on_search(s.port, "/search/q", 12, b);
  if (kSanitized) return all_answered(on_api, on_search, a, b);  // as above
  const auto carrying = [&](const std::string& upstream) {
    return s.metric(R"(sluice_upstream_carrying_capacity{upstream=")" + upstream + "\"}");
  };
  REQUIRE(eventually([&] { return upstream_stats(api)["capacity"] == 6; }, 20s));
  // Four seconds to find the room, then three measured.
  std::this_thread::sleep_for(4s);
  const auto before = upstream_stats(api)["requests"].get<double>();
  const auto search_before = upstream_stats(search);
  std::this_thread::sleep_for(3s);
  const double served = upstream_stats(api)["requests"].get<double>() - before;
  const auto search_after = upstream_stats(search);
  const double k = carrying("api");
  on_api.stop();
  on_search.stop();
  INFO("api: K " << k << ", K-hat "
                 << s.metric(R"(sluice_upstream_capacity_estimate{upstream="api"})") << ", served "
                 << served << " in 3 s; search: K " << carrying("search") << ", served "
                 << grew(search_after, search_before, "requests") << ", queued "
                 << grew(search_after, search_before, "queued"));
  CHECK(k >= 5);
  CHECK(served > 0.75 * 6 * (1000.0 / service_ms) * 3);
  // The other upstream keeps its own: what is forwarded to it stays out of its
  // queue over the window (as in the test above). Its K at one instant can be
  // a probe one or two past 4 that a loaded machine's own gaps let hold for a
  // window; what the upstream queued says whether it held for long.
  CHECK(carrying("search") >= 3);
  CHECK(grew(search_after, search_before, "queued") <
        0.4 * grew(search_after, search_before, "requests"));
  CHECK(a.failed + b.failed == 0);
  CHECK(a.other + b.other == 0);
}

// What a refused client is told to come back after is counted on what the
// upstream serves in an overload (docs/admission.md, "Retry-After"). Every
// thread ticks the bulkhead: two ticks a moment apart, or a window where the
// wait began, measure next to nothing of it, and the first measure is taken
// whole. From the first that shows, it is what the upstream served, as the
// upstream counts it; the upstream beside it, never waited on, shows none.
TEST_CASE(
    "what an overloaded upstream serves is measured from the first window, at production shape",
    "[e2e][scale][concurrency]") {
  // 4 at a time for 20 ms (429 above): 200 a second at most, and 16 clients.
  Upstream api(kUpstream, {"--capacity", "4", "--service-ms", "20", "--threads", "2"});
  Upstream search(kUpstream, {"--service-ms", "20", "--threads", "2"});
  Sluice s(kSluice,
           two_upstreams(api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}}));
  Tally a, b;
  Load on_api(s.port, "/", 16, a), on_search(s.port, "/search/q", 2, b);
  const auto back_to = [&](int upstream) {
    return upstream_state(s, upstream)["refused_come_back_to"];
  };
  const auto served = [&] {
    const auto stats = upstream_stats(api);
    return stats["requests"].get<double>() - stats["rejected"].get<double>();
  };
  double first = 0;
  REQUIRE(eventually(
      [&] {
        first = back_to(0)["served_per_s"].get<double>();
        return first > 0;
      },
      20s));
  // What the upstream served over the next 2 s, by its own count.
  const double before = served();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(2s);
  const double rate =
      (served() - before) /
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto api_back = back_to(0), search_back = back_to(1);
  on_api.stop();
  on_search.stop();
  INFO("first served_per_s " << first << ", the upstream served " << rate << "/s; api "
                             << api_back.dump() << "; search " << search_back.dump());
  REQUIRE(rate > 0);
  CHECK(first > 0.5 * rate);
  CHECK(first < 2 * rate);
  CHECK(api_back["served_per_s"].get<double>() > 0.5 * rate);
  CHECK(api_back["served_per_s"].get<double>() < 2 * rate);
  CHECK(search_back["served_per_s"].get<double>() == 0);
  CHECK(search_back["quiet_per_s"].get<double>() > 0);
  CHECK(a.failed + b.failed == 0);
  CHECK(b.queue_timeout + b.other_503 == 0);
}

// An overload is remembered weighed by the clients it refused (docs/admission.md,
// "Retry-After"): blips of a few refusals after it, each an episode of its own,
// hardly move what the next overload is told. Halved at each episode's end, six
// blips of a few clients left under half of it. Each upstream keeps its own.
TEST_CASE("the overload remembered keeps its weight against blips, at production shape",
          "[e2e][scale][concurrency]") {
  // 4 at a time for 100 ms (429 above): 40 a second; 64 clients wait past the
  // standard lane's 500 ms window, and are refused, a few hundred times in 4 s.
  Upstream api(kUpstream, {"--capacity", "4", "--service-ms", "100", "--threads", "2"});
  Upstream search(kUpstream, {"--service-ms", "20", "--threads", "2"});
  Sluice s(kSluice,
           two_upstreams(api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_ACCESS_LOG", "off"}}));
  Tally beside;
  Load on_search(s.port, "/search/q", 2, beside);
  const auto remembered = [&](int upstream) {
    return upstream_state(s, upstream)["lanes"]["standard"]["overload_remembered"];
  };
  // A blip: 6 requests at once that hold their seats 1 s; those not seated
  // within the window are refused together. Their Retry-After values.
  const auto blip = [&] {
    std::vector<int> told;
    std::mutex m;
    {
      std::vector<std::jthread> clients;
      for (int i = 0; i < 6; ++i)
        clients.emplace_back([&] {
          auto res = request(s.port, "GET", "/slow?ms=1000", {}, {}, 10s);
          if (res.status != 503) return;
          const auto retry_after = res.header("Retry-After");  // -1: none, which fails below
          std::lock_guard lock(m);
          told.push_back(retry_after.empty() ? -1 : std::stoi(retry_after));
        });
    }
    return told;
  };
  const auto gap = 2500ms;  // past the 2 s without a refusal that ends an episode
  Tally overload;
  {
    Load load(s.port, "/", 64, overload);
    std::this_thread::sleep_for(4s);
  }
  std::this_thread::sleep_for(gap);
  const auto first = remembered(0);
  int blips = 0;
  std::size_t refused = 0;
  for (int i = 0; i < 6; ++i) {
    const auto blip_told = blip();
    blips += blip_told.empty() ? 0 : 1;
    refused += blip_told.size();
    std::this_thread::sleep_for(gap);
  }
  const auto after = remembered(0);
  const auto told = blip();  // the next overload's first clients
  on_search.stop();
  INFO("after the overload " << first.dump() << " (clients refused " << overload.queue_timeout
                             << " + " << overload.other_503 << "); after " << blips
                             << " blips that refused " << refused << ": " << after.dump()
                             << "; the next told " << told.size() << " Retry-After values");
  const double lasted = first["lasted_s"].get<double>(), clients = first["clients"].get<double>();
  REQUIRE(lasted > 1);
  REQUIRE(blips >= 5);  // each an episode of its own
  // Blips together under 15 % of the overload's clients: each moves the memory
  // by about its share of them (2 a blip, 12 in all, of 320-330 in runs here).
  REQUIRE(refused <= 0.15 * clients);
  CHECK(after["lasted_s"].get<double>() >= 0.8 * lasted);
  CHECK(after["clients"].get<double>() >= clients);
  // What a client refused by the next overload is told: at least what the last lasted.
  REQUIRE(!told.empty());
  for (int t : told) CHECK(t >= after["lasted_s"].get<double>());
  // The upstream beside it never said "too much": nothing refused, nothing remembered.
  CHECK(beside.queue_timeout + beside.other_503 == 0);
  CHECK(beside.failed == 0);
  CHECK(remembered(1)["clients"].get<double>() == 0);
}
