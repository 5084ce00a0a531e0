#pragma once
// Lease tokens (seed 001 §10, delegation): Sluice adds one to each request it
// forwards; a request that comes back through Sluice carrying the token of a
// live lease is seated at once on the parent's lane.
//
//   token        = worker "-" slot "-" generation "-" lane "-" mac, in hex
//   mac          = SipHash-2-4(instance key, worker | slot | generation | lane)
//   instance key = SipHash-2-4(key, instance | 0) | SipHash-2-4(key, instance | 1)
//
// The MAC proves this process wrote the token (the instance is random per
// start, so a token from another instance or from before a restart fails it,
// even with a shared SLUICE_LEASE_KEY); whether its lease is still live is the
// lease table's answer (a released slot has a new generation). A forged token
// and one replayed after its lease ended earn nothing.
//
// Threading: pure functions.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "admission/lane.hpp"

namespace sluice::admission {

using LeaseKey = std::array<std::uint8_t, 16>;

// SipHash-2-4: a keyed 64-bit pseudo-random function for short inputs.
std::uint64_t siphash24(const LeaseKey& key, const void* data, std::size_t n);

// The key this process signs with: the configured (or generated) key bound to
// the random instance id of this start.
LeaseKey instance_key(const LeaseKey& key, std::uint64_t instance);

struct LeaseId {
  std::uint32_t worker = 0;
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  Lane lane = Lane::standard;
  bool operator==(const LeaseId&) const = default;
};

inline constexpr std::size_t kLeaseTokenMax = 8 + 1 + 8 + 1 + 16 + 1 + 1 + 1 + 16;

// Writes the token into out (at least kLeaseTokenMax chars); returns its length.
std::size_t format_lease_token(const LeaseKey& key, const LeaseId& id, char* out);
// The lease a token names, when it is well formed and its MAC is right.
std::optional<LeaseId> parse_lease_token(const LeaseKey& key, std::string_view token);

}  // namespace sluice::admission
