// End-to-end tests of sluice-upstream: the real binary on a free loopback port, driven over
// real sockets.
#include <poll.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using sluice::test::Conn;
using sluice::test::format_request;
using sluice::test::request;
using sluice::test::Upstream;

namespace {

const std::string kBin = SLUICE_UPSTREAM_BIN;

std::string pattern_bytes(std::size_t n) {
  constexpr std::string_view kUnit = "0123456789abcdef";
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = kUnit[i % kUnit.size()];
  return out;
}

nlohmann::json stats(std::uint16_t port) {
  return nlohmann::json::parse(request(port, "GET", "/stats").body);
}

// Polls /stats until `ready` holds; the upstream counts asynchronously to the client.
template <class Predicate>
bool wait_for_stats(std::uint16_t port, Predicate ready, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready(stats(port))) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

std::string chunked(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& piece : pieces) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    out += size + piece + "\r\n";
  }
  return out + "0\r\n\r\n";
}

}  // namespace

TEST_CASE("the upstream announces its port and answers ok on any other path", "[e2e][upstream]") {
  Upstream up(kBin);
  REQUIRE(up.port != 0);
  const auto err = up.process.err();
  CHECK(err == "sluice-upstream: listening on 127.0.0.1:" + std::to_string(up.port) + "\n");

  for (const auto* target : {"/", "/anything/else?x=1"}) {
    const auto res = request(up.port, "GET", target);
    CHECK(res.status == 200);
    CHECK(res.body == "ok\n");
    CHECK(res.header("content-type") == "text/plain");
    CHECK(res.header("X-Upstream-Port") == std::to_string(up.port));
  }
}

TEST_CASE("echo returns a Content-Length body with the same length and content type",
          "[e2e][upstream]") {
  Upstream up(kBin);
  const auto body = pattern_bytes(300 * 1024) + "tail";
  const auto res = request(up.port, "POST", "/echo", {{"Content-Type", "text/x-test"}}, body);
  CHECK(res.status == 200);
  CHECK(res.header("Content-Length") == std::to_string(body.size()));
  CHECK(res.header("Transfer-Encoding").empty());
  CHECK(res.header("Content-Type") == "text/x-test");
  CHECK(res.body == body);
}

TEST_CASE("echo answers a chunked body chunked, defaulting the content type", "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("POST", "/echo", up.port, {{"Transfer-Encoding", "chunked"}},
                                   chunked({"hello ", "chunked ", "world"}))));
  const auto res = conn.read_response();
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->header("Transfer-Encoding") == "chunked");
  CHECK(res->header("Content-Type") == "application/octet-stream");
  CHECK(res->body == "hello chunked world");
  CHECK(res->keep_alive);
}

TEST_CASE("echo relays the first piece of a body before the rest is sent", "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("POST", "/echo", up.port, {{"Transfer-Encoding", "chunked"}}) +
                    "6\r\nfirst \r\n"));
  sluice::test::BodyReader reader(conn);
  const auto head = reader.read_head();
  REQUIRE(head);
  CHECK(head->status == 200);
  const auto first = reader.next();
  REQUIRE(first);
  CHECK(first->second == "first ");

  REQUIRE(conn.send("6\r\nsecond\r\n0\r\n\r\n"));
  const auto rest = reader.read_all(5s);
  REQUIRE(reader.done());
  std::string tail;
  for (const auto& chunk : rest) tail += chunk.second;
  CHECK(tail == "second");
}

TEST_CASE("headers lists the request headers in order as JSON and counts the body",
          "[e2e][upstream]") {
  Upstream up(kBin);
  const auto res = request(up.port, "PUT", "/headers?x=1",
                           {{"X-Zeta", "last-letter"}, {"X-Alpha", "first-letter"}}, "12345");
  REQUIRE(res.status == 200);
  CHECK(res.header("Content-Type") == "application/json");
  const auto doc = nlohmann::json::parse(res.body);
  CHECK(doc["method"] == "PUT");
  CHECK(doc["target"] == "/headers?x=1");
  CHECK(doc["version"] == 11);
  CHECK(doc["body_bytes"] == 5);
  const auto headers = doc["headers"];
  REQUIRE(headers.size() == 4);
  CHECK(headers[0] == nlohmann::json::array({"Host", "127.0.0.1:" + std::to_string(up.port)}));
  CHECK(headers[1] == nlohmann::json::array({"X-Zeta", "last-letter"}));
  CHECK(headers[2] == nlohmann::json::array({"X-Alpha", "first-letter"}));
  CHECK(headers[3] == nlohmann::json::array({"Content-Length", "5"}));
}

TEST_CASE("status answers the requested code and rejects codes outside 200..599",
          "[e2e][upstream]") {
  Upstream up(kBin);
  for (const int code : {200, 404, 418, 503, 599}) {
    const auto res = request(up.port, "GET", "/status/" + std::to_string(code));
    CHECK(res.status == code);
    CHECK(res.body == "status " + std::to_string(code) + "\n");
  }
  const auto empty = request(up.port, "GET", "/status/204");
  CHECK(empty.status == 204);
  CHECK(empty.header("Content-Length").empty());
  CHECK(empty.body.empty());
  const auto not_modified = request(up.port, "GET", "/status/304");
  CHECK(not_modified.status == 304);
  CHECK(not_modified.body.empty());
  for (const auto* bad : {"/status/100", "/status/600", "/status/abc"}) {
    CHECK(request(up.port, "GET", bad).status == 400);
  }
}

TEST_CASE("large sends N pattern bytes with Content-Length", "[e2e][upstream]") {
  Upstream up(kBin);
  const std::size_t n = 1024 * 1024 + 7;
  const auto res = request(up.port, "GET", "/large?bytes=" + std::to_string(n));
  CHECK(res.status == 200);
  CHECK(res.header("Content-Length") == std::to_string(n));
  CHECK(res.body.size() == n);
  CHECK(res.body == pattern_bytes(n));

  const auto head = request(up.port, "HEAD", "/large?bytes=" + std::to_string(n));
  CHECK(head.status == 200);
  CHECK(head.header("Content-Length") == std::to_string(n));
  CHECK(head.body.empty());

  const auto none = request(up.port, "GET", "/large?bytes=0");
  CHECK(none.status == 200);
  CHECK(none.header("Content-Length") == "0");
  CHECK(none.body.empty());
}

TEST_CASE("large with chunked=1 sends the same bytes chunked", "[e2e][upstream]") {
  Upstream up(kBin);
  const std::size_t n = 100 * 1000;
  const auto res = request(up.port, "GET", "/large?bytes=" + std::to_string(n) + "&chunked=1");
  CHECK(res.status == 200);
  CHECK(res.header("Transfer-Encoding") == "chunked");
  CHECK(res.header("Content-Length").empty());
  CHECK(res.body == pattern_bytes(n));
}

TEST_CASE("sse events arrive spread out in time, not all at the end", "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("GET", "/sse?n=5&interval_ms=150", up.port,
                                   {{"Accept", "text/event-stream"}})));
  const auto streamed = sluice::test::read_streamed(conn, 10s);
  REQUIRE(streamed.head);
  CHECK(streamed.head->status == 200);
  CHECK(streamed.head->header("Content-Type") == "text/event-stream");
  CHECK(streamed.head->header("Cache-Control") == "no-cache");
  CHECK(streamed.head->header("Transfer-Encoding") == "chunked");
  REQUIRE(streamed.complete);

  std::string expected;
  for (int i = 1; i <= 5; ++i) {
    expected += "id: " + std::to_string(i) + "\ndata: event " + std::to_string(i) + "\n\n";
  }
  CHECK(streamed.body() == expected);

  // Four intervals (600 ms) separate the first event from the last; allow for a slow machine
  // but not for a stream buffered until its end.
  REQUIRE(streamed.chunks.size() >= 2);
  const auto spread = streamed.chunks.back().first - streamed.chunks.front().first;
  CHECK(spread >= 300ms);
  CHECK(streamed.chunks.front().second.rfind("id: 1\n", 0) == 0);

  // The connection stays usable after a cleanly ended stream.
  REQUIRE(conn.send(format_request("GET", "/", up.port)));
  const auto next = conn.read_response();
  REQUIRE(next);
  CHECK(next->body == "ok\n");
}

TEST_CASE("sse stops streaming when the client goes away", "[e2e][upstream]") {
  Upstream up(kBin);
  {
    auto conn = Conn::open(up.port);
    REQUIRE(conn.send(format_request("GET", "/sse?n=1000&interval_ms=50", up.port)));
    sluice::test::BodyReader reader(conn);
    REQUIRE(reader.read_head());
    REQUIRE(reader.next());
  }
  // The stream would last 50 s; the slot must come back long before.
  CHECK(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["in_flight"] == 0; }, 5s));
}

TEST_CASE("capacity answers 429 with Retry-After while a slow request holds the slot",
          "[e2e][upstream]") {
  Upstream up(kBin, {"--capacity", "1"});
  auto slow = Conn::open(up.port);
  REQUIRE(slow.send(format_request("GET", "/slow?ms=1500", up.port)));
  REQUIRE(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["in_flight"] == 1; }, 5s));

  const auto rejected = request(up.port, "GET", "/");
  CHECK(rejected.status == 429);
  CHECK(rejected.header("Retry-After") == "1");
  CHECK(rejected.body == "over capacity\n");
  CHECK(rejected.header("X-Upstream-Port") == std::to_string(up.port));

  const auto done = slow.read_response(10s);
  REQUIRE(done);
  CHECK(done->status == 200);
  CHECK(done->body == "slow\n");
  CHECK(request(up.port, "GET", "/").status == 200);

  const auto s = stats(up.port);
  CHECK(s["rejected"] == 1);
  CHECK(s["max_in_flight"] == 1);
}

TEST_CASE("over-capacity queue makes requests above C wait for a slot, oldest first",
          "[e2e][upstream]") {
  Upstream up(kBin, {"--capacity", "1", "--over-capacity", "queue", "--threads", "2"});
  auto holder = Conn::open(up.port);
  REQUIRE(holder.send(format_request("GET", "/slow?ms=300", up.port)));
  REQUIRE(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["in_flight"] == 1; }, 5s));
  // Two more, one after the other: both wait, in that order.
  auto first = Conn::open(up.port);
  REQUIRE(first.send(format_request("GET", "/slow?ms=100", up.port)));
  REQUIRE(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["waiting"] == 1; }, 5s));
  auto second = Conn::open(up.port);
  REQUIRE(second.send(format_request("GET", "/", up.port)));
  REQUIRE(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["waiting"] == 2; }, 5s));
  CHECK(stats(up.port)["in_flight"] == 1);

  const auto held = holder.read_response(10s);
  REQUIRE(held);
  CHECK(held->status == 200);
  const auto last = second.read_response(10s);
  REQUIRE(last);
  CHECK(last->status == 200);
  CHECK(last->body == "ok\n");
  // With one slot, the second waiter can only start once the first has been answered: the
  // first one's response is already there.
  pollfd ready{first.fd(), POLLIN, 0};
  CHECK(::poll(&ready, 1, 0) == 1);
  const auto earlier = first.read_response(10s);
  REQUIRE(earlier);
  CHECK(earlier->status == 200);
  CHECK(earlier->body == "slow\n");

  const auto s = stats(up.port);
  CHECK(s["requests"] == 3);
  CHECK(s["rejected"] == 0);
  CHECK(s["queued"] == 2);
  CHECK(s["waiting"] == 0);
  CHECK(s["in_flight"] == 0);
  CHECK(s["max_in_flight"] == 1);
  // The freed slot serves the next request at once.
  CHECK(request(up.port, "GET", "/").status == 200);
}

TEST_CASE("over-capacity takes 429 or queue, nothing else", "[e2e][upstream]") {
  sluice::test::Process bad({kBin, "--over-capacity", "drop"});
  CHECK(bad.wait_exit(5s) == 2);
  CHECK(bad.err().find("--over-capacity: expected 429 or queue, got 'drop'") != std::string::npos);
}

TEST_CASE("stats counts requests but not itself", "[e2e][upstream]") {
  Upstream up(kBin);
  CHECK(stats(up.port) == nlohmann::json{{"requests", 0},
                                         {"in_flight", 0},
                                         {"max_in_flight", 0},
                                         {"max_offered", 0},
                                         {"rejected", 0},
                                         {"queued", 0},
                                         {"waiting", 0}});
  request(up.port, "GET", "/");
  request(up.port, "GET", "/status/500");
  request(up.port, "POST", "/echo", {}, "x");
  const auto s = stats(up.port);
  CHECK(s["requests"] == 3);
  CHECK(s["in_flight"] == 0);
  CHECK(s["max_in_flight"] == 1);
  CHECK(s["max_offered"] == 1);
  CHECK(s["rejected"] == 0);
}

TEST_CASE(
    "stats counts a refused request in the concurrency offered, and reset_max restarts the "
    "highs from now",
    "[e2e][upstream]") {
  Upstream up(kBin, {"--capacity", "1"});
  std::jthread held([&] { request(up.port, "GET", "/slow?ms=800"); });
  REQUIRE(sluice::test::eventually([&] { return stats(up.port)["in_flight"] == 1; }, 5s));
  CHECK(request(up.port, "GET", "/").status == 429);
  auto s = nlohmann::json::parse(request(up.port, "GET", "/stats?reset_max=1").body);
  CHECK(s["max_in_flight"] == 1);
  CHECK(s["max_offered"] == 2);
  held.join();
  s = stats(up.port);
  CHECK(s["max_in_flight"] == 1);  // the one in flight at the reset
  CHECK(s["max_offered"] == 1);
}

TEST_CASE("service-ms delays ordinary responses but not stats", "[e2e][upstream]") {
  Upstream up(kBin, {"--service-ms", "2000"});
  const auto start = std::chrono::steady_clock::now();
  CHECK(request(up.port, "GET", "/").status == 200);
  CHECK(std::chrono::steady_clock::now() - start >= 2000ms);

  const auto stats_start = std::chrono::steady_clock::now();
  CHECK(request(up.port, "GET", "/stats").status == 200);
  CHECK(std::chrono::steady_clock::now() - stats_start < 1500ms);
}

TEST_CASE("one connection carries several requests, pipelined too", "[e2e][upstream]") {
  Upstream up(kBin, {"--threads", "2"});
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("GET", "/status/201", up.port) +
                    format_request("POST", "/echo", up.port, {}, "abc") +
                    format_request("GET", "/", up.port)));
  const auto first = conn.read_response();
  const auto second = conn.read_response();
  const auto third = conn.read_response();
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(third);
  CHECK(first->status == 201);
  CHECK(second->body == "abc");
  CHECK(third->body == "ok\n");
  CHECK(third->keep_alive);
}

TEST_CASE("Connection: close ends the connection after the response", "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("GET", "/", up.port, {{"Connection", "close"}})));
  const auto res = conn.read_response();
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK_FALSE(res->keep_alive);
  CHECK(conn.closed_by_peer(5s));
}

TEST_CASE("a malformed request gets 400 and the connection closes", "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send("GARBAGE\r\n\r\n"));
  const auto res = conn.read_response();
  REQUIRE(res);
  CHECK(res->status == 400);
  CHECK(conn.closed_by_peer(5s));

  auto bad_chunk = Conn::open(up.port);
  REQUIRE(bad_chunk.send(
      format_request("POST", "/headers", up.port, {{"Transfer-Encoding", "chunked"}}) +
      "zz\r\nnope\r\n"));
  const auto bad = bad_chunk.read_response();
  REQUIRE(bad);
  CHECK(bad->status == 400);
  CHECK(bad_chunk.closed_by_peer(5s));
}

TEST_CASE("Expect: 100-continue gets an interim response before the body is sent",
          "[e2e][upstream]") {
  Upstream up(kBin);
  auto conn = Conn::open(up.port);
  REQUIRE(conn.send(format_request("POST", "/echo", up.port,
                                   {{"Expect", "100-continue"}, {"Content-Length", "4"}})));
  const auto interim = conn.read_response();
  REQUIRE(interim);
  CHECK(interim->status == 100);
  REQUIRE(conn.send("data"));
  const auto res = conn.read_response();
  REQUIRE(res);
  CHECK(res->body == "data");
}

TEST_CASE("clients that reset mid-response do not bring the upstream down", "[e2e][upstream]") {
  Upstream up(kBin, {"--threads", "2"});
  for (int i = 0; i < 5; ++i) {
    auto conn = Conn::open(up.port);
    REQUIRE(conn.send(format_request("GET", "/large?bytes=50000000", up.port)));
    sluice::test::BodyReader reader(conn);
    REQUIRE(reader.read_head());
    conn.reset();
  }
  {
    auto conn = Conn::open(up.port);
    REQUIRE(conn.send(format_request("POST", "/echo", up.port, {{"Content-Length", "100000"}}) +
                      "partial"));
    conn.reset();
  }
  CHECK(request(up.port, "GET", "/").status == 200);
  CHECK(wait_for_stats(
      up.port, [](const nlohmann::json& s) { return s["in_flight"] == 0; }, 5s));
  CHECK(up.process.running());
}

TEST_CASE("concurrent slow requests are served in parallel", "[e2e][upstream][concurrency]") {
  Upstream up(kBin, {"--threads", "4"});
  std::vector<Conn> conns;
  for (int i = 0; i < 8; ++i) {
    conns.push_back(Conn::open(up.port));
    REQUIRE(conns.back().send(format_request("GET", "/slow?ms=500", up.port)));
  }
  for (auto& conn : conns) {
    const auto res = conn.read_response(10s);
    REQUIRE(res);
    CHECK(res->body == "slow\n");
  }
  CHECK(stats(up.port)["max_in_flight"] == 8);
}

TEST_CASE("SIGTERM and SIGINT make the upstream exit 0", "[e2e][upstream]") {
  for (const int sig : {SIGTERM, SIGINT}) {
    Upstream up(kBin, {"--threads", "3"});
    auto idle = Conn::open(up.port);  // an open keep-alive connection must not hold it up
    CHECK(request(up.port, "GET", "/").status == 200);
    CHECK(up.process.signal_and_wait(sig, 5s) == 0);
    CHECK_FALSE(up.process.running());
  }
}
