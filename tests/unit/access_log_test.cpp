#include "proxy/access_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

using sluice::proxy::AccessLog;
using sluice::proxy::AccessRecord;

namespace {
// Everything written to the pipe so far.
std::string drain(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (n < static_cast<ssize_t>(sizeof buf)) break;
  }
  return out;
}
}  // namespace

TEST_CASE("an access log line is one JSON object with every field, hostile bytes escaped",
          "[proxy][log]") {
  int p[2];
  REQUIRE(::pipe2(p, O_NONBLOCK) == 0);
  {
    AccessLog log(p[1]);
    AccessRecord r;
    r.ts = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'764'561'600'123));
    r.request_id = "id-1";
    r.method = "GET";
    std::string path = "/a\"b\\c\nd\x01\xff";
    r.path = path;
    r.status = 200;
    r.lane = "bulk";
    r.route = "uploads";
    r.upstream = "api";
    r.decision = "admitted";
    r.client = "127.0.0.1";
    r.upstream_wait_ms = 1.5;
    r.duration_ms = 2.25;
    r.bytes_in = 7;
    log.write(r);
    CHECK(drain(p[0]).empty());  // buffered until flushed
    log.flush();
    auto text = drain(p[0]);
    REQUIRE(text.back() == '\n');
    REQUIRE(text.find('\n') == text.size() - 1);
    auto j = nlohmann::json::parse(text);
    CHECK(j["ts"] == "2025-12-01T04:00:00.123Z");
    // A byte outside ASCII is written as \u00XX, so the line stays valid JSON.
    CHECK(text.find(R"(\u00ff)") != std::string::npos);
    CHECK(j["path"] == "/a\"b\\c\nd\x01\xc3\xbf");
    CHECK(j["status"] == 200);
    CHECK(j["lane"] == "bulk");
    CHECK(j["retry_after_s"].is_null());
    CHECK(j["ttfb_ms"].is_null());
    CHECK(j["upstream_wait_ms"] == 1.5);
    CHECK(j["bytes_in"] == 7);
  }
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("the access log writes whole lines in pieces no larger than PIPE_BUF", "[proxy][log]") {
  int p[2];
  REQUIRE(::pipe2(p, O_NONBLOCK) == 0);
  AccessLog log(p[1]);
  AccessRecord r;
  std::string path(300, 'x');
  r.path = path;
  for (int i = 0; i < 40; ++i) log.write(r);  // ~20 KiB: above PIPE_BUF, below the flush size
  log.flush();
  auto text = drain(p[0]);
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  CHECK(lines == 40);
  ::close(p[0]);
  ::close(p[1]);
}
