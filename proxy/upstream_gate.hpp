#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "admission/resilience.hpp"

namespace sluice::proxy {

// An upstream's closure (seed 001 §9), one for the whole process: a refusal no
// load change cures closes every thread's way to it. Requests read `closed`
// (one relaxed load); only while it is set, or to change it, does a thread take
// the mutex, so the request path takes no lock while every upstream is open.
struct UpstreamGate {
  std::atomic<bool> closed{false};
  std::mutex mutex;
  admission::Closure closure;
  std::atomic<std::uint64_t> probes_ok{0}, probes_failed{0}, closures{0};
  explicit UpstreamGate(const admission::ClosurePolicy& p) : closure(p) {}
  void close(admission::Micros now, std::optional<admission::Micros> until) {
    std::lock_guard lock(mutex);
    if (!closure.closed()) closures.fetch_add(1, std::memory_order_relaxed);
    closure.close(now, until);
    closed.store(true, std::memory_order_relaxed);
  }
  // admit / probe / closed; `running` is what runs on the upstream now.
  // `running()` (what runs on the upstream now) is only asked while it is closed.
  template <class Running>
  admission::Verdict ask(admission::Micros now, Running running) {
    if (!closed.load(std::memory_order_relaxed)) return admission::Verdict::admit;
    int n = running();
    std::lock_guard lock(mutex);
    auto v = closure.ask(now, n);
    closed.store(closure.closed(), std::memory_order_relaxed);
    return v;
  }
  void probe_ended(bool clean) {
    std::lock_guard lock(mutex);
    closure.probe_ended(clean);
    (clean ? probes_ok : probes_failed).fetch_add(1, std::memory_order_relaxed);
    closed.store(closure.closed(), std::memory_order_relaxed);
  }
  admission::Micros reopen_hint(admission::Micros now) {
    std::lock_guard lock(mutex);
    return closure.reopen_hint(now);
  }
  struct View {
    bool closed = false;
    std::optional<admission::Micros> until, last_probe;
    admission::Micros next_probe{0};
  };
  void set_policy(const admission::ClosurePolicy& p) {
    std::lock_guard lock(mutex);
    closure.set_policy(p);
  }
  admission::ClosurePolicy policy() {
    std::lock_guard lock(mutex);
    return closure.policy();
  }
  View view() {
    std::lock_guard lock(mutex);
    return {closure.closed(), closure.closed_until(), closure.last_probe(), closure.next_probe()};
  }
};

}  // namespace sluice::proxy
