#pragma once
// When an upstream's host names are asked again, and how its active health
// checks move a host in and out. Plain C++: no clock read, no I/O (the
// directory in proxy/ drives them on the admin thread).
//
// Re-resolution: an answer is asked again when its TTL runs out, the TTL held
// within the operator's bounds (SLUICE_DNS_MIN_TTL, SLUICE_DNS_MAX_TTL), so a
// record of TTL 0 is not asked for in a loop and one of a day still follows a
// moving service. A name whose lookup failed is asked again after the minimum,
// doubling with each failure in a row up to kRetryCap (or the maximum, if
// lower): a name that does not resolve yet (its service not created, DNS down
// at boot) is found within seconds of resolving.
//
// Health: a host starts healthy (a cold start serves at once; the first check
// runs at once). `unhealthy` failed checks in a row take it out, `healthy`
// passed checks in a row bring it back; each check comes an interval after the
// last one, plus up to a tenth of it at random, so a fleet's checks do not
// arrive together.
#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::hosts {

using Millis = std::chrono::milliseconds;

struct TtlBounds {
  Millis min{1000};
  Millis max{60'000};
  bool operator==(const TtlBounds&) const = default;
};

inline constexpr Millis kRetryCap{30'000};

// How long an answer of this TTL is kept before it is asked again.
Millis refresh_after(std::chrono::seconds ttl, TtlBounds bounds);
// How long after the n-th failed lookup in a row (n >= 1) it is tried again.
Millis retry_after(std::uint32_t failures, TtlBounds bounds);

// One upstream's active health check (SLUICE_HEALTH_CHECKS).
struct HealthCheck {
  std::string path = "/healthz";  // GET path; a 2xx or 3xx passes
  Millis interval{5000};
  Millis timeout{1000};         // connect, send and the response head, together
  std::uint32_t healthy = 2;    // passes in a row that bring a host back
  std::uint32_t unhealthy = 3;  // failures in a row that take it out
  bool operator==(const HealthCheck&) const = default;
};

// The wait before the next check: the interval, plus up to a tenth of it drawn
// from `random` (any 64-bit value).
Millis next_check(const HealthCheck& check, std::uint64_t random);

class HealthState {
 public:
  bool healthy() const { return healthy_; }
  std::uint32_t streak() const { return streak_; }  // results in a row against the state
  // One check's result; true when it changed the state.
  bool record(bool passed, const HealthCheck& check);

 private:
  bool healthy_ = true;
  std::uint32_t streak_ = 0;
};

}  // namespace sluice::hosts
