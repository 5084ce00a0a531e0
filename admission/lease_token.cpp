#include "admission/lease_token.hpp"

#include <bit>
#include <charconv>
#include <cstring>

namespace sluice::admission {

namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

std::uint64_t load_le64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void absorb(std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

// The bytes the MAC covers, in a fixed little-endian layout.
// The bytes the MAC covers: le32 worker, le32 slot, le64 generation, lane.
std::size_t mac_input(const LeaseId& id, std::uint8_t* out) {
  std::uint64_t words[2] = {id.worker | (std::uint64_t{id.slot} << 32), id.generation};
  if constexpr (std::endian::native == std::endian::big)
    for (auto& w : words) w = __builtin_bswap64(w);
  std::memcpy(out, words, 16);
  out[16] = static_cast<std::uint8_t>(id.lane);
  return 17;
}

std::uint64_t mac(const LeaseKey& key, const LeaseId& id) {
  std::uint8_t buf[24];
  return siphash24(key, buf, mac_input(id, buf));
}

template <class T>
bool parse_hex(std::string_view& s, T& v, bool last) {
  auto dash = last ? s.size() : s.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 16) return false;
  if (dash > 1 && s[0] == '0') return false;  // no leading zeros: one spelling per token
  for (char c : s.substr(0, dash))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;  // one spelling only
  auto r = std::from_chars(s.data(), s.data() + dash, v, 16);
  if (r.ec != std::errc{} || r.ptr != s.data() + dash) return false;
  s.remove_prefix(last ? dash : dash + 1);
  return true;
}

}  // namespace

std::uint64_t siphash24(const LeaseKey& key, const void* data, std::size_t n) {
  const std::uint64_t k0 = load_le64(key.data()), k1 = load_le64(key.data() + 8);
  SipState s{0x736f6d6570736575ull ^ k0, 0x646f72616e646f6dull ^ k1, 0x6c7967656e657261ull ^ k0,
             0x7465646279746573ull ^ k1};
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t whole = n / 8 * 8;
  for (std::size_t i = 0; i < whole; i += 8) s.absorb(load_le64(p + i));
  std::uint64_t b = static_cast<std::uint64_t>(n) << 56;
  for (std::size_t i = whole; i < n; ++i)
    b |= static_cast<std::uint64_t>(p[i]) << (8 * (i - whole));
  s.absorb(b);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

LeaseKey instance_key(const LeaseKey& key, std::uint64_t instance) {
  LeaseKey out{};
  for (std::uint8_t half = 0; half < 2; ++half) {
    std::uint8_t in[9];
    for (int i = 0; i < 8; ++i) in[i] = static_cast<std::uint8_t>(instance >> (8 * i));
    in[8] = half;
    auto h = siphash24(key, in, sizeof in);
    for (int i = 0; i < 8; ++i) out[half * 8 + i] = static_cast<std::uint8_t>(h >> (8 * i));
  }
  return out;
}

std::size_t format_lease_token(const LeaseKey& key, const LeaseId& id, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char* p = out;
  auto hex = [&](std::uint64_t v) {  // lower-case, no leading zeros
    int digits = v == 0 ? 1 : (67 - std::countl_zero(v)) / 4;
    for (int i = digits - 1; i >= 0; --i) p[digits - 1 - i] = kHex[(v >> (4 * i)) & 15];
    p += digits;
  };
  hex(id.worker);
  *p++ = '-';
  hex(id.slot);
  *p++ = '-';
  hex(id.generation);
  *p++ = '-';
  hex(static_cast<std::uint64_t>(id.lane));
  *p++ = '-';
  hex(mac(key, id));  // the others are small: a few digits each
  return static_cast<std::size_t>(p - out);
}

std::optional<LeaseId> parse_lease_token(const LeaseKey& key, std::string_view token) {
  if (token.size() > kLeaseTokenMax) return std::nullopt;
  LeaseId id;
  std::uint64_t lane = 0, tag = 0;
  if (!parse_hex(token, id.worker, false) || !parse_hex(token, id.slot, false) ||
      !parse_hex(token, id.generation, false) || !parse_hex(token, lane, false) ||
      !parse_hex(token, tag, true) || !token.empty() || lane >= kLaneCount)
    return std::nullopt;
  id.lane = static_cast<Lane>(lane);
  // Constant-time enough: a 64-bit compare of a value the attacker cannot see.
  if (mac(key, id) != tag) return std::nullopt;
  return id;
}

}  // namespace sluice::admission
