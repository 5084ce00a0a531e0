#include "admission/gate.hpp"

#include <algorithm>

namespace sluice::admission {

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::enforce:
      return "enforce";
    case Mode::observe:
      return "observe";
    case Mode::off:
      return "off";
  }
  return "enforce";
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::admitted:
      return "admitted";
    case Outcome::shed:
      return "shed";
    case Outcome::would_shed:
      return "would_shed";
  }
  return "admitted";
}

std::string_view to_string(Reason reason) {
  switch (reason) {
    case Reason::none:
      return "none";
    case Reason::level:
      return "level";
    case Reason::queue_timeout:
      return "queue_timeout";
    case Reason::pool_closed:
      return "pool_closed";
    case Reason::heavy_cap:
      return "heavy_cap";
    case Reason::budget:
      return "budget";
    case Reason::reserved:
      return "reserved";
    case Reason::unresolved:
      return "unresolved";
    case Reason::tenant_limit:
      return "tenant_limit";
    case Reason::ingest_budget:
      return "ingest_budget";
  }
  return "none";
}

LaneFactors default_lane_factors() {
  LaneFactors f{};
  f[index(Lane::bulk)] = {1.0, 0.5, 0.0, 0.0};
  f[index(Lane::standard)] = {1.0, 1.0, 1.0, 0.5};
  f[index(Lane::heavy)] = {1.0, 0.5, 0.25, 0.25};
  return f;
}

RetryBands default_retry_bands() {
  RetryBands b{};
  b[index(Lane::bulk)] = {Millis{1'000}, Millis{180'000}};
  b[index(Lane::standard)] = {Millis{1'000}, Millis{30'000}};
  b[index(Lane::heavy)] = {Millis{2'000}, Millis{60'000}};
  return b;
}

Level Gate::readmit_level(Lane lane, Level level) const {
  const auto& f = factors_[index(lane)];
  for (std::size_t l = static_cast<std::size_t>(level) + 1; l > 0; --l)
    if (f[l - 1] > 0.0) return static_cast<Level>(l - 1);
  return Level::normal;
}

std::optional<Millis> level_wait(const Controller& controller, const Gate& gate, Lane lane,
                                 Millis now) {
  return controller.time_to_level(gate.readmit_level(lane, controller.level()), now);
}

namespace {
// Whole seconds, rounded up: a client told to come back sooner than the level can
// change would only be refused again.
std::int64_t ceil_seconds(Millis m) { return (std::max<std::int64_t>(m.count(), 0) + 999) / 1000; }
}  // namespace

int retry_after_seconds(std::optional<Millis> derived, RetryBand band, Rng& rng) {
  std::int64_t floor_s = ceil_seconds(band.floor);
  std::int64_t cap_s = std::max(floor_s, ceil_seconds(band.cap));
  // Not foreseeable (a pin without expiry): as long as the lane allows.
  std::int64_t value = derived ? ceil_seconds(*derived) : cap_s;
  value = std::clamp(value, floor_s, cap_s);
  std::int64_t spread = std::min(cap_s - value, std::max<std::int64_t>(1, value / 5));
  if (spread > 0)
    value += static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(spread + 1));
  return static_cast<int>(value);
}

}  // namespace sluice::admission
