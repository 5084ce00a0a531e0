// Lease tokens: SipHash-2-4 and the token's format and MAC.
#include "admission/lease_token.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace sluice::admission;

namespace {
LeaseKey test_key() {
  LeaseKey k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(i);
  return k;
}
std::string token_for(const LeaseKey& key, const LeaseId& id) {
  char buf[kLeaseTokenMax];
  return std::string(buf, format_lease_token(key, id, buf));
}
}  // namespace

TEST_CASE("SipHash-2-4 gives the reference vectors", "[admission][lease]") {
  auto key = test_key();
  std::uint8_t msg[64];
  for (std::size_t i = 0; i < sizeof msg; ++i) msg[i] = static_cast<std::uint8_t>(i);
  CHECK(siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ull);
  CHECK(siphash24(key, msg, 15) == 0xa129ca6149be45e5ull);
}

TEST_CASE("a lease token names its lease and verifies with the key that signed it",
          "[admission][lease]") {
  auto key = test_key();
  LeaseId id{1, 4242, 77, Lane::heavy};
  auto token = token_for(key, id);
  CHECK(token.size() <= kLeaseTokenMax);
  auto back = parse_lease_token(key, token);
  REQUIRE(back);
  CHECK(*back == id);
}

TEST_CASE("a forged or altered lease token earns nothing", "[admission][lease]") {
  auto key = test_key();
  LeaseId id{0, 7, 3, Lane::bulk};
  auto token = token_for(key, id);
  // Another key (another fleet, or a restart with a generated key).
  auto other = key;
  other[0] ^= 1;
  CHECK_FALSE(parse_lease_token(other, token));
  // Another instance with the same configured key, or this one after a restart.
  auto mine = instance_key(key, 1), theirs = instance_key(key, 2);
  CHECK(mine != theirs);
  CHECK(parse_lease_token(mine, token_for(mine, id)));
  CHECK_FALSE(parse_lease_token(theirs, token_for(mine, id)));
  // Claiming another lane, slot or generation under the same MAC.
  for (const LeaseId& forged : {LeaseId{0, 7, 3, Lane::heavy}, LeaseId{0, 8, 3, Lane::bulk},
                                LeaseId{0, 7, 5, Lane::bulk}, LeaseId{1, 7, 3, Lane::bulk}}) {
    auto t = token_for(key, forged);
    auto mac = token.substr(token.rfind('-'));
    CHECK_FALSE(parse_lease_token(key, t.substr(0, t.rfind('-')) + mac));
  }
  // Every single-character change of the MAC is caught.
  for (std::size_t i = token.rfind('-') + 1; i < token.size(); ++i) {
    auto t = token;
    t[i] = t[i] == '0' ? '1' : '0';
    CHECK_FALSE(parse_lease_token(key, t));
  }
  // Malformed ones.
  for (const std::string& bad :
       std::vector<std::string>{"", "-", "1-2-3-4-5", "0-7-3-0-" + std::string(17, 'a'),
                                token + "-0", "A" + token.substr(1), " " + token, "0" + token})
    CHECK_FALSE(parse_lease_token(key, bad));
}
