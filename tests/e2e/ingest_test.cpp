// The ingest byte budget through the real binary (2 threads, two upstreams, a
// fresh instance): many large uploads, marked heavy by their route's
// min_body_bytes and sent at a client's pace, beside small standard requests
// with bodies. The bytes in flight stay under the budget and heavy's share,
// standard keeps every request, and refused uploads carry Retry-After.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Conn;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kUpload = 512 * kKiB;
constexpr std::size_t kPiece = 64 * kKiB;

// One upload of kUpload bytes, as large uploads go (Expect: 100-continue:
// the body follows Sluice's 100), at 64 KiB per 250 ms; the final response, or
// nullopt when none came.
std::optional<sluice::test::Response> upload(std::uint16_t port) {
  auto c = Conn::open(port);
  const std::string piece(kPiece, 'u');
  if (!c.send(sluice::test::format_request(
          "POST", "/v1/files", port,
          {{"Content-Length", std::to_string(kUpload)}, {"Expect", "100-continue"}}, "")))
    return std::nullopt;
  auto first = c.read_response(10s);
  if (!first || first->status != 100) return first;  // answered without the body: refused
  for (std::size_t sent = 0; sent < kUpload; sent += kPiece) {
    if (!c.send(piece)) break;
    std::this_thread::sleep_for(250ms);
  }
  return c.read_response(10s);
}

}  // namespace

TEST_CASE(
    "many large uploads beside small standard requests: the ingest budget holds the bytes in "
    "flight under its limit, standard keeps its success, refused uploads carry Retry-After",
    "[e2e][ingest]") {
  Upstream api(kUpstream), search(kUpstream);
  // Bodies of 256 KiB or more on /v1 are heavy (the route's min_body_bytes), on `search`.
  Sluice s(kSluice,
           sluice::test::two_upstreams(
               api, search,
               {{"SLUICE_ROUTES",
                 R"([{"prefix":"/v1/","min_body_bytes":262144,"lane":"heavy","upstream":"search"},)"
                 R"({"prefix":"/search","upstream":"search"},{"prefix":"/","lane":"standard"}])"},
                {"SLUICE_THREADS", "2"},
                {"SLUICE_INGEST_BUDGET", "4MiB"}}));
  constexpr double kBudget = 4.0 * 1024 * 1024;
  constexpr double kHeavyCap = 0.4 * kBudget;  // SLUICE_INGEST_SHARES' default

  std::atomic<bool> stop{false};
  std::mutex m;
  std::map<int, int> uploads;  // status -> count
  std::vector<std::string> retry_afters, rejects, standard_failures;
  std::vector<std::thread> clients;
  for (int i = 0; i < 30; ++i)
    clients.emplace_back([&] {
      while (!stop) {
        auto r = upload(s.port);
        std::lock_guard lock(m);
        ++uploads[r ? r->status : 0];
        if (r && r->status == 503) {
          retry_afters.push_back(r->header("Retry-After"));
          rejects.push_back(r->header("X-Sluice-Reject"));
        }
      }
    });
  // Small standard requests with bodies, on the other upstream: they share the
  // process's ingest budget with the uploads, not a bulkhead (an upload holds
  // its seat for its whole 2 s, and the lane rules would answer for that).
  std::atomic<int> standard_ok{0}, standard_other{0};
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&, i] {
      const std::string body(kKiB, 's');
      while (!stop) {
        auto r = request(s.port, "POST", i == 0 ? "/items" : "/orders", {}, body);
        ++(r.status == 200 ? standard_ok : standard_other);
        if (r.status != 200) {
          std::lock_guard lock(m);
          standard_failures.push_back(std::to_string(r.status) + " " + r.header("X-Sluice-Reject") +
                                      " " + r.body);
        }
        std::this_thread::sleep_for(20ms);
      }
    });
  // The bytes in flight, as /admin/state tells them, all along.
  double most = 0, most_heavy = 0;
  bool waited = false;
  auto until = std::chrono::steady_clock::now() + 6s;
  while (std::chrono::steady_clock::now() < until) {
    auto st = json::parse(request(s.admin, "GET", "/admin/state").body)["ingest"];
    most = std::max(most, st["in_flight"].get<double>());
    most_heavy = std::max(most_heavy, st["lanes"]["heavy"]["in_flight"].get<double>());
    waited = waited || st["lanes"]["heavy"]["waiting"].get<int>() > 0;
    std::this_thread::sleep_for(20ms);
  }
  stop = true;
  for (auto& t : clients) t.join();

  INFO("uploads by status: " << json(uploads).dump());
  INFO("standard failures: " << json(standard_failures).dump());
  CHECK(most > 0);
  CHECK(most <= kBudget);
  CHECK(most_heavy <= kHeavyCap);
  CHECK(most_heavy >= kUpload);  // uploads were in flight, heavy by their size
  CHECK(waited);                 // and queued for room
  CHECK(uploads[200] > 0);
  CHECK(uploads[0] == 0);  // every upload got an answer
  REQUIRE(uploads[503] > 0);
  for (const auto& r : rejects) CHECK(r == "ingest_budget");
  for (const auto& ra : retry_afters) CHECK(std::stoi(ra) >= 1);
  CHECK(standard_ok > 20);
  CHECK(standard_other == 0);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="heavy",outcome="shed",reason="ingest_budget"})") ==
      uploads[503]);
  CHECK(s.metric("sluice_ingest_drain_bytes_per_second") > 0);
  // All given back at the end.
  CHECK(eventually(
      [&] {
        return json::parse(request(s.admin, "GET", "/admin/state").body)["ingest"]["in_flight"] ==
               0;
      },
      5s));
}

TEST_CASE("a chunked body is metered as it arrives and given back when written upstream",
          "[e2e][ingest]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, sluice::test::two_upstreams(
                        api, search, {{"SLUICE_THREADS", "2"}, {"SLUICE_INGEST_BUDGET", "1MiB"}}));
  auto in_flight = [&] {
    return json::parse(request(s.admin, "GET", "/admin/state")
                           .body)["ingest"]["lanes"]["standard"]["in_flight"]
        .get<double>();
  };
  auto c = Conn::open(s.port);
  REQUIRE(c.send("POST /search/up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string piece(32 * kKiB, 'c');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
  double most = 0;
  for (int i = 0; i < 8; ++i) {
    REQUIRE(c.send(std::string(size_line) + piece + "\r\n"));
    std::this_thread::sleep_for(100ms);
    most = std::max(most, in_flight());
  }
  // Held while it streams: one block at admission, then each piece from its
  // read to its write (on loopback, microseconds); never the whole body.
  CHECK(most <= 2.0 * 32 * kKiB);
  REQUIRE(c.send("0\r\n\r\n"));
  auto r = c.read_response(10s);
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(eventually([&] { return in_flight() == 0; }, 5s));
  // Every piece was counted and given back as written upstream: the drain
  // rate measured them (32 KiB per 100 ms).
  CHECK(s.metric("sluice_ingest_drain_bytes_per_second") > 100.0 * kKiB);
}
