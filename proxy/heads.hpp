#pragma once
// What Sluice writes on the wire besides the request head (request_fields.hpp):
// status lines, the client's response head, chunk framing and Sluice's own
// answers (4xx, 5xx, the 503). Pure functions appending to a reused string, so
// the session, the unit tests and the response fuzz target run the same code.
//
// Threading: no state; any thread.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "admission/bulkhead.hpp"
#include "proxy/request_fields.hpp"

namespace sluice::proxy {

using ResponseParser =
    boost::beast::http::response_parser<boost::beast::http::buffer_body, HeadAlloc>;
using ResponseHead = ResponseParser::value_type;

void append_number(std::string& h, std::uint64_t n);
void append_number_field(std::string& h, std::string_view name, std::uint64_t n);
// "HTTP/1.x NNN reason\r\n"; the standard reason when none is given.
void append_status_line(std::string& h, bool http11, int status, std::string_view reason);
// Every head Sluice writes ends with the request's id.
void end_head(std::string& h, std::string_view request_id);

// The framing of one body piece of n bytes: chunked, a size line before it and
// CRLF after it, the last chunk after the last piece; raw, nothing.
struct ChunkFrame {
  std::array<char, 20> line{};
  std::size_t line_size = 0;
  std::string_view tail;
  std::string_view size_line() const { return {line.data(), line_size}; }
};
ChunkFrame frame_piece(bool chunked, std::size_t n, bool last);

// How the client's response is framed and whether its connection stays open.
struct ResponseFraming {
  bool chunked = false;  // Sluice chunks it (no Content-Length, an HTTP/1.1 client)
  bool keep_alive = true;
};
// `content_length`: the upstream's; `keep_alive`: what Sluice would keep. A
// body without a length goes chunked to an HTTP/1.1 client; an HTTP/1.0 one
// reads it to the close.
ResponseFraming frame_response(bool head_request, int status,
                               std::optional<std::uint64_t> content_length, unsigned client_version,
                               bool keep_alive);

// The upstream's response fields the client may see: not the hop-by-hop ones
// (keep_upgrade: Connection and Upgrade of a 101 pass), nor X-Request-Id,
// which is Sluice's to state.
void append_response_fields(std::string& h, const ResponseHead& m, bool keep_upgrade);
// The client's head for an upstream response: status line (the client's
// version), the fields, the framing, keep-alive as decided, X-Request-Id.
void append_response_head(std::string& h, const ResponseHead& m,
                          std::optional<std::uint64_t> content_length, unsigned client_version,
                          const ResponseFraming& framing, std::string_view request_id);
// The head of a 101: the switch is agreed, so Connection and Upgrade pass.
void append_switch_head(std::string& h, const ResponseHead& m, std::string_view request_id);

// What an upstream's response head says of its quota: RateLimit-Limit,
// -Remaining and -Reset (or X-RateLimit-*) give a budget reading; a status in
// `closing` (SLUICE_CLOSE_STATUSES) closes the upstream, until its Retry-After
// (seconds) or the quota's reset when it states one. One pass over the fields.
struct QuotaSignal {
  std::optional<admission::BudgetReading> budget;
  bool closes = false;
  std::optional<admission::Micros> until;  // closes: until then (none: SLUICE_CLOSE_FOR)
};
QuotaSignal read_quota(const ResponseHead& m, int status, std::span<const int> closing,
                       admission::Micros now, std::int64_t unix_now);

// An answer Sluice makes itself: head and JSON body appended to `out`; `body`
// is scratch space (both reused, so steady state allocates nothing).
struct OwnAnswer {
  int status = 500;
  std::string_view error;  // the error, or the refusal's reason
  std::string_view request_id;
  bool close = false;  // Connection: close
  // A refusal (SPEC's 503): Retry-After, X-Sluice-Reject and the lane and level.
  bool refusal = false;
  std::string_view lane;
  int level = 0;
  int retry_after_s = 0;
  std::string_view fields;  // more header lines, each ending in CRLF
};
void append_own_answer(std::string& out, std::string& body, const OwnAnswer& a);

}  // namespace sluice::proxy
