#pragma once
// A request's tenant: who it belongs to, for fairness inside a lane and for
// per-tenant limits (SLUICE_TENANT_KEY, or a route's tenant_key).
//   header:NAME   the first value of a request header (an API key)
//   client_ip     the client's address (the connection's peer)
//   jwt:CLAIM     a claim of the bearer JWT in Authorization, read without
//                 verification, or verified HS256 when a key is configured
//                 (SLUICE_TENANT_JWT_KEY): a token that fails is no key
// A request without a key (absent, empty, a JWT that cannot be read) belongs
// to the shared tenant, Id 0.
//
// A key is never kept as it came: it is hashed at once (SHA-256, the first 8
// bytes, never 0), and only the hash is queued, counted, logged (16 hex
// digits) or sent to Redis. The hash is the same in every instance, so the
// fleet agrees on a tenant without the key leaving the instance that read it.
//
// Threading: pure functions; nothing allocates but parse_key().
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace sluice::tenants {

using Id = std::uint64_t;  // 0: the shared tenant

struct Key {
  enum class Kind : std::uint8_t { none, header, client_ip, jwt };
  Kind kind = Kind::none;
  std::string name;         // the header's name, or the JWT claim
  std::string str() const;  // as configured: "header:X-Api-Key", "client_ip", "jwt:sub", "none"
  bool on() const { return kind != Kind::none; }
  bool operator==(const Key&) const = default;
};

// "none", "header:NAME", "client_ip", "jwt:CLAIM". Throws std::invalid_argument
// saying what is wrong and what would be valid.
Key parse_key(std::string_view text);

// SHA-256 of the key's bytes, its first 8 bytes as a number; never 0 (an empty
// key is no key: 0).
Id hash(std::string_view value);

// 16 lower-case hex digits.
std::array<char, 16> hex(Id id);

// The JWT's claim `claim` from an Authorization value ("Bearer <jwt>"), as its
// raw JSON text (a string's contents without the quotes, or a number); empty
// when there is none or it cannot be read. With `hs256_key` not empty, a token
// whose header is not alg HS256 or whose signature does not verify gives
// nothing. `scratch` holds the decoded payload; a payload larger than it gives
// nothing.
std::string_view jwt_claim(std::string_view authorization, std::string_view claim,
                           std::string_view hs256_key, std::span<char> scratch);

}  // namespace sluice::tenants
