#include "proxy/exchange.hpp"

namespace sluice::proxy {

admission::Verdict WorkerUpstreams::ask_gate(std::size_t u, admission::Micros now) {
  auto& rt = w_.runtime();
  return rt.gates[u]->ask(now, [&] { return rt.running_on(u, w_); });
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

// Heavy looks across every thread and upstream (the heavy cap is the
// process's); the other lanes at their own bulkhead.
std::optional<admission::Micros> WorkerUpstreams::youngest(admission::Lane lane, std::size_t u) {
  if (lane != admission::Lane::heavy) return w_.bulkhead(u).youngest(lane);
  std::optional<admission::Micros> youngest;
  auto later = [&](std::optional<admission::Micros> y) {
    if (y && (!youngest || *y > *youngest)) youngest = y;
  };
  for (auto& w : w_.runtime().workers) {
    if (w.get() == &w_) continue;
    auto y = w->youngest_heavy_us.load(std::memory_order_relaxed);
    if (y >= 0) later(admission::Micros(y));
  }
  for (std::size_t i = 0; i < w_.runtime().config.upstreams.size(); ++i)
    later(w_.bulkhead(i).youngest(lane));
  return youngest;
}

}  // namespace sluice::proxy
