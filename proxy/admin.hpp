#pragma once
// The admin listener: /metrics, /healthz, /readyz, /admin/... It runs on its
// own thread, apart from the I/O threads, so it answers (and the watchdog's
// view of a stalled loop is visible) while a loop is stalled.
#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "admission/controller.hpp"
#include "proxy/runtime.hpp"
#include "proxy/watchdog.hpp"

namespace sluice::proxy {

class Ticker;

// Prometheus text of everything Sluice measures.
std::string render_metrics(Runtime& rt, const Watchdog& watchdog, const Ticker& ticker);

// The label sets /metrics exports at 0 before their first event, so that a
// dashboard has the series and increase() sees the first one. A level change
// moves the level, the way its trigger can move it (pressure raises, relief
// lowers, a pin or its end either way); a suppressed rise is toward a level above 0,
// by a signal the rise gate judges (not a stall, which passes the gate).
bool level_change_known(std::size_t from, std::size_t to, admission::Trigger trigger);
bool rise_suppressed_known(std::size_t to, admission::Trigger trigger);
// The statuses Sluice answers itself before a request has a route
// (sluice_client_errors_total): a malformed head or target 400, no route 404,
// a head too slow 408, a declared body too large 413, a head too large 431,
// an HTTP version other than 1.0 and 1.1 505.
inline constexpr std::array<int, 6> kClientErrorCodes{400, 404, 408, 413, 431, 505};

// One row of the admin listener's route table. The router finds the row by
// path and method (a GET row answers HEAD too): an unknown path is 404, a
// known path with another method 405 with Allow, and a mutating row needs the
// bearer token when SLUICE_ADMIN_TOKEN is set (401 otherwise), before its handler runs.
struct AdminRouteRow {
  std::string_view method;  // "GET", "POST", "DELETE"
  std::string_view path;
  bool prefix = false;    // path is a prefix: every path that starts with it
  bool mutating = false;  // changes something: needs the token
  bool debug = false;     // served only with SLUICE_DEBUG_ENDPOINTS=true
};

// Every row of the table, in the router's order (GET /admin/routes lists
// those the running instance serves).
std::vector<AdminRouteRow> admin_routes();

// Serves the admin endpoints on acceptor's io_context.
void start_admin(tcp::acceptor& acceptor, Runtime& rt, const Watchdog& watchdog, Ticker& ticker);

}  // namespace sluice::proxy
