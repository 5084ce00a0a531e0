// SSE keep-alive comments through the real binary (2 threads, two upstreams):
// a route with sse_keepalive sends ": keep-alive" comment lines while its
// upstream is silent, before the first event and between events, never inside
// one, so no gap reaches an idle cut on the path; a route without it does not.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using sluice::test::Conn;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

struct Stream {
  std::string body;
  std::chrono::milliseconds longest_gap{0};  // between the head and the first piece, or two pieces
  bool complete = false;
};

// Three events 1.5 s apart (the first 1.5 s after the head).
Stream stream(std::uint16_t port, bool keepalive) {
  auto c = Conn::open(port);
  sluice::test::Headers h{{"Accept", "text/event-stream"}};
  if (keepalive) h.emplace_back("X-Keepalive", "on");
  REQUIRE(c.send(sluice::test::format_request("GET", "/sse?n=3&interval_ms=1500", port, h)));
  auto r = sluice::test::read_streamed(c, 15s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  Stream out;
  out.body = r.body();
  out.complete = r.complete;
  auto last = r.head_at;
  for (const auto& [at, piece] : r.chunks) {
    out.longest_gap =
        std::max(out.longest_gap, std::chrono::duration_cast<std::chrono::milliseconds>(at - last));
    last = at;
  }
  return out;
}

// The body's blocks (separated by a blank line).
std::vector<std::string> blocks(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (auto end = body.find("\n\n"); end != std::string::npos; end = body.find("\n\n", at)) {
    out.push_back(body.substr(at, end - at));
    at = end + 2;
  }
  CHECK(at == body.size());  // nothing after the last blank line
  return out;
}

}  // namespace

TEST_CASE(
    "an SSE route with sse_keepalive sends comment lines during its upstream's silence, at "
    "event boundaries only, so no gap reaches an idle cut on the path",
    "[e2e][sse][keepalive]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           sluice::test::two_upstreams(
               api, search,
               {{"SLUICE_ROUTES",
                 R"([{"prefix":"/sse","header":{"name":"X-Keepalive","value":"on"},)"
                 R"("sse_keepalive":"300ms","lane":"heavy"},)"
                 R"({"prefix":"/search","upstream":"search"},{"prefix":"/","lane":"heavy"}])"},
                {"SLUICE_THREADS", "2"}}));
  // An idle cut on the path (a load balancer's 60 s, here 800 ms) would end a
  // stream silent for longer.
  constexpr auto kIdleCut = 800ms;

  auto kept = stream(s.port, true);
  CHECK(kept.complete);
  CHECK(kept.longest_gap < kIdleCut);
  int comments = 0, events = 0;
  for (const auto& b : blocks(kept.body)) {
    if (b == ": keep-alive") {
      ++comments;
    } else {
      CHECK(b.rfind("id: ", 0) == 0);  // a whole event: no comment inside it
      CHECK(b.find(": keep-alive") == std::string::npos);
      ++events;
    }
  }
  CHECK(events == 3);
  CHECK(comments >= 6);  // 4.5 s of silence in three spells, one every 300 ms
  CHECK(s.metric("sluice_sse_keepalives_total") == comments);

  // The same stream on a route without it: silent spells of 1.5 s.
  auto plain = stream(s.port, false);
  CHECK(plain.complete);
  CHECK(plain.longest_gap >= 1200ms);
  CHECK(plain.body.find(": keep-alive") == std::string::npos);
  CHECK(s.metric("sluice_sse_keepalives_total") == comments);
}

TEST_CASE("an SSE keep-alive comment never goes inside an event: it waits for the boundary",
          "[e2e][sse][keepalive]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           sluice::test::two_upstreams(
               api, search,
               {{"SLUICE_ROUTES", R"([{"prefix":"/search","upstream":"search"},)"
                                  R"({"prefix":"/","lane":"heavy","sse_keepalive":"200ms"}])"},
                {"SLUICE_THREADS", "2"}}));
  // One event sent in two halves 1 s apart: the silence inside it gets no comment.
  auto c = Conn::open(s.port);
  REQUIRE(c.send(sluice::test::format_request("GET", "/raw?kind=sse_split", s.port,
                                              {{"Accept", "text/event-stream"}})));
  auto r = sluice::test::read_streamed(c, 10s);
  REQUIRE(r.head);
  CHECK(r.head->status == 200);
  CHECK(r.body() == "id: 1\ndata: half and all\n\n");
  CHECK(s.metric("sluice_sse_keepalives_total") == 0);
}
