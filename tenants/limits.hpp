#pragma once
// Per-tenant limits (SLUICE_TENANT_CONCURRENCY, SLUICE_TENANT_RATE, or a
// route's own): requests in flight and a token bucket per tenant, in a table
// of bounded size shared by every I/O thread.
//
//   concurrency  a tenant with `concurrency` requests in flight is refused
//                (429 tenant_limit) until one ends.
//   rate         a token bucket of `burst` tokens (one second of the rate by
//                default), refilled at `rate` per second; a request takes one
//                token, and without one it is refused, told when the next
//                token comes. A request refused later (by the level or its
//                lane) gets its token back: the rate counts what is admitted.
//   the table    at most `capacity` tenants, in 16 stripes, each a fixed
//                array with an open-addressed index (linear probing, backward
//                shift on removal) and a least-recently-used list: O(1) per
//                request; a stripe's arrays are made at its first tenant and
//                nothing is allocated after. A new tenant in a
//                full stripe evicts the least recently used tenant with
//                nothing in flight (of the 8 least recent; counted), forgetting
//                its bucket; when all 8 have requests in flight the newcomer
//                is not tracked this once (counted) rather than refused.
//   the fleet    with a fleet quota (SLUICE_REDIS_URL), a tenant's rate is
//                the fleet's: its admitted requests are counted per window of
//                kWindow (wall-clock aligned, the same in every instance) and
//                reported off the request path (collect(), then the link's
//                HSET of each instance's whole total), and each reconcile
//                gives each instance an allowance of admissions until the
//                next (set_allowance(), from fleet_allowance()), valid two
//                intervals. While the link is down (or the allowance is
//                stale, or before a tenant's first reconcile), its bucket
//                refills at rate / N (the instances last seen), a bucket of
//                bucket / N.
//
// Threading: any thread; each call locks one stripe for a few dozen
// instructions. Time comes in as Micros since an epoch the caller picks.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tenants {

using Micros = std::chrono::microseconds;

struct Limits {
  std::uint32_t concurrency = 0;  // 0: none
  double rate = 0;                // requests per second; 0: none
  double burst = 0;               // the bucket's size; 0: one second of the rate (at least 1)
  bool on() const { return concurrency > 0 || rate > 0; }
  double bucket() const { return burst > 0 ? burst : std::max(1.0, rate); }
  bool operator==(const Limits&) const = default;
};

// "R" or "R:B": R requests per second (a number above 0, at most 1e6), a
// bucket of B (at least 1; by default one second of R, at least 1). Throws
// std::invalid_argument saying what would be valid.
Limits parse_rate(std::string_view text);
// The rate as configured ("50", "50:100").
std::string rate_text(const Limits& l);

// What one reconcile reads of a tenant's window counts, and the allowance it
// gives this instance until the next (fleet_allowance()).
struct FleetReading {
  double limit = 0;       // the rate x kWindow: requests per window, fleet-wide
  double current = 0;     // the fleet's count in the current window (after this report)
  double previous = 0;    // ... in the window before it
  double mine = 0;        // this instance's share of current + previous (its reports)
  double elapsed = 0;     // of the current window, 0..1
  double interval = 0.1;  // the reconcile interval over the window
  int instances = 1;      // instances seen
};
struct FleetAllowance {
  double admissions = 0;  // until the next reconcile
  Micros retry{0};        // when the fleet's sliding count falls under the limit (none left)
};
// The sliding count p x (1 - elapsed) + c, against the limit; what the next
// interval frees (the previous window's part sliding out, p x interval); of
// that, this instance's share: what it reported of the fleet's counts, at
// least 1 / instances (an instance new to the tenant takes its even share).
FleetAllowance fleet_allowance(const FleetReading& r);

// A tenant's counts to report: admitted in the current window and the one
// before (not yet reported), and what this instance reported of them before.
struct FleetItem {
  std::uint64_t key = 0;
  double rate = 0;
  std::int64_t window = 0;                  // the current window's number
  std::array<std::uint32_t, 2> pending{};   // [0] current window, [1] the one before
  std::array<std::uint32_t, 2> reported{};  // ... reported earlier, this one excluded
};

enum class Limited : std::uint8_t { no, concurrency, rate, untracked };

// What acquire() gave: give it back with release().
struct Grant {
  Limited limited = Limited::no;  // no or untracked: admitted
  std::uint64_t key = 0;
  std::int32_t entry = -1;  // its stripe's entry (-1: none)
  std::uint8_t stripe = 0;
  bool holds = false;        // a unit of the tenant's concurrency
  bool took_token = false;   // a token of its bucket
  std::int64_t window = -1;  // the fleet: the window it was counted in
  bool gated = false;        // the fleet: it took one of the tenant's allowance
  Micros retry_after{0};     // limited: when it would be admitted
};

class Table {
 public:
  static constexpr std::size_t kStripes = 16;
  static constexpr int kEvictionTries = 8;
  explicit Table(std::size_t capacity);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // A request of the tenant `key` (tenant hash, or mixed with a route's: see
  // scoped()) asks under `limits` at `now`.
  Grant acquire(std::uint64_t key, const Limits& limits, Micros now);
  // The request ended (refund: refused after acquire(), its token back).
  void release(Grant& g, bool refund = false);

  // The fleet (SLUICE_REDIS_URL). Windows are kWindow of wall-clock time;
  // `wall_offset` is the wall clock's Micros at the caller's epoch.
  static constexpr Micros kWindow{1'000'000};
  enum class Fleet : std::uint8_t { off, up, down };
  void set_wall_offset(Micros wall_offset) { wall_offset_ = wall_offset; }
  std::int64_t window_of(Micros now) const { return (now + wall_offset_) / kWindow; }
  // How much of its window has passed at `now`, 0..1.
  double window_elapsed(Micros now) const {
    return static_cast<double>(((now + wall_offset_) % kWindow).count()) /
           static_cast<double>(kWindow.count());
  }
  // up: each tenant's allowance gates it; down: its bucket refills at rate / divisor.
  void set_fleet(Fleet mode, double divisor);
  Fleet fleet() const { return fleet_.load(std::memory_order_relaxed); }
  // Moves the counts of every tenant with a rate asked since the last collect
  // into `out` (appended), as reported; restore() takes them back when the
  // report failed.
  void collect(Micros now, std::vector<FleetItem>& out);
  void restore(const std::vector<FleetItem>& items);
  // The allowance holds for `valid` from `now` (two reconcile intervals): a
  // stale one gives way to the tenant's share.
  void set_allowance(std::uint64_t key, const FleetAllowance& a, Micros now, Micros valid);

  std::uint64_t evictions() const;
  std::uint64_t untracked() const;
  std::size_t size() const;
  std::size_t capacity() const { return capacity_; }

  // The stripe a key lives in.
  static std::size_t stripe_of(std::uint64_t key);
  // A key of its own for a tenant under a route's own limits.
  static std::uint64_t scoped(std::uint64_t tenant, std::uint64_t route);

 private:
  struct Stripe;
  template <class F>
  std::uint64_t sum(F field) const;  // of every stripe's counter, each under its lock
  std::size_t capacity_;
  std::array<std::unique_ptr<Stripe>, kStripes> stripes_;
  Micros wall_offset_{0};
  std::atomic<Fleet> fleet_{Fleet::off};
  std::atomic<double> divisor_{1.0};
};

}  // namespace sluice::tenants
