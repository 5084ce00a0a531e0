// End-to-end tests of the status page: the admin listener serves it at /, and a
// real browser (Debian's headless Chromium) renders the live /admin/state with it.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Conn;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

std::map<std::string, std::string> env_for(const Upstream& up) {
  return sluice::test::upstream_env(
      up, {{"SLUICE_ROUTES", R"([{"name":"uploads","prefix":"/bulk","lane":"bulk"},)"
                             R"({"name":"api","prefix":"/","lane":"standard"}])"},
           {"SLUICE_TICK", "100ms"}});
}

// The text after the first occurrence of `attr` (e.g. `id="level-name"`) up to the next tag,
// in Chromium's serialized DOM; nullopt when the attribute is not there.
std::optional<std::string> text_after(std::string_view dom, std::string_view attr) {
  auto at = dom.find(attr);
  if (at == std::string_view::npos) return std::nullopt;
  auto open = dom.find('>', at);
  auto close = dom.find('<', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return std::nullopt;
  return std::string(dom.substr(open + 1, close - open - 1));
}

// The serialized <tr> carrying `attr`, or "" when there is none.
std::string row(std::string_view dom, std::string_view attr) {
  auto at = dom.find(attr);
  if (at == std::string_view::npos) return {};
  auto end = dom.find("</tr>", at);
  return std::string(dom.substr(at, end == std::string_view::npos ? end : end - at));
}

struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-chromium-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path path;
};

// Debian's chromium, headless, loads `url`, lets the page run for `budget_ms` of virtual time
// (its one-second polls included) and prints the DOM. Fails the test, rather than skipping it,
// when chromium is missing: scripts/setup.sh installs it.
std::string chromium_dump_dom(const std::string& url, int budget_ms) {
  const char* override_bin = std::getenv("CHROMIUM");
  std::string bin = override_bin != nullptr && *override_bin != '\0' ? override_bin : "chromium";
  TempDir profile;
  std::optional<Process> browser;
  try {
    browser.emplace(std::vector<std::string>{
        bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--user-data-dir=" + profile.path.string(),
        "--virtual-time-budget=" + std::to_string(budget_ms), "--dump-dom", url});
  } catch (const std::exception& e) {
    FAIL("cannot start " << bin << " (" << e.what()
                         << "): the status page test needs Debian's chromium; "
                            "run scripts/setup.sh, which installs it");
  }
  auto code = browser->wait_exit(90s);
  INFO("chromium stderr:\n" << browser->err());
  REQUIRE(code.has_value());
  REQUIRE(*code == 0);
  return browser->out();
}

}  // namespace

TEST_CASE("the admin listener serves the status page at / as one self-contained HTML file",
          "[e2e][status]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, env_for(up));

  auto res = request(s.admin, "GET", "/");
  REQUIRE(res.status == 200);
  CHECK(res.header("Content-Type") == "text/html; charset=utf-8");
  CHECK(res.header("Cache-Control") == "no-store");
  CHECK(res.header("Content-Security-Policy").find("default-src 'none'") != std::string::npos);
  // The bytes of proxy/status.html, embedded at build time: the file is the one source.
  std::ifstream file(std::string(SLUICE_SOURCE_DIR) + "/proxy/status.html", std::ios::binary);
  CHECK(res.body == std::string(std::istreambuf_iterator<char>(file), {}));
  CHECK(res.body.starts_with("<!doctype html>"));
  CHECK(res.body.find("/admin/state") != std::string::npos);
  CHECK(res.body.size() < 16 * 1024);
  // Nothing is loaded from anywhere else: no scripts, styles, fonts or images by reference.
  for (const char* ref : {"src=", "<link", "@import", "url("}) {
    INFO(ref);
    CHECK(res.body.find(ref) == std::string::npos);
  }
  // A query string does not change the page (bookmarks with ?refresh etc. still work).
  CHECK(request(s.admin, "GET", "/?x=1").body == res.body);

  // HEAD sends no body: the next response on the connection parses cleanly.
  auto conn = Conn::open(s.admin);
  REQUIRE(conn.send("HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"));
  auto head = conn.read_response(5s, true);
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(head->header("Content-Type") == "text/html; charset=utf-8");
  auto next = conn.read_response(5s);
  REQUIRE(next);
  CHECK(next->status == 200);
  CHECK(next->body == "ok\n");

  // It is a read-only page.
  CHECK(request(s.admin, "POST", "/").status == 405);
  CHECK(request(s.admin, "DELETE", "/").status == 405);
}

TEST_CASE("headless Chromium renders the status page: the pinned level, its reason, the lanes",
          "[e2e][status][chromium]") {
  Upstream up(kUpstream);
  // Two threads seeded with 3 each: the upstream's capacity estimate K̂ is 6 (no demand grows it).
  auto env = env_for(up);
  env["SLUICE_THREADS"] = "2";
  env["SLUICE_BULKHEAD_SEED"] = "6";
  Sluice s(kSluice, env);
  for (int i = 0; i < 3; ++i) REQUIRE(request(s.port, "GET", "/v1/items").status == 200);

  // The reason carries markup: the page must show it as text, never as HTML.
  const std::string reason = "INC-42 failover <b>db</b>";
  auto pinned =
      request(s.admin, "POST", "/admin/pins", {{"Content-Type", "application/json"}},
              json{{"level", 2}, {"ttl", "5m"}, {"reason", reason}, {"who", "e2e-oncall"}}.dump());
  REQUIRE(pinned.status == 200);
  for (int i = 0; i < 2; ++i) CHECK(request(s.port, "GET", "/bulk/upload").status == 503);

  auto dom = chromium_dump_dom("http://127.0.0.1:" + std::to_string(s.admin) + "/", 3000);
  INFO(dom);

  CHECK(text_after(dom, R"(id="level-name")") == "critical");
  CHECK(text_after(dom, R"(id="level")") == "2");
  CHECK(text_after(dom, R"(id="trigger")") == "pin");
  CHECK(text_after(dom, R"(id="mode")") == "enforce");
  CHECK(dom.find(R"(data-level="2")") != std::string::npos);

  // The pin: shown, with who, reason (escaped) and expiry.
  CHECK(dom.find(R"(id="pin" hidden)") == std::string::npos);
  CHECK(text_after(dom, R"(id="pin-level")") == "2 (critical)");
  CHECK(text_after(dom, R"(id="pin-who")").value_or("").find("e2e-oncall") != std::string::npos);
  CHECK(text_after(dom, R"(id="pin-reason")") == "INC-42 failover &lt;b&gt;db&lt;/b&gt;");
  auto expires = text_after(dom, R"(id="pin-expires")").value_or("");
  CHECK((expires.starts_with("in 4 m ") || expires == "in 5 m 0 s"));  // ttl 5m

  // The lanes table: bulk is refused at critical and its two 503s are counted.
  auto bulk = row(dom, R"(data-lane="bulk")");
  INFO(bulk);
  REQUIRE_FALSE(bulk.empty());
  CHECK(text_after(bulk, R"(data-field="factor")") == "0");
  CHECK(text_after(bulk, R"(data-field="shed")") == "2");
  auto standard = row(dom, R"(data-lane="standard")");
  REQUIRE_FALSE(standard.empty());
  CHECK(text_after(standard, R"(data-field="factor")") == "1");
  CHECK(text_after(standard, R"(data-field="admitted")") == "3");
  CHECK_FALSE(row(dom, R"(data-lane="heavy")").empty());

  // The upstream with its capacity, heavy leases, and more than one poll drawn into the sparklines.
  auto api = row(dom, R"(data-upstream="api")");
  REQUIRE_FALSE(api.empty());
  CHECK(text_after(api, R"(data-field="capacity")") == "6");
  CHECK(text_after(api, R"(data-field="carrying_capacity")") == "—");
  CHECK(text_after(dom, R"(id="leases")") == "0");
  auto samples = text_after(dom, R"(id="samples")").value_or("");
  CHECK(samples.find("(1 reading") == std::string::npos);
  CHECK(samples.find("readings)") != std::string::npos);
  CHECK(dom.find(R"(<svg id="spark-lag")") != std::string::npos);
  CHECK(dom.find("<path d=\"M") != std::string::npos);
  CHECK(text_after(dom, R"(id="conn")").value_or("").starts_with("live"));
}

TEST_CASE("headless Chromium renders a closed upstream, its next probe, and another's quota",
          "[e2e][status][chromium]") {
  Upstream a(kUpstream);
  Upstream b(kUpstream);
  // A 403 from a closes it for SLUICE_CLOSE_FOR; no probe within the test.
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "a=127.0.0.1:" + std::to_string(a.port) +
                                              ";b=127.0.0.1:" + std::to_string(b.port)},
                     {"SLUICE_THREADS", "1"},
                     {"SLUICE_TICK", "100ms"},
                     {"SLUICE_CLOSE_STATUSES", "403"},
                     {"SLUICE_CLOSE_FOR", "35m"},
                     {"SLUICE_PROBE_EVERY", "1h"},
                     {"SLUICE_ROUTES", R"([{"prefix":"/","upstream":"a","alternatives":["b"]}])"}});
  REQUIRE(request(s.port, "GET", "/status/403").status == 403);
  // a is closed: this goes to b, which says 20 % of its quota is left for ten minutes.
  REQUIRE(request(s.port, "GET", "/status/200?ratelimit=100,20,600").status == 200);
  REQUIRE(sluice::test::eventually(
      [&] {
        auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
        return state["upstreams"][0]["closed"] == true &&
               state["upstreams"][1]["budget_remaining"].is_number();
      },
      2s));

  auto dom = chromium_dump_dom("http://127.0.0.1:" + std::to_string(s.admin) + "/", 2000);
  INFO(dom);
  auto row_a = row(dom, R"(data-upstream="a")");
  auto row_b = row(dom, R"(data-upstream="b")");
  REQUIRE_FALSE(row_a.empty());
  REQUIRE_FALSE(row_b.empty());
  auto state_a = text_after(row_a, R"(data-field="state")").value_or("");
  CHECK(state_a.starts_with("closed for 3"));  // 35 m 0 s, or a moment less
  CHECK(state_a.find(", probe in ") != std::string::npos);
  CHECK(row_a.find(R"(data-field="state" class="shed")") != std::string::npos);  // red
  CHECK(text_after(row_a, R"(data-field="budget_remaining")") == "—");
  CHECK(text_after(row_b, R"(data-field="state")") == "open");
  CHECK(text_after(row_b, R"(data-field="budget_remaining")") == "20 %");
  // The closed upstream heads the starving list.
  CHECK(text_after(dom, R"(id="starving")").value_or("").starts_with("upstream a closed (for 3"));
}

TEST_CASE("headless Chromium renders the HTTP/2 streams per connection",
          "[e2e][status][chromium]") {
  Upstream up(kUpstream);
  auto env = env_for(up);
  env["SLUICE_THREADS"] = "2";
  env["SLUICE_H2C"] = "true";
  Sluice s(kSluice, env);
  // Four SSE streams held open on one HTTP/2 connection (nghttp asks once per URL).
  std::vector<std::string> argv{"nghttp", "-n"};
  for (int i = 0; i < 4; ++i)
    argv.push_back("http://127.0.0.1:" + std::to_string(s.port) +
                   "/sse?n=1&interval_ms=8000&i=" + std::to_string(i));
  Process client(argv);
  REQUIRE(sluice::test::eventually([&] { return s.metric("sluice_h2_streams") == 4; }, 5s));
  auto dom = chromium_dump_dom("http://127.0.0.1:" + std::to_string(s.admin) + "/", 2000);
  INFO(dom);
  CHECK(text_after(dom, R"(id="h2-connections")") == "1");
  CHECK(text_after(dom, R"(id="h2-streams")") == "4");
  CHECK(text_after(dom, R"(id="h2-per-connection")") == "4");
  CHECK(text_after(dom, R"(id="clients")") == "1");
}
