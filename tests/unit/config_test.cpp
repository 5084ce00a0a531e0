#include "config/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using sluice::config::AccessLog;
using sluice::config::Config;
using sluice::config::ConfigError;
using sluice::config::Duration;
using sluice::config::Env;
using sluice::config::load;
using sluice::config::parse_bytes;
using sluice::config::parse_duration;
using sluice::config::parse_endpoint;
using sluice::config::parse_upstreams;
using sluice::config::Reload;
using sluice::config::to_json;
using sluice::config::variables;

// The least environment load() accepts.
Env minimal(Env extra = {}) {
  Env env{{"SLUICE_UPSTREAMS", "127.0.0.1:9000"}};
  for (auto& [k, v] : extra) env[k] = v;
  return env;
}

std::string error_of(const Env& env) {
  try {
    load(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string variable_of(const Env& env) {
  try {
    load(env);
  } catch (const ConfigError& e) {
    return e.variable();
  }
  return "(no error)";
}

template <class F>
std::string parse_error(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// A file that removes itself.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("sluice-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

std::string json_key(std::string_view variable) {
  std::string key(variable.substr(std::string_view("SLUICE_").size()));
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return key;
}

}  // namespace

TEST_CASE("the variable table names each variable once, with a default and a meaning", "[config]") {
  std::set<std::string_view> names;
  for (const auto& v : variables()) {
    CHECK(v.name.starts_with("SLUICE_"));
    CHECK_FALSE(v.default_value.empty());
    CHECK_FALSE(v.meaning.empty());
    CHECK(names.insert(v.name).second);
  }
  CHECK(names.size() == 92);
}

TEST_CASE("every variable in the table is read by load and shown by to_json", "[config]") {
  auto shown = nlohmann::json::parse(to_json(load(minimal())));
  std::set<std::string> table_keys;
  for (const auto& v : variables()) {
    if (v.name == "SLUICE_ROUTES_FILE") continue;  // shown as "routes", like SLUICE_ROUTES
    table_keys.insert(json_key(v.name));
    CHECK(shown.contains(json_key(v.name)));
  }
  for (const auto& [key, value] : shown.items()) CHECK(table_keys.count(key) == 1);
}

TEST_CASE("the defaults in the table are the defaults load applies", "[config]") {
  // Setting a variable to its documented default must change nothing.
  const std::string baseline = to_json(load(minimal()));
  std::set<std::string_view> not_literal;
  for (const auto& v : variables()) {
    bool literal = v.default_value != "unset" && v.default_value != "required" &&
                   v.default_value.find(' ') == std::string_view::npos;
    if (!literal) {
      not_literal.insert(v.name);
      continue;
    }
    INFO(v.name << "=" << v.default_value);
    CHECK(to_json(load(minimal({{std::string(v.name), std::string(v.default_value)}}))) ==
          baseline);
  }
  CHECK(not_literal == std::set<std::string_view>{"SLUICE_ADMIN_TOKEN",
                                                  "SLUICE_UPSTREAMS",
                                                  "SLUICE_ROUTES",
                                                  "SLUICE_ROUTES_FILE",
                                                  "SLUICE_THREADS",
                                                  "SLUICE_PINS_FILE",
                                                  "SLUICE_TICK_LOG",
                                                  "SLUICE_CONFIG_FILE",
                                                  "SLUICE_HEAVY_MAX_IN_FLIGHT",
                                                  "SLUICE_INGEST_BUDGET",
                                                  "SLUICE_LEASE_KEY",
                                                  "SLUICE_CLOSE_STATUSES",
                                                  "SLUICE_TENANT_JWT_KEY",
                                                  "SLUICE_TENANT_CONCURRENCY",
                                                  "SLUICE_TENANT_RATE",
                                                  "SLUICE_TENANT_WEIGHTS",
                                                  "SLUICE_REDIS_URL",
                                                  "SLUICE_TLS_CERT",
                                                  "SLUICE_TLS_KEY",
                                                  "SLUICE_TLS_CIPHERS",
                                                  "SLUICE_TLS_CIPHERSUITES",
                                                  "SLUICE_UPSTREAM_CA",
                                                  "SLUICE_UPSTREAM_CLIENT_CERT",
                                                  "SLUICE_UPSTREAM_CLIENT_KEY"});

  // And the loaded defaults are the struct's.
  Config expected;
  Config loaded = load(minimal());
  expected.upstreams = loaded.upstreams;
  expected.routes = sluice::routes::Table::defaults();
  expected.threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 256u));
  CHECK(to_json(loaded) == to_json(expected));
  CHECK(loaded.threads == expected.threads);
  CHECK(loaded.admin_token.empty());
  REQUIRE(loaded.routes.routes().size() == 2);
  CHECK(loaded.routes.routes()[0].name == "sse");
}

TEST_CASE("SLUICE_UPSTREAMS is required", "[config]") {
  CHECK(error_of({}) ==
        "SLUICE_UPSTREAMS: required; e.g. "
        "SLUICE_UPSTREAMS=api=127.0.0.1:9000|127.0.0.1:9001;auth=127.0.0.1:9100");
}

TEST_CASE("an unknown SLUICE_ variable is refused with the nearest name", "[config]") {
  CHECK(error_of(minimal({{"SLUICE_LISTN", "0.0.0.0:1"}})) ==
        "SLUICE_LISTN: unknown variable; did you mean SLUICE_LISTEN?");
  CHECK(error_of(minimal({{"SLUICE_HEADER_TIMEOUTS", "1s"}})) ==
        "SLUICE_HEADER_TIMEOUTS: unknown variable; did you mean SLUICE_HEADER_TIMEOUT?");
  CHECK(variable_of(minimal({{"SLUICE_LISTN", "x"}})) == "SLUICE_LISTN");
}

TEST_CASE("an unknown SLUICE_ variable far from every name is refused without a guess",
          "[config]") {
  std::string e = error_of(minimal({{"SLUICE_COMPLETELY_DIFFERENT", "1"}}));
  CHECK_THAT(e, Catch::StartsWith("SLUICE_COMPLETELY_DIFFERENT: unknown variable;"));
  CHECK_THAT(e, !Catch::Contains("did you mean"));
}

TEST_CASE("an unknown variable is refused even when SLUICE_UPSTREAMS is missing", "[config]") {
  // The typo is the likelier cause, so it is reported first.
  CHECK(variable_of({{"SLUICE_UPSTREAM", "127.0.0.1:9000"}}) == "SLUICE_UPSTREAM");
}

TEST_CASE("sluice_environment keeps only the SLUICE_ entries", "[config]") {
  std::string a = "SLUICE_LISTEN=127.0.0.1:1", b = "PATH=/bin", c = "SLUICE_ROUTES=[{\"a\"=1}]",
              d = "SLUICE_NOEQUALS", e = "XSLUICE_LISTEN=1";
  char* envp[] = {a.data(), b.data(), c.data(), d.data(), e.data(), nullptr};
  Env env = sluice::config::sluice_environment(envp);
  CHECK(env == Env{{"SLUICE_LISTEN", "127.0.0.1:1"}, {"SLUICE_ROUTES", "[{\"a\"=1}]"}});
  CHECK(sluice::config::sluice_environment(nullptr).empty());
}

TEST_CASE("upstreams parse named, multi-host, bare and IPv6 forms", "[config][upstreams]") {
  auto u = parse_upstreams("api=127.0.0.1:9000|10.0.0.2:9001;auth=auth.internal:9100");
  REQUIRE(u.size() == 2);
  CHECK(u[0].name == "api");
  REQUIRE(u[0].hosts.size() == 2);
  CHECK(u[0].hosts[0].host == "127.0.0.1");
  CHECK(u[0].hosts[0].port == 9000);
  CHECK(u[0].hosts[1].str() == "10.0.0.2:9001");
  CHECK(u[1].name == "auth");
  CHECK(u[1].hosts[0].str() == "auth.internal:9100");

  auto bare = parse_upstreams("127.0.0.1:9000");
  REQUIRE(bare.size() == 1);
  CHECK(bare[0].name == "default");
  CHECK(bare[0].hosts[0].str() == "127.0.0.1:9000");

  auto v6 = parse_upstreams("v6=[::1]:9000|[fd00::2]:9001");
  CHECK(v6[0].hosts[0].host == "::1");
  CHECK(v6[0].hosts[1].str() == "[fd00::2]:9001");

  auto trailing = parse_upstreams("a_1=h:1;b-2=h:2;");
  CHECK(trailing.size() == 2);
  CHECK(trailing[1].name == "b-2");
}

TEST_CASE("upstream names must be unique and made of letters, digits, _ and -",
          "[config][upstreams]") {
  CHECK_THAT(parse_error([] { parse_upstreams("a=h:1;a=h:2"); }),
             Catch::StartsWith("upstream \"a\" is given twice; names must be unique"));
  CHECK_THAT(parse_error([] { parse_upstreams("h:1;h:2"); }),
             Catch::StartsWith("upstream \"default\" is given twice"));
  CHECK_THAT(parse_error([] { parse_upstreams("a.b=h:1"); }),
             Catch::StartsWith("upstream name \"a.b\" is not valid"));
  CHECK_THAT(parse_error([] { parse_upstreams("=h:1"); }),
             Catch::StartsWith("upstream name \"\" is not valid"));
}

TEST_CASE("upstream hosts need a host and a port in 1..65535", "[config][upstreams]") {
  CHECK_THAT(parse_error([] { parse_upstreams("a=h:0"); }),
             Catch::StartsWith("upstream \"a\": \"h:0\" has port 0; valid ports: 1..65535"));
  CHECK_THAT(parse_error([] { parse_upstreams("a=h:65536"); }), Catch::Contains("valid ports"));
  CHECK_THAT(parse_error([] { parse_upstreams("a=h"); }),
             Catch::StartsWith("upstream \"a\": \"h\" is not host:port"));
  CHECK_THAT(parse_error([] { parse_upstreams("a=h:1|"); }),
             Catch::StartsWith("upstream \"a\" has an empty host"));
  CHECK_THAT(parse_error([] { parse_upstreams(";"); }), Catch::StartsWith("no upstream given"));
  CHECK_THAT(parse_error([] { parse_upstreams("a=::1:9000"); }),
             Catch::Contains("an IPv6 address needs brackets"));
  CHECK(variable_of({{"SLUICE_UPSTREAMS", "a=h"}}) == "SLUICE_UPSTREAMS");
}

TEST_CASE("endpoints parse host:port and [IPv6]:port and print the same way", "[config]") {
  CHECK(parse_endpoint("0.0.0.0:8080").str() == "0.0.0.0:8080");
  CHECK(parse_endpoint("[::]:8080").str() == "[::]:8080");
  CHECK(parse_endpoint("127.0.0.1:0").port == 0);  // a listener may ask for any free port
  CHECK_THAT(parse_error([] { parse_endpoint("[zz]:1"); }),
             Catch::StartsWith("\"zz\" is not an IPv6 address"));
  CHECK_THAT(parse_error([] { parse_endpoint(":8080"); }), Catch::Contains("has no host"));
  CHECK_THAT(parse_error([] { parse_endpoint("h:http"); }), Catch::Contains("valid ports"));
  CHECK_THAT(parse_error([] { parse_endpoint("a b:1"); }),
             Catch::Contains("is not a host name or address"));
  CHECK(variable_of(minimal({{"SLUICE_LISTEN", "8080"}})) == "SLUICE_LISTEN");
  CHECK(load(minimal({{"SLUICE_LISTEN", "127.0.0.1:18080"}})).listen.port == 18080);
}

TEST_CASE("loopback means 127.0.0.0/8, ::1 and localhost", "[config]") {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "::1", "localhost", "LocalHost"})
    CHECK(sluice::config::Endpoint{host, 1}.is_loopback());
  for (const char* host : {"0.0.0.0", "10.0.0.1", "::", "128.0.0.1", "example.com"})
    CHECK_FALSE(sluice::config::Endpoint{host, 1}.is_loopback());
}

TEST_CASE("the admin token is required when the admin listener is not loopback", "[config]") {
  CHECK(error_of(minimal({{"SLUICE_ADMIN_LISTEN", "0.0.0.0:9901"}})) ==
        "SLUICE_ADMIN_LISTEN: 0.0.0.0:9901 is not loopback and SLUICE_ADMIN_TOKEN is unset; set "
        "SLUICE_ADMIN_TOKEN (mutating admin calls then need it) or listen on 127.0.0.1");
  Config c = load(minimal({{"SLUICE_ADMIN_LISTEN", "0.0.0.0:9901"}, {"SLUICE_ADMIN_TOKEN", "s3"}}));
  CHECK(c.admin_token == "s3");
  CHECK_NOTHROW(load(minimal({{"SLUICE_ADMIN_LISTEN", "[::1]:9901"}})));
}

TEST_CASE("an admin token set to the empty string is refused", "[config]") {
  CHECK(error_of(minimal({{"SLUICE_ADMIN_TOKEN", ""}})) ==
        "SLUICE_ADMIN_TOKEN: set but empty; give a token or unset it");
}

TEST_CASE("SLUICE_ROUTES is parsed against the configured upstreams", "[config][routes]") {
  Config c = load({{"SLUICE_UPSTREAMS", "api=h:1;auth=h:2"},
                   {"SLUICE_ROUTES", R"([{"prefix":"/auth","upstream":"auth"},{"prefix":"/"}])"}});
  REQUIRE(c.routes.routes().size() == 2);
  CHECK(c.routes.routes()[0].upstream == 1);
  CHECK(c.routes.routes()[1].upstream == 0);
}

TEST_CASE("route errors are reported under the variable that holds the routes",
          "[config][routes]") {
  CHECK(error_of(minimal({{"SLUICE_ROUTES", R"([{"prefix":"/"},{"lane":"fast"}])"}})) ==
        "SLUICE_ROUTES: route 1: field \"lane\": \"fast\" is not a lane; valid: bulk, standard, "
        "heavy");
  CHECK_THAT(error_of(minimal({{"SLUICE_ROUTES", "[{"}})),
             Catch::StartsWith("SLUICE_ROUTES: invalid JSON: "));
  TempFile file(R"([{"upstream":"nope"}])");
  CHECK_THAT(error_of(minimal({{"SLUICE_ROUTES_FILE", file.path.string()}})),
             Catch::StartsWith("SLUICE_ROUTES_FILE: route 0: field \"upstream\": \"nope\""));
}

TEST_CASE("SLUICE_ROUTES_FILE is read at load", "[config][routes]") {
  TempFile file(R"([{"name":"from-file","prefix":"/","lane":"bulk"}])");
  Config c = load(minimal({{"SLUICE_ROUTES_FILE", file.path.string()}}));
  REQUIRE(c.routes.routes().size() == 1);
  CHECK(c.routes.routes()[0].name == "from-file");
}

TEST_CASE("an unreadable SLUICE_ROUTES_FILE is an error naming the path", "[config][routes]") {
  CHECK(error_of(minimal({{"SLUICE_ROUTES_FILE", "/nonexistent/routes.json"}})) ==
        "SLUICE_ROUTES_FILE: cannot read \"/nonexistent/routes.json\": No such file or directory");
  CHECK_THAT(error_of(minimal({{"SLUICE_ROUTES_FILE", "/"}})),
             Catch::StartsWith("SLUICE_ROUTES_FILE: cannot read \"/\""));
}

TEST_CASE("SLUICE_ROUTES and SLUICE_ROUTES_FILE together are refused", "[config][routes]") {
  TempFile file(R"([{"prefix":"/"}])");
  CHECK(error_of(minimal({{"SLUICE_ROUTES", R"([{"prefix":"/"}])"},
                          {"SLUICE_ROUTES_FILE", file.path.string()}})) ==
        "SLUICE_ROUTES: set together with SLUICE_ROUTES_FILE; set only one");
}

TEST_CASE("SLUICE_THREADS accepts 1..256", "[config]") {
  CHECK(load(minimal({{"SLUICE_THREADS", "1"}})).threads == 1);
  CHECK(load(minimal({{"SLUICE_THREADS", "256"}})).threads == 256);
  CHECK(error_of(minimal({{"SLUICE_THREADS", "0"}})) ==
        "SLUICE_THREADS: \"0\" is out of range; valid: 1..256");
  CHECK(variable_of(minimal({{"SLUICE_THREADS", "257"}})) == "SLUICE_THREADS");
  CHECK_THAT(error_of(minimal({{"SLUICE_THREADS", "four"}})),
             Catch::Contains("is not a whole number"));
  CHECK_THAT(error_of(minimal({{"SLUICE_THREADS", "-1"}})),
             Catch::Contains("is not a whole number"));
}

TEST_CASE("SLUICE_ACCESS_LOG takes stdout, stderr, off or an absolute or ./ path", "[config]") {
  CHECK(load(minimal({{"SLUICE_ACCESS_LOG", "stderr"}})).access_log == AccessLog::stderr_);
  CHECK(load(minimal({{"SLUICE_ACCESS_LOG", "off"}})).access_log == AccessLog::off);
  Config abs = load(minimal({{"SLUICE_ACCESS_LOG", "/var/log/sluice.log"}}));
  CHECK(abs.access_log == AccessLog::file);
  CHECK(abs.access_log_path == "/var/log/sluice.log");
  CHECK(load(minimal({{"SLUICE_ACCESS_LOG", "./access.log"}})).access_log_path == "./access.log");
  CHECK(error_of(minimal({{"SLUICE_ACCESS_LOG", "access.log"}})) ==
        "SLUICE_ACCESS_LOG: \"access.log\" is not stdout, stderr, off or a file path; a path must "
        "be absolute or start with ./");
}

TEST_CASE("durations take a whole number and a unit of ms, s, m or h", "[config][parsers]") {
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("5s") == 5s);
  CHECK(parse_duration("2m") == 2min);
  CHECK(parse_duration("1h") == 1h);
  CHECK(parse_duration("0") == 0ms);
  CHECK(parse_duration("0s") == 0ms);
}

TEST_CASE("a duration without a unit is refused with examples", "[config][parsers]") {
  CHECK(error_of(minimal({{"SLUICE_HEADER_TIMEOUT", "10"}})) ==
        "SLUICE_HEADER_TIMEOUT: \"10\" has no unit; use e.g. 250ms, 5s, 2m");
}

TEST_CASE("negative, fractional, unknown-unit and overflowing durations are refused",
          "[config][parsers]") {
  CHECK_THAT(parse_error([] { parse_duration("-5s"); }), Catch::Contains("is negative"));
  CHECK_THAT(parse_error([] { parse_duration("1.5s"); }), Catch::Contains("has a fraction"));
  CHECK_THAT(parse_error([] { parse_duration("5sec"); }),
             Catch::Contains("unknown unit \"sec\"; valid units: ms, s, m, h"));
  CHECK_THAT(parse_error([] { parse_duration("5 s"); }), Catch::Contains("unknown unit"));
  CHECK_THAT(parse_error([] { parse_duration("s"); }), Catch::Contains("is not a duration"));
  CHECK_THAT(parse_error([] { parse_duration(""); }), Catch::StartsWith("empty"));
  CHECK_THAT(parse_error([] { parse_duration("9999999999999999h"); }),
             Catch::Contains("is too large"));
  CHECK_THAT(parse_error([] { parse_duration("99999999999999999999999ms"); }),
             Catch::Contains("is too large"));
}

TEST_CASE("byte sizes take plain bytes or KiB, MiB, GiB", "[config][parsers]") {
  CHECK(parse_bytes("16384") == 16384u);
  CHECK(parse_bytes("16KiB") == 16384u);
  CHECK(parse_bytes("64MiB") == 64ull << 20);
  CHECK(parse_bytes("1GiB") == 1ull << 30);
  CHECK(parse_bytes("0") == 0u);
}

TEST_CASE("decimal, negative and overflowing byte sizes are refused", "[config][parsers]") {
  CHECK_THAT(parse_error([] { parse_bytes("16KB"); }), Catch::Contains("unknown unit \"KB\""));
  CHECK_THAT(parse_error([] { parse_bytes("16k"); }), Catch::Contains("unknown unit \"k\""));
  CHECK_THAT(parse_error([] { parse_bytes("-1"); }), Catch::Contains("is negative"));
  CHECK_THAT(parse_error([] { parse_bytes("KiB"); }), Catch::Contains("is not a size"));
  CHECK_THAT(parse_error([] { parse_bytes("17179869184GiB"); }), Catch::Contains("is too large"));
  CHECK_THAT(parse_error([] { parse_bytes("18446744073709551616"); }),
             Catch::Contains("is too large"));
}

TEST_CASE("every timeout must be greater than zero", "[config]") {
  for (const char* name :
       {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "SLUICE_HEADER_TIMEOUT", "SLUICE_IDLE_TIMEOUT",
        "SLUICE_BODY_TIMEOUT", "SLUICE_SEND_TIMEOUT", "SLUICE_UPSTREAM_CONNECT_TIMEOUT",
        "SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "SLUICE_SSE_IDLE_TIMEOUT", "SLUICE_DRAIN_TIMEOUT"}) {
    INFO(name);
    CHECK_THAT(error_of(minimal({{name, "0s"}})),
               Catch::StartsWith(std::string(name) +
                                 ": \"0s\" is not allowed; valid: greater than 0, e.g. "));
    CHECK_NOTHROW(load(minimal({{name, "1ms"}})));
  }
  CHECK(error_of(minimal({{"SLUICE_HEADER_TIMEOUT", "0"}})) ==
        "SLUICE_HEADER_TIMEOUT: \"0\" is not allowed; valid: greater than 0, e.g. 10s");
}

TEST_CASE("every duration variable is parsed into its field", "[config]") {
  Config c = load(minimal({{"SLUICE_UPSTREAM_IDLE_TIMEOUT", "1ms"},
                           {"SLUICE_HEADER_TIMEOUT", "2ms"},
                           {"SLUICE_IDLE_TIMEOUT", "3ms"},
                           {"SLUICE_BODY_TIMEOUT", "4ms"},
                           {"SLUICE_SEND_TIMEOUT", "5ms"},
                           {"SLUICE_UPSTREAM_CONNECT_TIMEOUT", "6ms"},
                           {"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "7ms"},
                           {"SLUICE_SSE_IDLE_TIMEOUT", "8ms"},
                           {"SLUICE_LAG_PROBE_INTERVAL", "11ms"},
                           {"SLUICE_DRAIN_DELAY", "9ms"},
                           {"SLUICE_DRAIN_TIMEOUT", "10ms"}}));
  CHECK(c.upstream_idle_timeout == 1ms);
  CHECK(c.header_timeout == 2ms);
  CHECK(c.idle_timeout == 3ms);
  CHECK(c.body_timeout == 4ms);
  CHECK(c.send_timeout == 5ms);
  CHECK(c.connect_timeout == 6ms);
  CHECK(c.response_timeout == 7ms);
  CHECK(c.sse_idle_timeout == 8ms);
  CHECK(c.lag_probe_interval == 11ms);
  CHECK(c.drain_delay == 9ms);
  CHECK(c.drain_timeout == 10ms);
}

TEST_CASE("the drain delay may be zero", "[config]") {
  CHECK(load(minimal({{"SLUICE_DRAIN_DELAY", "0"}})).drain_delay == 0ms);
  CHECK(variable_of(minimal({{"SLUICE_DRAIN_DELAY", "-1s"}})) == "SLUICE_DRAIN_DELAY");
}

TEST_CASE("SLUICE_LAG_PROBE_INTERVAL is limited to 10ms..1s", "[config]") {
  CHECK(load(minimal({{"SLUICE_LAG_PROBE_INTERVAL", "10ms"}})).lag_probe_interval == 10ms);
  CHECK(load(minimal({{"SLUICE_LAG_PROBE_INTERVAL", "1s"}})).lag_probe_interval == 1s);
  CHECK(error_of(minimal({{"SLUICE_LAG_PROBE_INTERVAL", "9ms"}})) ==
        "SLUICE_LAG_PROBE_INTERVAL: \"9ms\" is out of range; valid: 10ms..1s");
  CHECK(variable_of(minimal({{"SLUICE_LAG_PROBE_INTERVAL", "1001ms"}})) ==
        "SLUICE_LAG_PROBE_INTERVAL");
}

TEST_CASE("SLUICE_MAX_HEADER_BYTES is limited to 1KiB..1MiB", "[config]") {
  CHECK(load(minimal({{"SLUICE_MAX_HEADER_BYTES", "1KiB"}})).max_header_bytes == 1024u);
  CHECK(load(minimal({{"SLUICE_MAX_HEADER_BYTES", "1MiB"}})).max_header_bytes == 1u << 20);
  CHECK(error_of(minimal({{"SLUICE_MAX_HEADER_BYTES", "1023"}})) ==
        "SLUICE_MAX_HEADER_BYTES: \"1023\" is out of range; valid: 1KiB..1MiB");
  CHECK(variable_of(minimal({{"SLUICE_MAX_HEADER_BYTES", "1048577"}})) ==
        "SLUICE_MAX_HEADER_BYTES");
}

TEST_CASE("SLUICE_MAX_BODY_BYTES takes any size, zero included", "[config]") {
  CHECK(load(minimal({{"SLUICE_MAX_BODY_BYTES", "0"}})).max_body_bytes == 0u);
  CHECK(load(minimal({{"SLUICE_MAX_BODY_BYTES", "4GiB"}})).max_body_bytes == 4ull << 30);
  CHECK(variable_of(minimal({{"SLUICE_MAX_BODY_BYTES", "1TB"}})) == "SLUICE_MAX_BODY_BYTES");
}

TEST_CASE("SLUICE_CLIENT_SEND_BUFFER is 0 (the kernel's) or 4KiB..64MiB", "[config]") {
  CHECK(load(minimal()).client_send_buffer == 256u * 1024);
  CHECK(load(minimal({{"SLUICE_CLIENT_SEND_BUFFER", "0"}})).client_send_buffer == 0u);
  CHECK(load(minimal({{"SLUICE_CLIENT_SEND_BUFFER", "4KiB"}})).client_send_buffer == 4096u);
  CHECK(load(minimal({{"SLUICE_CLIENT_SEND_BUFFER", "64MiB"}})).client_send_buffer == 64u << 20);
  CHECK(error_of(minimal({{"SLUICE_CLIENT_SEND_BUFFER", "1KiB"}})) ==
        "SLUICE_CLIENT_SEND_BUFFER: \"1KiB\" is out of range; valid: 0 (the kernel's autotuning) "
        "or 4KiB..64MiB");
  CHECK(variable_of(minimal({{"SLUICE_CLIENT_SEND_BUFFER", "65MiB"}})) ==
        "SLUICE_CLIENT_SEND_BUFFER");
}

TEST_CASE("connection limits must be at least one", "[config]") {
  CHECK(load(minimal({{"SLUICE_MAX_CONNECTIONS", "1"}})).max_connections == 1u);
  CHECK(load(minimal({{"SLUICE_UPSTREAM_MAX_CONNECTIONS", "64"}})).upstream_max_connections == 64u);
  CHECK(error_of(minimal({{"SLUICE_MAX_CONNECTIONS", "0"}})) ==
        "SLUICE_MAX_CONNECTIONS: \"0\" is out of range; valid: at least 1");
  CHECK(error_of(minimal({{"SLUICE_UPSTREAM_MAX_CONNECTIONS", "0"}})) ==
        "SLUICE_UPSTREAM_MAX_CONNECTIONS: \"0\" is out of range; valid: at least 1");
  CHECK_THAT(error_of(minimal({{"SLUICE_MAX_CONNECTIONS", "20k"}})),
             Catch::Contains("is not a whole number"));
}

TEST_CASE("every config error starts with the variable it is about", "[config]") {
  // One bad value per variable; each must be refused, and under its own name.
  const std::vector<std::pair<std::string, std::string>> bad{
      {"SLUICE_LISTEN", "nope"},
      {"SLUICE_ADMIN_LISTEN", "nope"},
      {"SLUICE_ADMIN_TOKEN", ""},
      {"SLUICE_UPSTREAMS", "a=b"},
      {"SLUICE_ROUTES", "[]"},
      {"SLUICE_ROUTES_FILE", "/nonexistent"},
      {"SLUICE_THREADS", "0"},
      {"SLUICE_ACCESS_LOG", "syslog"},
      {"SLUICE_UPSTREAM_MAX_CONNECTIONS", "0"},
      {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "30"},
      {"SLUICE_HOST_EJECT", "30s:1s"},
      {"SLUICE_MAX_HEADER_BYTES", "16KB"},
      {"SLUICE_MAX_BODY_BYTES", "64MB"},
      {"SLUICE_MAX_CONNECTIONS", "0"},
      {"SLUICE_CLIENT_SEND_BUFFER", "1KiB"},
      {"SLUICE_HEADER_TIMEOUT", "10"},
      {"SLUICE_IDLE_TIMEOUT", "60"},
      {"SLUICE_BODY_TIMEOUT", "30"},
      {"SLUICE_SEND_TIMEOUT", "30"},
      {"SLUICE_UPSTREAM_CONNECT_TIMEOUT", "2"},
      {"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "30"},
      {"SLUICE_SSE_IDLE_TIMEOUT", "5"},
      {"SLUICE_H2", "yes"},
      {"SLUICE_H2C", "on"},
      {"SLUICE_H2_MAX_STREAMS", "0"},
      {"SLUICE_H2_WINDOW", "1KiB"},
      {"SLUICE_H2_FRAME_BUDGET", "none"},
      {"SLUICE_LAG_PROBE_INTERVAL", "50"},
      {"SLUICE_DRAIN_DELAY", "5"},
      {"SLUICE_DRAIN_TIMEOUT", "30"},
      {"SLUICE_ADMISSION_MODE", "shed"},
      {"SLUICE_ADMISSION_PROFILE", "slow"},
      {"SLUICE_TICK", "1"},
      {"SLUICE_ADMISSION_LAG_MS", "250,200,600"},
      {"SLUICE_ADMISSION_UPSTREAM_WAIT_MS", "1,2"},
      {"SLUICE_ADMISSION_RISE_TICKS", "0"},
      {"SLUICE_ADMISSION_EMERGENCY_MS", "1s"},
      {"SLUICE_ADMISSION_HOLD", "5s,15s"},
      {"SLUICE_ADMISSION_EXIT_RATIO", "1.5"},
      {"SLUICE_ADMISSION_SPACING", "5"},
      {"SLUICE_ADMISSION_EMERGENCY_DWELL", "-1s"},
      {"SLUICE_ADMISSION_TIMEOUT_PIN", "0s"},
      {"SLUICE_LANE_FACTORS", "bulk=1,2,0,0"},
      {"SLUICE_RETRY_AFTER", "bulk=10s:5s"},
      {"SLUICE_LANE_FLOORS", "standard=0.8"},
      {"SLUICE_LANE_WEIGHTS", "bulk=0"},
      {"SLUICE_QUEUE_WINDOW", "heavy=6m"},
      {"SLUICE_STARVED_AFTER", "0s"},
      {"SLUICE_BUDGET_RESERVE", "bulk=130%"},
      {"SLUICE_HEAVY_MAX_IN_FLIGHT", "0"},
      {"SLUICE_BULKHEAD_SEED", "0.5"},
      {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "0"},
      {"SLUICE_BULKHEAD_SLOW_FACTOR", "1"},
      {"SLUICE_CLOSE_STATUSES", "429"},
      {"SLUICE_EMERGENCY_ACTIONS", "short_timeouts,stop"},
      {"SLUICE_EMERGENCY_ACTIONS_AFTER", "5 minutes"},
      {"SLUICE_EMERGENCY_CONNECTION_FLOOR", "-1"},
      {"SLUICE_INGEST_BUDGET", "0"},
      {"SLUICE_INGEST_SHARES", "bulk=0"},
      {"SLUICE_CLOSE_FOR", "25h"},
      {"SLUICE_PROBE_EVERY", "50ms"},
      {"SLUICE_DELEGATION", "true"},
      {"SLUICE_LEASE_KEY", "abc"},
      {"SLUICE_PINS_FILE", ""},
      {"SLUICE_TICK_LOG", ""},
      {"SLUICE_DEBUG_ENDPOINTS", "yes"},
      {"SLUICE_FORWARDED_FOR", "prepend"},
      {"SLUICE_CONFIG_FILE", "/nonexistent/sluice.env"},
      {"SLUICE_TLS_CERT", "a.pem,,b.pem"},
      {"SLUICE_TLS_KEY", ","},
      {"SLUICE_TLS_LISTEN", "nope"},
      {"SLUICE_TLS_MIN_VERSION", "1.1"},
      {"SLUICE_TLS_CIPHERS", ""},
      {"SLUICE_TLS_CIPHERSUITES", ""},
      {"SLUICE_TLS_HANDSHAKE_TIMEOUT", "10"},
      {"SLUICE_TLS_TICKET_ROTATE", "500ms"},
      {"SLUICE_UPSTREAM_CA", "/nonexistent/ca.pem"},
      {"SLUICE_UPSTREAM_CLIENT_CERT", "/nonexistent/client.pem"},
      {"SLUICE_UPSTREAM_CLIENT_KEY", "/nonexistent/client.key"},
      {"SLUICE_RESOLVER", "dns.example:53"},
      {"SLUICE_DNS_MIN_TTL", "0s"},
      {"SLUICE_DNS_MAX_TTL", "2d"},
      {"SLUICE_HEALTH_CHECKS", R"({"api":{"path":"healthz"}})"},
      {"SLUICE_TENANT_KEY", "cookie:session"},
      {"SLUICE_TENANT_JWT_KEY", "short"},
      {"SLUICE_TENANT_CONCURRENCY", "0"},
      {"SLUICE_TENANT_RATE", "10:0"},
      {"SLUICE_TENANT_TABLE", "8"},
      {"SLUICE_TENANT_WEIGHTS", "key-a=0.5"},
      {"SLUICE_REDIS_URL", "http://127.0.0.1:6379"},
      {"SLUICE_REDIS_INTERVAL", "5ms"},
      {"SLUICE_FLEET_CAPACITY", "yes"},
  };
  REQUIRE(bad.size() == variables().size());
  for (const auto& [name, value] : bad) {
    INFO(name << "=" << value);
    Env env = minimal();
    env[name] = value;
    try {
      load(env);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK(e.variable() == name);
      CHECK_THAT(std::string(e.what()), Catch::StartsWith(name + ": "));
    }
  }
}

TEST_CASE("to_json never contains the admin token", "[config][json]") {
  Config c = load(
      minimal({{"SLUICE_ADMIN_TOKEN", "hunter2-secret"}, {"SLUICE_ADMIN_LISTEN", "0.0.0.0:9901"}}));
  std::string shown = to_json(c);
  CHECK_THAT(shown, !Catch::Contains("hunter2-secret"));
  CHECK(nlohmann::json::parse(shown)["admin_token"] == "(set)");
  CHECK(nlohmann::json::parse(to_json(load(minimal())))["admin_token"].is_null());
}

TEST_CASE("to_json prints a value that is not UTF-8, its bad bytes replaced", "[config][json]") {
  // A path is any bytes but '/' and NUL; `sluice config` prints it all the same.
  std::string shown = to_json(load(minimal({{"SLUICE_PINS_FILE", "/etc/sluice/pins-\xff.json"}})));
  CHECK(nlohmann::json::parse(shown)["pins_file"] == "/etc/sluice/pins-\xef\xbf\xbd.json");
}

TEST_CASE("to_json never contains the lease key", "[config][json]") {
  const std::string key = "00112233445566778899aabbccddeeff";
  std::string shown = to_json(load(minimal({{"SLUICE_LEASE_KEY", key}})));
  CHECK_THAT(shown, !Catch::Contains(key));
  CHECK_THAT(shown, !Catch::Contains("00112233"));
  CHECK(nlohmann::json::parse(shown)["lease_key"] == "(set)");
  CHECK(nlohmann::json::parse(to_json(load(minimal())))["lease_key"].is_null());
}

TEST_CASE("to_json shows values in user units and routes by upstream name", "[config][json]") {
  Config c = load({{"SLUICE_UPSTREAMS", "api=127.0.0.1:9000|[::1]:9001;auth=h:2"},
                   {"SLUICE_HEADER_TIMEOUT", "250ms"},
                   {"SLUICE_SSE_IDLE_TIMEOUT", "120s"},
                   {"SLUICE_MAX_HEADER_BYTES", "32KiB"},
                   {"SLUICE_ACCESS_LOG", "./a.log"},
                   {"SLUICE_ROUTES", R"([{"prefix":"/a","upstream":"auth","lane":"heavy"}])"}});
  auto j = nlohmann::json::parse(to_json(c));
  CHECK(j["header_timeout"] == "250ms");
  CHECK(j["sse_idle_timeout"] == "2m");
  CHECK(j["max_header_bytes"] == 32768);
  CHECK(j["access_log"] == "./a.log");
  CHECK(j["upstreams"] ==
        nlohmann::json::parse(
            R"([{"name":"api","hosts":["127.0.0.1:9000","[::1]:9001"],"tls":false},
                                  {"name":"auth","hosts":["h:2"],"tls":false}])"));
  CHECK(j["routes"] == nlohmann::json::parse(
                           R"([{"name":"route0","prefix":"/a","lane":"heavy","upstream":"auth",
                                "alternatives":[],"pin":false}])"));
  CHECK(to_json(c).find("\n  \"listen\"") != std::string::npos);  // two-space indent
}

TEST_CASE("the routes to_json shows can be given back as SLUICE_ROUTES", "[config][json]") {
  const std::string routes =
      R"([{"name":"a","regex":"^/x","methods":["GET"],"header":{"name":"X-T","value":"v"},
           "sse":true,"min_body_bytes":5,"lane":"bulk","upstream":"two","alternatives":["one"]},
          {"prefix":"/","pin":true}])";
  Env env{{"SLUICE_UPSTREAMS", "one=h:1;two=h:2"}, {"SLUICE_ROUTES", routes}};
  std::string first = to_json(load(env));
  env["SLUICE_ROUTES"] = nlohmann::json::parse(first)["routes"].dump();
  CHECK(to_json(load(env)) == first);
}

TEST_CASE("help text starts with the usage line and lists every variable with its default",
          "[config][docs]") {
  std::string help = sluice::config::help_text();
  CHECK_THAT(help, Catch::StartsWith("Usage: sluice [serve|check-config|healthcheck|replay "
                                     "[FILE|-]] [--help|--version]\n"));
  for (const auto& v : variables()) {
    INFO(v.name);
    CHECK_THAT(help, Catch::Contains(std::string(v.name) +
                                     "  (default: " + std::string(v.default_value) + ")"));
  }
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(line.size() <= 100);
  }
}

TEST_CASE("the reference lists every variable with its default and meaning", "[config][docs]") {
  std::string md = sluice::config::reference_markdown();
  CHECK_THAT(md, Catch::StartsWith("# Configuration reference\n"));
  for (const auto& v : variables()) {
    INFO(v.name);
    CHECK_THAT(md, Catch::Contains("| `" + std::string(v.name) + "` | "));
    CHECK_THAT(md, Catch::Contains(std::string(v.default_value)));
  }
}

TEST_CASE("docs/configuration.md is the generated reference", "[config][docs]") {
  std::ifstream in(SLUICE_SOURCE_DIR "/docs/configuration.md", std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  // On failure: regenerate with `sluice config-reference > docs/configuration.md`.
  CHECK(text.str() == sluice::config::reference_markdown());
}

TEST_CASE(
    "every variable of the table is in --help, the reference and check-config, and says "
    "whether a reload puts it in force",
    "[config][table]") {
  const std::string help = sluice::config::help_text();
  const std::string md = sluice::config::reference_markdown();
  const auto shown = nlohmann::json::parse(to_json(load(minimal())));
  // The secrets need valid values to be set at all.
  const auto with_secrets = nlohmann::json::parse(
      to_json(load(minimal({{"SLUICE_ADMIN_TOKEN", "hunter2-secret"},
                            {"SLUICE_LEASE_KEY", "00112233445566778899aabbccddeeff"},
                            {"SLUICE_TENANT_JWT_KEY", "an-hs256-secret-of-some-length"}}))));
  std::set<std::string_view> not_shown, secrets;
  std::set<std::string> keys;
  for (const auto& v : variables()) {
    const std::string name(v.name);
    INFO(name);
    const bool live = v.reload == Reload::live;
    CHECK((live || v.reload == Reload::restart));

    // --help: the variable with its default, and "Reloads live." exactly when it does.
    auto at = help.find("\n  " + name + "  (default: " + std::string(v.default_value) + ")\n");
    REQUIRE(at != std::string::npos);
    auto end = help.find("\n\n", at + 1);
    std::string entry = help.substr(at, end == std::string::npos ? end : end - at);
    for (std::size_t nl; (nl = entry.find("\n      ")) != std::string::npos;)
      entry.replace(nl, 7, " ");  // the meaning unwrapped
    CHECK((entry.find(" Reloads live.") != std::string::npos) == live);

    // The reference: the variable's row, with live or restart in its reload column.
    auto row_at = md.find("\n| `" + name + "` | ");
    REQUIRE(row_at != std::string::npos);
    std::string row = md.substr(row_at + 1, md.find('\n', row_at + 1) - row_at - 1);
    CHECK_THAT(row, Catch::Contains(std::string(live ? " | live | " : " | restart | ")));

    // check-config: under its key, a secret only as whether it is set.
    if (v.key.empty()) {
      not_shown.insert(v.name);
      continue;
    }
    keys.insert(std::string(v.key));
    CHECK(shown.contains(std::string(v.key)));
    if (v.secret) {
      secrets.insert(v.name);
      CHECK(shown[std::string(v.key)].is_null());
      CHECK(with_secrets[std::string(v.key)] == "(set)");
    }
  }
  // Shown under routes, as the routes it holds.
  CHECK(not_shown == std::set<std::string_view>{"SLUICE_ROUTES_FILE"});
  CHECK(secrets == std::set<std::string_view>{"SLUICE_ADMIN_TOKEN", "SLUICE_LEASE_KEY",
                                              "SLUICE_TENANT_JWT_KEY"});
  for (const auto& [key, value] : shown.items()) CHECK(keys.count(key) == 1);
  CHECK(keys.size() == variables().size() - not_shown.size());
}

TEST_CASE("a reload takes the live variables from the new configuration and lists the others",
          "[config][reload]") {
  using sluice::config::reload;
  const Config running = load(minimal());
  const Config next = load(minimal({{"SLUICE_LANE_FACTORS", "bulk=1,1,1,1"},
                                    {"SLUICE_ADMISSION_PROFILE", "sentinel"},
                                    {"SLUICE_MAX_BODY_BYTES", "1KiB"},
                                    {"SLUICE_ADMIN_TOKEN", "hunter2"}}));
  auto r = reload(running, next);
  // In table order, by check-config key; the profile brings its timings along.
  CHECK(r.live == std::vector<std::string_view>{"admission_profile", "tick", "admission_hold",
                                                "admission_exit_ratio", "admission_spacing",
                                                "admission_emergency_dwell", "lane_factors"});
  CHECK(r.restart == std::vector<std::string_view>{"admin_token", "max_body_bytes"});
  CHECK(r.config.admission.factors == next.admission.factors);
  CHECK(r.config.admission.controller.hold == next.admission.controller.hold);
  CHECK(r.config.admission.tick == next.admission.tick);
  CHECK(r.config.max_body_bytes == running.max_body_bytes);
  CHECK(r.config.admin_token.empty());

  // A secret check-config shows as (set) both times is still compared by value.
  auto token = [](std::string t) { return load(minimal({{"SLUICE_ADMIN_TOKEN", t}})); };
  CHECK(reload(token("a"), token("b")).restart == std::vector<std::string_view>{"admin_token"});
  auto same = reload(running, running);
  CHECK(same.live.empty());
  CHECK(same.restart.empty());
  CHECK(to_json(same.config) == to_json(running));
}

TEST_CASE("the sentinel profile sets seed 003's timings and single variables override it",
          "[config][admission]") {
  auto fast = load(minimal()).admission;
  CHECK(fast.profile == "fast");
  CHECK(fast.tick == 1000ms);
  CHECK(fast.controller.hold[0] == 5000ms);
  CHECK(fast.controller.exit_ratio == 0.6);
  CHECK(fast.controller.emergency_rule == sluice::admission::EmergencyRule::evidence);
  auto sentinel = load(minimal({{"SLUICE_ADMISSION_PROFILE", "sentinel"}})).admission;
  CHECK(sentinel.tick == 60'000ms);
  CHECK(sentinel.controller.hold ==
        std::array<sluice::config::Duration, 3>{300'000ms, 300'000ms, 300'000ms});
  CHECK(sentinel.controller.exit_ratio == 1.0);
  CHECK(sentinel.controller.spacing == 300'000ms);
  CHECK(sentinel.controller.emergency_dwell == 180'000ms);
  CHECK(sentinel.controller.emergency_rule == sluice::admission::EmergencyRule::sustained_critical);
  auto overridden = load(minimal({{"SLUICE_ADMISSION_PROFILE", "sentinel"},
                                  {"SLUICE_ADMISSION_SPACING", "1m"},
                                  {"SLUICE_TICK", "30s"}}))
                        .admission;
  CHECK(overridden.controller.spacing == 60'000ms);
  CHECK(overridden.tick == 30'000ms);
  CHECK(overridden.controller.emergency_dwell == 180'000ms);
  CHECK(overridden.controller.emergency_rule ==
        sluice::admission::EmergencyRule::sustained_critical);
}

TEST_CASE("lane factors: lanes left out keep their defaults, a factor never rises with the level",
          "[config][admission]") {
  auto a = load(minimal({{"SLUICE_LANE_FACTORS", "bulk=1,0.25,0,0"}})).admission;
  CHECK(a.factors[0] == std::array<double, 4>{1, 0.25, 0, 0});
  CHECK(a.factors[1] == sluice::admission::default_lane_factors()[1]);
  CHECK(variable_of(minimal({{"SLUICE_LANE_FACTORS", "bulk=0.5,1,1,1"}})) == "SLUICE_LANE_FACTORS");
  CHECK_THAT(error_of(minimal({{"SLUICE_LANE_FACTORS", "bulk=0.5,1,1,1"}})),
             Catch::Contains("must not increase"));
  CHECK_THAT(error_of(minimal({{"SLUICE_LANE_FACTORS", "fast=1,1,1,1"}})),
             Catch::Contains("not a lane"));
  CHECK_THAT(error_of(minimal({{"SLUICE_LANE_FACTORS", "bulk=1,1,1"}})),
             Catch::Contains("four factors"));
}

TEST_CASE("thresholds must be three, positive and strictly increasing", "[config][admission]") {
  CHECK(load(minimal({{"SLUICE_ADMISSION_LAG_MS", "100,250,600"}})).admission.controller.lag_ms ==
        std::array<double, 3>{100, 250, 600});
  CHECK_THAT(error_of(minimal({{"SLUICE_ADMISSION_LAG_MS", "250,250,600"}})),
             Catch::Contains("strictly increasing"));
  CHECK_THAT(error_of(minimal({{"SLUICE_ADMISSION_UPSTREAM_WAIT_MS", "0,1,2"}})),
             Catch::Contains("above 0"));
}

TEST_CASE("Retry-After bands need floor <= cap and a floor of at least 1s", "[config][admission]") {
  auto a = load(minimal({{"SLUICE_RETRY_AFTER", "standard=2s:10s"}})).admission;
  CHECK(a.retry[1].floor == 2000ms);
  CHECK(a.retry[1].cap == 10'000ms);
  CHECK(a.retry[0].floor == 1000ms);  // derived by default: seed 000's 120s:180s is opt-in
  CHECK_THAT(error_of(minimal({{"SLUICE_RETRY_AFTER", "standard=500ms:10s"}})),
             Catch::Contains("at least 1s"));
}

TEST_CASE("load_admission needs no upstreams but still refuses unknown names",
          "[config][admission]") {
  auto a = sluice::config::load_admission({{"SLUICE_ADMISSION_MODE", "observe"}});
  CHECK(a.mode == sluice::admission::Mode::observe);
  CHECK_THROWS_AS(sluice::config::load_admission({{"SLUICE_ADMISION_MODE", "observe"}}),
                  ConfigError);
}

TEST_CASE("SLUICE_CONFIG_FILE lines are laid over the environment and checked like it",
          "[config][reload]") {
  TempFile file("# reloadable settings\nSLUICE_ADMISSION_MODE=observe\n\n  SLUICE_TICK=250ms  \n");
  auto c = load(minimal({{"SLUICE_CONFIG_FILE", file.path.string()}, {"SLUICE_TICK", "2s"}}));
  CHECK(c.admission.mode == sluice::admission::Mode::observe);
  CHECK(c.admission.tick == 250ms);  // the file wins over the environment
  TempFile typo("SLUICE_TIKC=1s\n");
  CHECK(variable_of(minimal({{"SLUICE_CONFIG_FILE", typo.path.string()}})) == "SLUICE_TIKC");
  TempFile bad("SLUICE_TICK=1\n");
  CHECK(variable_of(minimal({{"SLUICE_CONFIG_FILE", bad.path.string()}})) == "SLUICE_TICK");
  TempFile junk("TICK=1s\n");
  CHECK_THAT(error_of(minimal({{"SLUICE_CONFIG_FILE", junk.path.string()}})),
             Catch::Contains("line 1: not SLUICE_X=value"));
}

TEST_CASE("bulkhead and lease variables default to the documented values", "[config][admission]") {
  auto a = load(minimal()).admission;
  CHECK(a.lanes.floors == std::array<double, 3>{0.1, 0.5, 0.2});
  CHECK(a.lanes.weights == std::array<double, 3>{1, 4, 2});
  CHECK(a.lanes.queue_window ==
        std::array<sluice::admission::Micros, 3>{0us, 500'000us, 2'000'000us});
  CHECK(a.lanes.starved_after == 5s);
  CHECK_FALSE(a.heavy_max_in_flight.has_value());
  CHECK(a.estimate.seed == 4.0);
  CHECK(a.estimate.growth_interval == 250ms);
  CHECK(a.estimate.slow_factor == 4.0);
  CHECK(a.estimate.max == sluice::admission::EstimatePolicy{}.max);  // the proxy sets it
  CHECK(a.estimate.decrease == sluice::admission::EstimatePolicy{}.decrease);
  CHECK(a.delegation);
  CHECK(a.lease_key.empty());

  auto j = nlohmann::json::parse(to_json(load(minimal())));
  CHECK(j["lane_floors"] == "bulk=0.1;standard=0.5;heavy=0.2");
  CHECK(j["lane_weights"] == "bulk=1;standard=4;heavy=2");
  CHECK(j["queue_window"] == "bulk=0s;standard=500ms;heavy=2s");
  CHECK(j["starved_after"] == "5s");
  CHECK(j["heavy_max_in_flight"].is_null());
  CHECK(j["bulkhead_seed"] == 4.0);
  CHECK(j["bulkhead_growth_interval"] == "250ms");
  CHECK(j["bulkhead_slow_factor"] == 4.0);
  CHECK(j["delegation"] == "on");
  CHECK(j["lease_key"].is_null());
}

TEST_CASE("bulkhead and lease variables are parsed into the admission config",
          "[config][admission]") {
  const Env env{{"SLUICE_LANE_FLOORS", "bulk=0;heavy=0.5"},
                {"SLUICE_LANE_WEIGHTS", "standard=2.5"},
                {"SLUICE_QUEUE_WINDOW", "bulk=100ms;heavy=5m"},
                {"SLUICE_STARVED_AFTER", "1500ms"},
                {"SLUICE_HEAVY_MAX_IN_FLIGHT", "32"},
                {"SLUICE_BULKHEAD_SEED", "16"},
                {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "1ms"},
                {"SLUICE_BULKHEAD_SLOW_FACTOR", "1.5"},
                {"SLUICE_DELEGATION", "off"},
                {"SLUICE_LEASE_KEY", "00112233445566778899AABBccddeeff"}};
  auto a = load(minimal(env)).admission;
  // Lanes left out keep their defaults.
  CHECK(a.lanes.floors == std::array<double, 3>{0, 0.5, 0.5});
  CHECK(a.lanes.weights == std::array<double, 3>{1, 2.5, 2});
  CHECK(a.lanes.queue_window ==
        std::array<sluice::admission::Micros, 3>{100'000us, 500'000us, 300'000'000us});
  CHECK(a.lanes.starved_after == 1500ms);
  CHECK(a.heavy_max_in_flight == std::optional<std::size_t>{32});
  CHECK(a.estimate.seed == 16.0);
  CHECK(a.estimate.growth_interval == 1ms);
  CHECK(a.estimate.slow_factor == 1.5);
  CHECK_FALSE(a.delegation);
  CHECK(a.lease_key == "00112233445566778899AABBccddeeff");

  auto j = nlohmann::json::parse(to_json(load(minimal(env))));
  CHECK(j["lane_floors"] == "bulk=0;standard=0.5;heavy=0.5");
  CHECK(j["lane_weights"] == "bulk=1;standard=2.5;heavy=2");
  CHECK(j["queue_window"] == "bulk=100ms;standard=500ms;heavy=5m");
  CHECK(j["starved_after"] == "1500ms");
  CHECK(j["heavy_max_in_flight"] == 32);
  CHECK(j["bulkhead_seed"] == 16.0);
  CHECK(j["bulkhead_growth_interval"] == "1ms");
  CHECK(j["bulkhead_slow_factor"] == 1.5);
  CHECK(j["delegation"] == "off");
  CHECK(j["lease_key"] == "(set)");

  // The same values reach `sluice replay` and live reload through load_admission.
  auto replayed = sluice::config::load_admission(env);
  CHECK(replayed.lanes.floors == a.lanes.floors);
  CHECK(replayed.lanes.weights == a.lanes.weights);
  CHECK(replayed.lanes.queue_window == a.lanes.queue_window);
  CHECK(replayed.lanes.starved_after == a.lanes.starved_after);
  CHECK(replayed.heavy_max_in_flight == a.heavy_max_in_flight);
  CHECK(replayed.estimate.seed == a.estimate.seed);
  CHECK(replayed.estimate.growth_interval == a.estimate.growth_interval);
  CHECK(replayed.estimate.slow_factor == a.estimate.slow_factor);
  CHECK(replayed.delegation == a.delegation);
  CHECK(replayed.lease_key == a.lease_key);
}

TEST_CASE("the limits of the bulkhead and lease variables are accepted", "[config][admission]") {
  auto a = load(minimal({{"SLUICE_LANE_FLOORS", "bulk=0.2;standard=0.5;heavy=0.3"},
                         {"SLUICE_LANE_WEIGHTS", "bulk=0.001;standard=1e6"},
                         {"SLUICE_QUEUE_WINDOW", "standard=0"},
                         {"SLUICE_STARVED_AFTER", "1ms"},
                         {"SLUICE_HEAVY_MAX_IN_FLIGHT", "1"},
                         {"SLUICE_BULKHEAD_SEED", "100000"},
                         {"SLUICE_BULKHEAD_SLOW_FACTOR", "0"}}))
               .admission;
  CHECK(a.lanes.floors == std::array<double, 3>{0.2, 0.5, 0.3});  // sums to 1, give or take a bit
  CHECK(a.lanes.weights == std::array<double, 3>{0.001, 1e6, 2});
  CHECK(a.lanes.queue_window[1] == 0us);
  CHECK(a.lanes.starved_after == 1ms);
  CHECK(a.heavy_max_in_flight == std::optional<std::size_t>{1});
  CHECK(a.estimate.seed == 100'000.0);
  CHECK(a.estimate.slow_factor == 0.0);
  CHECK(load(minimal({{"SLUICE_BULKHEAD_SEED", "1"}})).admission.estimate.seed == 1.0);
  CHECK(
      load(minimal({{"SLUICE_LANE_FLOORS", "bulk=1;standard=0;heavy=0"}})).admission.lanes.floors ==
      std::array<double, 3>{1, 0, 0});
}

TEST_CASE("SLUICE_LANE_FLOORS: each in 0..1, together at most 1, lanes by name",
          "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_LANE_FLOORS", "standard=0.8"}})) ==
        "SLUICE_LANE_FLOORS: the floors bulk=0.1;standard=0.8;heavy=0.2 add up to 1.1; together "
        "they may guarantee at most 1 (lanes left out keep their defaults)");
  CHECK(error_of(minimal({{"SLUICE_LANE_FLOORS", "bulk=1.5"}})) ==
        "SLUICE_LANE_FLOORS: \"1.5\" is above 1; a floor is a fraction 0..1 of the capacity");
  CHECK(error_of(minimal({{"SLUICE_LANE_FLOORS", "bulk=-0.1"}})) ==
        "SLUICE_LANE_FLOORS: \"-0.1\" is not a non-negative number");
  CHECK(error_of(minimal({{"SLUICE_LANE_FLOORS", "fast=0.1"}})) ==
        "SLUICE_LANE_FLOORS: \"fast\" is not a lane; valid: bulk, standard, heavy");
  CHECK(error_of(minimal({{"SLUICE_LANE_FLOORS", "0.1"}})) ==
        "SLUICE_LANE_FLOORS: \"0.1\" is not lane=value; e.g. bulk=0.1;standard=0.5;heavy=0.2");
  CHECK_THAT(error_of(minimal({{"SLUICE_LANE_FLOORS", "bulk=nan"}})),
             Catch::StartsWith("SLUICE_LANE_FLOORS: "));
}

TEST_CASE("SLUICE_LANE_WEIGHTS: each finite and above 0", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_LANE_WEIGHTS", "bulk=0"}})) ==
        "SLUICE_LANE_WEIGHTS: \"0\" is out of range; valid: a finite number above 0, e.g. "
        "standard=4");
  CHECK(error_of(minimal({{"SLUICE_LANE_WEIGHTS", "heavy=inf"}})) ==
        "SLUICE_LANE_WEIGHTS: \"inf\" is out of range; valid: a finite number above 0, e.g. "
        "standard=4");
  CHECK(error_of(minimal({{"SLUICE_LANE_WEIGHTS", "heavy=-2"}})) ==
        "SLUICE_LANE_WEIGHTS: \"-2\" is not a non-negative number");
  CHECK(error_of(minimal({{"SLUICE_LANE_WEIGHTS", "batch=1"}})) ==
        "SLUICE_LANE_WEIGHTS: \"batch\" is not a lane; valid: bulk, standard, heavy");
}

TEST_CASE("SLUICE_QUEUE_WINDOW: durations with a unit, at most 5m", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_QUEUE_WINDOW", "heavy=6m"}})) ==
        "SLUICE_QUEUE_WINDOW: \"6m\" is out of range; valid: 0s..5m");
  CHECK(error_of(minimal({{"SLUICE_QUEUE_WINDOW", "standard=500"}})) ==
        "SLUICE_QUEUE_WINDOW: \"500\" has no unit; use e.g. 250ms, 5s, 2m");
  CHECK(error_of(minimal({{"SLUICE_QUEUE_WINDOW", "standard=-1s"}})) ==
        "SLUICE_QUEUE_WINDOW: \"-1s\" is negative; use e.g. 250ms, 5s, 2m");
  CHECK(error_of(minimal({{"SLUICE_QUEUE_WINDOW", "urgent=1s"}})) ==
        "SLUICE_QUEUE_WINDOW: \"urgent\" is not a lane; valid: bulk, standard, heavy");
}

TEST_CASE("SLUICE_STARVED_AFTER must be greater than 0", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_STARVED_AFTER", "0s"}})) ==
        "SLUICE_STARVED_AFTER: \"0s\" is not allowed; valid: greater than 0, e.g. 5s");
  CHECK(error_of(minimal({{"SLUICE_STARVED_AFTER", "5"}})) ==
        "SLUICE_STARVED_AFTER: \"5\" has no unit; use e.g. 250ms, 5s, 2m");
  // Too large to hold in microseconds.
  CHECK(error_of(minimal({{"SLUICE_STARVED_AFTER", "9223372036854776ms"}})) ==
        "SLUICE_STARVED_AFTER: \"9223372036854776ms\" is too large");
}

TEST_CASE("SLUICE_HEAVY_MAX_IN_FLIGHT is a whole number of at least 1", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_HEAVY_MAX_IN_FLIGHT", "0"}})) ==
        "SLUICE_HEAVY_MAX_IN_FLIGHT: \"0\" is out of range; valid: at least 1");
  CHECK(error_of(minimal({{"SLUICE_HEAVY_MAX_IN_FLIGHT", "2.5"}})) ==
        "SLUICE_HEAVY_MAX_IN_FLIGHT: \"2.5\" is not a whole number; e.g. 512");
  CHECK(variable_of(minimal({{"SLUICE_HEAVY_MAX_IN_FLIGHT", ""}})) == "SLUICE_HEAVY_MAX_IN_FLIGHT");
}

TEST_CASE("SLUICE_BULKHEAD_SEED is a number in 1..100000", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_SEED", "0.5"}})) ==
        "SLUICE_BULKHEAD_SEED: \"0.5\" is out of range; valid: 1..100000");
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_SEED", "100001"}})) ==
        "SLUICE_BULKHEAD_SEED: \"100001\" is out of range; valid: 1..100000");
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_SEED", "four"}})) ==
        "SLUICE_BULKHEAD_SEED: \"four\" is not a non-negative number");
}

TEST_CASE("SLUICE_BULKHEAD_GROWTH_INTERVAL is a duration of at least 1ms", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_GROWTH_INTERVAL", "0"}})) ==
        "SLUICE_BULKHEAD_GROWTH_INTERVAL: \"0\" is out of range; valid: at least 1ms");
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_GROWTH_INTERVAL", "250"}})) ==
        "SLUICE_BULKHEAD_GROWTH_INTERVAL: \"250\" has no unit; use e.g. 250ms, 5s, 2m");
}

TEST_CASE("SLUICE_BULKHEAD_SLOW_FACTOR is 0 or at least 1.5", "[config][admission]") {
  for (const char* bad : {"1", "1.49", "inf"}) {
    INFO(bad);
    CHECK(error_of(minimal({{"SLUICE_BULKHEAD_SLOW_FACTOR", bad}})) ==
          "SLUICE_BULKHEAD_SLOW_FACTOR: \"" + std::string(bad) +
              "\" is out of range; valid: 0 (off) or a number of at least 1.5");
  }
  CHECK(error_of(minimal({{"SLUICE_BULKHEAD_SLOW_FACTOR", "-4"}})) ==
        "SLUICE_BULKHEAD_SLOW_FACTOR: \"-4\" is not a non-negative number");
}

TEST_CASE("SLUICE_DELEGATION is on or off", "[config][admission]") {
  CHECK(load(minimal({{"SLUICE_DELEGATION", "on"}})).admission.delegation);
  for (const char* bad : {"true", "1", "ON", ""}) {
    INFO(bad);
    CHECK(error_of(minimal({{"SLUICE_DELEGATION", bad}})) ==
          "SLUICE_DELEGATION: \"" + std::string(bad) + "\" is neither on nor off; valid: on, off");
  }
}

TEST_CASE("SLUICE_LEASE_KEY is 32 hex digits and its errors never show it", "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_LEASE_KEY", ""}})) ==
        "SLUICE_LEASE_KEY: set but empty; give 32 hex digits (16 bytes), e.g. from openssl rand "
        "-hex 16, or unset it to have one generated at start");
  const std::string short_key = "s3cr3t0123456789abcdef0123456789a";  // 33 characters
  CHECK(error_of(minimal({{"SLUICE_LEASE_KEY", short_key}})) ==
        "SLUICE_LEASE_KEY: has 33 characters, not 32; give 32 hex digits (16 bytes), e.g. from "
        "openssl rand -hex 16");
  const std::string not_hex = "0123456789abcdef0123456789abcdeg";
  std::string e = error_of(minimal({{"SLUICE_LEASE_KEY", not_hex}}));
  CHECK(e ==
        "SLUICE_LEASE_KEY: character 32 is not a hex digit; give 32 hex digits (16 bytes), e.g. "
        "from openssl rand -hex 16");
  CHECK_THAT(e, !Catch::Contains("0123456789abcdef"));
}

TEST_CASE("budget reserve, closure and host ejection default to the documented values",
          "[config][admission]") {
  auto c = load(minimal());
  auto& a = c.admission;
  CHECK(a.lanes.reserve == std::array<double, 3>{0.30, 0.05, 0.15});
  CHECK(a.lanes.reserve == sluice::admission::LanePolicy{}.reserve);
  CHECK(a.close_statuses.empty());
  CHECK(a.closure.close_for == 35min);
  CHECK(a.closure.probe_every == 10s);
  CHECK(c.host_eject_base == 1s);
  CHECK(c.host_eject_max == 30s);

  auto j = nlohmann::json::parse(to_json(c));
  CHECK(j["budget_reserve"] == "bulk=30%;standard=5%;heavy=15%");
  CHECK(j["close_statuses"].is_null());
  CHECK(j["close_for"] == "35m");
  CHECK(j["probe_every"] == "10s");
  CHECK(j["host_eject"] == "1s:30s");
}

TEST_CASE("budget reserve, closure and host ejection are parsed", "[config][admission]") {
  const Env env{{"SLUICE_BUDGET_RESERVE", "bulk=0.5;heavy=12.5%"},
                {"SLUICE_CLOSE_STATUSES", "403,402,451"},
                {"SLUICE_CLOSE_FOR", "90s"},
                {"SLUICE_PROBE_EVERY", "250ms"}};
  auto c = load(minimal({{"SLUICE_HOST_EJECT", "500ms:2m"}}));
  CHECK(c.host_eject_base == 500ms);
  CHECK(c.host_eject_max == 2min);
  CHECK(nlohmann::json::parse(to_json(c))["host_eject"] == "500ms:2m");

  auto a = load(minimal(env)).admission;
  // Lanes left out keep their defaults; fractions and percentages mean the same.
  CHECK(a.lanes.reserve == std::array<double, 3>{0.5, 0.05, 0.125});
  CHECK(a.close_statuses == std::vector<int>{402, 403, 451});  // ascending
  CHECK(a.closure.close_for == 90s);
  CHECK(a.closure.probe_every == 250ms);

  auto j = nlohmann::json::parse(to_json(load(minimal(env))));
  CHECK(j["budget_reserve"] == "bulk=50%;standard=5%;heavy=12.5%");
  CHECK(j["close_statuses"] == "402,403,451");
  CHECK(j["close_for"] == "90s");
  CHECK(j["probe_every"] == "250ms");

  // The same values reach `sluice replay` and live reload through load_admission.
  auto replayed = sluice::config::load_admission(env);
  CHECK(replayed.lanes.reserve == a.lanes.reserve);
  CHECK(replayed.close_statuses == a.close_statuses);
  CHECK(replayed.closure.close_for == a.closure.close_for);
  CHECK(replayed.closure.probe_every == a.closure.probe_every);
}

TEST_CASE("the limits of the budget reserve, closure and host ejection are accepted",
          "[config][admission]") {
  auto c = load(minimal({{"SLUICE_BUDGET_RESERVE", "bulk=100%;standard=0;heavy=1"},
                         {"SLUICE_CLOSE_STATUSES", "400,599"},
                         {"SLUICE_CLOSE_FOR", "24h"},
                         {"SLUICE_PROBE_EVERY", "100ms"},
                         {"SLUICE_HOST_EJECT", "1ms:1ms"}}));
  CHECK(c.admission.lanes.reserve == std::array<double, 3>{1, 0, 1});
  CHECK(c.admission.close_statuses == std::vector<int>{400, 599});
  CHECK(c.admission.closure.close_for == 24h);
  CHECK(c.admission.closure.probe_every == 100ms);
  CHECK(c.host_eject_base == 1ms);
  CHECK(c.host_eject_max == 1ms);
  CHECK(load(minimal({{"SLUICE_CLOSE_FOR", "1ms"}})).admission.closure.close_for == 1ms);
  CHECK(load(minimal({{"SLUICE_PROBE_EVERY", "1h"}})).admission.closure.probe_every == 1h);
  CHECK(load(minimal({{"SLUICE_BUDGET_RESERVE", "standard=0%"}})).admission.lanes.reserve[1] ==
        0.0);
}

TEST_CASE("SLUICE_BUDGET_RESERVE: each a percentage or a fraction in 0..1, lanes by name",
          "[config][admission]") {
  CHECK(error_of(minimal({{"SLUICE_BUDGET_RESERVE", "bulk=130%"}})) ==
        "SLUICE_BUDGET_RESERVE: \"130%\" is out of range; valid: 0%..100% or a fraction 0..1 of "
        "the quota");
  CHECK(error_of(minimal({{"SLUICE_BUDGET_RESERVE", "heavy=1.5"}})) ==
        "SLUICE_BUDGET_RESERVE: \"1.5\" is out of range; valid: 0%..100% or a fraction 0..1 of "
        "the quota");
  for (const char* bad : {"-5%", "thirty", "30 %", "%", "", "nan"}) {
    INFO(bad);
    CHECK(error_of(minimal({{"SLUICE_BUDGET_RESERVE", "bulk=" + std::string(bad)}})) ==
          "SLUICE_BUDGET_RESERVE: \"" + std::string(bad) +
              "\" is not a percentage or a fraction; e.g. bulk=30% or bulk=0.3");
  }
  CHECK(error_of(minimal({{"SLUICE_BUDGET_RESERVE", "fast=30%"}})) ==
        "SLUICE_BUDGET_RESERVE: \"fast\" is not a lane; valid: bulk, standard, heavy");
  CHECK(error_of(minimal({{"SLUICE_BUDGET_RESERVE", "30%"}})) ==
        "SLUICE_BUDGET_RESERVE: \"30%\" is not lane=value; e.g. bulk=30%;standard=5%;heavy=15%");
}

TEST_CASE("SLUICE_CLOSE_STATUSES: 400..599, each once, never the load statuses 429 and 503",
          "[config][admission]") {
  for (const char* load_status : {"429", "503"}) {
    INFO(load_status);
    CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", "402," + std::string(load_status)}})) ==
          "SLUICE_CLOSE_STATUSES: \"" + std::string(load_status) +
              "\" is load, not a refusal to close for: it shrinks the upstream's estimate and "
              "closes nothing; valid: 400..599 except 429 and 503, e.g. 402,403");
  }
  for (const char* out_of_range : {"399", "600", "200"}) {
    INFO(out_of_range);
    CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", out_of_range}})) ==
          "SLUICE_CLOSE_STATUSES: \"" + std::string(out_of_range) +
              "\" is out of range; valid: 400..599 except 429 and 503, e.g. 402,403");
  }
  CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", "402,forbidden"}})) ==
        "SLUICE_CLOSE_STATUSES: \"forbidden\" is not a status code; valid: 400..599 except 429 "
        "and 503, e.g. 402,403");
  CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", "402,403,402"}})) ==
        "SLUICE_CLOSE_STATUSES: \"402\" is given twice; list each status once");
  CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", "402,,403"}})) ==
        "SLUICE_CLOSE_STATUSES: \"402,,403\" has an empty entry; give status codes separated by "
        "commas, e.g. 402,403");
  CHECK(error_of(minimal({{"SLUICE_CLOSE_STATUSES", ""}})) ==
        "SLUICE_CLOSE_STATUSES: empty; give status codes such as 402,403, or unset it for none");
}

TEST_CASE("SLUICE_CLOSE_FOR is a duration greater than 0 and at most 24h", "[config][admission]") {
  for (const char* bad : {"0", "0s", "25h", "1441m"}) {
    INFO(bad);
    CHECK(error_of(minimal({{"SLUICE_CLOSE_FOR", bad}})) ==
          "SLUICE_CLOSE_FOR: \"" + std::string(bad) +
              "\" is out of range; valid: greater than 0, at most 24h");
  }
  CHECK(error_of(minimal({{"SLUICE_CLOSE_FOR", "35"}})) ==
        "SLUICE_CLOSE_FOR: \"35\" has no unit; use e.g. 250ms, 5s, 2m");
}

TEST_CASE("SLUICE_PROBE_EVERY is a duration in 100ms..1h", "[config][admission]") {
  for (const char* bad : {"0", "99ms", "61m", "2h"}) {
    INFO(bad);
    CHECK(error_of(minimal({{"SLUICE_PROBE_EVERY", bad}})) ==
          "SLUICE_PROBE_EVERY: \"" + std::string(bad) + "\" is out of range; valid: 100ms..1h");
  }
  CHECK(error_of(minimal({{"SLUICE_PROBE_EVERY", "-1s"}})) ==
        "SLUICE_PROBE_EVERY: \"-1s\" is negative; use e.g. 250ms, 5s, 2m");
}

TEST_CASE("SLUICE_HOST_EJECT is base:max with base greater than 0 and max at least base",
          "[config]") {
  CHECK(error_of(minimal({{"SLUICE_HOST_EJECT", "30s:1s"}})) ==
        "SLUICE_HOST_EJECT: \"30s:1s\": the max is below the base; e.g. 1s:30s");
  CHECK(error_of(minimal({{"SLUICE_HOST_EJECT", "0s:30s"}})) ==
        "SLUICE_HOST_EJECT: \"0s:30s\": the base must be greater than 0; e.g. 1s:30s");
  CHECK(error_of(minimal({{"SLUICE_HOST_EJECT", "1s"}})) ==
        "SLUICE_HOST_EJECT: \"1s\" is not base:max; e.g. 1s:30s");
  CHECK(error_of(minimal({{"SLUICE_HOST_EJECT", "1:30s"}})) ==
        "SLUICE_HOST_EJECT: \"1\" has no unit; use e.g. 250ms, 5s, 2m");
  CHECK(error_of(minimal({{"SLUICE_HOST_EJECT", "1s:"}})) ==
        "SLUICE_HOST_EJECT: empty; use e.g. 250ms, 5s, 2m");
}

TEST_CASE("SLUICE_FORWARDED_FOR appends by default and replaces at the edge", "[config]") {
  CHECK_FALSE(load(minimal()).forwarded_for_replace);
  CHECK(load(minimal({{"SLUICE_FORWARDED_FOR", "replace"}})).forwarded_for_replace);
  CHECK(error_of(minimal({{"SLUICE_FORWARDED_FOR", "edge"}})) ==
        "SLUICE_FORWARDED_FOR: \"edge\" is not a mode; valid: append, replace");
}

TEST_CASE("tenant weights name a key or its hash, and show only hashes", "[config]") {
  auto c = load(minimal({{"SLUICE_TENANT_WEIGHTS", "key-a=4;#00000000000000ff=2.5"}}));
  CHECK(c.tenants.weight(sluice::tenants::hash("key-a")) == 4);
  CHECK(c.tenants.weight(0xff) == 2.5);
  CHECK(c.tenants.weight(sluice::tenants::hash("key-b")) == 1);
  auto shown = nlohmann::json::parse(to_json(c))["tenant_weights"];
  CHECK(shown["#f10f781241e22466"] == 4);
  CHECK(shown.dump().find("key-a") == std::string::npos);
  CHECK_THROWS_WITH(load(minimal({{"SLUICE_TENANT_WEIGHTS", "a=2;a=3"}})),
                    Catch::Contains("lists one tenant twice"));
  CHECK_THROWS_WITH(load(minimal({{"SLUICE_TENANT_WEIGHTS", "a=200"}})),
                    Catch::Contains("is not in 1..100"));
}

TEST_CASE("a Redis URL gives host, port, credentials and database, the password never shown",
          "[config]") {
  auto c = load(minimal({{"SLUICE_REDIS_URL", "redis://app:s3cret@10.0.0.5:6380/2"}}));
  CHECK(c.redis.at.host == "10.0.0.5");
  CHECK(c.redis.at.port == 6380);
  CHECK(c.redis.user == "app");
  CHECK(c.redis.password == "s3cret");
  CHECK(c.redis.db == 2);
  auto shown = to_json(c);
  CHECK(shown.find("s3cret") == std::string::npos);
  CHECK(nlohmann::json::parse(shown)["redis_url"] == "redis://app:(set)@10.0.0.5:6380/2");
  CHECK(load(minimal({{"SLUICE_REDIS_URL", "redis://redis"}})).redis.at.port == 6379);
  CHECK(load(minimal({{"SLUICE_REDIS_URL", "redis://:p%40ss%3Aw%2Fd@redis"}})).redis.password ==
        "p@ss:w/d");
  CHECK_THROWS_WITH(load(minimal({{"SLUICE_REDIS_URL", "redis://:bad%4@redis"}})),
                    Catch::Contains("two hex digits"));
  CHECK_THROWS_WITH(load(minimal({{"SLUICE_REDIS_URL", "redis://:@host"}})),
                    Catch::Contains("empty password"));
  CHECK_THROWS_WITH(load(minimal({{"SLUICE_REDIS_URL", "rediss://host"}})),
                    Catch::Contains("does not start with redis://"));
}
