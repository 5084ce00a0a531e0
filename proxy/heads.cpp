#include "proxy/heads.hpp"

#include <algorithm>
#include <boost/beast/http/status.hpp>
#include <charconv>

#include "admission/resilience.hpp"
#include "proxy/access_log.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;

void append_number(std::string& h, std::uint64_t n) {
  char tmp[24];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, n);
  h.append(tmp, r.ptr);
}

void append_number_field(std::string& h, std::string_view name, std::uint64_t n) {
  h += name;
  h += ": ";
  append_number(h, n);
  h += "\r\n";
}

void append_status_line(std::string& h, bool http11, int status, std::string_view reason) {
  h += http11 ? "HTTP/1.1 " : "HTTP/1.0 ";
  char code[4] = {static_cast<char>('0' + status / 100), static_cast<char>('0' + status / 10 % 10),
                  static_cast<char>('0' + status % 10), ' '};
  h.append(code, 4);
  if (reason.empty())
    h += http::obsolete_reason(static_cast<http::status>(status));
  else
    h += reason;
  h += "\r\n";
}

void end_head(std::string& h, std::string_view request_id) {
  h += "X-Request-Id: ";
  h += request_id;
  h += "\r\n\r\n";
}

ChunkFrame frame_piece(bool chunked, std::size_t n, bool last) {
  ChunkFrame f;
  if (!chunked) return f;
  if (n > 0) {
    auto r = std::to_chars(f.line.data(), f.line.data() + 16, n, 16);
    r.ptr[0] = '\r';
    r.ptr[1] = '\n';
    f.line_size = static_cast<std::size_t>(r.ptr + 2 - f.line.data());
    f.tail = last ? std::string_view("\r\n0\r\n\r\n") : std::string_view("\r\n");
  } else if (last) {
    f.tail = "0\r\n\r\n";
  }
  return f;
}

ResponseFraming frame_response(bool head_request, int status,
                               std::optional<std::uint64_t> content_length, unsigned client_version,
                               bool keep_alive) {
  ResponseFraming f;
  f.keep_alive = keep_alive;
  bool body_possible = !head_request && status != 204 && status != 304;
  if (body_possible && !content_length) {
    if (client_version >= 11)
      f.chunked = true;
    else
      f.keep_alive = false;
  }
  return f;
}

void append_response_fields(std::string& h, const ResponseHead& m, bool keep_upgrade) {
  const HopFields hop(m);
  for (const auto& f : m) {
    if (hop.skip(f, keep_upgrade) || beast::iequals(f.name_string(), "x-request-id")) continue;
    append_field(h, f.name_string(), f.value());
  }
}

void append_response_head(std::string& h, const ResponseHead& m,
                          std::optional<std::uint64_t> content_length, unsigned client_version,
                          const ResponseFraming& framing, std::string_view request_id) {
  append_status_line(h, client_version >= 11, m.result_int(), m.reason());
  append_response_fields(h, m, false);
  if (framing.chunked)
    h += "Transfer-Encoding: chunked\r\n";
  else if (content_length)
    append_number_field(h, "Content-Length", *content_length);  // a HEAD's length describes the GET
  if (!framing.keep_alive && client_version >= 11) h += "Connection: close\r\n";
  if (framing.keep_alive && client_version < 11) h += "Connection: keep-alive\r\n";
  end_head(h, request_id);
}

void append_switch_head(std::string& h, const ResponseHead& m, std::string_view request_id) {
  append_status_line(h, true, 101, m.reason());
  append_response_fields(h, m, true);
  end_head(h, request_id);
}

QuotaSignal read_quota(const ResponseHead& m, int status, std::span<const int> closing,
                       admission::Micros now, std::int64_t unix_now) {
  std::string_view limit, remaining, reset;
  for (const auto& f : m) {
    auto name = f.name_string();
    if (name.size() < 15) continue;
    if (beast::iequals(name.substr(0, 2), "x-")) name.remove_prefix(2);
    if (!beast::iequals(name.substr(0, 10), "ratelimit-")) continue;
    auto what = name.substr(10);
    if (beast::iequals(what, "limit"))
      limit = f.value();
    else if (beast::iequals(what, "remaining"))
      remaining = f.value();
    else if (beast::iequals(what, "reset"))
      reset = f.value();
  }
  QuotaSignal q;
  if (!limit.empty()) q.budget = admission::read_budget(limit, remaining, reset, now, unix_now);
  if (std::find(closing.begin(), closing.end(), status) == closing.end()) return q;
  q.closes = true;
  if (auto it = m.find(http::field::retry_after); it != m.end()) {
    std::int64_t seconds = 0;
    auto v = it->value();
    auto r = std::from_chars(v.data(), v.data() + v.size(), seconds);
    if (r.ec == std::errc{} && r.ptr == v.data() + v.size() && seconds > 0)
      q.until = now + admission::Micros(seconds * 1'000'000);
  }
  if (!q.until && q.budget) q.until = q.budget->until;
  return q;
}

void append_own_answer(std::string& out, std::string& body, const OwnAnswer& a) {
  body.clear();
  body += "{\"error\":\"";
  body += a.refusal ? std::string_view("admission_rejected") : a.error;
  if (a.refusal) {
    body += "\",\"reason\":\"";
    body += a.error;
    body += "\",\"lane\":\"";
    body += a.lane;
    body += "\",\"level\":";
    append_number(body, static_cast<std::uint64_t>(a.level));
    body += ",\"retry_after_s\":";
    append_number(body, static_cast<std::uint64_t>(a.retry_after_s));
  } else {
    body += "\",\"status\":";
    append_number(body, static_cast<std::uint64_t>(a.status));
  }
  body += ",\"request_id\":\"";
  append_json_escaped(body, a.request_id);
  body += "\"}\n";

  append_status_line(out, true, a.status, {});
  out += "Content-Type: application/json\r\n";
  if (a.refusal) {
    append_number_field(out, "Retry-After", static_cast<std::uint64_t>(a.retry_after_s));
    append_field(out, "X-Sluice-Reject", a.error);
  }
  out += a.fields;
  append_number_field(out, "Content-Length", body.size());
  if (a.close) out += "Connection: close\r\n";
  end_head(out, a.request_id);
  out += body;
}

}  // namespace sluice::proxy
