// Live reload through the real binary: SIGHUP and file changes re-read the
// configuration without dropping a connection or resetting the level; an
// invalid configuration is refused and the old one stays in force.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
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
using sluice::test::format_request;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::run;
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

TEST_CASE("one change is one reload: a routes file a reload names is not reloaded again",
          "[e2e][reload]") {
  Upstream up(kUpstream);
  TempFile config("config"), routes("routes");
  config.write("");
  routes.write(R"([{"prefix":"/","lane":"bulk"}])");
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_CONFIG_FILE", config.path.string()}});
  auto reloads = [&] {
    int n = 0;
    for (const auto& line : s.log_lines()) n += line.value("audit", "") == "reload";
    return n;
  };
  config.write("SLUICE_ROUTES_FILE=" + routes.path.string() + "\n");
  REQUIRE(eventually([&] { return reloads() == 1; }, 5s));
  // Ten ticks later: no second reload of the routes file the first one read.
  std::this_thread::sleep_for(1s);
  CHECK(reloads() == 1);
  routes.write(R"([{"prefix":"/","lane":"heavy"}])");
  REQUIRE(eventually([&] { return reloads() == 2; }, 5s));
  std::this_thread::sleep_for(1s);
  CHECK(reloads() == 2);
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
  CHECK(refused->header("X-Sluice-Reject") == "heavy_cap");

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

TEST_CASE(
    "a reload puts every live variable of the table in force and keeps every other until a "
    "restart",
    "[e2e][reload]") {
  // The table as the binary has it: per variable, live or restart, and its check-config key.
  auto table = json::parse(run({"config-reference", "--json"}, {}).out);
  TempFile routes("routes");
  routes.write(R"([{"prefix":"/file","lane":"heavy"},{"prefix":"/"}])");
  // A certificate and its key, for the TLS variables (the certificate is its own CA).
  TempFile cert("cert"), cert_key("key");
  {
    sluice::test::Process openssl({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                   "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj",
                                   "/CN=reload.test", "-keyout", cert_key.path.string(), "-out",
                                   cert.path.string()});
    REQUIRE(openssl.wait_exit(30s) == 0);
  }
  // A valid value other than the one in force, for every variable.
  const std::map<std::string, std::string> changed{
      {"SLUICE_LISTEN", "127.0.0.1:1"},
      {"SLUICE_ADMIN_LISTEN", "127.0.0.1:2"},
      {"SLUICE_ADMIN_TOKEN", "hunter2"},
      {"SLUICE_UPSTREAMS", "127.0.0.1:9;b=127.0.0.1:10"},
      {"SLUICE_ROUTES", R"([{"prefix":"/","lane":"bulk"}])"},
      {"SLUICE_ROUTES_FILE", routes.path.string()},
      {"SLUICE_CONFIG_FILE", "/nonexistent/other.env"},
      {"SLUICE_THREADS", "3"},
      {"SLUICE_ACCESS_LOG", "stderr"},
      {"SLUICE_UPSTREAM_MAX_CONNECTIONS", "7"},
      {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "7s"},
      {"SLUICE_HOST_EJECT", "2s:1m"},
      {"SLUICE_RESOLVER", "127.0.0.1:5353"},
      {"SLUICE_DNS_MIN_TTL", "2s"},
      {"SLUICE_DNS_MAX_TTL", "2m"},
      {"SLUICE_HEALTH_CHECKS", R"({"default":{"path":"/healthz","interval":"1h"}})"},
      {"SLUICE_MAX_HEADER_BYTES", "32KiB"},
      {"SLUICE_MAX_BODY_BYTES", "1KiB"},
      {"SLUICE_FORWARDED_FOR", "replace"},
      {"SLUICE_MAX_CONNECTIONS", "7"},
      {"SLUICE_HEADER_TIMEOUT", "7s"},
      {"SLUICE_IDLE_TIMEOUT", "7s"},
      {"SLUICE_BODY_TIMEOUT", "7s"},
      {"SLUICE_SEND_TIMEOUT", "7s"},
      {"SLUICE_CLIENT_SEND_BUFFER", "128KiB"},
      {"SLUICE_UPSTREAM_CONNECT_TIMEOUT", "7s"},
      {"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "7s"},
      {"SLUICE_SSE_IDLE_TIMEOUT", "7s"},
      {"SLUICE_H2", "false"},
      {"SLUICE_H2C", "true"},
      {"SLUICE_H2_MAX_STREAMS", "64"},
      {"SLUICE_H2_WINDOW", "1MiB"},
      {"SLUICE_H2_FRAME_BUDGET", "50"},
      {"SLUICE_LAG_PROBE_INTERVAL", "70ms"},
      {"SLUICE_DRAIN_DELAY", "7s"},
      {"SLUICE_DRAIN_TIMEOUT", "7s"},
      {"SLUICE_ADMISSION_MODE", "observe"},
      {"SLUICE_ADMISSION_PROFILE", "sentinel"},
      {"SLUICE_TICK", "200ms"},
      {"SLUICE_ADMISSION_LAG_MS", "1,2,3"},
      {"SLUICE_ADMISSION_UPSTREAM_WAIT_MS", "1,2,3"},
      {"SLUICE_ADMISSION_RISE_TICKS", "7"},
      {"SLUICE_ADMISSION_EMERGENCY_MS", "7000"},
      {"SLUICE_ADMISSION_HOLD", "7s,7s,7s"},
      {"SLUICE_ADMISSION_EXIT_RATIO", "0.7"},
      {"SLUICE_ADMISSION_SPACING", "7s"},
      {"SLUICE_ADMISSION_EMERGENCY_DWELL", "7s"},
      {"SLUICE_ADMISSION_TIMEOUT_PIN", "7s"},
      {"SLUICE_LANE_FACTORS", "bulk=1,1,1,1"},
      {"SLUICE_RETRY_AFTER", "bulk=7s:8s"},
      {"SLUICE_LANE_FLOORS", "bulk=0.2"},
      {"SLUICE_LANE_WEIGHTS", "bulk=7"},
      {"SLUICE_QUEUE_WINDOW", "bulk=7s"},
      {"SLUICE_STARVED_AFTER", "7s"},
      {"SLUICE_BUDGET_RESERVE", "bulk=7%"},
      {"SLUICE_HEAVY_MAX_IN_FLIGHT", "7"},
      {"SLUICE_TENANT_KEY", "client_ip"},
      {"SLUICE_TENANT_JWT_KEY", "an-hs256-secret-of-some-length"},
      {"SLUICE_TENANT_CONCURRENCY", "7"},
      {"SLUICE_TENANT_RATE", "7:14"},
      {"SLUICE_TENANT_TABLE", "1024"},
      {"SLUICE_TENANT_WEIGHTS", "key-a=3"},
      {"SLUICE_REDIS_URL", "redis://127.0.0.1:1"},
      {"SLUICE_REDIS_INTERVAL", "50ms"},
      {"SLUICE_FLEET_CAPACITY", "off"},
      {"SLUICE_BULKHEAD_SEED", "7"},
      {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "7ms"},
      {"SLUICE_BULKHEAD_SLOW_FACTOR", "7"},
      {"SLUICE_INGEST_BUDGET", "7MiB"},
      {"SLUICE_INGEST_SHARES", "bulk=0.7"},
      {"SLUICE_EMERGENCY_ACTIONS", "no_keepalive"},
      {"SLUICE_EMERGENCY_ACTIONS_AFTER", "7s"},
      {"SLUICE_EMERGENCY_CONNECTION_FLOOR", "7"},
      {"SLUICE_CLOSE_STATUSES", "402"},
      {"SLUICE_CLOSE_FOR", "7m"},
      {"SLUICE_PROBE_EVERY", "7s"},
      {"SLUICE_DELEGATION", "off"},
      {"SLUICE_LEASE_KEY", "00112233445566778899aabbccddeeff"},
      {"SLUICE_PINS_FILE", "/nonexistent/pins.json"},
      {"SLUICE_TICK_LOG", "/nonexistent/ticks.log"},
      {"SLUICE_DEBUG_ENDPOINTS", "true"},
      {"SLUICE_TLS_CERT", cert.path.string()},
      {"SLUICE_TLS_KEY", cert_key.path.string()},
      {"SLUICE_TLS_LISTEN", "127.0.0.1:3"},
      {"SLUICE_TLS_MIN_VERSION", "1.3"},
      {"SLUICE_TLS_CIPHERS", "ECDHE-ECDSA-AES256-GCM-SHA384"},
      {"SLUICE_TLS_CIPHERSUITES", "TLS_AES_256_GCM_SHA384"},
      {"SLUICE_TLS_HANDSHAKE_TIMEOUT", "7s"},
      {"SLUICE_TLS_TICKET_ROTATE", "7m"},
      {"SLUICE_UPSTREAM_CA", cert.path.string()},
      {"SLUICE_UPSTREAM_CLIENT_CERT", cert.path.string()},
      {"SLUICE_UPSTREAM_CLIENT_KEY", cert_key.path.string()},
  };
  // A certificate needs its key: the pair goes into the file at once, as one change.
  const std::map<std::string, std::string> pair_of{
      {"SLUICE_TLS_CERT", "SLUICE_TLS_KEY"},
      {"SLUICE_UPSTREAM_CLIENT_CERT", "SLUICE_UPSTREAM_CLIENT_KEY"}};
  Upstream up(kUpstream);
  TempFile config("config");
  config.write("");
  // Sluice's own listeners and threads, so check-config sees what the process started with.
  const std::map<std::string, std::string> env{
      {"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)},
      {"SLUICE_LISTEN", "127.0.0.1:0"},
      {"SLUICE_ADMIN_LISTEN", "127.0.0.1:0"},
      {"SLUICE_THREADS", "2"},
      {"SLUICE_TICK", "100ms"},
      {"SLUICE_CONFIG_FILE", config.path.string()}};
  Sluice s(kSluice, env);
  // What a fresh start with the file as it is now would run, and what this process runs.
  auto fresh = [&] {
    auto r = run({"check-config"}, env);
    REQUIRE(r.code == 0);
    return json::parse(r.out);
  };
  auto running = [&] {
    return json::parse(request(s.admin, "GET", "/admin/state").body)["config"];
  };
  auto reloads = [&] {
    std::vector<json> out;
    for (const auto& line : s.log_lines())
      if (line.value("audit", "") == "reload") out.push_back(line);
    return out;
  };
  // Writes the file and waits for the reload it causes.
  auto reload_with = [&](const std::string& text) {
    auto before = reloads().size();
    config.write(text);
    REQUIRE(eventually([&] { return reloads().size() > before; }, 5s));
    return reloads().back();
  };
  const json started = running();
  REQUIRE(started == fresh());

  std::string file;  // one more variable each round: every earlier change stays
  json previous = started;
  for (const auto& row : table) {
    const std::string name = row["name"];
    INFO(name);
    REQUIRE(changed.count(name) == 1);  // a new variable needs a value above
    const std::string line = name + "=" + changed.at(name) + "\n";
    if (name == "SLUICE_UPSTREAMS" || name == "SLUICE_CONFIG_FILE") {
      // Refused whole: routes name upstreams by position, and a config file names no other.
      const json before = running();
      CHECK(reload_with(file + line)["ok"] == false);
      CHECK(running() == before);
      CHECK(reload_with(file)["ok"] == true);
      continue;
    }
    bool second_of_pair = false;
    for (const auto& [first, second] : pair_of) second_of_pair |= name == second;
    if (second_of_pair) {  // went in with its first
      CHECK(file.find(name + "=") != std::string::npos);
      continue;
    }
    if (name == "SLUICE_ROUTES_FILE") {  // one or the other: the inline routes go
      auto at = file.find("SLUICE_ROUTES=");
      REQUIRE(at != std::string::npos);
      file.erase(at, file.find('\n', at) + 1 - at);
    }
    file += line;
    if (auto p = pair_of.find(name); p != pair_of.end())
      file += p->second + "=" + changed.at(p->second) + "\n";
    auto audit = reload_with(file);
    REQUIRE(audit["ok"] == true);
    const json expected = fresh();
    const json now = running();
    const bool live = row["reload"] == "live";
    // SLUICE_ROUTES_FILE shows as the routes it holds.
    const std::string key = row["key"].is_null() ? "routes" : row["key"].get<std::string>();
    CHECK(expected[key] != previous[key]);  // the new value is a change
    const auto& listed = audit[live ? "changed" : "needs_restart"];
    CHECK(std::find(listed.begin(), listed.end(), key) != listed.end());
    // Every variable: the live ones as the file says now, the others as the process started.
    for (const auto& other : table) {
      if (other["key"].is_null()) continue;
      const std::string k = other["key"];
      INFO(k);
      CHECK(now[k] == (other["reload"] == "live" ? expected[k] : started[k]));
    }
    previous = expected;
  }
}
