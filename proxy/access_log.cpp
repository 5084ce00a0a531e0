#include "proxy/access_log.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <ctime>

#include "tenants/key.hpp"

namespace sluice::proxy {

AccessLog::AccessLog(int fd) : fd_(fd) {
  if (fd_ >= 0) buf_.reserve(kFlushBytes * 2);
}

AccessLog::~AccessLog() { flush(); }

namespace {
constexpr auto kNeedsEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c >= 0x7f || c == '"' || c == '\\';
  return t;
}();
constexpr bool needs_escape(unsigned char c) { return kNeedsEscape[c]; }
}  // namespace

void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::size_t run = 0;  // start of the current stretch of plain characters
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (!needs_escape(c)) continue;
    out.append(s.data() + run, i - run);  // plain stretches go in one append
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default: {  // keeps the line ASCII whatever the client sent
        char u[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out.append(u, 6);
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
}

void AccessLog::append_escaped(std::string_view s) { append_json_escaped(buf_, s); }

void AccessLog::append_ts(std::chrono::system_clock::time_point ts) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(ts.time_since_epoch()).count();
  std::int64_t sec = ms / 1000;
  if (sec != ts_second_) {  // the date part changes once a second
    ts_second_ = sec;
    std::time_t t = static_cast<std::time_t>(sec);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(ts_prefix_, sizeof ts_prefix_, "%Y-%m-%dT%H:%M:%S", &tm);
  }
  buf_ += ts_prefix_;
  char frac[8];
  int m = static_cast<int>(ms % 1000);
  frac[0] = '.';
  frac[1] = static_cast<char>('0' + m / 100);
  frac[2] = static_cast<char>('0' + m / 10 % 10);
  frac[3] = static_cast<char>('0' + m % 10);
  frac[4] = 'Z';
  buf_.append(frac, 5);
}

namespace {
void append_int(std::string& out, std::int64_t v) {
  char tmp[24];
  auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  out.append(tmp, r.ptr);
}
// Milliseconds with three decimals, from whole microseconds (integer
// formatting: a double's to_chars costs ten times as much).
void append_ms(std::string& out, double v) {
  if (v < 0) {
    out += "null";
    return;
  }
  auto us = static_cast<std::int64_t>(v * 1000.0 + 0.5);
  append_int(out, us / 1000);
  char frac[4] = {'.', static_cast<char>('0' + us / 100 % 10),
                  static_cast<char>('0' + us / 10 % 10), static_cast<char>('0' + us % 10)};
  out.append(frac, 4);
}
}  // namespace

void AccessLog::write(const AccessRecord& r) {
  if (fd_ < 0) return;
  auto field = [this](std::string_view name, std::string_view value) {
    buf_ += ",\"";
    buf_ += name;
    buf_ += "\":\"";
    append_escaped(value);
    buf_ += '"';
  };
  buf_ += "{\"ts\":\"";
  append_ts(r.ts);
  buf_ += '"';
  field("request_id", r.request_id);
  field("method", r.method);
  field("path", r.path);
  buf_ += ",\"status\":";
  append_int(buf_, r.status);
  field("lane", r.lane);
  field("route", r.route);
  field("upstream", r.upstream);
  if (r.tenant != 0) {
    auto h = tenants::hex(r.tenant);
    field("tenant", {h.data(), h.size()});
  }
  if (!r.upstream_addr.empty()) field("upstream_addr", r.upstream_addr);
  if (!r.fallback_from.empty()) {
    field("fallback_from", r.fallback_from);
    field("fallback_why", r.fallback_why);
  }
  field("decision", r.decision);
  field("reason", r.reason);
  buf_ += ",\"level\":";
  append_int(buf_, r.level);
  buf_ += ",\"retry_after_s\":";
  if (r.retry_after_s < 0)
    buf_ += "null";
  else
    append_int(buf_, r.retry_after_s);
  buf_ += ",\"queue_ms\":";
  append_ms(buf_, r.queue_ms);
  buf_ += ",\"upstream_wait_ms\":";
  append_ms(buf_, r.upstream_wait_ms);
  if (r.connect_ms >= 0) {
    buf_ += ",\"upstream_connect_ms\":";
    append_ms(buf_, r.connect_ms);
  }
  if (r.tls_ms >= 0) {
    buf_ += ",\"upstream_tls_ms\":";
    append_ms(buf_, r.tls_ms);
  }
  buf_ += ",\"ttfb_ms\":";
  append_ms(buf_, r.ttfb_ms);
  buf_ += ",\"duration_ms\":";
  append_ms(buf_, r.duration_ms);
  buf_ += ",\"bytes_in\":";
  append_int(buf_, static_cast<std::int64_t>(r.bytes_in));
  buf_ += ",\"bytes_out\":";
  append_int(buf_, static_cast<std::int64_t>(r.bytes_out));
  field("client", r.client);
  if (!r.tls.empty()) field("tls", r.tls);
  buf_ += "}\n";
  if (buf_.size() >= kFlushBytes) flush();
}

void AccessLog::write_line(std::string_view json_object) {
  if (fd_ < 0) return;
  buf_ += json_object;
  buf_ += '\n';
  if (buf_.size() >= kFlushBytes) flush();
}

void AccessLog::flush() {
  if (fd_ < 0 || buf_.empty()) return;
  std::string_view rest = buf_;
  while (!rest.empty()) {
    // Line-aligned pieces of at most PIPE_BUF bytes are atomic on a pipe.
    std::size_t n = rest.size();
    if (n > PIPE_BUF) {
      auto cut = rest.rfind('\n', PIPE_BUF - 1);
      n = cut == std::string_view::npos ? PIPE_BUF : cut + 1;
    }
    ssize_t w = ::write(fd_, rest.data(), n);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;  // a broken log sink never stops the proxy
    }
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
  buf_.clear();
}

}  // namespace sluice::proxy
