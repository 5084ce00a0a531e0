// Fuzz target: a tenant's key from a request (tenants/key.hpp): the bearer
// JWT's claim read from an attacker's Authorization header, with and without
// an HS256 key, and its hash. Input: the claim's name, a newline, then the
// Authorization value.
// Beyond not crashing: a claim lies inside the decoded payload's buffer, the
// verified claim is one the unverified read finds too, and a key hashes to 0
// exactly when it is empty.
#include <array>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz.hpp"
#include "tenants/key.hpp"

using sluice::fuzz::expect;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto nl = in.find('\n');
  if (nl == std::string_view::npos) return 0;
  std::string_view claim = in.substr(0, nl), authorization = in.substr(nl + 1);
  std::array<char, 512> scratch{};
  auto got = sluice::tenants::jwt_claim(authorization, claim, {}, scratch);
  expect(got.empty() || (got.data() >= scratch.data() &&
                         got.data() + got.size() <= scratch.data() + scratch.size()),
         "the claim lies inside the decoded payload");
  std::array<char, 512> verified_scratch{};
  auto verified =
      sluice::tenants::jwt_claim(authorization, claim, "a-fuzzing-secret-key", verified_scratch);
  expect(verified.empty() || verified == got, "a verified claim is the claim read unverified");
  expect((sluice::tenants::hash(got) == 0) == got.empty(), "only an empty key hashes to 0");
  return 0;
}
