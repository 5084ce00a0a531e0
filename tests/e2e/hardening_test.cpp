// Hardening, end to end: slow clients cut at their deadlines with nothing left
// held, and the admin surface (token, bind rule, body limits, no echoed secrets).
// The real `sluice` in front of the real `sluice-upstream` on loopback ports.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Conn;
using sluice::test::eventually;
using sluice::test::format_request;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::Ran;
using sluice::test::request;
using sluice::test::run;
using sluice::test::Sluice;
using sluice::test::Upstream;
using sluice::test::upstream_env;
using sluice::test::upstream_stats;

namespace {

std::uint64_t upstream_requests(const Upstream& up) { return upstream_stats(up)["requests"]; }
std::uint64_t upstream_in_flight(const Upstream& up) { return upstream_stats(up)["in_flight"]; }

// True when the peer has sent something (an answer, or the close) to read now.
bool readable(const Conn& c) {
  pollfd p{c.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Nothing of a cut exchange is held: no client connection, no upstream
// connection, nothing in flight, and the upstream's own request has ended.
void check_nothing_held(Sluice& s, const Upstream& up) {
  CHECK(eventually([&] { return s.metric("sluice_client_connections") == 0; }, 3s));
  CHECK(eventually([&] { return s.metric("sluice_upstream_connections{upstream=\"api\"}") == 0; },
                   3s));
  CHECK(s.metric("sluice_lane_in_flight{lane=\"standard\"}") == 0);
  CHECK(s.metric("sluice_heavy_leases") == 0);
  CHECK(eventually([&] { return upstream_in_flight(up) == 0; }, 3s));
}

const std::string kToken = "tok-Zq8pW3-secret-4471";
const std::string kLeaseKey = "8f1e2d3c4b5a69788796a5b4c3d2e1f0";

}  // namespace

// ---------------------------------------------------------------- slow clients

TEST_CASE("slowloris: a head trickled in gets 408 at SLUICE_HEADER_TIMEOUT, is closed and counted",
          "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_HEADER_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send("GET / HTTP/1.1\r\nHost: t\r\n"));
  bool cut_while_trickling = false;
  for (int i = 0; i < 40 && !cut_while_trickling; ++i) {  // a byte every 50 ms for up to 2 s
    std::this_thread::sleep_for(50ms);
    cut_while_trickling = readable(c) || !c.send("X");
  }
  CHECK(cut_while_trickling);
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 408);
  CHECK(c.closed_by_peer(2s));
  CHECK(s.metric("sluice_client_timeouts_total{phase=\"header\"}") == 1);
  CHECK(s.metric("sluice_client_errors_total{code=\"408\"}") == 1);
  CHECK(upstream_requests(up) == 0);
  check_nothing_held(s, up);
}

TEST_CASE("a connection that never sends a byte is closed at SLUICE_HEADER_TIMEOUT and counted",
          "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_HEADER_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  CHECK(c.closed_by_peer(3s));
  CHECK(eventually([&] { return s.metric("sluice_client_timeouts_total{phase=\"header\"}") == 1; },
                   2s));
  CHECK(s.metric("sluice_client_timeouts_total{phase=\"idle\"}") == 0);
}

TEST_CASE(
    "a body trickled in a byte at a time is cut with 408 at SLUICE_BODY_TIMEOUT, holding "
    "no upstream connection meanwhile",
    "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_BODY_TIMEOUT", "500ms"}}));
  auto c = Conn::open(s.port);
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"));
  // Progress every 50 ms: a timeout that only looks for progress never fires.
  bool cut_while_trickling = false;
  bool held_nothing = true;
  for (int i = 0; i < 60 && !cut_while_trickling; ++i) {  // up to 3 s
    std::this_thread::sleep_for(50ms);
    cut_while_trickling = readable(c) || !c.send("b");
    if (i == 5) {
      // While it trickles it holds neither an upstream connection nor a slot.
      held_nothing = s.metric("sluice_upstream_connections{upstream=\"api\"}") == 0 &&
                     s.metric("sluice_lane_in_flight{lane=\"standard\"}") == 0;
    }
  }
  CHECK(cut_while_trickling);
  CHECK(held_nothing);
  auto res = c.read_response(3s);
  REQUIRE(res);
  CHECK(res->status == 408);
  CHECK(c.closed_by_peer(2s));
  CHECK(s.metric("sluice_client_timeouts_total{phase=\"body\"}") == 1);
  CHECK(s.metric("sluice_requests_total{code=\"408\",lane=\"standard\"}") == 1);
  CHECK(upstream_requests(up) == 0);  // nothing of it was forwarded
  check_nothing_held(s, up);
}

TEST_CASE(
    "a body sent at a steady pace is not cut, though it takes longer than SLUICE_BODY_TIMEOUT",
    "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_BODY_TIMEOUT", "500ms"}}));
  auto c = Conn::open(s.port);
  constexpr std::size_t kPiece = 16 * 1024;
  constexpr int kPieces = 8;  // 128 KiB over about 1.6 s: a block every 200 ms
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                 std::to_string(kPiece * kPieces) + "\r\n\r\n"));
  for (int i = 0; i < kPieces; ++i) {
    std::this_thread::sleep_for(200ms);
    REQUIRE(c.send(std::string(kPiece, static_cast<char>('a' + i))));
  }
  auto res = c.read_response(5s);
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body.size() == kPiece * kPieces);
  CHECK(s.metric("sluice_client_timeouts_total{phase=\"body\"}") == 0);
}

TEST_CASE(
    "a client that stops reading a large response is cut at SLUICE_SEND_TIMEOUT and its "
    "upstream connection released",
    "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_SEND_TIMEOUT", "300ms"}}));
  auto c = Conn::open(s.port);
  int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  auto started = std::chrono::steady_clock::now();
  // Far more than the sockets between can hold: Sluice's write must stall.
  SECTION("with Content-Length") {
    REQUIRE(c.send(format_request("GET", "/large?bytes=1073741824", s.port)));
  }
  SECTION("chunked") {
    REQUIRE(c.send(format_request("GET", "/large?bytes=1073741824&chunked=1", s.port)));
  }
  // The client reads nothing until Sluice has given up on it.
  REQUIRE(eventually([&] { return s.metric("sluice_client_timeouts_total{phase=\"send\"}") == 1; },
                     10s));
  CHECK(std::chrono::steady_clock::now() - started >= 250ms);
  // Sluice's side of the connection is closed (what the kernel had buffered
  // still drains to the client, which is why the client is not asked here).
  check_nothing_held(s, up);
  // Counted as 408 (send_timeout), never as a clean 200.
  CHECK(s.metric("sluice_requests_total{code=\"408\",lane=\"standard\"}") == 1);
  CHECK(s.metric("sluice_requests_total{code=\"200\",lane=\"standard\"}") == -1);
  CHECK(request(s.port, "GET", "/").status == 200);
}

TEST_CASE(
    "SLUICE_CLIENT_SEND_BUFFER bounds what is queued for a reader, so its write stalls and is cut",
    "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  // 2 MiB: more than a 64 KiB send buffer holds, less than the kernel's own
  // autotuning would let Sluice queue for the reader.
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_SEND_TIMEOUT", "300ms"},
                                      {"SLUICE_CLIENT_SEND_BUFFER", "64KiB"}}));
  auto c = Conn::open(s.port);
  int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  REQUIRE(c.send(format_request("GET", "/large?bytes=2097152", s.port)));
  CHECK(eventually([&] { return s.metric("sluice_client_timeouts_total{phase=\"send\"}") == 1; },
                   5s));
  check_nothing_held(s, up);
}

TEST_CASE(
    "clients that stop reading give their bulkhead slots back before they are cut, so "
    "others are served",
    "[e2e][hardening][slow]") {
  Upstream up(kUpstream);
  // Two slots in all, no queueing: a request finds a free slot or gets 503.
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_SEND_TIMEOUT", "20s"},
                                      {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "1s"},
                                      {"SLUICE_BULKHEAD_SEED", "2"},
                                      {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "1h"},
                                      {"SLUICE_QUEUE_WINDOW", "standard=0s"}}));
  std::vector<Conn> readers;
  for (int i = 0; i < 6; ++i) {
    readers.push_back(Conn::open(s.port));
    int small = 4096;
    ::setsockopt(readers.back().fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    REQUIRE(readers.back().send(format_request("GET", "/large?bytes=1073741824", s.port)));
  }
  // Their writes stall; 250 ms later each gives its slot back.
  REQUIRE(eventually([&] { return s.metric("sluice_client_stalled_writes_total") >= 2; }, 10s));
  int ok = 0;
  for (int i = 0; i < 10; ++i) ok += request(s.port, "GET", "/").status == 200;
  CHECK(ok == 10);
  // Still streaming to them (not cut: that is 20 s away), with their upstream connections.
  CHECK(s.metric("sluice_client_timeouts_total{phase=\"send\"}") == 0);
  CHECK(s.metric("sluice_upstream_connections{upstream=\"api\"}") >= 2);
  for (auto& r : readers) r.reset();
  CHECK(eventually([&] { return s.metric("sluice_client_connections") == 0; }, 5s));
  CHECK(eventually([&] { return s.metric("sluice_upstream_connections{upstream=\"api\"}") == 0; },
                   5s));
}

// ---------------------------------------------------------------- hostile paths

// A backtracking matcher recurses once per character of `(a|b)*`: a long path
// would overflow the I/O thread's stack and crash the proxy for everyone.
TEST_CASE(
    "a 60 KiB path against a route regex with a starred group is routed, and the proxy serves on",
    "[e2e][hardening][routes]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_MAX_HEADER_BYTES", "128KiB"},
                                      {"SLUICE_THREADS", "1"},  // one log buffer: lines in order
                                      {"SLUICE_ROUTES", R"([{"name":"ab","regex":"^/(a|b)*$"},)"
                                                        R"({"name":"rest","prefix":"/"}])"}}));
  // The status, or 0 when no answer came (the test's own message, not the 60 KiB target).
  auto status = [&](const std::string& target) {
    try {
      return request(s.port, "GET", target).status;
    } catch (const std::runtime_error&) {
      return 0;
    }
  };
  const std::string as(60 * 1024, 'a');
  CHECK(status("/" + as) == 200);
  CHECK(status("/" + as + "c") == 200);
  CHECK(status("/after") == 200);
  REQUIRE(s.process.running());
  auto lines = s.wait_log_lines(3);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["route"] == "ab");
  CHECK(lines[1]["route"] == "rest");  // no match: the next route
  CHECK(lines[2]["route"] == "rest");
  CHECK(upstream_requests(up) == 3);
}

// ---------------------------------------------------------------- admin surface

TEST_CASE("mutating admin calls need the bearer token when one is set, reading calls do not",
          "[e2e][hardening][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice,
           upstream_env(up, {{"SLUICE_ADMIN_TOKEN", kToken}, {"SLUICE_DEBUG_ENDPOINTS", "true"}}));
  const std::string pin = R"({"level":2,"ttl":"1m","reason":"test"})";
  const sluice::test::Headers json_type{{"Content-Type", "application/json"}};
  auto with = [&](std::string auth) {
    auto h = json_type;
    h.emplace_back("Authorization", std::move(auth));
    return h;
  };
  for (auto headers : {json_type, with("Bearer wrong"), with("Bearer " + kToken.substr(0, 10)),
                       with("Bearer " + kToken + "x"), with("Basic " + kToken), with(kToken)}) {
    auto post = request(s.admin, "POST", "/admin/pins", headers, pin);
    CHECK(post.status == 401);
    CHECK(post.header("WWW-Authenticate") == "Bearer");
    CHECK(request(s.admin, "DELETE", "/admin/pins", headers).status == 401);
    CHECK(request(s.admin, "POST", "/admin/debug/block?ms=1", headers).status == 401);
  }
  CHECK(json::parse(request(s.admin, "GET", "/admin/state").body)["level"] == 0);  // nothing pinned

  CHECK(request(s.admin, "POST", "/admin/pins", with("Bearer " + kToken), pin).status == 200);
  CHECK(request(s.admin, "POST", "/admin/pins", with("bearer " + kToken), pin).status == 200);
  CHECK(json::parse(request(s.admin, "GET", "/admin/state").body)["level"] == 2);
  CHECK(request(s.admin, "DELETE", "/admin/pins", with("Bearer " + kToken)).status == 200);
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=1", with("Bearer " + kToken)).status ==
        202);
  // Reading needs nothing.
  CHECK(request(s.admin, "GET", "/admin/state").status == 200);
  CHECK(request(s.admin, "GET", "/admin/pins").status == 200);
  CHECK(request(s.admin, "GET", "/metrics").status == 200);
  CHECK(request(s.admin, "GET", "/healthz").status == 200);
}

TEST_CASE("without a token the admin calls are open, on a loopback admin listener only",
          "[e2e][hardening][admin]") {
  Upstream up(kUpstream);
  {
    Sluice s(kSluice, upstream_env(up));
    CHECK(request(s.admin, "POST", "/admin/pins", {}, R"({"level":1})").status == 200);
    CHECK(request(s.admin, "DELETE", "/admin/pins").status == 200);
  }
  for (auto cmd : {"serve", "check-config"}) {
    INFO(cmd);
    for (const char* listen : {"0.0.0.0:0", "[::]:0", "10.1.2.3:9901"}) {
      INFO(listen);
      auto r = run({cmd}, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                           {"SLUICE_LISTEN", "127.0.0.1:0"},
                           {"SLUICE_ADMIN_LISTEN", listen}});
      CHECK(r.code == 2);
      CHECK(r.err.starts_with("sluice: config: SLUICE_ADMIN_LISTEN: "));
      CHECK(r.err.find("SLUICE_ADMIN_TOKEN") != std::string::npos);
      CHECK(r.err.find("listening") == std::string::npos);  // nothing was bound
    }
  }
  auto r = run({"check-config"}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9000"},
                                  {"SLUICE_ADMIN_LISTEN", "0.0.0.0:9901"},
                                  {"SLUICE_ADMIN_TOKEN", kToken}});
  CHECK(r.code == 0);
}

TEST_CASE("admin request bodies and heads are size-limited: 413 and 431, read as answers",
          "[e2e][hardening][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_ADMIN_TOKEN", kToken}}));
  const sluice::test::Headers auth{{"Authorization", "Bearer " + kToken}};
  SECTION("a body above 8 KiB, sent whole") {
    // The whole body is sent before the answer is read: Sluice must drain it
    // and close cleanly, or the client would see a reset instead of the 413.
    auto c = Conn::open(s.admin);
    REQUIRE(c.send(format_request("POST", "/admin/pins", s.admin, auth,
                                  R"({"level":1,"reason":")" + std::string(200'000, 'r') + "\"}")));
    auto res = c.read_response(5s);
    REQUIRE(res);
    CHECK(res->status == 413);
    CHECK(json::parse(res->body)["error"] == "body_too_large");
    CHECK(json::parse(res->body)["detail"] == "the body is larger than 8192 bytes");
    // Sluice goes on reading (and dropping) what the client still sends, then
    // closes in order (FIN): closing with bytes unread would reset the
    // connection, which can destroy the answer in flight on a real network.
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(100ms);
      CHECK(c.send(std::string(1000, 'x')));
    }
    pollfd p{c.fd(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    char byte;
    errno = 0;
    auto n = ::recv(c.fd(), &byte, 1, 0);
    CHECK(n == 0);
    CHECK(errno != ECONNRESET);
  }
  SECTION("a body of 8 KiB goes on to validation") {
    auto res = request(s.admin, "POST", "/admin/pins", auth,
                       R"({"level":1,"reason":")" + std::string(8000, 'r') + "\"}");
    CHECK(res.status == 400);
    CHECK(json::parse(res.body)["detail"] == "\"reason\" is longer than 500 bytes");
  }
  SECTION("a head above 8 KiB") {
    auto res = request(s.admin, "GET", "/admin/state", {{"X-Big", std::string(9000, 'x')}});
    CHECK(res.status == 431);
    CHECK(json::parse(res.body)["error"] == "header_too_large");
  }
  CHECK(json::parse(request(s.admin, "GET", "/admin/state").body)["level"] == 0);
}

TEST_CASE("an invalid pin body gets 400 with what is wrong and what would be valid",
          "[e2e][hardening][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_ADMIN_TOKEN", kToken}}));
  const sluice::test::Headers auth{{"Authorization", "Bearer " + kToken}};
  const std::vector<std::pair<std::string, std::string>> cases{
      {"", "the body must be a JSON object"},
      {"level=2", "the body must be a JSON object"},
      {"[2]", "the body must be a JSON object"},
      {R"({"level":2,"colour":"red"})", "unknown field \"colour\"; valid: level, ttl, reason, who"},
      {R"({"ttl":"10m"})", "\"level\" is required, a whole number 0..3"},
      {R"({"level":"2"})", "\"level\" is required, a whole number 0..3"},
      {R"({"level":2,"ttl":600})", "\"ttl\" must be a duration string such as \"10m\""},
      {R"({"level":2,"ttl":"ten minutes"})", "\"ttl\" is not a duration; use e.g. 30s, 10m, 1h"},
      {R"({"level":2,"ttl":"0s"})", "\"ttl\" must be above 0"},
      {R"({"level":2,"reason":7})", "\"reason\" must be a string"},
      {R"({"level":2,"who":"x","reason":false})", "\"reason\" must be a string"},
      {R"({"level":7})", "level"},
  };
  for (const auto& [body, detail] : cases) {
    INFO(body);
    auto res = request(s.admin, "POST", "/admin/pins", auth, body);
    CHECK(res.status == 400);
    auto j = json::parse(res.body);
    CHECK(j["error"] == "bad_request");
    CHECK_THAT(j["detail"].get<std::string>(), Catch::StartsWith(detail));
  }
  auto del = request(s.admin, "DELETE", "/admin/pins", auth, "{}");
  CHECK(del.status == 400);
  CHECK(json::parse(del.body)["detail"] == "this call takes no body");
  CHECK(json::parse(request(s.admin, "GET", "/admin/state").body)["level"] ==
        0);  // nothing applied
}

TEST_CASE("no error and no check-config output shows the admin token or the lease key",
          "[e2e][hardening][admin][secrets]") {
  Upstream up(kUpstream);
  const std::map<std::string, std::string> base{
      {"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
      {"SLUICE_ADMIN_TOKEN", kToken},
      {"SLUICE_LEASE_KEY", kLeaseKey}};
  auto shows_a_secret = [](const std::string& text) {
    // Any 8 characters of either secret in a row count.
    for (const auto* secret : {&kToken, &kLeaseKey})
      for (std::size_t i = 0; i + 8 <= secret->size(); ++i)
        if (text.find(secret->substr(i, 8)) != std::string::npos) return true;
    return false;
  };
  SECTION("check-config") {
    auto r = run({"check-config"}, base);
    REQUIRE(r.code == 0);
    CHECK_FALSE(shows_a_secret(r.out + r.err));
    auto j = json::parse(r.out);
    CHECK(j["admin_token"] == "(set)");
    CHECK(j["lease_key"] == "(set)");
  }
  SECTION("config errors, about the secrets' variables and others") {
    std::vector<std::map<std::string, std::string>> envs;
    auto with = [&](std::string name, std::string value) {
      auto env = base;
      env[std::move(name)] = std::move(value);
      envs.push_back(std::move(env));
    };
    with("SLUICE_LEASE_KEY", "zz" + kLeaseKey.substr(2));  // not hex
    with("SLUICE_LEASE_KEY", kLeaseKey + "00");            // too long
    with("SLUICE_LEASE_KEY", kLeaseKey.substr(0, 30));     // too short
    with("SLUICE_ADMIN_TOKN", kToken);                     // a typo of the name
    with("SLUICE_LEASE_KY", kLeaseKey);
    with("SLUICE_HEADER_TIMEOUT", "10");  // another variable
    for (const auto& env : envs) {
      for (auto cmd : {"check-config", "serve"}) {
        auto e = env;
        e.emplace("SLUICE_LISTEN", "127.0.0.1:0");
        e.emplace("SLUICE_ADMIN_LISTEN", "127.0.0.1:0");
        auto r = run({cmd}, e);
        INFO(cmd << ": " << r.err);
        CHECK(r.code == 2);
        CHECK(r.err.starts_with("sluice: config: "));
        CHECK_FALSE(shows_a_secret(r.out + r.err));
      }
    }
  }
  SECTION("a config file holding the secrets, with a bad line") {
    auto path = std::filesystem::temp_directory_path() /
                ("sluice-secrets-" + std::to_string(::getpid()) + ".env");
    {
      std::ofstream f(path);
      f << "SLUICE_ADMIN_TOKEN=" << kToken << "\nSLUICE_LEASE_KEY=" << kLeaseKey << "\n"
        << kToken << "\n";
    }
    auto env = base;
    env.erase("SLUICE_ADMIN_TOKEN");
    env.erase("SLUICE_LEASE_KEY");
    env["SLUICE_CONFIG_FILE"] = path.string();
    auto r = run({"check-config"}, env);
    std::filesystem::remove(path);
    CHECK(r.code == 2);
    CHECK(r.err.starts_with("sluice: config: SLUICE_CONFIG_FILE: "));
    CHECK_FALSE(shows_a_secret(r.out + r.err));
  }
  SECTION("the admin listener's answers") {
    auto env = base;
    Sluice s(kSluice, env);
    std::string seen;
    auto keep = [&](const sluice::test::Response& r) {
      seen += std::to_string(r.status) + " " + r.body;
      for (const auto& [k, v] : r.headers) seen += k + ": " + v + "\n";
    };
    keep(request(s.admin, "POST", "/admin/pins",
                 {{"Authorization", "Bearer " + kToken.substr(0, 12)}}, R"({"level":1})"));
    keep(request(s.admin, "POST", "/admin/pins", {{"Authorization", "Bearer " + kToken}},
                 "nonsense"));
    keep(request(s.admin, "GET", "/admin/state"));
    keep(request(s.admin, "GET", "/metrics"));
    keep(request(s.port, "GET", "/"));
    CHECK_FALSE(shows_a_secret(seen + s.process.err()));
  }
}

TEST_CASE("a reload that changes the admin token or the lease key names it and shows neither value",
          "[e2e][hardening][admin][secrets]") {
  Upstream up(kUpstream);
  auto path = std::filesystem::temp_directory_path() /
              ("sluice-secrets-reload-" + std::to_string(::getpid()) + ".env");
  auto write = [&](const std::string& token, const std::string& key) {
    auto tmp = path.string() + ".new";
    std::ofstream(tmp) << "SLUICE_ADMIN_TOKEN=" << token << "\nSLUICE_LEASE_KEY=" << key << "\n";
    std::filesystem::rename(tmp, path);
  };
  const std::string next_token = "tok-Yy71Kq-other-0932";
  const std::string next_key = "0f1e2d3c4b5a69788796a5b4c3d2e1f8";
  write(kToken, kLeaseKey);
  {
    Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                       {"SLUICE_CONFIG_FILE", path.string()}});
    write(next_token, next_key);
    CHECK(s.process.wait_for_err("admin_token changed; it takes effect on restart", 5s));
    CHECK(s.process.wait_for_err("lease_key changed; it takes effect on restart", 5s));
    // The running token still holds until the restart.
    CHECK(
        request(s.admin, "DELETE", "/admin/pins", {{"Authorization", "Bearer " + kToken}}).status ==
        200);
    auto err = s.process.err();
    for (const auto* secret : {&kToken, &kLeaseKey, &next_token, &next_key})
      CHECK(err.find(secret->substr(0, 8)) == std::string::npos);
  }
  std::filesystem::remove(path);
}
