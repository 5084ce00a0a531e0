#pragma once
// Request head validation: what Beast's parser accepts but a proxy must not
// pass on, because an upstream could frame or read it differently.
//
// check_request_head() is the one place that decides. Beast has already read
// the head (request line, fields, Content-Length and chunked detection); this
// looks again at the raw head bytes and at the parsed message, and answers a
// HeadVerdict: go on, go on and close both connections after the answer, or a
// refusal status with its reason. Every rule is in docs/security.md, with the
// corpus cases (tests/corpus) that hold it.
//
//   raw head      obs-fold (a line starting with SP or HTAB): 400
//   request line  a target byte outside VCHAR (raw UTF-8, obs-text): 400
//   version       only HTTP/1.0 and HTTP/1.1: 505
//   field names   a name that reads as Content-Length or Transfer-Encoding
//                 once `_` and runs of `-` fold (Content_Length,
//                 Transfer---Encoding): 400
//   Content-Length  one field, one value of digits only: else 400
//   Transfer-Encoding  HTTP/1.1 only; a list of tokens, empty elements
//                 ignored, chunked last and once, without parameters; every
//                 other coding is passed on (Sluice re-chunks the body): else 400
//   Host          exactly one on HTTP/1.1, never two on HTTP/1.0 (it goes
//                 upstream as HTTP/1.1): else 400
//   GET or HEAD with a body: forwarded, then both connections close
//
// Pure: no allocation, no I/O; any thread.
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::proxy {

struct HeadVerdict {
  int status = 0;            // 0: the request may go on; else the refusal's status
  std::string_view why;      // the refusal's reason (logs, JSON body)
  bool close_after = false;  // go on, then close client and upstream connections
};

namespace head_detail {

inline bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

inline bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

inline std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// True when name folds to target ("content-length") with `_` read as `-` and a
// run of separators read as one, but is not spelled exactly so.
inline bool folds_to(std::string_view name, std::string_view target) {
  std::size_t j = 0;
  bool exact = name.size() == target.size();
  for (std::size_t i = 0; i < name.size();) {
    char c = lower(name[i]);
    if (c == '-' || c == '_') {
      if (j >= target.size() || target[j] != '-') return false;
      if (c == '_') exact = false;
      std::size_t run = 0;
      while (i < name.size() && (name[i] == '-' || name[i] == '_')) {
        if (name[i] == '_') exact = false;
        ++i;
        ++run;
      }
      if (run > 1) exact = false;
      ++j;
      continue;
    }
    if (j >= target.size() || target[j] != c) return false;
    ++i;
    ++j;
  }
  return j == target.size() && !exact;
}

// One element of a Transfer-Encoding list: a coding name, then parameters.
struct Coding {
  std::string_view name;
  bool has_params = false;
  bool valid = false;
};

inline Coding parse_coding(std::string_view element) {
  Coding c;
  auto semi = element.find(';');
  c.name = trim_ows(element.substr(0, semi));
  c.has_params = semi != std::string_view::npos;
  c.valid = is_token(c.name);
  if (!c.valid || !c.has_params) return c;
  // Parameters: `;` token [ `=` ( token / quoted-string ) ], OWS around each;
  // an empty one (`gzip ;`) is tolerated, like an empty list element.
  auto rest = element.substr(semi);
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the ';'
    auto next = rest.find(';');
    auto param = trim_ows(rest.substr(0, next));
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next);
    if (param.empty()) continue;
    auto eq = param.find('=');
    if (!is_token(trim_ows(param.substr(0, eq)))) return c.valid = false, c;
    if (eq == std::string_view::npos) continue;
    auto value = trim_ows(param.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') continue;
    if (!is_token(value)) return c.valid = false, c;
  }
  return c;
}

}  // namespace head_detail

// The codings of a request's Transfer-Encoding fields, in order, each given to
// f(name). Empty list elements are skipped.
template <class Fields, class F>
void for_each_coding(const Fields& fields, F&& f) {
  namespace http = boost::beast::http;
  for (auto it = fields.find(http::field::transfer_encoding);
       it != fields.end() && it->name() == http::field::transfer_encoding; ++it) {
    std::string_view v = it->value();
    while (true) {
      auto comma = v.find(',');
      auto element = head_detail::trim_ows(v.substr(0, comma));
      if (!element.empty()) f(head_detail::parse_coding(element));
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
}

// raw_head: the head's bytes as received (request line through the blank
// line). beast_chunked: what Beast's parser decided (the body is read by it).
template <class Body, class Fields>
HeadVerdict check_request_head(const boost::beast::http::request<Body, Fields>& m,
                               std::string_view raw_head, bool beast_chunked) {
  namespace http = boost::beast::http;
  using namespace head_detail;
  // obs-fold: Beast unfolds a line starting with SP or HTAB; an upstream could
  // read the fold differently.
  for (auto i = raw_head.find('\n'); i != std::string_view::npos && i + 1 < raw_head.size();
       i = raw_head.find('\n', i + 1))
    if (raw_head[i + 1] == ' ' || raw_head[i + 1] == '\t') return {400, "obs_fold"};
  if (m.version() != 11 && m.version() != 10) return {505, "http_version"};
  for (unsigned char c : m.target())
    if (c <= 0x20 || c >= 0x7f) return {400, "target"};

  std::size_t lengths = 0, hosts = 0;
  bool has_te = false;
  for (const auto& f : m) {
    hosts += f.name() == http::field::host;
    has_te |= f.name() == http::field::transfer_encoding;
    auto name = f.name_string();
    if (folds_to(name, "content-length") || folds_to(name, "transfer-encoding"))
      return {400, "framing_lookalike"};
    if (f.name() == http::field::content_length) {
      ++lengths;
      auto v = trim_ows(f.value());
      if (v.empty()) return {400, "content_length"};
      for (char c : v)
        if (c < '0' || c > '9') return {400, "content_length"};
    }
  }
  if (lengths > 1) return {400, "content_length"};

  if (has_te) {
    if (lengths > 0 || m.version() != 11) return {400, "transfer_encoding"};
    std::size_t codings = 0, chunked = 0;
    bool valid = true, last_chunked = false, chunked_params = false;
    for_each_coding(m, [&](const Coding& c) {
      ++codings;
      valid &= c.valid;
      last_chunked = boost::beast::iequals(c.name, "chunked");
      if (last_chunked) {
        ++chunked;
        chunked_params |= c.has_params;
      }
    });
    if (!valid || codings == 0 || !last_chunked || chunked != 1 || chunked_params || !beast_chunked)
      return {400, "transfer_encoding"};
  }

  // Never two Hosts (RFC 9112 section 3.2), whatever the version: HTTP/1.0 goes upstream as 1.1.
  if (hosts > 1 || (m.version() == 11 && hosts != 1)) return {400, "host"};

  // GET and HEAD have no defined use for a body: one is passed on with Sluice's
  // own framing, and neither connection is used again after it.
  if ((m.method() == http::verb::get || m.method() == http::verb::head) &&
      (has_te || (lengths == 1 && trim_ows(m[http::field::content_length]) != "0")))
    return {0, "body_on_get", true};
  return {};
}

}  // namespace sluice::proxy
