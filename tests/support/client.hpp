// A small blocking HTTP/1.1 client for end-to-end tests, over real TCP sockets to 127.0.0.1.
//
// It sends whatever bytes a test gives it (hostile ones included) and parses answers with
// Beast's response parser, so framing, HEAD and 1xx rules are Beast's, not ours. Every read
// has a deadline; nothing blocks forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Response {
  int status = 0;
  Headers headers;  // in the order received, names as sent
  std::string body;
  bool keep_alive = false;

  // The first value of `name`, compared case-insensitively; "" when absent.
  std::string header(std::string_view name) const;
};

// Decoded body bytes and when they arrived (the time of the read that brought them).
using BodyChunk = std::pair<std::chrono::steady_clock::time_point, std::string>;

class Conn {
 public:
  // Connects to 127.0.0.1:port; throws std::runtime_error when it cannot.
  static Conn open(std::uint16_t port);
  // Same, but nullopt when the connection is refused or times out.
  static std::optional<Conn> try_open(std::uint16_t port);

  Conn(Conn&& other) noexcept;
  Conn& operator=(Conn&& other) noexcept;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn();

  // Sends all of `raw`; false if the peer is gone or it takes longer than 5 s.
  bool send(std::string_view raw);

  // One response, bytes after it kept for the next call. 1xx responses are returned like any
  // other (call again for the final one). `head_request`: the response has no body whatever
  // its headers say. nullopt on timeout, on a parse error, or when the peer closes first.
  std::optional<Response> read_response(std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                        bool head_request = false);

  // Unparsed bytes held so far plus everything until the peer closes or the timeout.
  std::string read_until_close(std::chrono::milliseconds timeout);

  // True if the peer closed (recv returns 0 or ECONNRESET) within the timeout; bytes that
  // arrive first are kept for read_response / read_until_close.
  bool closed_by_peer(std::chrono::milliseconds timeout);

  // Half-close: no more bytes from us, reading still possible.
  void shutdown_write();
  // Close with SO_LINGER 0, so the peer sees a reset instead of an orderly close.
  void reset();

  int fd() const { return fd_; }
  // When the most recent bytes arrived.
  std::chrono::steady_clock::time_point last_read() const { return last_read_; }

 private:
  friend class BodyReader;
  explicit Conn(int fd) : fd_(fd) {}
  // Appends what arrives before `deadline` to pending_; false on timeout or close (eof_).
  bool fill(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::string pending_;  // received, not yet parsed
  bool eof_ = false;
  std::chrono::steady_clock::time_point last_read_{};
};

// Reads one response incrementally: the head, then body data piece by piece as it arrives,
// with chunked transfer encoding decoded. For SSE streams and other relayed bodies.
class BodyReader {
 public:
  explicit BodyReader(Conn& conn, bool head_request = false);
  ~BodyReader();
  BodyReader(const BodyReader&) = delete;
  BodyReader& operator=(const BodyReader&) = delete;

  // Status and headers (body empty); nullopt on timeout, parse error or close.
  std::optional<Response> read_head(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // The next piece of decoded body data; nullopt at the end of the body (done() is then true),
  // on timeout, on a framing error or when the peer closes mid-body.
  std::optional<BodyChunk> next(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Pieces until the end of the body or the timeout.
  std::vector<BodyChunk> read_all(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The body ended as its framing says.
  bool done() const;

 private:
  struct Impl;
  Conn& conn_;
  std::unique_ptr<Impl> impl_;
};

struct StreamedResponse {
  std::optional<Response> head;  // nullopt when no head arrived
  std::vector<BodyChunk> chunks;
  bool complete = false;  // the body ended as framed before the timeout
  std::chrono::steady_clock::time_point head_at{};

  std::string body() const;
};

// The head and then the body as it arrives, until the body ends or `timeout` passes.
StreamedResponse read_streamed(Conn& conn,
                               std::chrono::milliseconds timeout = std::chrono::seconds(10),
                               bool head_request = false);

// A well-formed HTTP/1.1 request: adds Host (unless given) and Content-Length when there is
// a body (unless Content-Length or Transfer-Encoding is given).
std::string format_request(std::string_view method, std::string_view target, std::uint16_t port,
                           const Headers& headers = {}, std::string_view body = {});

// Opens a connection, sends one request, returns the final response (1xx skipped).
// Throws std::runtime_error when no response arrives in time.
Response request(std::uint16_t port, std::string method, std::string target, Headers headers = {},
                 std::string body = {},
                 std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace sluice::test
