#include "routes/routes.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>
#include <vector>

// Counts allocations on this thread while a test asks for it, to hold match() to its
// no-allocation promise. Every non-aligned form is replaced so new/delete stay paired under
// the sanitizers; they only forward to malloc/free.
namespace {
thread_local bool g_counting = false;
thread_local int g_allocations = 0;

void* counted_alloc(std::size_t size) {
  if (g_counting) ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

// These replace the global allocation functions, so malloc and free pair up by
// design; GCC cannot see that and warns on the free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return counted_alloc(size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using sluice::admission::Lane;
using sluice::routes::RequestView;
using sluice::routes::Route;
using sluice::routes::RouteError;
using sluice::routes::Table;

const std::vector<std::string> kUpstreams{"api", "auth", "batch"};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// A request as the proxy would describe it; the header lookup is case-insensitive as
// RequestView's contract demands.
struct FakeRequest {
  std::string method = "GET";
  std::string path = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  bool accepts_sse = false;
  std::uint64_t body_bytes = 0;

  static std::string_view lookup(const void* ctx, std::string_view name) {
    for (const auto& [n, v] : static_cast<const FakeRequest*>(ctx)->headers)
      if (iequals(n, name)) return v;
    return {};
  }

  RequestView view() const {
    RequestView v;
    v.method = method;
    v.path = path;
    v.header = &FakeRequest::lookup;
    v.ctx = this;
    v.accepts_sse = accepts_sse;
    v.body_bytes = body_bytes;
    return v;
  }
};

FakeRequest get(std::string path) {
  FakeRequest r;
  r.path = std::move(path);
  return r;
}

Table parse(std::string_view json) { return Table::parse(json, kUpstreams); }

bool matches(std::string_view route_json, const FakeRequest& req) {
  Table t = parse(route_json);
  return t.match(req.view()) != nullptr;
}

std::string error_of(std::string_view json) {
  try {
    parse(json);
  } catch (const RouteError& e) {
    return e.what();
  }
  return "(no error)";
}

const char* name_of(const Route* r) { return r ? r->name.c_str() : "(none)"; }

}  // namespace

TEST_CASE("the default table sends SSE requests to lane heavy and the rest to standard",
          "[routes]") {
  Table t = Table::defaults();
  REQUIRE(t.routes().size() == 2);

  FakeRequest sse = get("/v1/stream");
  sse.accepts_sse = true;
  const Route* r = t.match(sse.view());
  REQUIRE(r);
  CHECK(r->name == "sse");
  CHECK(r->lane == Lane::heavy);
  CHECK(r->upstream == 0);

  r = t.match(get("/anything").view());
  REQUIRE(r);
  CHECK(r->name == "default");
  CHECK(r->lane == Lane::standard);
  CHECK(r->upstream == 0);
}

TEST_CASE("the first matching route wins, in the order given", "[routes]") {
  Table t = parse(
      R"([{"name":"uploads","prefix":"/v1/uploads","lane":"bulk"},
          {"name":"v1","prefix":"/v1/","lane":"heavy"},
          {"name":"rest","prefix":"/"}])");
  CHECK(std::string(name_of(t.match(get("/v1/uploads/7").view()))) == "uploads");
  CHECK(std::string(name_of(t.match(get("/v1/users").view()))) == "v1");
  CHECK(std::string(name_of(t.match(get("/health").view()))) == "rest");

  Table reversed = parse(R"([{"name":"rest","prefix":"/"},{"name":"uploads","prefix":"/v1/"}])");
  CHECK(std::string(name_of(reversed.match(get("/v1/uploads").view()))) == "rest");
}

TEST_CASE("a request no route matches gets no route", "[routes]") {
  Table t = parse(R"([{"prefix":"/v1/"}])");
  CHECK(t.match(get("/v2/x").view()) == nullptr);
}

TEST_CASE("a prefix route matches only paths that start with it", "[routes]") {
  constexpr auto kRoute = R"([{"prefix":"/v1/uploads"}])";
  CHECK(matches(kRoute, get("/v1/uploads")));
  CHECK(matches(kRoute, get("/v1/uploads/42")));
  CHECK_FALSE(matches(kRoute, get("/v1/upload")));
  CHECK_FALSE(matches(kRoute, get("/api/v1/uploads")));
}

TEST_CASE("a regex route matches anywhere in the path with RE2 syntax", "[routes]") {
  constexpr auto kRoute = R"J([{"regex":"/v[0-9]+/chat(/|$)"}])J";
  CHECK(matches(kRoute, get("/v1/chat")));
  CHECK(matches(kRoute, get("/api/v12/chat/completions")));
  CHECK_FALSE(matches(kRoute, get("/v1/chatter")));
  CHECK_FALSE(matches(kRoute, get("/vx/chat")));
  CHECK(matches(R"([{"regex":"^/admin\\d"}])", get("/admin7")));
  CHECK_FALSE(matches(R"([{"regex":"^/admin$"}])", get("/admin/")));
}

// A backtracking matcher recurses once per character here and overflows the stack.
TEST_CASE("a regex with a starred group matches a 60 KiB path without exhausting the stack",
          "[routes]") {
  constexpr auto kRoute = R"J([{"regex":"^/(a|b)*$"}])J";
  CHECK(matches(kRoute, get("/" + std::string(60 * 1024, 'a'))));
  CHECK_FALSE(matches(kRoute, get("/" + std::string(60 * 1024 - 1, 'a') + "c")));
}

TEST_CASE("a methods route matches the listed methods, written in any case", "[routes]") {
  Table t = parse(R"([{"methods":["post","Put"]}])");
  CHECK(t.routes()[0].methods == std::vector<std::string>{"POST", "PUT"});
  FakeRequest post = get("/");
  post.method = "POST";
  FakeRequest put = get("/");
  put.method = "PUT";
  CHECK(t.match(post.view()));
  CHECK(t.match(put.view()));
  CHECK_FALSE(t.match(get("/").view()));
}

TEST_CASE("a header route matches the exact value whatever the case of the header name",
          "[routes]") {
  constexpr auto kRoute = R"([{"header":{"name":"x-tenant","value":"batch"}}])";
  FakeRequest req = get("/");
  req.headers = {{"X-Tenant", "batch"}};
  CHECK(matches(kRoute, req));

  req.headers = {{"X-TENANT", "batch"}};
  CHECK(matches(kRoute, req));

  req.headers = {{"X-Tenant", "Batch"}};
  CHECK_FALSE(matches(kRoute, req));

  req.headers = {{"X-Other", "batch"}};
  CHECK_FALSE(matches(kRoute, req));
}

TEST_CASE("a header route never matches a request described without a header lookup", "[routes]") {
  Table t = parse(R"([{"header":{"name":"X-Tenant","value":"batch"}}])");
  RequestView v;
  v.method = "GET";
  v.path = "/";
  CHECK(t.match(v) == nullptr);
}

TEST_CASE("sse true matches only requests that accept event streams, false only the others",
          "[routes]") {
  FakeRequest stream = get("/");
  stream.accepts_sse = true;
  FakeRequest plain = get("/");

  CHECK(matches(R"([{"sse":true}])", stream));
  CHECK_FALSE(matches(R"([{"sse":true}])", plain));
  CHECK(matches(R"([{"sse":false}])", plain));
  CHECK_FALSE(matches(R"([{"sse":false}])", stream));
}

TEST_CASE("min_body_bytes matches requests whose body is at least that large", "[routes]") {
  constexpr auto kRoute = R"([{"min_body_bytes":1048576}])";
  FakeRequest req = get("/");
  req.body_bytes = 1048575;
  CHECK_FALSE(matches(kRoute, req));
  req.body_bytes = 1048576;
  CHECK(matches(kRoute, req));
  req.body_bytes = 5'000'000'000ull;
  CHECK(matches(kRoute, req));
}

TEST_CASE("every match field given must hold", "[routes]") {
  constexpr auto kRoute =
      R"([{"prefix":"/v1/","methods":["POST"],"header":{"name":"X-T","value":"a"},
           "sse":false,"min_body_bytes":10}])";
  FakeRequest ok = get("/v1/x");
  ok.method = "POST";
  ok.headers = {{"X-T", "a"}};
  ok.body_bytes = 10;
  REQUIRE(matches(kRoute, ok));

  FakeRequest wrong_path = ok;
  wrong_path.path = "/v2/x";
  FakeRequest wrong_method = ok;
  wrong_method.method = "GET";
  FakeRequest wrong_header = ok;
  wrong_header.headers = {{"X-T", "b"}};
  FakeRequest wrong_sse = ok;
  wrong_sse.accepts_sse = true;
  FakeRequest too_small = ok;
  too_small.body_bytes = 9;
  for (const auto* req : {&wrong_path, &wrong_method, &wrong_header, &wrong_sse, &too_small})
    CHECK_FALSE(matches(kRoute, *req));
}

TEST_CASE("a route's action is its lane, upstream, alternatives and pin", "[routes]") {
  Table t = parse(
      R"([{"prefix":"/a","lane":"bulk","upstream":"batch","alternatives":["api","auth"]},
          {"prefix":"/b","lane":"heavy","upstream":"auth","pin":true},
          {"prefix":"/c"}])");
  const auto& r = t.routes();
  CHECK(r[0].lane == Lane::bulk);
  CHECK(r[0].upstream == 2);
  CHECK(r[0].alternatives == std::vector<std::size_t>{0, 1});
  CHECK_FALSE(r[0].pin);
  CHECK(r[1].lane == Lane::heavy);
  CHECK(r[1].upstream == 1);
  CHECK(r[1].pin);
  // Defaults: lane standard, the first upstream, no alternatives, not pinned.
  CHECK(r[2].lane == Lane::standard);
  CHECK(r[2].upstream == 0);
  CHECK(r[2].alternatives.empty());
  CHECK_FALSE(r[2].pin);
}

TEST_CASE("a route without a name is named by its index", "[routes]") {
  Table t = parse(R"([{"prefix":"/a","name":"uploads"},{"prefix":"/b"}])");
  CHECK(t.routes()[0].name == "uploads");
  CHECK(t.routes()[1].name == "route1");
}

TEST_CASE("matching a route allocates nothing, a regex route once warm", "[routes]") {
  // Names longer than the small-string buffer, so that copying one would allocate.
  Table t = parse(
      R"([{"prefix":"/v1/a-rather-long-path-prefix/","methods":["POST"],
           "header":{"name":"X-Sluice-Tenant-Identifier","value":"a-rather-long-tenant-name"}},
          {"sse":true,"min_body_bytes":1},
          {"regex":"^/v[0-9]+/(a|b)[a-z-]*/y$"},
          {"prefix":"/"}])");
  FakeRequest req = get("/v1/a-rather-long-path-prefix/x");
  req.method = "POST";
  req.headers = {{"x-sluice-tenant-identifier", "another-rather-long-tenant"}};
  RequestView view = req.view();
  // RE2 builds its DFA states the first time it meets them, and keeps them.
  REQUIRE(t.match(view));

  g_allocations = 0;
  g_counting = true;
  const Route* r = t.match(view);
  g_counting = false;
  REQUIRE(r);
  CHECK(r->name == "route3");
  CHECK(g_allocations == 0);
}

TEST_CASE("invalid route JSON is refused with the parser's message", "[routes][errors]") {
  std::string e = error_of(R"([{"prefix":"/"])");
  CHECK_THAT(e, Catch::StartsWith("invalid JSON: "));
  CHECK_THAT(e, Catch::Contains("parse error"));
}

TEST_CASE("routes must be a non-empty JSON array of objects", "[routes][errors]") {
  CHECK_THAT(error_of(R"({"prefix":"/"})"), Catch::Contains("is not a JSON array of routes"));
  CHECK_THAT(error_of("[]"), Catch::Contains("empty, so nothing would be routed"));
  CHECK_THAT(error_of(R"([{"prefix":"/"},"/v1"])"),
             Catch::StartsWith("route 1: \"/v1\" is not a JSON object"));
}

TEST_CASE("an unknown route field is refused with the list of valid fields", "[routes][errors]") {
  CHECK(error_of(R"([{"prefx":"/"}])") ==
        "route 0: unknown field \"prefx\"; valid fields: name, prefix, regex, methods, header, "
        "sse, min_body_bytes, lane, upstream, alternatives, pin, retry_after, sse_keepalive, "
        "first_event_timeout, tenant_key, tenant_concurrency, tenant_rate");
}

TEST_CASE("a route's retry_after band replaces its lane's, floor:cap of at least 1s",
          "[routes][errors]") {
  auto t = Table::parse(
      R"([{"prefix":"/logs","lane":"bulk","retry_after":"2s:4s"},{"prefix":"/"}])", {"api"});
  REQUIRE(t.routes()[0].retry_after);
  CHECK(t.routes()[0].retry_after->floor == std::chrono::milliseconds(2000));
  CHECK(t.routes()[0].retry_after->cap == std::chrono::milliseconds(4000));
  CHECK_FALSE(t.routes()[1].retry_after);
  CHECK_THAT(error_of(R"([{"prefix":"/","retry_after":"2s"}])"), Catch::Contains("floor:cap"));
  CHECK_THAT(error_of(R"([{"prefix":"/","retry_after":"500ms:4s"}])"),
             Catch::Contains("at least 1s"));
  CHECK_THAT(error_of(R"([{"prefix":"/","retry_after":"5s:4s"}])"),
             Catch::Contains("cap is below the floor"));
  CHECK_THAT(error_of(R"([{"prefix":"/","retry_after":2}])"), Catch::Contains("not a string"));
}

TEST_CASE("a route's first_event_timeout is a duration of 100ms..60m", "[routes][errors]") {
  auto t = Table::parse(
      R"([{"prefix":"/v1/chat","first_event_timeout":"2s","alternatives":["b"]},{"prefix":"/"}])",
      {"a", "b"});
  REQUIRE(t.routes()[0].first_event_timeout);
  CHECK(*t.routes()[0].first_event_timeout == std::chrono::milliseconds(2000));
  CHECK_FALSE(t.routes()[1].first_event_timeout);
  for (const char* bad : {R"("50ms")", R"("2h")", R"("soon")", "2"})
    CHECK_THAT(error_of(std::string(R"([{"prefix":"/","first_event_timeout":)") + bad + "}]"),
               Catch::Contains("first_event_timeout"));
}

TEST_CASE("a route's sse_keepalive is a duration of 100ms..60m", "[routes][errors]") {
  auto t = Table::parse(R"([{"prefix":"/events","sse_keepalive":"15s"},{"prefix":"/"}])", {"api"});
  REQUIRE(t.routes()[0].sse_keepalive);
  CHECK(*t.routes()[0].sse_keepalive == std::chrono::milliseconds(15000));
  CHECK_FALSE(t.routes()[1].sse_keepalive);
  for (auto bad : {R"("50ms")", R"("61m")", R"("15")", R"(15)"})
    CHECK_THAT(error_of(std::string(R"([{"prefix":"/","sse_keepalive":)") + bad + "}]"),
               Catch::Contains("sse_keepalive"));
}

TEST_CASE("a lane that does not exist is refused with the valid lanes", "[routes][errors]") {
  CHECK(error_of(R"([{"prefix":"/a"},{"lane":"fast"}])") ==
        "route 1: field \"lane\": \"fast\" is not a lane; valid: bulk, standard, heavy");
  CHECK_THAT(error_of(R"([{"lane":2}])"),
             Catch::StartsWith("route 0: field \"lane\": 2 is not a string"));
}

TEST_CASE("prefix and regex in one route are refused", "[routes][errors]") {
  CHECK_THAT(error_of(R"([{"prefix":"/a","regex":"b"}])"),
             Catch::StartsWith("route 0: fields \"prefix\" and \"regex\" are exclusive"));
}

TEST_CASE("a prefix that does not start with a slash is refused", "[routes][errors]") {
  CHECK_THAT(error_of(R"([{"prefix":"v1/"}])"),
             Catch::StartsWith("route 0: field \"prefix\": \"v1/\" does not start with '/'"));
  CHECK_THAT(error_of(R"([{"prefix":7}])"),
             Catch::StartsWith("route 0: field \"prefix\": 7 is not a string"));
}

TEST_CASE("an invalid regex is refused", "[routes][errors]") {
  CHECK(error_of(R"([{"regex":"/v1/(unclosed"}])") ==
        "route 0: field \"regex\": \"/v1/(unclosed\" is not a valid RE2 regex (missing ): "
        "/v1/(unclosed)");
}

TEST_CASE("a regex with a back-reference or a look-ahead is refused: RE2 has neither",
          "[routes][errors]") {
  CHECK(error_of(R"([{"prefix":"/a"},{"regex":"^/(a)\\1"}])") ==
        "route 1: field \"regex\": \"^/(a)\\\\1\" has a back-reference (\\1); route regexes are "
        "RE2, which has none (it matches in time linear in the path)");
  CHECK_THAT(error_of(R"([{"regex":"^/(a)\\66666666666666666666"}])"),
             Catch::Contains("is not a valid RE2 regex (invalid escape sequence: \\666)"));
  CHECK_THAT(error_of(R"J([{"regex":"^/v1/(?!admin)"}])J"),
             Catch::Contains("has a look-ahead ((?!); route regexes are RE2, which has none"));
}

TEST_CASE("a regex count above 1000 is refused (counts inside counts multiply), 1000 is kept",
          "[routes][errors]") {
  CHECK(error_of(R"([{"regex":"^/a{1001}"}])") ==
        "route 0: field \"regex\": \"^/a{1001}\" repeats more than 1000 times at {1001} (counts "
        "inside counts multiply); at most 1000");
  CHECK_THAT(error_of(R"([{"regex":"^/(a{100}){11}"}])"),
             Catch::Contains("repeats more than 1000 times at {11}"));
  CHECK(error_of(R"([{"regex":"^/a{2,1000}\\{99999}(b{10}){100}"}])") == "(no error)");
  CHECK(error_of("{\"invalid JSON\": 1e999}").starts_with("invalid JSON"));
}

TEST_CASE("a regex too large once compiled is refused, not built", "[routes][errors]") {
  std::string huge;
  for (int i = 0; i < 128; ++i) huge += "[a-z]{1000}";
  CHECK(error_of(R"([{"regex":")" + huge + R"("}])") ==
        "route 0: field \"regex\": \"" + huge +
            "\" is too large once compiled (over 1 MiB); use smaller counts or fewer alternatives");
}

TEST_CASE("methods must be a non-empty array of method tokens", "[routes][errors]") {
  CHECK_THAT(error_of(R"([{"methods":"GET"}])"),
             Catch::StartsWith("route 0: field \"methods\": \"GET\" is not a non-empty array"));
  CHECK_THAT(error_of(R"([{"methods":[]}])"),
             Catch::StartsWith("route 0: field \"methods\": [] is not a non-empty array"));
  CHECK_THAT(error_of(R"([{"methods":["GET",""]}])"),
             Catch::StartsWith("route 0: field \"methods\": \"\" is not a method"));
  CHECK_THAT(error_of(R"([{"methods":["GET POST"]}])"),
             Catch::StartsWith("route 0: field \"methods\": \"GET POST\" is not a method"));
  CHECK_THAT(error_of(R"([{"methods":[1]}])"),
             Catch::StartsWith("route 0: field \"methods\": 1 is not a method"));
}

TEST_CASE("a header match needs exactly a header name and a non-empty string value",
          "[routes][errors]") {
  const std::string prefix = "route 0: field \"header\": ";
  CHECK_THAT(error_of(R"([{"header":{"name":"X-T"}}])"),
             Catch::StartsWith(prefix) && Catch::Contains("exactly \"name\" and \"value\""));
  CHECK_THAT(error_of(R"([{"header":{"name":"X-T","value":"a","extra":1}}])"),
             Catch::Contains("exactly \"name\" and \"value\""));
  CHECK_THAT(error_of(R"([{"header":"X-T: a"}])"),
             Catch::Contains("exactly \"name\" and \"value\""));
  CHECK_THAT(error_of(R"([{"header":{"name":"X T","value":"a"}}])"),
             Catch::StartsWith(prefix + "name \"X T\" is not a header name"));
  CHECK_THAT(error_of(R"([{"header":{"name":"X-T","value":1}}])"),
             Catch::StartsWith(prefix + "value 1 is not a non-empty string"));
  CHECK_THAT(error_of(R"([{"header":{"name":"X-T","value":""}}])"),
             Catch::StartsWith(prefix + "value \"\" is not a non-empty string"));
}

TEST_CASE("sse and pin must be booleans", "[routes][errors]") {
  CHECK(error_of(R"([{"sse":"yes"}])") ==
        "route 0: field \"sse\": \"yes\" is not a boolean; valid: true, false");
  CHECK(error_of(R"([{"pin":1}])") ==
        "route 0: field \"pin\": 1 is not a boolean; valid: true, false");
}

TEST_CASE("min_body_bytes must be a non-negative integer", "[routes][errors]") {
  for (const char* bad : {R"([{"min_body_bytes":-1}])", R"([{"min_body_bytes":1.5}])",
                          R"([{"min_body_bytes":"1MiB"}])"})
    CHECK_THAT(error_of(bad), Catch::StartsWith("route 0: field \"min_body_bytes\": ") &&
                                  Catch::EndsWith("is not a non-negative integer; e.g. 1048576"));
  CHECK(parse(R"([{"min_body_bytes":0}])").routes()[0].min_body_bytes == 0u);
}

TEST_CASE("an upstream that is not configured is refused with the configured ones",
          "[routes][errors]") {
  CHECK(error_of(R"([{"upstream":"billing"}])") ==
        "route 0: field \"upstream\": \"billing\" is not a configured upstream; valid: api, "
        "auth, batch");
}

TEST_CASE("alternatives must be distinct configured upstreams other than the route's own",
          "[routes][errors]") {
  const std::string prefix = "route 0: field \"alternatives\": ";
  CHECK_THAT(error_of(R"([{"alternatives":"auth"}])"),
             Catch::StartsWith(prefix + "\"auth\" is not an array of upstream names"));
  CHECK_THAT(error_of(R"([{"alternatives":["billing"]}])"),
             Catch::StartsWith(prefix + "\"billing\" is not a configured upstream"));
  CHECK_THAT(error_of(R"([{"alternatives":["auth","auth"]}])"),
             Catch::StartsWith(prefix + "\"auth\" is listed twice"));
  CHECK_THAT(error_of(R"([{"upstream":"auth","alternatives":["auth"]}])"),
             Catch::StartsWith(prefix + "\"auth\" is the route's own upstream"));
  // The default upstream counts as the route's own too, whatever the field order.
  CHECK_THAT(error_of(R"([{"alternatives":["api"]}])"),
             Catch::StartsWith(prefix + "\"api\" is the route's own upstream"));
}

TEST_CASE("a pinned route with alternatives is refused", "[routes][errors]") {
  CHECK_THAT(error_of(R"([{"pin":true,"alternatives":["auth"]}])"),
             Catch::StartsWith("route 0: fields \"pin\" and \"alternatives\" are exclusive"));
  CHECK_NOTHROW(parse(R"([{"pin":false,"alternatives":["auth"]}])"));
}

TEST_CASE("route names must be non-empty strings and unique", "[routes][errors]") {
  CHECK_THAT(error_of(R"([{"name":""}])"), Catch::StartsWith("route 0: field \"name\": is empty"));
  CHECK_THAT(error_of(R"([{"name":3}])"),
             Catch::StartsWith("route 0: field \"name\": 3 is not a string"));
  CHECK(error_of(R"([{"name":"a","prefix":"/x"},{"name":"a"}])") ==
        "route 1: field \"name\": \"a\" is already the name of route 0; names must be unique");
  // A given name may not take the name another route gets by default.
  CHECK_THAT(error_of(R"([{"prefix":"/x"},{"name":"route0"}])"),
             Catch::StartsWith("route 1: field \"name\": \"route0\" is already the name of "
                               "route 0"));
}

TEST_CASE("a route may carry its own tenant key and per-tenant limits", "[routes]") {
  Table t =
      parse(R"([{"name":"chat","prefix":"/chat","tenant_key":"jwt:org","tenant_concurrency":4,)"
            R"("tenant_rate":"20:40"},{"prefix":"/"}])");
  const Route& chat = t.routes()[0];
  REQUIRE(chat.tenant_key);
  CHECK(chat.tenant_key->str() == "jwt:org");
  CHECK(chat.tenant_limits.concurrency == 4);
  CHECK(chat.tenant_limits.rate == 20);
  CHECK(chat.tenant_limits.burst == 40);
  CHECK(chat.tenant_scope != 0);
  CHECK_FALSE(t.routes()[1].tenant_key);
  CHECK_FALSE(t.routes()[1].tenant_limits.on());
  CHECK_THAT(error_of(R"([{"tenant_key":"cookie:x"}])"),
             Catch::StartsWith("route 0: field \"tenant_key\": \"cookie:x\" is not a tenant key"));
  CHECK_THAT(error_of(R"([{"tenant_concurrency":0}])"),
             Catch::Contains("is not a count of requests in 1..1000000"));
  CHECK_THAT(error_of(R"([{"tenant_rate":"fast"}])"),
             Catch::Contains("is not a number of requests per second"));
  CHECK_THAT(error_of(R"([{"tenant_rate":5}])"), Catch::Contains("is not a string"));
}
