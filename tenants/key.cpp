#include "tenants/key.hpp"

// SHA256_Init and friends are deprecated in OpenSSL 3 in favour of EVP, which
// costs a fetch or an allocation per digest (see hash()).
#define OPENSSL_SUPPRESS_DEPRECATED

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace sluice::tenants {

namespace {

bool is_token_char(char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument(
      what +
      "; valid: header:NAME (e.g. header:X-Api-Key), client_ip, jwt:CLAIM (e.g. jwt:sub), "
      "none");
}

// base64url (RFC 4648 §5, no padding; '=' padding tolerated) into out;
// the decoded length, or -1 when it is not base64url or does not fit.
long decode_base64url(std::string_view in, std::span<char> out) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::size_t n = 0;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '-')
      v = 62;
    else if (c == '_')
      v = 63;
    else
      return -1;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (n == out.size()) return -1;
      out[n++] = static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return static_cast<long>(n);
}

// A small reader of one JSON object's top-level members: enough to find a
// claim without building a document (and without allocating).
struct Scanner {
  std::string_view s;
  std::size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  // A string at i (after its opening quote): its raw contents; false if unterminated.
  bool string(std::string_view& out) {
    std::size_t start = i;
    while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
    if (i >= s.size()) return false;
    out = s.substr(start, i - start);
    ++i;
    return true;
  }
  // Skips one value; its raw text (a string's contents without the quotes).
  bool value(std::string_view& out, int depth = 0) {
    ws();
    if (i >= s.size() || depth > 32) return false;
    char c = s[i];
    if (c == '"') {
      ++i;
      return string(out);
    }
    std::size_t start = i;
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i;
      if (eat(close)) {
        out = s.substr(start, i - start);
        return true;
      }
      for (;;) {
        std::string_view ignored;
        if (c == '{' && !(eat('"') && string(ignored) && eat(':'))) return false;
        if (!value(ignored, depth + 1)) return false;
        if (eat(close)) break;
        if (!eat(',')) return false;
      }
      out = s.substr(start, i - start);
      return true;
    }
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
           s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
      ++i;
    out = s.substr(start, i - start);
    return !out.empty();
  }
  // The top-level member `name` of the object in s.
  std::string_view member(std::string_view name) {
    if (!eat('{')) return {};
    if (eat('}')) return {};
    for (;;) {
      std::string_view key, v;
      if (!(eat('"') && string(key) && eat(':') && value(v))) return {};
      if (key == name) return v;
      if (!eat(',')) return {};
    }
  }
};

std::string_view member(std::string_view json, std::string_view name) {
  return Scanner{json}.member(name);
}

// HMAC-SHA256 (RFC 2104) on the low-level SHA-256: no allocation, no fetch.
std::array<unsigned char, SHA256_DIGEST_LENGTH> hmac_sha256(std::string_view key,
                                                            std::string_view data) {
  std::array<unsigned char, SHA256_CBLOCK> k{};
  if (key.size() > k.size()) {
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, key.data(), key.size());
    SHA256_Final(k.data(), &c);
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<unsigned char, SHA256_CBLOCK> pad{};
  std::array<unsigned char, SHA256_DIGEST_LENGTH> inner{}, out{};
  SHA256_CTX c;
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ 0x36;
  SHA256_Init(&c);
  SHA256_Update(&c, pad.data(), pad.size());
  SHA256_Update(&c, data.data(), data.size());
  SHA256_Final(inner.data(), &c);
  for (std::size_t i = 0; i < pad.size(); ++i) pad[i] = k[i] ^ 0x5c;
  SHA256_Init(&c);
  SHA256_Update(&c, pad.data(), pad.size());
  SHA256_Update(&c, inner.data(), inner.size());
  SHA256_Final(out.data(), &c);
  return out;
}

bool verify_hs256(std::string_view header_b64, std::string_view signed_part,
                  std::string_view signature_b64, std::string_view key) {
  std::array<char, 256> header{};
  long hn = decode_base64url(header_b64, header);
  if (hn < 0 || member({header.data(), static_cast<std::size_t>(hn)}, "alg") != "HS256")
    return false;
  std::array<char, 64> sig{};
  long sn = decode_base64url(signature_b64, sig);
  if (sn != SHA256_DIGEST_LENGTH) return false;
  const auto mac = hmac_sha256(key, signed_part);
  return CRYPTO_memcmp(mac.data(), sig.data(), mac.size()) == 0;
}

}  // namespace

std::string Key::str() const {
  switch (kind) {
    case Kind::none:
      return "none";
    case Kind::header:
      return "header:" + name;
    case Kind::client_ip:
      return "client_ip";
    case Kind::jwt:
      return "jwt:" + name;
  }
  return "none";
}

Key parse_key(std::string_view text) {
  Key k;
  const std::string quoted = "\"" + std::string(text) + "\"";
  if (text == "none") return k;
  if (text == "client_ip") {
    k.kind = Key::Kind::client_ip;
    return k;
  }
  auto colon = text.find(':');
  if (colon == std::string_view::npos) invalid(quoted + " is not a tenant key");
  auto what = text.substr(0, colon);
  auto name = text.substr(colon + 1);
  if (what == "header") {
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_token_char))
      invalid(quoted + ": \"" + std::string(name) + "\" is not a header name");
    k.kind = Key::Kind::header;
  } else if (what == "jwt") {
    if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
          return c > ' ' && c < 0x7f && c != '"' && c != '\\';
        }))
      invalid(quoted + ": \"" + std::string(name) + "\" is not a claim name");
    k.kind = Key::Kind::jwt;
  } else {
    invalid(quoted + " is not a tenant key");
  }
  k.name = std::string(name);
  return k;
}

Id hash(std::string_view value) {
  if (value.empty()) return 0;
  // OpenSSL's low-level SHA-256 (its assembly, SHA-NI where the CPU has it):
  // no provider fetch and no allocation, a few hundred instructions for a key.
  // The EVP interface fetches the algorithm or allocates its context on each
  // digest, ten times the hash's own cost on the request path.
  SHA256_CTX ctx;
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, value.data(), value.size());
  SHA256_Final(d.data(), &ctx);
  Id id = 0;
  for (int i = 0; i < 8; ++i) id = (id << 8) | d[static_cast<std::size_t>(i)];
  return id == 0 ? 1 : id;
}

std::array<char, 16> hex(Id id) {
  constexpr std::string_view kDigits = "0123456789abcdef";
  std::array<char, 16> out{};
  for (int i = 15; i >= 0; --i, id >>= 4) out[static_cast<std::size_t>(i)] = kDigits[id & 0xf];
  return out;
}

std::string_view jwt_claim(std::string_view authorization, std::string_view claim,
                           std::string_view hs256_key, std::span<char> scratch) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size()) return {};
  for (std::size_t i = 0; i < kBearer.size(); ++i)
    if ((authorization[i] | 0x20) != kBearer[i]) return {};
  std::string_view token = authorization.substr(kBearer.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  auto dot1 = token.find('.');
  if (dot1 == std::string_view::npos) return {};
  auto dot2 = token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos)
    return {};
  if (!hs256_key.empty() && !verify_hs256(token.substr(0, dot1), token.substr(0, dot2),
                                          token.substr(dot2 + 1), hs256_key))
    return {};
  long n = decode_base64url(token.substr(dot1 + 1, dot2 - dot1 - 1), scratch);
  if (n <= 0) return {};
  return member({scratch.data(), static_cast<std::size_t>(n)}, claim);
}

}  // namespace sluice::tenants
