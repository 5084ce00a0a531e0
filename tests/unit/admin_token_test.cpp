#include "proxy/admin_token.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace {

using sluice::proxy::admin_authorized;
using sluice::proxy::bearer_token;
using sluice::proxy::constant_time_equal;

// A byte range that records which of its bytes were read.
struct Watched {
  std::string bytes;
  mutable std::vector<bool> read = std::vector<bool>(bytes.size(), false);
  std::size_t size() const { return bytes.size(); }
  char operator[](std::size_t i) const {
    read.at(i) = true;
    return bytes[i];
  }
  bool all_read() const {
    for (bool r : read)
      if (!r) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("the token comparison is equality of every byte and of the length", "[proxy][admin]") {
  using std::string_view;
  CHECK(constant_time_equal(string_view("s3cret"), string_view("s3cret")));
  CHECK_FALSE(constant_time_equal(string_view("s3creT"), string_view("s3cret")));
  CHECK_FALSE(constant_time_equal(string_view("x3cret"), string_view("s3cret")));
  CHECK_FALSE(constant_time_equal(string_view("s3cre"), string_view("s3cret")));
  CHECK_FALSE(constant_time_equal(string_view("s3crett"), string_view("s3cret")));
  CHECK_FALSE(constant_time_equal(string_view(""), string_view("s3cret")));
  // A guess padded with NULs is not the token, though the loop pads a short guess with 0.
  CHECK_FALSE(constant_time_equal(string_view("s3cr\0\0", 6), string_view("s3cr")));
  CHECK_FALSE(constant_time_equal(string_view("s3cr"), string_view("s3cr\0\0", 6)));
}

TEST_CASE("the token comparison reads every byte of the token whatever byte differs first",
          "[proxy][admin]") {
  const std::string token = "0123456789abcdef0123456789abcdef";
  for (std::size_t differs_at :
       {std::size_t{0}, std::size_t{1}, token.size() / 2, token.size() - 1}) {
    INFO("the guess differs at byte " << differs_at);
    std::string guess_bytes = token;
    guess_bytes[differs_at] = '!';
    Watched expected{token};
    Watched guess{guess_bytes};
    CHECK_FALSE(constant_time_equal(guess, expected));
    // No exit on the first difference: the whole token and the whole guess were compared.
    CHECK(expected.all_read());
    CHECK(guess.all_read());
  }
  SECTION("a guess of another length is compared over the token's whole length too") {
    Watched expected{token};
    Watched guess{"x"};
    CHECK_FALSE(constant_time_equal(guess, expected));
    CHECK(expected.all_read());
  }
}

TEST_CASE("the bearer token is read from the Authorization value, scheme in any case",
          "[proxy][admin]") {
  CHECK(bearer_token("Bearer t0k") == std::string_view("t0k"));
  CHECK(bearer_token("bearer t0k") == std::string_view("t0k"));
  CHECK(bearer_token("BEARER   t0k ") == std::string_view("t0k"));
  CHECK_FALSE(bearer_token("Basic dDBrOg=="));
  CHECK_FALSE(bearer_token("Bearer"));
  CHECK_FALSE(bearer_token("Bearer "));
  CHECK_FALSE(bearer_token("Bearert0k"));
  CHECK_FALSE(bearer_token(""));
}

TEST_CASE("mutating admin calls are authorized only by the configured token, when one is set",
          "[proxy][admin]") {
  CHECK(admin_authorized("", ""));
  CHECK(admin_authorized("", "Bearer anything"));
  CHECK(admin_authorized("t0k", "Bearer t0k"));
  CHECK_FALSE(admin_authorized("t0k", ""));
  CHECK_FALSE(admin_authorized("t0k", "Bearer t0"));
  CHECK_FALSE(admin_authorized("t0k", "Bearer t0kk"));
  CHECK_FALSE(admin_authorized("t0k", "t0k"));
  CHECK_FALSE(admin_authorized("t0k", "Basic t0k"));
}
