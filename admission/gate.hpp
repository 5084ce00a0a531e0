#pragma once
// The level gate and the refusal's Retry-After.
//
// Gate: at level L a new request of lane X is admitted with probability
//   factor[X][L] (SLUICE_LANE_FACTORS), drawn from a seeded RNG so that tests and
//   `sluice replay` repeat exactly. Modes: enforce (refuse), observe (decide and
//   count would_shed, forward anyway), off (no decision).
//
// Retry-After of a level refusal (whole seconds):
//   target  = the highest level T <= L with factor[X][T] > 0 (the lane is
//             admitted again there; T = L when the refusal was a coin flip)
//   derived = controller.time_to_level(T, now), rounded up to seconds
//             (no expiry on a pin: the lane's cap)
//   value   = clamp(derived, floor[X], cap[X]) + jitter, jitter uniform in
//             [0, min(cap - clamped, max(1, clamped / 5))]: it only ever adds,
//             never passes the cap, so refused clients do not return together.
//
// Threading: plain values; Gate::admit is const and reads only its tables.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "admission/controller.hpp"
#include "admission/lane.hpp"

namespace sluice::admission {

enum class Mode : std::uint8_t { enforce, observe, off };
std::string_view to_string(Mode mode);

enum class Outcome : std::uint8_t { admitted, shed, would_shed };
std::string_view to_string(Outcome outcome);

// Why a request was refused (or would have been). The 503's X-Sluice-Reject,
// its body's "reason" and the metrics' reason label all come from to_string.
//   level          the lane's factor at the level refused it
//   queue_timeout  no slot within the lane's queue window (the upstream was full)
//   heavy_cap      SLUICE_HEAVY_MAX_IN_FLIGHT heavy leases were live
//   budget         the upstream's quota reading is down to the lane's reserve
//   reserved       the free slots are owed to lanes below their floors
//   pool_closed    the upstream is closed (seed 001 §9)
enum class Reason : std::uint8_t {
  none,
  level,
  queue_timeout,
  pool_closed,
  heavy_cap,
  budget,
  reserved,
  unresolved,    // the upstream has no address: none of its names resolves
  tenant_limit,  // its tenant is at its concurrency or out of its rate (429)
  ingest_budget  // its body did not fit SLUICE_INGEST_BUDGET within its wait
};
inline constexpr std::size_t kReasonCount = 10;
std::string_view to_string(Reason reason);

// factor[lane][level] in [0, 1].
using LaneFactors = std::array<std::array<double, kLevelCount>, kLaneCount>;
LaneFactors default_lane_factors();  // bulk=1,0.5,0,0;standard=1,1,1,0.5;heavy=1,0.5,0.25,0.25

struct RetryBand {
  Millis floor;
  Millis cap;
};
using RetryBands = std::array<RetryBand, kLaneCount>;
RetryBands default_retry_bands();  // bulk=1s:180s;standard=1s:30s;heavy=2s:60s

// A small, fast, seedable generator (splitmix64); one per thread.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::uint64_t s_;
};

struct GateDecision {
  Outcome outcome = Outcome::admitted;
  Reason reason = Reason::none;
};

class Gate {
 public:
  Gate(Mode mode, LaneFactors factors) : mode_(mode), factors_(factors) {}
  // Admit or refuse one new request of `lane` at `level`.
  GateDecision admit(Lane lane, Level level, Rng& rng) const {
    if (mode_ == Mode::off) return {};
    double f = factors_[index(lane)][static_cast<std::size_t>(level)];
    if (f >= 1.0 || (f > 0.0 && rng.uniform() < f)) return {};
    return {mode_ == Mode::enforce ? Outcome::shed : Outcome::would_shed, Reason::level};
  }
  Mode mode() const { return mode_; }
  const LaneFactors& factors() const { return factors_; }
  // The highest level <= level where the lane has a non-zero factor (0 if none).
  Level readmit_level(Lane lane, Level level) const;

 private:
  Mode mode_;
  LaneFactors factors_;
};

// Seconds before the level admits `lane` again, unclamped and without jitter
// (nullopt: not foreseeable, e.g. a pin without expiry).
std::optional<Millis> level_wait(const Controller& controller, const Gate& gate, Lane lane,
                                 Millis now);

// The Retry-After value: clamp into the band, round up to whole seconds, add jitter.
int retry_after_seconds(std::optional<Millis> derived, RetryBand band, Rng& rng);

}  // namespace sluice::admission
