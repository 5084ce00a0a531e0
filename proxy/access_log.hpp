#pragma once
// Access log: one JSON object per line per request. Each I/O thread owns one
// writer and appends into its own buffer; the buffer is written when it passes
// kFlushBytes or at the thread's next heartbeat, in line-aligned writes of at
// most PIPE_BUF bytes so lines from two threads never interleave.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::proxy {

struct AccessRecord {
  std::chrono::system_clock::time_point ts;
  std::string_view request_id, method, path, lane, route, upstream, decision, reason, client;
  // When the request moved off its route's upstream: that upstream and why
  // (closed, full, connect_failed); empty otherwise.
  std::string_view fallback_from, fallback_why;
  std::string_view upstream_addr;  // address:port of the host that carried it; empty: none
  std::string_view tls;      // the client connection's TLS version ("TLSv1.3"); empty: plain HTTP
  std::uint64_t tenant = 0;  // its tenant's hash, logged as 16 hex digits; 0: none
  int status = 0;
  int level = 0;
  int retry_after_s = -1;  // -1: none
  double queue_ms = 0, upstream_wait_ms = -1, ttfb_ms = -1, duration_ms = 0;
  // Only on the request a new upstream connection was opened for (-1: none).
  double connect_ms = -1, tls_ms = -1;
  std::uint64_t bytes_in = 0, bytes_out = 0;
};

class AccessLog {
 public:
  static constexpr std::size_t kFlushBytes = 32 * 1024;
  explicit AccessLog(int fd);  // fd < 0: off
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const { return fd_ >= 0; }
  void write(const AccessRecord& r);
  // Writes an already formatted JSON object (audit lines).
  void write_line(std::string_view json_object);
  void flush();

 private:
  void append_escaped(std::string_view s);
  void append_ts(std::chrono::system_clock::time_point ts);
  int fd_;
  std::string buf_;
  std::int64_t ts_second_ = -1;
  char ts_prefix_[24] = {};
};

// Appends s to out as the inside of a JSON string.
void append_json_escaped(std::string& out, std::string_view s);

}  // namespace sluice::proxy
