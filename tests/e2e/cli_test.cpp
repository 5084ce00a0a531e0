// The command line, through the real binary: configuration errors, check-config,
// help and the health check.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::Ran;
using sluice::test::run;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {}  // namespace

TEST_CASE("check-config prints the effective configuration as JSON and exits 0", "[e2e][cli]") {
  auto r = run({"check-config"}, {{"SLUICE_UPSTREAMS", "api=127.0.0.1:9000|127.0.0.1:9001"},
                                  {"SLUICE_ADMIN_TOKEN", "s3cret-token"}});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j.dump().find("127.0.0.1:9001") != std::string::npos);
  CHECK(r.out.find("s3cret-token") == std::string::npos);
}

TEST_CASE("a bad value stops start-up with sluice: config: SLUICE_X and exit 2", "[e2e][cli]") {
  for (auto cmd : {"check-config", "serve"}) {
    INFO(cmd);
    auto r = run({cmd}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9000"},
                         {"SLUICE_LISTEN", "127.0.0.1:0"},
                         {"SLUICE_ADMIN_LISTEN", "127.0.0.1:0"},
                         {"SLUICE_HEADER_TIMEOUT", "10"}});
    CHECK(r.code == 2);
    CHECK(r.err.starts_with("sluice: config: SLUICE_HEADER_TIMEOUT: "));
    CHECK(r.err.find("listening") == std::string::npos);  // nothing was bound
  }
}

TEST_CASE("a route regex RE2 cannot take stops start-up naming the route and the field, exit 2",
          "[e2e][cli]") {
  auto r = run({"serve"}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9000"},
                           {"SLUICE_LISTEN", "127.0.0.1:0"},
                           {"SLUICE_ADMIN_LISTEN", "127.0.0.1:0"},
                           {"SLUICE_ROUTES", R"([{"prefix":"/a"},{"regex":"^/(a)\\1"}])"}});
  CHECK(r.code == 2);
  CHECK(r.err.starts_with(
      "sluice: config: SLUICE_ROUTES: route 1: field \"regex\": \"^/(a)\\\\1\" has a "
      "back-reference (\\1)"));
  CHECK(r.err.find("listening") == std::string::npos);
}

TEST_CASE(
    "an access log or tick log that cannot be opened stops start-up with exit 2, nothing bound",
    "[e2e][cli]") {
  const std::string kPath = "/nonexistent-sluice-dir/x.log";
  for (auto var : {"SLUICE_ACCESS_LOG", "SLUICE_TICK_LOG"}) {
    INFO(var);
    auto r = run({"serve"}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9000"},
                             {"SLUICE_LISTEN", "127.0.0.1:0"},
                             {"SLUICE_ADMIN_LISTEN", "127.0.0.1:0"},
                             {var, kPath}});
    CHECK(r.code == 2);
    CHECK(r.err == "sluice: config: " + std::string(var) + ": cannot open " + kPath +
                       ": No such file or directory\n");
  }
}

TEST_CASE("an unknown SLUICE_ variable is refused, naming the likely one", "[e2e][cli]") {
  auto r = run({"check-config"}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9000"}, {"SLUICE_THREDS", "2"}});
  CHECK(r.code == 2);
  CHECK(r.err.starts_with("sluice: config: SLUICE_THREDS: "));
  CHECK(r.err.find("SLUICE_THREADS") != std::string::npos);
}

TEST_CASE("SLUICE_UPSTREAMS is required", "[e2e][cli]") {
  auto r = run({"check-config"}, {});
  CHECK(r.code == 2);
  CHECK(r.err.starts_with("sluice: config: SLUICE_UPSTREAMS: "));
}

TEST_CASE("--help lists every variable of the configuration table", "[e2e][cli]") {
  auto r = run({"--help"}, {});
  CHECK(r.code == 0);
  for (auto* name : {"SLUICE_LISTEN", "SLUICE_UPSTREAMS", "SLUICE_ROUTES", "SLUICE_THREADS",
                     "SLUICE_MAX_BODY_BYTES", "SLUICE_HEADER_TIMEOUT", "SLUICE_DRAIN_TIMEOUT"})
    CHECK(r.out.find(name) != std::string::npos);
  auto v = run({"--version"}, {});
  CHECK(v.code == 0);
  CHECK(v.out == "sluice " SLUICE_VERSION "\n");
}

TEST_CASE("healthcheck exits 0 against a live instance and 1 when none answers", "[e2e][cli]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "127.0.0.1:" + std::to_string(up.port)}});
  auto ok = run({"healthcheck"}, {{"SLUICE_UPSTREAMS", "127.0.0.1:9"},
                                  {"SLUICE_ADMIN_LISTEN", "127.0.0.1:" + std::to_string(s.admin)}});
  CHECK(ok.code == 0);
  auto down = run({"healthcheck"},
                  {{"SLUICE_UPSTREAMS", "127.0.0.1:9"}, {"SLUICE_ADMIN_LISTEN", "127.0.0.1:1"}});
  CHECK(down.code == 1);
}
