#include "proxy/exchange.hpp"

namespace sluice::proxy {

admission::Verdict WorkerUpstreams::ask_gate(std::size_t u, admission::Micros now) {
  auto& rt = w_.runtime();
  return rt.gates[u]->ask(now, [&] { return rt.bulkhead(u).running(); });
}

bool WorkerUpstreams::closed(std::size_t u) const {
  return w_.runtime().gates[u]->closed.load(std::memory_order_relaxed);
}

void WorkerUpstreams::probe_ended(std::size_t u, bool clean) {
  w_.runtime().gates[u]->probe_ended(clean);
}

admission::Micros WorkerUpstreams::reopen_hint(std::size_t u, admission::Micros now) {
  return w_.runtime().gates[u]->reopen_hint(now);
}

// Heavy looks across every upstream (the heavy cap is the process's); the
// other lanes at their own bulkhead. Only a refusal asks.
std::optional<admission::Micros> WorkerUpstreams::youngest(admission::Lane lane, std::size_t u) {
  auto& rt = w_.runtime();
  if (lane != admission::Lane::heavy) return rt.bulkhead(u).youngest(lane);
  std::optional<admission::Micros> youngest;
  for (const auto& b : rt.bulkheads)
    if (auto y = b->youngest(lane); y && (!youngest || *y > *youngest)) youngest = y;
  return youngest;
}

AccessRecord access_record(const Exchange& ex, int status, std::string_view method,
                           std::string_view client, const config::Config& cfg,
                           Clock::time_point now) {
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  AccessRecord r;
  r.ts = ex.start_wall;
  r.request_id = ex.request_id;
  r.method = method;
  r.path = ex.path;
  r.status = status;
  if (ex.route) {
    r.lane = admission::to_string(ex.lane);
    r.route = ex.route->name;
    r.upstream = cfg.upstreams[ex.upstream].name;
    r.upstream_addr = std::string_view(ex.upstream_addr.data(), ex.upstream_addr_len);
    r.decision = admission::to_string(ex.decision.outcome);
    r.tenant = ex.tenant;
  }
  if (ex.fallback_from >= 0) {
    r.fallback_from = cfg.upstreams[static_cast<std::size_t>(ex.fallback_from)].name;
    r.fallback_why = admission::to_string(ex.fallback_why);
  }
  r.reason = ex.decision.reason != admission::Reason::none
                 ? admission::to_string(ex.decision.reason)
                 : ex.reason;
  r.level = static_cast<int>(ex.level);
  r.retry_after_s = ex.retry_after;
  r.client = client;
  r.queue_ms = ms(ex.queue_wait);
  r.upstream_wait_ms = ex.upstream_wait.count() >= 0 ? ms(ex.upstream_wait) : -1;
  r.ttfb_ms = ex.ttfb.count() >= 0 ? ms(ex.ttfb) : -1;
  r.connect_ms = ex.connect_time.count() >= 0 ? ms(ex.connect_time) : -1;
  r.tls_ms = ex.tls_time.count() >= 0 ? ms(ex.tls_time) : -1;
  r.duration_ms = std::chrono::duration<double, std::milli>(now - ex.start).count();
  r.bytes_in = ex.bytes_in;
  r.bytes_out = ex.bytes_out;
  return r;
}

}  // namespace sluice::proxy
