// The tenant key: its configuration, its hash and the JWT claim reader.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "tenants/key.hpp"

using namespace sluice::tenants;

namespace {

// Signed HS256 with "secret-key"; the payload is
// {"iss":"sluice-test","nested":{"sub":"inner","a":[1,{"b":"}"}]},"sub":"tenant-42","n":7}
constexpr std::string_view kSigned =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJpc3MiOiJzbHVpY2UtdGVzdCIsIm5lc3RlZCI6eyJzdWIiOiJpbm5lciIsImEiOlsxLHsiYiI6In0ifV19LCJzdWIiOi"
    "J0ZW5hbnQtNDIiLCJuIjo3fQ.cvQg-PJV6RWUwFYTlDVWNGKzs3dMj_uJfnla6zr-PfA";
// The same payload, alg none, no signature.
constexpr std::string_view kUnsigned =
    "eyJhbGciOiAibm9uZSJ9."
    "eyJpc3MiOiJzbHVpY2UtdGVzdCIsIm5lc3RlZCI6eyJzdWIiOiJpbm5lciIsImEiOlsxLHsiYiI6In0ifV19LCJzdWIiOi"
    "J0ZW5hbnQtNDIiLCJuIjo3fQ.";

std::string bearer(std::string_view jwt) { return "Bearer " + std::string(jwt); }

std::string claim(std::string_view auth, std::string_view name, std::string_view key = {}) {
  std::array<char, 1024> scratch{};
  return std::string(jwt_claim(auth, name, key, scratch));
}

}  // namespace

TEST_CASE("a tenant key is a header, the client's address or a JWT claim, or none", "[tenants]") {
  CHECK(parse_key("header:X-Api-Key").kind == Key::Kind::header);
  CHECK(parse_key("header:X-Api-Key").name == "X-Api-Key");
  CHECK(parse_key("client_ip").kind == Key::Kind::client_ip);
  CHECK(parse_key("jwt:sub").name == "sub");
  CHECK_FALSE(parse_key("none").on());
  CHECK(parse_key("jwt:org_id").str() == "jwt:org_id");
  CHECK_THROWS_WITH(parse_key("header:"), Catch::Contains("is not a header name"));
  CHECK_THROWS_WITH(parse_key("header:X Api"), Catch::Contains("is not a header name"));
  CHECK_THROWS_WITH(parse_key("cookie:session"), Catch::Contains("valid: header:NAME"));
  CHECK_THROWS_WITH(parse_key("apikey"), Catch::Contains("is not a tenant key"));
  CHECK_THROWS_AS(parse_key("jwt:"), std::invalid_argument);
}

TEST_CASE("a key is kept only as its hash: SHA-256's first 8 bytes, the same everywhere",
          "[tenants]") {
  CHECK(hash("") == 0);  // no key: the shared tenant
  CHECK(hash("key-a") == 0xf10f781241e22466ull);
  CHECK(hash("key-a") != hash("key-b"));
  auto h = hex(hash("key-a"));
  CHECK(std::string(h.data(), h.size()) == "f10f781241e22466");
}

TEST_CASE("a bearer JWT's claim is read at the top level of its payload", "[tenants]") {
  CHECK(claim(bearer(kUnsigned), "sub") == "tenant-42");  // not the nested one
  CHECK(claim(bearer(kUnsigned), "n") == "7");
  CHECK(claim(bearer(kUnsigned), "missing").empty());
  CHECK(claim("bearer  " + std::string(kSigned), "iss") == "sluice-test");
  CHECK(claim("Basic dXNlcjpwYXNz", "sub").empty());
  CHECK(claim("Bearer not-a-jwt", "sub").empty());
  CHECK(claim("Bearer a.b.c.d", "sub").empty());
  CHECK(claim("Bearer e30.!!!.x", "sub").empty());  // not base64url
  std::array<char, 8> small{};
  CHECK(jwt_claim(bearer(kUnsigned), "sub", {}, small).empty());  // does not fit: nothing
}

TEST_CASE("with a key, only an HS256 token whose signature verifies gives its claim", "[tenants]") {
  CHECK(claim(bearer(kSigned), "sub", "secret-key") == "tenant-42");
  CHECK(claim(bearer(kSigned), "sub", "another-key").empty());
  CHECK(claim(bearer(kUnsigned), "sub", "secret-key").empty());  // alg none
  std::string forged(kSigned);
  forged[forged.size() - 2] = forged[forged.size() - 2] == 'f' ? 'g' : 'f';
  CHECK(claim(bearer(forged), "sub", "secret-key").empty());
}
