// End-to-end tests of the proxy: the real `sluice` in front of the real
// `sluice-upstream`, both on free loopback ports, driven over real sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Conn;
using sluice::test::format_request;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;
using sluice::test::upstream_env;
using sluice::test::upstream_stats;

namespace {

std::uint64_t upstream_requests(const Upstream& up) { return upstream_stats(up)["requests"]; }

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

json headers_seen(const sluice::test::Response& res) {
  json out = json::object();
  json parsed = json::parse(res.body);
  for (auto& h : parsed["headers"]) {
    std::string name = h[0];
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = h[1];
  }
  return out;
}

}  // namespace

TEST_CASE("a request is forwarded and its answer returned with a generated X-Request-Id",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto res = request(s.port, "GET", "/hello?x=1");
  CHECK(res.status == 200);
  CHECK(res.body == "ok\n");
  CHECK(res.header("X-Upstream-Port") == std::to_string(up.port));
  CHECK(res.header("X-Request-Id").size() == 24);
}

TEST_CASE("the client's X-Request-Id is forwarded upstream and returned", "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto res = request(s.port, "GET", "/headers", {{"X-Request-Id", "client-id-42"}});
  CHECK(res.header("X-Request-Id") == "client-id-42");
  CHECK(headers_seen(res)["x-request-id"] == "client-id-42");
}

TEST_CASE("hop-by-hop headers, and those Connection names, never reach the upstream",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto res = request(s.port, "GET", "/headers",
                     {{"Connection", "keep-alive, X-Secret-Hop"},
                      {"X-Secret-Hop", "1"},
                      {"Keep-Alive", "timeout=5"},
                      {"TE", "deflate;q=0.5, trailers"},
                      {"Proxy-Authorization", "Basic Zm9vOmJhcg=="},
                      {"X-Forwarded-For", "203.0.113.9"},
                      {"X-Real-IP", "198.51.100.7"},
                      {"X-End-To-End", "kept"}});
  REQUIRE(res.status == 200);
  auto seen = headers_seen(res);
  CHECK_FALSE(seen.contains("connection"));
  CHECK_FALSE(seen.contains("x-secret-hop"));
  CHECK_FALSE(seen.contains("keep-alive"));
  CHECK(seen["te"] == "trailers");  // cut to trailers: Sluice relays no other coding
  CHECK_FALSE(seen.contains("proxy-authorization"));
  CHECK(seen["x-end-to-end"] == "kept");
  CHECK(seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1");
  CHECK(seen["x-real-ip"] == "127.0.0.1");  // a client's own is not passed as truth
  CHECK(seen["x-forwarded-proto"] == "http");
  CHECK(seen["x-request-id"] == res.header("X-Request-Id"));
}

TEST_CASE(
    "at the edge a client's X-Forwarded-For is replaced, and a TE without trailers goes nowhere",
    "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_FORWARDED_FOR", "replace"}}));
  auto res =
      request(s.port, "GET", "/headers", {{"X-Forwarded-For", "203.0.113.9"}, {"TE", "gzip"}});
  REQUIRE(res.status == 200);
  auto seen = headers_seen(res);
  CHECK(seen["x-forwarded-for"] == "127.0.0.1");
  CHECK_FALSE(seen.contains("te"));
}

TEST_CASE("request and response bodies stream both ways with Content-Length", "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto body = pattern(3 * 1024 * 1024 + 17);
  auto res = request(s.port, "POST", "/echo", {{"Content-Type", "application/x-test"}}, body);
  CHECK(res.status == 200);
  CHECK(res.header("Content-Length") == std::to_string(body.size()));
  CHECK(res.body == body);
}

TEST_CASE("a chunked request body is forwarded chunked and echoed intact", "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  std::string piece = pattern(40000);
  char size[16];
  std::snprintf(size, sizeof size, "%zx", piece.size());
  std::string raw = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  raw += std::string(size) + "\r\n" + piece + "\r\n5\r\nhello\r\n0\r\n\r\n";
  REQUIRE(c.send(raw));
  auto res = c.read_response();
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == piece + "hello");
}

TEST_CASE("large responses stream through, chunked and with Content-Length", "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto a = request(s.port, "GET", "/large?bytes=5000000");
  CHECK(a.status == 200);
  CHECK(a.body.size() == 5000000);
  CHECK(a.header("Content-Length") == "5000000");
  auto b = request(s.port, "GET", "/large?bytes=2000001&chunked=1");
  CHECK(b.status == 200);
  CHECK(b.body.size() == 2000001);
  CHECK(b.header("Transfer-Encoding") == "chunked");
}

TEST_CASE("SSE events reach the client as the upstream sends them, not at the end",
          "[e2e][proxy][sse]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/sse?n=5&interval_ms=300", s.port,
                                {{"Accept", "text/event-stream"}})));
  auto r = sluice::test::read_streamed(c, 10s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  CHECK(r.head->header("Content-Type") == "text/event-stream");
  REQUIRE(r.complete);
  REQUIRE(r.chunks.size() >= 2);
  CHECK(r.body().find("data: event 1\n\n") != std::string::npos);
  CHECK(r.body().find("data: event 5\n\n") != std::string::npos);
  // The first event arrives about 1/5 of the way through the stream: well
  // before the end, which a buffering proxy could not do.
  auto first = r.chunks.front().first - r.head_at;
  auto last = r.chunks.back().first - r.head_at;
  CHECK(first * 2 < last);
  // The head was not held back until the first event (due 300 ms after it).
  CHECK(first >= 150ms);
  // The SSE request is logged once it ends, in the heavy lane.
  auto lines = s.wait_log_lines(1);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["lane"] == "heavy");
  CHECK(lines[0]["path"] == "/sse");
}

TEST_CASE("keep-alive holds on both sides: one client connection, one upstream connection",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  auto c = Conn::open(s.port);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(c.send(format_request("GET", "/", s.port)));
    auto res = c.read_response();
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->keep_alive);
  }
  CHECK(s.metric("sluice_upstream_connections{upstream=\"api\"}") == 1);
  // Counted once the response is written, which the client may see first.
  for (int i = 0; i < 100 && s.metric("sluice_requests_total{code=\"200\",lane=\"standard\"}") < 5;
       ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(s.metric("sluice_requests_total{code=\"200\",lane=\"standard\"}") == 5);
}

TEST_CASE("a head above SLUICE_MAX_HEADER_BYTES gets 431 and never reaches the upstream",
          "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_MAX_HEADER_BYTES", "4KiB"}}));
  auto res = request(s.port, "GET", "/", {{"X-Big", std::string(8000, 'x')}});
  CHECK(res.status == 431);
  CHECK(upstream_requests(up) == 0);
}

TEST_CASE("a body above SLUICE_MAX_BODY_BYTES gets 413 and never reaches the upstream",
          "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_MAX_BODY_BYTES", "1KiB"}}));
  SECTION("declared by Content-Length") {
    auto res = request(s.port, "POST", "/echo", {}, std::string(2000, 'b'));
    CHECK(res.status == 413);
  }
  SECTION("found while reading a chunked body") {
    auto c = Conn::open(s.port);
    std::string raw =
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" +
        std::string(2000, 'b') + "\r\n0\r\n\r\n";
    REQUIRE(c.send(raw));
    auto res = c.read_response();
    REQUIRE(res);
    CHECK(res->status == 413);
  }
  CHECK(upstream_requests(up) == 0);
}

TEST_CASE("a head trickled in slower than SLUICE_HEADER_TIMEOUT gets 408 and is closed",
          "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_HEADER_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send("GET / HTTP/1.1\r\nHost: t\r\n"));
  for (int i = 0; i < 6; ++i) {  // slowloris: a byte every 100ms keeps the socket busy
    std::this_thread::sleep_for(100ms);
    if (!c.send("X")) break;
  }
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 408);
  CHECK(c.closed_by_peer(2s));
  CHECK(upstream_requests(up) == 0);
}

TEST_CASE("an idle keep-alive connection is closed after SLUICE_IDLE_TIMEOUT",
          "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_IDLE_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/", s.port)));
  REQUIRE(c.read_response());
  CHECK(c.closed_by_peer(3s));
}

TEST_CASE("an upstream that refuses connections gets 502", "[e2e][proxy][upstream-failure]") {
  std::uint16_t dead_port;
  {
    Upstream up(kUpstream);
    dead_port = up.port;
  }  // stopped: its port now refuses
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "api=127.0.0.1:" + std::to_string(dead_port)}});
  auto res = request(s.port, "GET", "/");
  CHECK(res.status == 502);
  CHECK(res.header("Content-Type") == "application/json");
  CHECK(s.metric("sluice_upstream_connect_failures_total{upstream=\"api\"}") >= 1);
}

TEST_CASE(
    "an upstream answering a garbage status line or two Content-Lengths gets 502, never a replay",
    "[e2e][proxy][upstream-failure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  for (std::string kind : {"bad_status", "two_lengths"}) {
    INFO(kind);
    auto before = upstream_requests(up);
    auto res = request(s.port, "GET", "/raw?kind=" + kind);
    CHECK(res.status == 502);
    CHECK(res.body.find("upstream_bad_response") != std::string::npos);
    CHECK(res.body.find("hello") == std::string::npos);  // nothing of the answer passes
    CHECK(upstream_requests(up) - before == 1);          // it answered: not a cut, not replayed
  }
}

TEST_CASE("a response body that runs to the upstream's close arrives whole, framed for the client",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/raw?kind=to_close", s.port)));
  auto r = sluice::test::read_streamed(c, 5s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  CHECK(r.complete);  // the close ended it cleanly: the client gets its last chunk
  CHECK(r.body() == "all of it, to the close");
}

TEST_CASE("a response body cut short by the upstream cuts the client's connection",
          "[e2e][proxy][upstream-failure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  SECTION("shorter than its Content-Length") {
    auto c = Conn::open(s.port);
    REQUIRE(c.send(format_request("GET", "/raw?kind=short_length", s.port)));
    auto r = sluice::test::read_streamed(c, 5s);
    REQUIRE(r.head);
    CHECK(r.head->header("Content-Length") == "100");
    CHECK_FALSE(r.complete);
    CHECK(r.body() == "only part of it");
    CHECK(c.closed_by_peer(2s));
  }
  SECTION("chunks without the last chunk") {
    auto c = Conn::open(s.port);
    REQUIRE(c.send(format_request("GET", "/raw?kind=short_chunked", s.port)));
    auto r = sluice::test::read_streamed(c, 5s);
    REQUIRE(r.head);
    CHECK_FALSE(r.complete);  // never a clean end
    CHECK(r.body() == "hello");
    CHECK(c.closed_by_peer(2s));
  }
  SECTION("an SSE stream reset mid-way: the events sent arrive, then the abort") {
    auto c = Conn::open(s.port);
    REQUIRE(c.send(
        format_request("GET", "/raw?kind=sse_reset", s.port, {{"Accept", "text/event-stream"}})));
    auto r = sluice::test::read_streamed(c, 5s);
    REQUIRE(r.head);
    CHECK_FALSE(r.complete);
    CHECK(r.body() == "data: event 1\n\ndata: event 2\n\n");
    CHECK(c.closed_by_peer(2s));
  }
}

TEST_CASE("an upstream slower than SLUICE_UPSTREAM_RESPONSE_TIMEOUT gets 504 and is counted",
          "[e2e][proxy][upstream-failure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "300ms"}}));
  auto res = request(s.port, "GET", "/slow?ms=3000");
  CHECK(res.status == 504);
  CHECK(s.metric("sluice_upstream_timeouts_total{upstream=\"api\"}") == 1);
}

TEST_CASE("an SSE stream silent for SLUICE_SSE_IDLE_TIMEOUT is cut, visibly incomplete",
          "[e2e][proxy][sse]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_SSE_IDLE_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/sse?n=3&interval_ms=2000", s.port,
                                {{"Accept", "text/event-stream"}})));
  auto r = sluice::test::read_streamed(c, 5s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  CHECK_FALSE(r.complete);
  // Cut before the first event, due 2 s in: the stream never got that far.
  CHECK(r.body().find("event 1") == std::string::npos);
  CHECK(c.closed_by_peer(1s));
}

TEST_CASE("connections above SLUICE_MAX_CONNECTIONS are closed at once", "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_MAX_CONNECTIONS", "2"}}));
  auto a = Conn::open(s.port);
  auto b = Conn::open(s.port);
  REQUIRE(a.send(format_request("GET", "/", s.port)));
  REQUIRE(a.read_response());
  REQUIRE(b.send(format_request("GET", "/", s.port)));
  REQUIRE(b.read_response());
  auto c = Conn::open(s.port);
  CHECK(c.closed_by_peer(2s));
  CHECK(s.metric("sluice_client_connections_refused_total") == 1);
}

TEST_CASE("malformed and ambiguous requests are refused and never forwarded",
          "[e2e][proxy][framing]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  struct Case {
    const char* name;
    std::string raw;
    int status;
  };
  std::vector<Case> cases{
      {"garbage", "HELLO\r\n\r\n", 400},
      {"content-length with transfer-encoding",
       "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: "
       "chunked\r\n\r\n0\r\n\r\n",
       400},
      {"transfer-encoding with content-length",
       "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: "
       "5\r\n\r\n0\r\n\r\n",
       400},
      {"two different content-lengths",
       "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
       400},
      {"bad chunk size",
       "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: "
       "chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
       400},
      {"transfer-encoding not ending in chunked",
       "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400},
      {"chunked with a parameter",
       "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked;x=1\r\n\r\n0\r\n\r\n", 400},
      {"missing host", "GET / HTTP/1.1\r\n\r\n", 400},
      {"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"obs-fold", "GET / HTTP/1.1\r\nHost: t\r\nX-A: b\r\n c\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n", 400},
      {"bad target", "GET nope HTTP/1.1\r\nHost: t\r\n\r\n", 400},
  };
  for (auto& k : cases) {
    INFO(k.name);
    auto c = Conn::open(s.port);
    REQUIRE(c.send(k.raw));
    auto res = c.read_response(3s);
    REQUIRE(res);
    CHECK(res->status == k.status);
    CHECK(c.closed_by_peer(2s));
  }
  CHECK(upstream_requests(up) == 0);
}

TEST_CASE("Expect: 100-continue gets its 100 from Sluice and the body goes through",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = c.read_response(3s);
  REQUIRE(interim);
  CHECK(interim->status == 100);
  REQUIRE(c.send("hello"));
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "hello");
}

TEST_CASE("routes pick the lane and the upstream, no match gets 404", "[e2e][proxy][routes]") {
  Upstream a(kUpstream);
  Upstream b(kUpstream);
  Sluice s(
      kSluice,
      {{"SLUICE_UPSTREAMS",
        "a=127.0.0.1:" + std::to_string(a.port) + ";b=127.0.0.1:" + std::to_string(b.port)},
       {"SLUICE_THREADS", "1"},  // one log buffer: the lines come in request order
       {"SLUICE_ROUTES",
        R"([{"name":"uploads","prefix":"/up","methods":["POST"],"lane":"bulk","upstream":"b"},)"
        R"({"name":"api","prefix":"/api","lane":"standard"}])"}});
  auto up = request(s.port, "POST", "/up/load", {}, "x");
  CHECK(up.status == 200);
  CHECK(up.header("X-Upstream-Port") == std::to_string(b.port));
  auto api = request(s.port, "GET", "/api/v1");
  CHECK(api.header("X-Upstream-Port") == std::to_string(a.port));
  auto none = request(s.port, "GET", "/other");
  CHECK(none.status == 404);
  CHECK(upstream_requests(a) + upstream_requests(b) == 2);
  auto lines = s.wait_log_lines(3);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["lane"] == "bulk");
  CHECK(lines[0]["route"] == "uploads");
  CHECK(lines[0]["upstream"] == "b");
  CHECK(s.metric("sluice_requests_total{code=\"200\",lane=\"bulk\"}") == 1);
  CHECK(s.metric("sluice_client_errors_total{code=\"404\"}") == 1);
}

TEST_CASE("every access log line carries SPEC's fields", "[e2e][proxy][log]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  request(s.port, "POST", "/echo?secret=1", {{"X-Request-Id", "log-1"}}, "12345");
  auto lines = s.wait_log_lines(1);
  REQUIRE(lines.size() == 1);
  auto& l = lines[0];
  for (auto* f : {"ts", "request_id", "method", "path", "status", "lane", "route", "upstream",
                  "decision", "reason", "level", "retry_after_s", "queue_ms", "upstream_wait_ms",
                  "ttfb_ms", "duration_ms", "bytes_in", "bytes_out", "client"})
    CHECK(l.contains(f));
  CHECK(l["request_id"] == "log-1");
  CHECK(l["method"] == "POST");
  CHECK(l["path"] == "/echo");  // the query string is not logged
  CHECK(l["status"] == 200);
  CHECK(l["decision"] == "admitted");
  CHECK(l["bytes_in"] == 5);
  CHECK(l["client"] == "127.0.0.1");
  std::string ts = l["ts"];
  CHECK(ts.size() == 24);
  CHECK(ts.back() == 'Z');
}

TEST_CASE("/metrics serves Prometheus text with the proxy's measurements",
          "[e2e][proxy][metrics]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  request(s.port, "GET", "/");
  auto res = request(s.admin, "GET", "/metrics");
  CHECK(res.status == 200);
  CHECK(res.header("Content-Type").starts_with("text/plain; version=0.0.4"));
  for (auto* name :
       {"# TYPE sluice_requests_total counter", "# TYPE sluice_event_loop_lag_seconds histogram",
        "# TYPE sluice_upstream_wait_seconds histogram",
        "# TYPE sluice_request_duration_seconds histogram", "sluice_lane_in_flight{lane=\"heavy\"}",
        "sluice_upstream_wait_seconds_count{upstream=\"api\"} 1",
        "sluice_event_loop_stall_seconds{thread=\"0\"}", "\nsluice_handler_exceptions_total 0\n"})
    CHECK(res.body.find(name) != std::string::npos);
  CHECK(request(s.admin, "GET", "/healthz").status == 200);
  CHECK(request(s.admin, "GET", "/readyz").status == 200);
}

TEST_CASE("on SIGTERM /readyz turns 503 at once and a request in flight still completes",
          "[e2e][proxy][drain]") {
  Upstream up(kUpstream);
  Sluice s(kSluice,
           upstream_env(up, {{"SLUICE_DRAIN_DELAY", "300ms"}, {"SLUICE_DRAIN_TIMEOUT", "10s"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/slow?ms=1500", s.port)));
  std::this_thread::sleep_for(200ms);  // the request is with the upstream
  REQUIRE(kill(s.process.pid(), SIGTERM) == 0);
  REQUIRE(s.process.wait_for_err("draining", 2s));
  CHECK(request(s.admin, "GET", "/readyz").status == 503);
  auto res = c.read_response(5s);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "slow\n");
  CHECK_FALSE(res->keep_alive);  // draining: the connection is not kept
  auto code = s.process.wait_exit(10s);
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK(s.log_lines().size() == 1);  // the log was flushed before exit
}

TEST_CASE("a drain ends an SSE stream cleanly", "[e2e][proxy][drain][sse]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_DRAIN_DELAY", "0s"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/sse?n=100&interval_ms=100", s.port,
                                {{"Accept", "text/event-stream"}})));
  std::this_thread::sleep_for(350ms);
  REQUIRE(kill(s.process.pid(), SIGTERM) == 0);
  auto r = sluice::test::read_streamed(c, 5s);
  REQUIRE(r.head);
  CHECK(r.complete);  // the final chunk came: a clean end, not a cut
  CHECK(r.body().find("data: event 1\n\n") != std::string::npos);
  auto code = s.process.wait_exit(5s);
  REQUIRE(code);
  CHECK(*code == 0);
}

TEST_CASE("the watchdog sees a stalled event loop while it is stalled", "[e2e][proxy][pressure]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_DEBUG_ENDPOINTS", "true"}}));
  CHECK(s.metric("sluice_event_loop_stall_seconds{thread=\"1\"}") < 0.25);
  auto res = request(s.admin, "POST", "/admin/debug/block?thread=1&ms=1500");
  REQUIRE(res.status == 202);
  std::this_thread::sleep_for(600ms);
  // Read during the stall, from the admin thread, which is not stalled.
  auto stalled = s.metric("sluice_event_loop_stall_seconds{thread=\"1\"}");
  CHECK(stalled >= 0.3);
  CHECK(s.metric("sluice_event_loop_stall_seconds{thread=\"0\"}") < stalled);
  CHECK(s.metric("sluice_event_loop_stalls_total") >= 1);
  std::this_thread::sleep_for(1500ms);
  // Afterwards: no stall now, and the probe timer recorded the late run as lag.
  CHECK(s.metric("sluice_event_loop_stall_seconds{thread=\"1\"}") < 0.25);
  auto text = s.metrics();
  CHECK(Sluice::sample(text, "sluice_event_loop_lag_seconds_bucket{le=\"1\"}") <
        Sluice::sample(text, "sluice_event_loop_lag_seconds_count"));
}

TEST_CASE("fault injection is off unless enabled and needs the token when one is set",
          "[e2e][proxy][admin]") {
  Upstream up(kUpstream);
  {
    Sluice s(kSluice, upstream_env(up));
    CHECK(request(s.admin, "POST", "/admin/debug/block?ms=10").status == 404);
  }
  Sluice s(kSluice,
           upstream_env(up, {{"SLUICE_DEBUG_ENDPOINTS", "true"}, {"SLUICE_ADMIN_TOKEN", "t0k"}}));
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=10").status == 401);
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=10", {{"Authorization", "Bearer nope"}})
            .status == 401);
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=10", {{"Authorization", "Bearer t0k"}})
            .status == 202);
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=0", {{"Authorization", "Bearer t0k"}})
            .status == 400);
}

TEST_CASE("a GET on a pooled connection the upstream has closed is retried, once, unseen",
          "[e2e][proxy][retry]") {
  Upstream up(kUpstream, {"--keepalive-ms", "200"});
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  CHECK(request(s.port, "GET", "/").status == 200);
  std::this_thread::sleep_for(400ms);  // the upstream closes its idle side
  CHECK(request(s.port, "GET", "/").status == 200);
  CHECK(request(s.port, "POST", "/echo", {}, "x").status == 200);
}

TEST_CASE("a POST never goes out on a pooled connection the upstream has closed",
          "[e2e][proxy][retry]") {
  // kCheckIdleAfter is 500 ms: a GET would take this 300 ms-idle connection
  // unchecked (and replay on failure); a request that cannot be replayed is
  // checked first, so it gets a fresh connection and nothing is replayed.
  Upstream up(kUpstream, {"--keepalive-ms", "200"});
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  CHECK(request(s.port, "GET", "/").status == 200);
  std::this_thread::sleep_for(300ms);
  CHECK(request(s.port, "POST", "/echo").status == 200);
  CHECK(s.metric("sluice_upstream_retries_total{upstream=\"api\"}") == 0);
}

TEST_CASE("an upstream that closes without answering: a GET is replayed once, a POST never",
          "[e2e][proxy][retry]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  for (std::string drop : {"/drop", "/drop?reset=1"}) {
    INFO(drop);
    auto before = upstream_requests(up);
    CHECK(request(s.port, "GET", drop).status == 502);
    CHECK(upstream_requests(up) - before == 2);  // the request and its one replay
    before = upstream_requests(up);
    CHECK(request(s.port, "POST", drop, {}, "x").status == 502);
    CHECK(upstream_requests(up) - before == 1);  // it may have been processed: never again
    before = upstream_requests(up);
    CHECK(request(s.port, "POST", drop).status == 502);  // no body: the method alone decides
    CHECK(upstream_requests(up) - before == 1);
  }
}

TEST_CASE("a pooled connection idle long enough is checked before use, so nothing fails",
          "[e2e][proxy][retry]") {
  Upstream up(kUpstream, {"--keepalive-ms", "200"});
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_THREADS", "1"}}));
  CHECK(request(s.port, "GET", "/").status == 200);
  std::this_thread::sleep_for(900ms);  // past the 500ms after which a reuse is checked
  CHECK(request(s.port, "POST", "/echo", {}, "x").status == 200);
  CHECK(s.metric("sluice_upstream_retries_total{upstream=\"api\"}") == 0);
}

TEST_CASE("a WebSocket upgrade is tunnelled both ways for its lifetime",
          "[e2e][proxy][websocket]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  REQUIRE(
      c.send("GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
             "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"));
  auto head = c.read_response(3s);
  REQUIRE(head);
  CHECK(head->status == 101);
  CHECK(head->header("Upgrade") == "websocket");
  for (std::string msg : {"first frame bytes", "second, after a pause"}) {
    REQUIRE(c.send(msg));
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (got.size() < msg.size() && std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{c.fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) continue;
      char buf[256];
      auto n = ::recv(c.fd(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    CHECK(got == msg);
    std::this_thread::sleep_for(100ms);
  }
  c.shutdown_write();
  CHECK(c.closed_by_peer(3s));
  CHECK(s.metric("sluice_websocket_tunnels_total") == 1);
  auto lines = s.wait_log_lines(1);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["status"] == 101);
}

TEST_CASE("an HTTP/1.0 client gets an HTTP/1.0 answer it can read, ended by the close",
          "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  // No Host (allowed in 1.0) and a chunked answer upstream, which 1.0 cannot read.
  REQUIRE(c.send("GET /large?bytes=40000&chunked=1 HTTP/1.0\r\n\r\n"));
  auto raw = c.read_until_close(5s);
  REQUIRE(raw.starts_with("HTTP/1.0 200 OK\r\n"));
  auto head_end = raw.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  auto head = raw.substr(0, head_end);
  CHECK(head.find("Transfer-Encoding") == std::string::npos);
  CHECK(raw.size() - head_end - 4 == 40000);
}

TEST_CASE("HEAD keeps the upstream's Content-Length and sends no body", "[e2e][proxy]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("HEAD", "/large?bytes=1234", s.port)));
  auto res = c.read_response(3s, true);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->header("Content-Length") == "1234");
  CHECK(res->body.empty());
  REQUIRE(c.send(format_request("GET", "/", s.port)));  // the connection is still in step
  auto next = c.read_response(3s);
  REQUIRE(next);
  CHECK(next->body == "ok\n");
}

TEST_CASE("during the drain delay a new connection is still served, then told to close",
          "[e2e][proxy][drain]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_DRAIN_DELAY", "3s"}}));
  REQUIRE(kill(s.process.pid(), SIGTERM) == 0);
  REQUIRE(s.process.wait_for_err("draining", 2s));
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/", s.port)));
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK_FALSE(res->keep_alive);
  CHECK(c.closed_by_peer(2s));
  auto code = s.process.wait_exit(10s);
  REQUIRE(code);
  CHECK(*code == 0);
}

TEST_CASE("HEAD on the admin listener states the length and sends no body", "[e2e][proxy][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up));
  auto c = Conn::open(s.admin);
  REQUIRE(
      c.send("HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /readyz HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto head = c.read_response(3s, true);
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->header("Content-Length") == "3");  // "ok\n"
  auto next = c.read_response(3s);
  REQUIRE(next);
  CHECK(next->body == "ready\n");
}

TEST_CASE("a request body that stalls past SLUICE_BODY_TIMEOUT gets 408 and is closed",
          "[e2e][proxy][limits]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_BODY_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789"));
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 408);
  CHECK(c.closed_by_peer(2s));
  // The upstream saw at most the start of a body, and then its connection closed.
  CHECK(sluice::test::eventually(
      [&] { return json::parse(request(up.port, "GET", "/stats").body)["in_flight"] == 0; }, 3s));
}

TEST_CASE("an upstream connect that hangs past SLUICE_UPSTREAM_CONNECT_TIMEOUT gets 502",
          "[e2e][proxy][upstream-failure]") {
  // A listener that never accepts, with its queue full: further SYNs go
  // unanswered, so a connect to it hangs (on loopback, without another host).
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 0) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  auto port = ntohs(addr.sin_port);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    fillers.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "api=127.0.0.1:" + std::to_string(port)},
                     {"SLUICE_UPSTREAM_CONNECT_TIMEOUT", "300ms"}});
  auto started = std::chrono::steady_clock::now();
  auto res = request(s.port, "GET", "/");
  CHECK(res.status == 502);
  CHECK(json::parse(res.body)["error"] == "upstream_connect_timeout");
  CHECK(std::chrono::steady_clock::now() - started >= 250ms);  // it waited, then gave up
  CHECK(s.metric("sluice_upstream_connect_failures_total{upstream=\"api\"}") >= 1);
  for (int fd : fillers) ::close(fd);
  ::close(listener);
}
