// First-event failover through the real binary (2 threads, two upstreams, a
// fresh instance each): a route's first_event_timeout moves a request whose
// upstream sends no head, or for SSE no first event, in time, before any byte
// went to the client, once, to an alternative; counted and logged with
// fallback_why first_event. Over HTTP/1.1 and HTTP/2 alike.
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::two_upstreams;
using sluice::test::Upstream;

namespace {

// /sse and /echo on api, with search as their alternative after 500 ms.
std::map<std::string, std::string> env(const Upstream& api, const Upstream& search,
                                       const std::string& timeout = "500ms") {
  return two_upstreams(
      api, search,
      {{"SLUICE_H2C", "true"},
       {"SLUICE_ROUTES", R"([{"prefix":"/sse","lane":"heavy","alternatives":["search"],)"
                         R"("first_event_timeout":")" +
                             timeout +
                             R"("},)"
                             R"({"prefix":"/echo","alternatives":["search"],)"
                             R"("first_event_timeout":")" +
                             timeout + R"("},{"prefix":"/"}])"}});
}

double fallbacks(Sluice& s) {
  return std::max(
      0.0,
      s.metric(R"(sluice_upstream_fallbacks_total{from="api",to="search",why="first_event"})"));
}

json last_request(Sluice& s) {
  auto lines = s.wait_log_lines(1);
  REQUIRE(!lines.empty());
  return lines.back();
}

}  // namespace

TEST_CASE("an SSE stream whose first event is late moves to an alternative before any byte went",
          "[e2e][first_event]") {
  Upstream api(kUpstream, {"--sse-first-ms", "5000"}), search(kUpstream);
  Sluice s(kSluice, env(api, search));
  auto c = sluice::test::Conn::open(s.port);
  REQUIRE(c.send(sluice::test::format_request("GET", "/sse?n=2&interval_ms=100", s.port)));
  auto r = sluice::test::read_streamed(c, 10s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  // Its head and its events are the alternative's: the late one's head was held.
  CHECK(r.head->header("X-Upstream-Port") == std::to_string(search.port));
  CHECK(r.complete);
  CHECK(r.body().find("data: event 2\n\n") != std::string::npos);
  CHECK(fallbacks(s) == 1);
  auto line = last_request(s);
  CHECK(line["upstream"] == "search");
  CHECK(line["fallback_from"] == "api");
  CHECK(line["fallback_why"] == "first_event");
}

TEST_CASE("a late response head moves the request, its small body sent again",
          "[e2e][first_event]") {
  Upstream api(kUpstream, {"--service-ms", "5000"}), search(kUpstream);
  Sluice s(kSluice, env(api, search));
  auto r = request(s.port, "POST", "/echo", {{"Content-Type", "text/plain"}}, "hello, again");
  CHECK(r.status == 200);
  CHECK(r.body == "hello, again");
  CHECK(r.header("X-Upstream-Port") == std::to_string(search.port));
  CHECK(fallbacks(s) == 1);
  // In time, it stays: no move.
  Upstream quick(kUpstream);
  Sluice t(kSluice, env(quick, search));
  CHECK(request(t.port, "POST", "/echo", {}, "x").header("X-Upstream-Port") ==
        std::to_string(quick.port));
  CHECK(fallbacks(t) == 0);
}

TEST_CASE("a stream moves once: late on the alternative too, it waits there",
          "[e2e][first_event]") {
  Upstream api(kUpstream, {"--sse-first-ms", "1500"}),
      search(kUpstream, {"--sse-first-ms", "1500"});
  Sluice s(kSluice, env(api, search));
  auto c = sluice::test::Conn::open(s.port);
  REQUIRE(c.send(sluice::test::format_request("GET", "/sse?n=1&interval_ms=100", s.port)));
  auto r = sluice::test::read_streamed(c, 10s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  CHECK(r.head->header("X-Upstream-Port") == std::to_string(search.port));
  CHECK(r.body().find("data: event 1\n\n") != std::string::npos);
  CHECK(fallbacks(s) == 1);
  CHECK(s.metric(R"(sluice_upstream_fallbacks_total{from="search",to="api",why="first_event"})") <=
        0);
}

TEST_CASE("a late first event fails over on an HTTP/2 stream too", "[e2e][first_event][h2]") {
  Upstream api(kUpstream, {"--sse-first-ms", "5000"}), search(kUpstream);
  Sluice s(kSluice, env(api, search));
  Process curl({"curl", "-sS", "-N", "--http2-prior-knowledge", "-D", "-",
                "http://127.0.0.1:" + std::to_string(s.port) + "/sse?n=2&interval_ms=100"});
  REQUIRE(curl.wait_exit(10s) == 0);
  auto out = curl.out();
  INFO(out << curl.err());
  CHECK(out.find("HTTP/2 200") != std::string::npos);
  CHECK(out.find("x-upstream-port: " + std::to_string(search.port)) != std::string::npos);
  CHECK(out.find("data: event 2\n\n") != std::string::npos);
  CHECK(fallbacks(s) == 1);
}
