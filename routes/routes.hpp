#pragma once
// Routes: SPEC's route schema. A table of flat JSON objects, first match wins.
// Parsed once at start-up; match() is called once per request on an I/O thread
// and reads only immutable state. It allocates nothing, except that a `regex`
// route's RE2 fills its DFA cache (under RE2's own reader-writer lock) the first
// times it meets new input; RE2 matches in time linear in the path and never
// recurses, so no path can exhaust a thread's stack.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "admission/gate.hpp"
#include "admission/lane.hpp"
#include "tenants/key.hpp"
#include "tenants/limits.hpp"

namespace re2 {
class RE2;
}

namespace sluice::routes {

// What the matcher may look at in a request.
struct RequestView {
  std::string_view method;  // e.g. "GET"
  std::string_view path;    // target without the query string
  // Header lookup: returns the first value of the named header (case-insensitive
  // name), or an empty view when absent.
  std::string_view (*header)(const void* ctx, std::string_view name) = nullptr;
  const void* ctx = nullptr;
  bool accepts_sse = false;      // Accept contains text/event-stream
  std::uint64_t body_bytes = 0;  // Content-Length, 0 when absent/chunked
};

struct HeaderMatch {
  std::string name;   // compared case-insensitively
  std::string value;  // compared exactly
};

struct Route {
  std::string name;  // "name" field if given, else "route<index>"
  // match
  std::optional<std::string> prefix;
  std::optional<std::string> regex_source;
  // RE2 syntax, matched anywhere in the path; compiled once, shared by copies of the table.
  std::shared_ptr<const re2::RE2> regex;
  std::vector<std::string> methods;  // empty: any; upper-case
  std::optional<HeaderMatch> header;
  std::optional<bool> sse;
  std::optional<std::uint64_t> min_body_bytes;
  // action
  admission::Lane lane = admission::Lane::standard;
  std::size_t upstream = 0;  // index into the configured upstream list
  std::vector<std::size_t> alternatives;
  bool pin = false;
  // Its refusals' Retry-After band, in place of the lane's (SLUICE_RETRY_AFTER):
  // "floor:cap", e.g. seed 000's "2s:4s" for /logs.
  std::optional<admission::RetryBand> retry_after;
  // An SSE stream's client gets a ": keep-alive" comment line after this long
  // without a byte, at event boundaries only (a load balancer's idle cut on the
  // path would end a stream silent for longer).
  std::optional<admission::Millis> sse_keepalive;
  // A request whose upstream sends no response head within this after the
  // request went (for an SSE response, no first event), before a byte went to
  // the client, moves once to one of its alternatives.
  std::optional<admission::Millis> first_event_timeout;
  // Who its requests belong to, in place of SLUICE_TENANT_KEY.
  std::optional<tenants::Key> tenant_key;
  // Per-tenant limits of its own (tenant_concurrency, tenant_rate): counted
  // apart from the tenant's other routes, on top of SLUICE_TENANT_*'s.
  tenants::Limits tenant_limits;
  std::uint64_t tenant_scope = 0;  // its own limits' count: the hash of its name

  bool matches(const RequestView& req) const;
};

class RouteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Table {
 public:
  // The default table: SSE requests -> heavy, the rest -> standard, to upstream 0.
  static Table defaults();
  // Parses SPEC's JSON array. Throws RouteError with a message naming the route
  // index and field ("route 2: unknown field \"lanes\"; valid: ...").
  static Table parse(std::string_view json, const std::vector<std::string>& upstream_names);

  // First matching route, or nullptr when none matches (the proxy answers 404).
  const Route* match(const RequestView& req) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace sluice::routes
