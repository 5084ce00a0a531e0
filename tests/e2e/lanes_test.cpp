// End-to-end tests of lanes and bulkheads: the real `sluice` in front of a real
// `sluice-upstream` that answers 429 above a fixed concurrency, driven by
// closed-loop clients. The machine is shared, so every check compares counts
// measured in the same run, with generous bounds, never absolute timings.
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/load.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::BodyReader;
using sluice::test::Conn;
using sluice::test::eventually;
using sluice::test::format_request;
using sluice::test::kSanitized;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Load;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Tally;
using sluice::test::Upstream;
using sluice::test::upstream_stats;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kRoutes = R"([{"name":"bulk","prefix":"/bulk","lane":"bulk"},)"
                            R"({"name":"heavy","prefix":"/heavy","lane":"heavy"},)"
                            R"({"name":"sse","prefix":"/sse","lane":"heavy"},)"
                            R"({"name":"api","prefix":"/","lane":"standard"}])";

// One I/O thread (one bulkhead per upstream), no access log to write under load.
std::map<std::string, std::string> env_for(const Upstream& up,
                                           std::map<std::string, std::string> extra = {}) {
  extra.emplace("SLUICE_ROUTES", kRoutes);
  extra.emplace("SLUICE_THREADS", "1");
  extra.emplace("SLUICE_ACCESS_LOG", "off");
  return sluice::test::upstream_env(up, std::move(extra));
}

// sluice-upstream answering 429 above 8 requests in flight, each served in 20 ms.
Upstream limited_upstream() {
  return Upstream(kUpstream, {"--capacity", "8", "--service-ms", "20"});
}

std::uint64_t served(const json& stats) {
  return stats["requests"].get<std::uint64_t>() - stats["rejected"].get<std::uint64_t>();
}

// The first SSE event's data line, read from an open stream; "" if none came.
std::string first_event_data(BodyReader& reader) {
  std::string text;
  const auto deadline = Clock::now() + 5s;
  while (text.find("\n\n") == std::string::npos && Clock::now() < deadline) {
    auto piece = reader.next(5s);
    if (!piece) break;
    text += piece->second;
  }
  const auto end = text.find("\n\n");
  if (end == std::string::npos) return {};
  const auto at = text.find("data: ");
  if (at == std::string::npos || at > end) return {};
  const auto line_end = text.find('\n', at);
  return text.substr(at + 6, line_end - at - 6);
}

double heavy_leases(Sluice& s) { return s.metric("sluice_heavy_leases"); }

double delegated_heavy(Sluice& s) {
  return s.metric(R"(sluice_lane_delegated_total{lane="heavy"})");
}

// The values of `name` (any case) the upstream's /headers saw.
std::vector<std::string> headers_named(const sluice::test::Response& res, std::string_view name) {
  std::vector<std::string> out;
  const auto doc = json::parse(res.body);
  for (auto& h : doc["headers"]) {
    std::string n = h[0];
    if (n.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < n.size(); ++i)
      same &= std::tolower(static_cast<unsigned char>(n[i])) ==
              std::tolower(static_cast<unsigned char>(name[i]));
    if (same) out.push_back(h[1]);
  }
  return out;
}

}  // namespace

TEST_CASE("the upstream's /sse echo option sends a request header as the first event's data",
          "[e2e][lanes]") {
  Upstream up(kUpstream);
  auto c = Conn::open(up.port);
  REQUIRE(c.send(format_request("GET", "/sse?echo=x-probe&n=2&interval_ms=10", up.port,
                                {{"X-Probe", "abc-123"}})));
  auto r = sluice::test::read_streamed(c, 5s);
  REQUIRE(r.complete);
  CHECK(r.body() == "id: 1\ndata: abc-123\n\nid: 2\ndata: event 2\n\n");

  auto d = Conn::open(up.port);
  REQUIRE(d.send(format_request("GET", "/sse?echo=x-absent&n=1&interval_ms=10", up.port)));
  auto e = sluice::test::read_streamed(d, 5s);
  REQUIRE(e.complete);
  CHECK(e.body() == "id: 1\ndata: \n\n");
}

TEST_CASE(
    "an upstream that answers 429 above a fixed concurrency: the estimate settles near it and "
    "the upstream's own 429s stay rare",
    "[e2e][lanes]") {
  auto up = limited_upstream();
  Sluice s(kSluice, env_for(up));
  const std::string estimate = R"(sluice_upstream_capacity_estimate{upstream="api"})";

  Tally warmup, measured;
  {
    Load load(s.port, "/api", 24, warmup);
    std::this_thread::sleep_for(2s);  // slow start overshoots, the 429s set K, growth settles
  }
  const auto before = upstream_stats(up);
  std::vector<double> samples;
  {
    Load load(s.port, "/api", 24, measured);
    const auto until = Clock::now() + 3s;
    while (Clock::now() < until) {
      std::this_thread::sleep_for(100ms);
      samples.push_back(s.metric(estimate));
    }
  }
  const auto after = upstream_stats(up);

  const auto requests = after["requests"].get<double>() - before["requests"].get<double>();
  const auto rejected = after["rejected"].get<double>() - before["rejected"].get<double>();
  std::sort(samples.begin(), samples.end());
  const double median = samples[samples.size() / 2];
  INFO("estimate samples " << json(samples).dump() << ", upstream requests " << requests
                           << ", rejected " << rejected << ", clients: ok " << measured.ok
                           << " queue_timeout " << measured.queue_timeout << " 429 "
                           << measured.upstream_429 << " other " << measured.other << " failed "
                           << measured.failed);
  if (!kSanitized) {  // a sanitized Sluice is slow enough that its own delay reads as a queue
    CHECK(median >= 6);
    CHECK(median <= 10);
  }
  CHECK(s.metric(R"(sluice_upstream_carrying_capacity{upstream="api"})") > 0);
  CHECK(s.metric(R"(sluice_upstream_exhausted_total{upstream="api",why="refused"})") >= 1);
  REQUIRE(requests > 100);  // the load ran
  CHECK(rejected < 0.05 * requests);
  CHECK(measured.upstream_429 < 0.05 * measured.answered());
}

TEST_CASE(
    "a bulk flood beside a trickle of standard requests: standard keeps its success while bulk "
    "absorbs the refusals",
    "[e2e][lanes]") {
  auto up = limited_upstream();
  Sluice s(kSluice, env_for(up));

  // Standard alone first: its latency without a flood, on the same machine now.
  Tally alone;
  {
    Load standard(s.port, "/api", 3, alone);
    std::this_thread::sleep_for(1s);
    alone.recording = true;
    std::this_thread::sleep_for(1500ms);
  }

  Tally bulk, standard_tally;
  {
    // Four times what the upstream serves at once: a bulk request waits its
    // delay target (twice the 20 ms baseline) behind 24 others, so refusals
    // are certain. (At twice, 16 clients, a bulk request is seated within its
    // wait nearly always: a handful of refusals, none on a loaded machine.)
    Load flood(s.port, "/bulk/upload", 32, bulk);
    std::this_thread::sleep_for(1500ms);  // the flood fills the bulkhead first
    const auto before = upstream_stats(up);
    {
      Load standard(s.port, "/api", 3, standard_tally);
      std::this_thread::sleep_for(500ms);
      standard_tally.recording = true;
      std::this_thread::sleep_for(3s);
    }
    const auto after = upstream_stats(up);
    INFO("upstream during the mixed phase: requests "
         << after["requests"].get<double>() - before["requests"].get<double>() << ", rejected "
         << after["rejected"].get<double>() - before["rejected"].get<double>());
    CHECK(after["rejected"].get<double>() - before["rejected"].get<double>() <
          0.05 * (after["requests"].get<double>() - before["requests"].get<double>()));
  }

  const double p50_alone = alone.median_ms();
  const double p50_flood = standard_tally.median_ms();
  INFO("standard: ok " << standard_tally.ok << " queue_timeout " << standard_tally.queue_timeout
                       << " other 503 " << standard_tally.other_503 << " 429 "
                       << standard_tally.upstream_429 << " other " << standard_tally.other
                       << " failed " << standard_tally.failed << "; p50 alone " << p50_alone
                       << " ms, under flood " << p50_flood << " ms");
  INFO("bulk: ok " << bulk.ok << " queue_timeout " << bulk.queue_timeout << " other 503 "
                   << bulk.other_503 << " 429 " << bulk.upstream_429 << " other " << bulk.other
                   << " failed " << bulk.failed);
  REQUIRE(standard_tally.answered() > 50);
  // The misses are the upstream's own 429s as the estimate probes past its capacity; a
  // sanitized build's slower, more bunched requests meet a few more of them (3 of 289
  // once under TSan).
  CHECK(standard_tally.ok >= (kSanitized ? 0.97 : 0.99) * standard_tally.answered());
  CHECK(standard_tally.failed == 0);
  CHECK(bulk.ok > 0);
  CHECK(bulk.queue_timeout > 0);  // bulk absorbs the refusals
  CHECK(bulk.queue_timeout > standard_tally.queue_timeout);
  const auto forwarded =
      bulk.ok + bulk.upstream_429 + standard_tally.ok + standard_tally.upstream_429;
  CHECK(bulk.upstream_429 + standard_tally.upstream_429 < 0.05 * forwarded);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="queue_timeout"})") >=
      1);
  // A loose latency relation: standard waits at most for a slot to turn over (not
  // for a sanitized build, whose own delays dwarf the upstream's).
  if (!kSanitized) CHECK(p50_flood <= 3 * p50_alone + 10);
}

TEST_CASE("a lone bulk flood still uses most of the upstream", "[e2e][lanes]") {
  auto up = limited_upstream();
  Sluice s(kSluice, env_for(up));

  Tally bulk;
  Load flood(s.port, "/bulk/upload", 24, bulk);
  std::this_thread::sleep_for(2s);  // past slow start and the first exhaustion
  const auto before = upstream_stats(up);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(2s);
  const auto after = upstream_stats(up);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  flood.stop();

  // Capacity / service time: 8 / 20 ms = 400 served per second at best.
  const double rate = static_cast<double>(served(after) - served(before)) / seconds;
  INFO("served " << rate << "/s over " << seconds << " s; max in flight " << after["max_in_flight"]
                 << "; estimate "
                 << s.metric(R"(sluice_upstream_capacity_estimate{upstream="api"})")
                 << "; clients: ok " << bulk.ok << " queue_timeout " << bulk.queue_timeout
                 << " 429 " << bulk.upstream_429 << " failed " << bulk.failed);
  CHECK(after["max_in_flight"].get<int>() >= 6);
  if (!kSanitized) CHECK(rate >= 0.6 * 400);  // a sanitized build serves at a fraction of that
  CHECK(bulk.queue_timeout > 0);              // the flood asked for more than the upstream serves
}

TEST_CASE(
    "a heavy request holds its lease for the whole SSE stream, and a heavy 503's Retry-After "
    "reflects the youngest lease's age",
    "[e2e][lanes]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_HEAVY_MAX_IN_FLIGHT", "1"},
                                 {"SLUICE_QUEUE_WINDOW", "heavy=200ms"}}));

  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/sse?n=50&interval_ms=100", s.port,
                                {{"Accept", "text/event-stream"}})));
  std::optional<BodyReader> reader(std::in_place, c);
  auto head = reader->read_head(5s);
  REQUIRE(head);
  REQUIRE(head->status == 200);
  const auto opened = Clock::now();
  CHECK(eventually([&] { return heavy_leases(s) == 1; }, 3s));

  // The lease is older than 3 s now; the stream still has about 2 s to go.
  std::this_thread::sleep_until(opened + 3s);
  CHECK(heavy_leases(s) == 1);
  auto refused = request(s.port, "GET", "/heavy/report");
  CHECK(refused.status == 503);
  CHECK(refused.header("X-Sluice-Reject") == "heavy_cap");
  const auto retry =
      std::stoi(refused.header("Retry-After").empty() ? "-1" : refused.header("Retry-After"));
  CHECK(retry >= 3);  // the youngest lease's age, not the 200 ms window
  CHECK(retry <= 60);
  auto body = json::parse(refused.body);
  CHECK(body["reason"] == "heavy_cap");
  CHECK(body["lane"] == "heavy");
  CHECK(body["retry_after_s"] == retry);

  // The stream ends as framed; then its lease is gone and heavy is served again.
  auto rest = reader->read_all(10s);
  CHECK(reader->done());
  std::string text;
  for (auto& piece : rest) text += piece.second;
  CHECK(text.find("data: event 50\n\n") != std::string::npos);
  CHECK(eventually([&] { return heavy_leases(s) == 0; }, 5s));
  CHECK(request(s.port, "GET", "/heavy/report").status == 200);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="heavy",outcome="shed",reason="heavy_cap"})") ==
      1);
  // What a refused client's turn is counted on: a heavy lease holds its seat
  // for its life (the stream's 5 s, then /heavy/report's moment an eighth of
  // the way), a request for its answer.
  REQUIRE(request(s.port, "GET", "/item").status == 200);
  // Its seat goes back once the answer is written, a moment after the client has it.
  json state;
  CHECK(eventually(
      [&] {
        state = json::parse(request(s.admin, "GET", "/admin/state").body);
        return state["upstreams"][0]["refused_come_back_to"]["request_hold_ms"].get<double>() > 0;
      },
      2s));
  const auto& back = state["upstreams"][0]["refused_come_back_to"];
  CHECK(back["stream_hold_ms"].get<double>() >= 4000);
  CHECK(back["request_hold_ms"].get<double>() > 0);
  CHECK(back["request_hold_ms"].get<double>() < back["stream_hold_ms"].get<double>());
  CHECK(back["spare_per_s"].get<double>() > 0);
}

TEST_CASE(
    "a request carrying a live lease's token is seated at once on its parent's lane, while a "
    "forged or replayed token earns nothing",
    "[e2e][lanes]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_HEAVY_MAX_IN_FLIGHT", "1"},
                                 {"SLUICE_QUEUE_WINDOW", "heavy=100ms"}}));

  // A bogus client-sent token is never forwarded as it came: the upstream sees Sluice's own.
  {
    auto res = request(s.port, "GET", "/headers", {{"X-Sluice-Lease", "0-0-0-0-0123456789abcdef"}});
    REQUIRE(res.status == 200);
    auto seen = headers_named(res, "X-Sluice-Lease");
    CHECK(seen.size() == 1);
    CHECK(std::find(seen.begin(), seen.end(), "0-0-0-0-0123456789abcdef") == seen.end());
  }

  // The parent: an SSE stream on the heavy lane holding the only heavy lease.
  std::optional<Conn> parent(Conn::open(s.port));
  REQUIRE(parent->send(format_request("GET", "/sse?echo=x-sluice-lease&n=30&interval_ms=100",
                                      s.port, {{"Accept", "text/event-stream"}})));
  std::optional<BodyReader> reader(std::in_place, *parent);
  auto head = reader->read_head(5s);
  REQUIRE(head);
  REQUIRE(head->status == 200);
  const std::string token = first_event_data(*reader);
  INFO("token " << token);
  REQUIRE(token.size() >= 10);
  CHECK(eventually([&] { return heavy_leases(s) == 1; }, 3s));
  REQUIRE(delegated_heavy(s) == 0);

  // Without the token a heavy request finds the cap full.
  auto plain = request(s.port, "GET", "/heavy/child");
  CHECK(plain.status == 503);
  CHECK(plain.header("X-Sluice-Reject") == "heavy_cap");

  // With it, the child is seated at once on the parent's lane, past the cap.
  auto child = request(s.port, "GET", "/heavy/child", {{"X-Sluice-Lease", token}});
  CHECK(child.status == 200);
  CHECK(delegated_heavy(s) == 1);

  // A live token sent to a standard route is delegated too, on the parent's
  // (heavy) lane, and is not forwarded as it came either.
  auto echoed = request(s.port, "GET", "/headers", {{"X-Sluice-Lease", token}});
  CHECK(echoed.status == 200);
  auto seen = headers_named(echoed, "X-Sluice-Lease");
  CHECK(seen.size() == 1);
  CHECK(std::find(seen.begin(), seen.end(), token) == seen.end());
  CHECK(delegated_heavy(s) == 2);

  // One hex digit of the MAC changed: forged, so an ordinary heavy request.
  std::string forged = token;
  forged.back() = forged.back() == '0' ? '1' : '0';
  auto forged_res = request(s.port, "GET", "/heavy/child", {{"X-Sluice-Lease", forged}});
  CHECK(forged_res.status == 503);
  CHECK(forged_res.header("X-Sluice-Reject") == "heavy_cap");
  CHECK(delegated_heavy(s) == 2);

  // The client goes away: the stream and its lease end.
  reader.reset();
  parent.reset();
  REQUIRE(eventually([&] { return heavy_leases(s) == 0; }, 5s));

  // Another stream takes the cap; the old token, replayed, earns nothing.
  auto other = Conn::open(s.port);
  REQUIRE(other.send(format_request("GET", "/sse?n=30&interval_ms=100", s.port,
                                    {{"Accept", "text/event-stream"}})));
  BodyReader other_reader(other);
  auto other_head = other_reader.read_head(5s);
  REQUIRE(other_head);
  REQUIRE(other_head->status == 200);
  REQUIRE(eventually([&] { return heavy_leases(s) == 1; }, 3s));
  auto replayed = request(s.port, "GET", "/heavy/child", {{"X-Sluice-Lease", token}});
  CHECK(replayed.status == 503);
  CHECK(replayed.header("X-Sluice-Reject") == "heavy_cap");
  CHECK(delegated_heavy(s) == 2);
}

TEST_CASE("a request carrying a live lease's token is seated at once even on a full bulkhead",
          "[e2e][lanes]") {
  Upstream up(kUpstream);
  // The estimate stays at its seed (4 slots): growth waits an hour.
  Sluice s(kSluice, env_for(up, {{"SLUICE_ROUTES", R"([{"prefix":"/","lane":"standard"}])"},
                                 {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "1h"},
                                 {"SLUICE_ACCESS_LOG", "stdout"}}));

  // The parent: a standard SSE stream, one of the four slots.
  auto parent = Conn::open(s.port);
  REQUIRE(
      parent.send(format_request("GET", "/sse?echo=x-sluice-lease&n=80&interval_ms=100", s.port)));
  BodyReader reader(parent);
  auto head = reader.read_head(5s);
  REQUIRE(head);
  REQUIRE(head->status == 200);
  const std::string token = first_event_data(reader);
  INFO("token " << token);
  REQUIRE(token.size() >= 10);

  // Three slow requests take the other three slots.
  std::vector<std::thread> slow;
  std::atomic<int> slow_ok{0};
  for (int i = 0; i < 3; ++i)
    slow.emplace_back([&] {
      if (request(s.port, "GET", "/slow?ms=5000", {}, {}, 20s).status == 200) ++slow_ok;
    });
  const bool full =
      eventually([&] { return s.metric(R"(sluice_lane_in_flight{lane="standard"})") == 4; }, 3s);
  CHECK(full);

  // A plain request waits for a slot (an estimate never measured exhausted
  // refuses nobody); the child goes past it at once.
  int plain_status = 0;
  std::thread plain([&] { plain_status = request(s.port, "GET", "/child", {}, {}, 20s).status; });
  REQUIRE(
      eventually([&] { return s.metric(R"(sluice_lane_queue_depth{lane="standard"})") == 1; }, 3s));
  auto child = request(s.port, "GET", "/child", {{"X-Sluice-Lease", token}});
  const double in_flight_after = s.metric(R"(sluice_lane_in_flight{lane="standard"})");
  for (auto& t : slow) t.join();
  plain.join();

  // The access log: the child was seated at once, the plain request had waited
  // (until a slot came back, or the child's clean answer grew the estimate:
  // either may come first, so the log says it, not the order of the answers).
  auto lines = s.wait_log_lines(5);
  std::vector<double> child_queue_ms;
  for (const auto& l : lines)
    if (l.value("path", "") == "/child") child_queue_ms.push_back(l["queue_ms"].get<double>());
  REQUIRE(child_queue_ms.size() == 2);
  CHECK(std::min(child_queue_ms[0], child_queue_ms[1]) == 0.0);
  CHECK(std::max(child_queue_ms[0], child_queue_ms[1]) > 0.0);
  CHECK(plain_status == 200);  // seated once a slow request gave its slot back
  CHECK(child.status == 200);
  CHECK(s.metric(R"(sluice_lane_delegated_total{lane="standard"})") == 1);
  CHECK(in_flight_after >= 4);  // the slow requests were still running: nothing was cut
  CHECK(slow_ok == 3);
}

TEST_CASE("/admin/plan answers without seating anything", "[e2e][lanes]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up));
  REQUIRE(request(s.port, "GET", "/api").status == 200);  // the upstream is known and idle

  auto running = [&] {
    auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
    REQUIRE(state["upstreams"].size() == 1);
    return state["upstreams"][0]["lanes"]["standard"]["running"].get<int>();
  };
  for (int i = 0; i < 3; ++i) {
    auto res = request(s.admin, "GET", "/admin/plan?lane=standard&upstream=api&wanted=100");
    REQUIRE(res.status == 200);
    auto plan = json::parse(res.body);
    CHECK(plan["start"].get<int>() >= 1);
    CHECK(plan["start"].get<int>() <= 100);
    CHECK(plan["lane"] == "standard");
    CHECK(plan["upstream"] == "api");
  }
  std::this_thread::sleep_for(300ms);  // a heartbeat or more: the read model is current
  CHECK(running() == 0);

  CHECK(request(s.admin, "GET", "/admin/plan?lane=express&upstream=api&wanted=1").status == 400);
  CHECK(request(s.admin, "GET", "/admin/plan?lane=standard&upstream=nope&wanted=1").status == 400);
  CHECK(request(s.admin, "GET", "/admin/plan?lane=standard&upstream=api&wanted=0").status == 400);
  CHECK(request(s.port, "GET", "/api").status == 200);  // nothing was left seated
}

TEST_CASE(
    "a request whose client stopped reading gives its slot back but keeps its lease, so its "
    "children are still delegated",
    "[e2e][lanes][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up, {{"SLUICE_ROUTES", R"([{"prefix":"/","lane":"standard"}])"},
                                 {"SLUICE_CLIENT_SEND_BUFFER", "4KiB"}}));

  // The parent: a standard stream as fast as the upstream can send it, read up to
  // its first event (its lease token), then no more.
  auto parent = Conn::open(s.port);
  int small = 4096;
  ::setsockopt(parent.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  REQUIRE(parent.send(
      format_request("GET", "/sse?echo=x-sluice-lease&n=100000000&interval_ms=0", s.port)));
  std::string token;
  {
    BodyReader reader(parent);
    auto head = reader.read_head(5s);
    REQUIRE(head);
    REQUIRE(head->status == 200);
    token = first_event_data(reader);
  }
  INFO("token " << token);
  REQUIRE(token.size() >= 10);
  // Its write stalls, and its bulkhead slot goes back.
  REQUIRE(eventually([&] { return s.metric("sluice_client_stalled_writes_total") >= 1; }, 10s));

  // The request is still live: a child carrying its token is delegated.
  auto child = request(s.port, "GET", "/child", {{"X-Sluice-Lease", token}});
  CHECK(child.status == 200);
  CHECK(s.metric(R"(sluice_lane_delegated_total{lane="standard"})") == 1);
}
