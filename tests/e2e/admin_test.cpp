// The admin listener, end to end: its route table as the running binary lists
// it (GET /admin/routes), the token on every mutating route, 404 and 405, and
// the series /metrics exports at 0 before anything has happened.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/sluice.hpp"

using nlohmann::json;
using sluice::test::Headers;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;
using sluice::test::upstream_env;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

struct Row {
  std::string method, path;
  bool mutating;
};

// The routes the instance says it serves.
std::vector<Row> listed_routes(Sluice& s) {
  auto res = request(s.admin, "GET", "/admin/routes");
  REQUIRE(res.status == 200);
  auto listing = json::parse(res.body);
  std::vector<Row> rows;
  for (const auto& r : listing["routes"]) rows.push_back({r["method"], r["path"], r["mutating"]});
  return rows;
}

bool listed(const std::vector<Row>& rows, std::string_view method, std::string_view path,
            bool mutating) {
  for (const auto& r : rows)
    if (r.method == method && r.path == path && r.mutating == mutating) return true;
  return false;
}

// The samples of one family in a /metrics text: canonical labels -> value.
std::map<std::string, double> samples(const std::string& text, const std::string& family) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(family + "{")) continue;
    auto close = line.find("} ");
    REQUIRE(close != std::string::npos);
    // Labels as the serializer writes them: name="value",... in a fixed order.
    out[line.substr(family.size() + 1, close - family.size() - 1)] =
        std::stod(line.substr(close + 2));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "every mutating admin route the instance lists refuses a missing or wrong token, and "
    "the reading routes need none",
    "[e2e][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice,
           upstream_env(up, {{"SLUICE_ADMIN_TOKEN", kToken}, {"SLUICE_DEBUG_ENDPOINTS", "true"}}));
  auto rows = listed_routes(s);  // read with no token: a reading route
  // The list is the table, not an empty answer: the known calls are in it.
  REQUIRE(listed(rows, "POST", "/admin/pins", true));
  REQUIRE(listed(rows, "DELETE", "/admin/pins", true));
  REQUIRE(listed(rows, "POST", "/admin/debug/block", true));
  REQUIRE(listed(rows, "GET", "/admin/state", false));
  REQUIRE(listed(rows, "GET", "/metrics", false));

  const std::vector<Headers> refused{
      {},
      {{"Authorization", "Bearer wrong"}},
      {{"Authorization", "Bearer " + kToken.substr(0, 16)}},
      {{"Authorization", "Bearer " + kToken + "x"}},
      {{"Authorization", "Basic " + kToken}},
      {{"Authorization", kToken}},
  };
  for (const auto& r : rows) {
    INFO(r.method << " " << r.path);
    if (r.mutating) {
      for (const auto& headers : refused) {
        INFO((headers.empty() ? std::string("no Authorization") : headers.front().second));
        auto res = request(s.admin, r.method, r.path, headers);
        CHECK(res.status == 401);
        CHECK(res.header("WWW-Authenticate") == "Bearer");
      }
      // With the token the route answers past the check (a 400 for a missing body or query is past
      // it).
      CHECK(request(s.admin, r.method, r.path, {{"Authorization", "Bearer " + kToken}}).status !=
            401);
    } else {
      CHECK(r.method == "GET");  // a route that changes nothing is read with GET (and HEAD)
      for (auto method : {"GET", "HEAD"}) {
        INFO(method);
        auto res = request(s.admin, method, r.path);
        CHECK(res.status != 401);
        CHECK(res.status != 404);
        CHECK(res.status != 405);
      }
    }
  }
  // Nothing the refused calls asked for happened.
  auto state = json::parse(request(s.admin, "GET", "/admin/state").body);
  CHECK(state["level"] == 0);
  CHECK(state["pin"].is_null());
}

TEST_CASE(
    "an unknown admin path is 404, a known one with another method is 405 with its methods "
    "in Allow, before any token check",
    "[e2e][admin]") {
  Upstream up(kUpstream);
  Sluice s(kSluice, upstream_env(up, {{"SLUICE_ADMIN_TOKEN", kToken}}));
  auto rows = listed_routes(s);
  REQUIRE(listed(rows, "DELETE", "/admin/pins", true));
  CHECK_FALSE(
      listed(rows, "POST", "/admin/debug/block", true));  // off without SLUICE_DEBUG_ENDPOINTS
  std::map<std::string, std::set<std::string>> methods;
  for (const auto& r : rows) {
    methods[r.path].insert(r.method);
    if (r.method == "GET") methods[r.path].insert("HEAD");
  }
  for (const auto& [path, allowed] : methods) {
    INFO(path);
    auto res = request(s.admin, "PUT", path);
    CHECK(res.status == 405);
    std::set<std::string> allow;
    std::istringstream list(res.header("Allow"));
    for (std::string m; std::getline(list >> std::ws, m, ',');) allow.insert(m);
    CHECK(allow == allowed);
  }
  auto admin = request(s.admin, "GET", "/admin/nothing");
  CHECK(admin.status == 404);
  CHECK(json::parse(admin.body)["error"] == "not_found");
  CHECK(request(s.admin, "POST", "/admin/debug/block?ms=1").status == 404);
  auto other = request(s.admin, "GET", "/nothing");
  CHECK(other.status == 404);
  CHECK(other.body == "not found\n");
  auto post = request(s.admin, "POST", "/metrics");
  CHECK(post.status == 405);
  CHECK(post.header("Allow") == "GET, HEAD");
  CHECK(post.body == "method not allowed\n");
}

TEST_CASE(
    "a fresh instance exports every known label set of level changes, suppressed rises, "
    "client errors, fallbacks and admission decisions at 0",
    "[e2e][admin][metrics]") {
  Upstream api(kUpstream);
  Upstream spare(kUpstream);
  Sluice s(
      kSluice,
      {{"SLUICE_UPSTREAMS", "api=127.0.0.1:" + std::to_string(api.port) +
                                ";spare=127.0.0.1:" + std::to_string(spare.port)},
       {"SLUICE_ROUTES",
        R"([{"prefix":"/v1","alternatives":["spare"]},{"prefix":"/s","upstream":"spare"},{"prefix":"/","lane":"standard"}])"}});
  auto text = s.metrics();  // before any request

  const std::vector<std::string> raise{"lag", "upstream_wait", "upstream_timeout", "stall"};
  const std::vector<std::string> lower{"decay", "signal_loss"};
  const std::vector<std::string> either{"pin", "unpin"};
  std::set<std::string> changes, suppressed;
  for (int from = 0; from < 4; ++from)
    for (int to = 0; to < 4; ++to) {
      if (from == to) continue;
      auto add = [&](const std::vector<std::string>& triggers) {
        for (const auto& t : triggers)
          changes.insert("from=\"" + std::to_string(from) + "\",to=\"" + std::to_string(to) +
                         "\",trigger=\"" + t + "\"");
      };
      add(to > from ? raise : lower);
      add(either);
    }
  for (int to = 1; to < 4; ++to)
    for (const auto& t : raise)
      if (t != "stall")  // a stall passes the rise gate: nothing of it is ever suppressed
        suppressed.insert("to=\"" + std::to_string(to) + "\",trigger=\"" + t + "\"");
  std::set<std::string> client_errors;
  for (int code : {400, 404, 408, 413, 431, 505})
    client_errors.insert("code=\"" + std::to_string(code) + "\"");
  // One route moves api's requests to spare; nothing moves requests to api.
  std::set<std::string> fallbacks;
  for (auto why : {"closed", "full", "connect_failed", "replay", "first_event"})
    fallbacks.insert(std::string(R"(from="api",to="spare",why=")") + why + "\"");

  std::set<std::string> decisions;
  for (auto lane : {"bulk", "standard", "heavy"}) {
    auto prefix = std::string("lane=\"") + lane + "\",outcome=\"";
    decisions.insert(prefix + R"(admitted",reason="none")");
    for (auto outcome : {"shed", "would_shed"})
      for (auto reason : {"level", "queue_timeout", "pool_closed", "heavy_cap", "budget",
                          "reserved", "tenant_limit", "ingest_budget"})
        decisions.insert(prefix + outcome + "\",reason=\"" + reason + "\"");
    decisions.insert(prefix + R"(shed",reason="unresolved")");  // never would_shed
  }

  for (const auto& [family, expected] : std::vector<std::pair<std::string, std::set<std::string>>>{
           {"sluice_admission_decisions_total", decisions},
           {"sluice_admission_level_changes_total", changes},
           {"sluice_admission_rise_suppressed_total", suppressed},
           {"sluice_client_errors_total", client_errors},
           {"sluice_upstream_fallbacks_total", fallbacks}}) {
    INFO(family);
    auto got = samples(text, family);
    std::set<std::string> labels;
    for (const auto& [l, value] : got) {
      INFO(l);
      CHECK(value == 0);
      labels.insert(l);
    }
    CHECK(labels == expected);
  }
}
