#pragma once
// The admin token check: the bearer token a request presents, compared with
// the configured one in constant time. The comparison reads every byte of the
// configured token and folds the differences together, with no exit on the
// first differing byte, so how long a refusal takes says nothing about how
// much of a guess was right. Plain functions: the admin thread calls them.
#include <cstddef>
#include <optional>
#include <string_view>

namespace sluice::proxy {

// True when presented equals expected. Time depends on expected.size() only.
// Templated on the byte ranges so a test can watch which bytes are read.
template <class Presented, class Expected>
bool constant_time_equal(const Presented& presented, const Expected& expected) {
  unsigned diff = presented.size() == expected.size() ? 0u : 1u;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    auto p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0u;
    diff |= p ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

// The credentials of an `Authorization: Bearer <token>` value (the scheme is
// case-insensitive, RFC 9110 §11.1); nullopt for any other scheme or none.
inline std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return std::nullopt;
  }
  auto rest = authorization.substr(kScheme.size());
  if (rest.front() != ' ') return std::nullopt;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  if (rest.empty()) return std::nullopt;
  return rest;
}

// Whether a request whose Authorization header is `authorization` may make a
// mutating call: always when no token is configured, else only with it.
inline bool admin_authorized(std::string_view configured, std::string_view authorization) {
  if (configured.empty()) return true;
  auto presented = bearer_token(authorization);
  // A missing or malformed header is compared too, as an empty guess.
  return constant_time_equal(presented.value_or(std::string_view{}), configured) &&
         presented.has_value();
}

}  // namespace sluice::proxy
