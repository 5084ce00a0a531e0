// Live reload through the real binary: SIGHUP and file changes re-read the
// configuration without dropping a connection or resetting the level; an
// invalid configuration is refused and the old one stays in force.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
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
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("sluice-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  }
  void write(const std::string& text) const {
    auto tmp = path.string() + ".new";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path);  // as a ConfigMap update does: a new file
  }
  ~TempFile() { std::filesystem::remove(path); }
};

const std::string kRoutes =
    R"([{"name":"bulk","prefix":"/bulk","lane":"bulk"},{"name":"api","prefix":"/","lane":"standard"}])";
}  // namespace

TEST_CASE("SIGHUP reloads the factors without dropping a connection or resetting the level",
          "[e2e][reload]") {
  Upstream up(kUpstream);
  TempFile config("config");
  config.write("SLUICE_LANE_FACTORS=bulk=1,0.5,0,0\n");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                     {"SLUICE_ROUTES", kRoutes},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_CONFIG_FILE", config.path.string()}});
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"10m"})").status == 200);
  auto c = Conn::open(s.port);
  REQUIRE(c.send(format_request("GET", "/bulk/x", s.port)));
  auto before = c.read_response();
  REQUIRE(before);
  CHECK(before->status == 503);  // bulk's factor at level 2 is 0

  // Written without a change of mtime granularity mattering: the signal forces the read.
  config.write("SLUICE_LANE_FACTORS=bulk=1,1,1,0\n");
  REQUIRE(kill(s.process.pid(), SIGHUP) == 0);
  REQUIRE(s.process.wait_for_err("reloaded", 5s));
  REQUIRE(c.send(format_request("GET", "/bulk/x", s.port)));  // the same connection
  auto after = c.read_response();
  REQUIRE(after);
  CHECK(after->status == 200);
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["level"] == 2);  // the level and the pin carried on
  CHECK(state["pin"]["level"] == 2);
  CHECK(s.metric(R"(sluice_config_reloads_total{result="ok"})") >= 1);
  CHECK(s.process.running());
}

TEST_CASE("an invalid new configuration is refused with its error and the old one stays",
          "[e2e][reload]") {
  Upstream up(kUpstream);
  TempFile config("config");
  config.write("SLUICE_ADMISSION_MODE=enforce\n");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                     {"SLUICE_ROUTES", kRoutes},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_CONFIG_FILE", config.path.string()}});
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"10m"})").status == 200);
  config.write("SLUICE_ADMISSION_MODE=observe\nSLUICE_LANE_FACTORS=bulk=1,2,0,0\n");
  REQUIRE(s.process.wait_for_err("reload refused", 5s));
  CHECK(s.process.err().find("SLUICE_LANE_FACTORS") != std::string::npos);
  CHECK(request(s.port, "GET", "/bulk/x").status == 503);  // still enforcing
  CHECK(s.metric(R"(sluice_config_reloads_total{result="failed"})") >= 1);
  CHECK(s.process.running());
}

TEST_CASE("a changed routes file takes effect without a restart", "[e2e][reload]") {
  Upstream a(kUpstream);
  Upstream b(kUpstream);
  TempFile routes("routes");
  routes.write(R"([{"prefix":"/","upstream":"a"}])");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(a.port) +
                                              ";b=127.0.0.1:" + std::to_string(b.port)},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_ROUTES_FILE", routes.path.string()}});
  CHECK(request(s.port, "GET", "/x").header("X-Upstream-Port") == std::to_string(a.port));
  routes.write(R"([{"prefix":"/x","upstream":"b"},{"prefix":"/","upstream":"a"}])");
  REQUIRE(eventually(
      [&] {
        return request(s.port, "GET", "/x").header("X-Upstream-Port") == std::to_string(b.port);
      },
      5s));
  CHECK(request(s.port, "GET", "/y").header("X-Upstream-Port") == std::to_string(a.port));
}

TEST_CASE("a variable that needs a restart is reported, not applied", "[e2e][reload]") {
  Upstream up(kUpstream);
  TempFile config("config");
  config.write("SLUICE_MAX_BODY_BYTES=1MiB\n");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_CONFIG_FILE", config.path.string()}});
  config.write("SLUICE_MAX_BODY_BYTES=1KiB\n");
  REQUIRE(s.process.wait_for_err("max_body_bytes changed; it takes effect on restart", 5s));
  CHECK(request(s.port, "POST", "/echo", {}, std::string(4000, 'x')).status == 200);
}

TEST_CASE("a reload changes the lanes' queue windows in the running bulkheads",
          "[e2e][reload][lanes]") {
  Upstream up(kUpstream);
  TempFile config("config");
  config.write("SLUICE_QUEUE_WINDOW=heavy=0s\n");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                     {"SLUICE_THREADS", "1"},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_HEAVY_MAX_IN_FLIGHT", "1"},
                     {"SLUICE_CONFIG_FILE", config.path.string()}});
  const std::string sse =
      "GET /sse?n=600&interval_ms=100 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
  auto stream = std::make_unique<Conn>(Conn::open(s.port));
  REQUIRE(stream->send(sse));
  {
    sluice::test::BodyReader reader(*stream);
    REQUIRE(reader.read_head());  // the stream holds the only heavy lease
  }
  REQUIRE(eventually([&] { return s.metric("sluice_heavy_leases") == 1; }, 5s));

  auto second = Conn::open(s.port);
  REQUIRE(second.send(sse));
  auto refused = second.read_response();
  REQUIRE(refused);
  CHECK(refused->status == 503);  // window 0: refused at once
  CHECK(refused->header("X-Sluice-Reject") == "queue_timeout");

  config.write("SLUICE_QUEUE_WINDOW=heavy=30s\n");
  REQUIRE(kill(s.process.pid(), SIGHUP) == 0);
  REQUIRE(s.process.wait_for_err("reloaded", 5s));
  auto third = Conn::open(s.port);
  REQUIRE(third.send(sse));
  // Now it waits in the heavy queue, and gets the lease when the stream ends.
  CHECK(eventually([&] { return s.metric(R"(sluice_lane_queue_depth{lane="heavy"})") == 1; }, 5s));
  stream.reset();
  sluice::test::BodyReader third_reader(third);
  auto head = third_reader.read_head(10s);
  REQUIRE(head);
  CHECK(head->status == 200);
}
