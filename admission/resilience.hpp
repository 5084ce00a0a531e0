#pragma once
// Upstream resilience (seed 001 §8, §8b, §9): which alternative a refused
// request moves to, when an upstream is closed and how a probe reopens it, and
// the budget an upstream's quota headers give.
//
// Thompson sampling among alternatives that admit the request now:
//   draw_i  = a sample of Beta(successes_i + 1, failures_i + 1)
//   score_i = draw_i x L_best / L_i     (L_i the mean response time; L_best the
//             smallest among the candidates; an unexplored one counts L_best)
//   pick    = argmax score_i
//   An unexplored alternative draws from Beta(1, 1): the choice keeps exploring.
//
// Closure: a refusal no load change cures (every host refuses connections, or
//   a status in SLUICE_CLOSE_STATUSES) closes the upstream until
//   now + (the upstream's own Retry-After or quota reset, else close_for).
//   While closed nothing is admitted but one probe every probe_every, and only
//   while nothing runs on it; a probe that ends cleanly reopens it at once, a
//   refused one keeps it closed and schedules the next probe. 429, timeouts and
//   slowness are load: they shrink the estimate and close nothing.
//
// Budget: RateLimit-Limit / -Remaining / -Reset (and X-RateLimit-*) give a
//   reading remaining/limit valid until the reset; a lane borrows nothing more
//   on that upstream while remaining/limit <= its reserve (SLUICE_BUDGET_RESERVE),
//   so the last of a quota goes to the most important lanes. A reading whose
//   window has ended stops nobody.
//
// Threading: plain values, not thread-safe; the proxy shares a Closure across
// threads behind its own synchronisation.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "admission/bulkhead.hpp"
#include "admission/gate.hpp"

namespace sluice::admission {

// A sample of Beta(a, b), a, b >= 1 (Marsaglia and Tsang's gamma sampler).
double beta_sample(double a, double b, Rng& rng);

// The index of the candidate Thompson sampling picks (candidates not empty).
std::size_t thompson_pick(std::span<const Candidate> candidates, Rng& rng);

struct ClosurePolicy {
  Micros close_for{std::chrono::minutes(35)};
  Micros probe_every{std::chrono::seconds(10)};
};

enum class Verdict : std::uint8_t { admit, probe, closed };

class Closure {
 public:
  explicit Closure(const ClosurePolicy& p = {}) : p_(p) {}
  // Closes (or keeps closed) until `until`, or now + close_for.
  void close(Micros now, std::optional<Micros> until = {});
  bool closed() const { return closed_; }
  // May a request start now? `running`: requests in flight on the upstream.
  // A probe is let through at most once per probe_every, only while nothing runs.
  Verdict ask(Micros now, int running);
  // A probe ended: clean reopens, anything else keeps the upstream closed.
  void probe_ended(bool clean);
  std::optional<Micros> closed_until() const {
    return closed_ ? std::optional(until_) : std::nullopt;
  }
  Micros next_probe() const { return next_probe_; }
  std::optional<Micros> last_probe() const { return last_probe_; }
  // When a request refused for the closure could next get in: the next probe,
  // or the end of the closure if that comes first.
  Micros reopen_hint(Micros now) const;
  void set_policy(const ClosurePolicy& p) { p_ = p; }
  const ClosurePolicy& policy() const { return p_; }

 private:
  ClosurePolicy p_;
  bool closed_ = false;
  bool probing_ = false;
  Micros until_{0};
  Micros next_probe_{0};
  std::optional<Micros> last_probe_;
};

// A reading from RateLimit-style header values (already looked up; empty:
// absent). `reset` is seconds from now, or a Unix time when it is larger than
// now_unix - 1 (the X-RateLimit-Reset convention). None when incomplete.
std::optional<BudgetReading> read_budget(std::string_view limit, std::string_view remaining,
                                         std::string_view reset, Micros now, std::int64_t now_unix);

}  // namespace sluice::admission
