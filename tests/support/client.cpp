#include "tests/support/client.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sluice::test {

namespace http = boost::beast::http;
namespace net = boost::asio;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

constexpr auto kSendTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr std::size_t kReadSize = 64 * 1024;
constexpr std::uint32_t kHeaderLimit = 1024 * 1024;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

template <class Body>
Response to_response(http::response<Body>& msg) {
  Response res;
  res.status = static_cast<int>(msg.result_int());
  for (const auto& field : msg) {
    res.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  res.keep_alive = msg.keep_alive();
  return res;
}

}  // namespace

std::string Response::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (iequals(key, name)) return value;
  }
  return {};
}

std::optional<Conn> Conn::try_open(std::uint16_t port) {
  // Close-on-exec: a child spawned by the test must not keep our connections open.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  Conn conn(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return std::nullopt;
    if (!wait_for(fd, POLLOUT, Clock::now() + kConnectTimeout)) return std::nullopt;
    int error = 0;
    socklen_t len = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      return std::nullopt;
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return conn;
}

Conn Conn::open(std::uint16_t port) {
  auto conn = try_open(port);
  if (!conn) {
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port) + ": " +
                             std::strerror(errno));
  }
  return std::move(*conn);
}

Conn::Conn(Conn&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      pending_(std::move(other.pending_)),
      eof_(other.eof_),
      last_read_(other.last_read_) {}

Conn& Conn::operator=(Conn&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pending_ = std::move(other.pending_);
    eof_ = other.eof_;
    last_read_ = other.last_read_;
  }
  return *this;
}

Conn::~Conn() {
  if (fd_ >= 0) ::close(fd_);
}

bool Conn::send(std::string_view raw) {
  const auto deadline = Clock::now() + kSendTimeout;
  while (!raw.empty()) {
    const auto n = ::send(fd_, raw.data(), raw.size(), MSG_NOSIGNAL);
    if (n > 0) {
      raw.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd_, POLLOUT, deadline)) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool Conn::fill(Clock::time_point deadline) {
  if (eof_ || fd_ < 0) return false;
  std::array<char, kReadSize> buf;
  while (true) {
    const auto n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n > 0) {
      pending_.append(buf.data(), static_cast<std::size_t>(n));
      last_read_ = Clock::now();
      return true;
    }
    if (n == 0) {
      eof_ = true;
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd_, POLLIN, deadline)) return false;
      continue;
    }
    eof_ = true;  // ECONNRESET and friends: the peer is gone either way
    return false;
  }
}

std::optional<Response> Conn::read_response(std::chrono::milliseconds timeout, bool head_request) {
  const auto deadline = Clock::now() + timeout;
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  parser.skip(head_request);
  parser.header_limit(kHeaderLimit);
  parser.body_limit(boost::none);
  while (true) {
    error_code ec;
    if (!pending_.empty()) {
      const auto used = parser.put(net::buffer(pending_), ec);
      pending_.erase(0, used);
      if (parser.is_done()) break;
      if (ec && ec != http::error::need_more) return std::nullopt;
      if (!ec && used > 0) continue;
    }
    if (eof_) {
      // A body delimited by the close ends here; anything else is cut short.
      if (!parser.got_some()) return std::nullopt;
      parser.put_eof(ec);
      if (ec || !parser.is_done()) return std::nullopt;
      break;
    }
    if (!fill(deadline) && !eof_) return std::nullopt;
  }
  auto& msg = parser.get();
  auto res = to_response(msg);
  res.body = std::move(msg.body());
  return res;
}

std::string Conn::read_until_close(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (fill(deadline)) {
  }
  return std::exchange(pending_, {});
}

bool Conn::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (fill(deadline)) {
  }
  return eof_;
}

void Conn::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void Conn::reset() {
  if (fd_ < 0) return;
  const linger abort{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  ::close(fd_);
  fd_ = -1;
  eof_ = true;
}

struct BodyReader::Impl {
  http::response_parser<http::buffer_body> parser;
  std::array<char, kReadSize> buf;
  bool failed = false;
};

BodyReader::BodyReader(Conn& conn, bool head_request)
    : conn_(conn), impl_(std::make_unique<Impl>()) {
  impl_->parser.skip(head_request);
  impl_->parser.header_limit(kHeaderLimit);
  impl_->parser.body_limit(boost::none);
}

BodyReader::~BodyReader() = default;

std::optional<Response> BodyReader::read_head(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto& parser = impl_->parser;
  // Not eager: put stops once the header is parsed and leaves the body for next().
  while (!parser.is_header_done()) {
    error_code ec;
    if (!conn_.pending_.empty()) {
      const auto used = parser.put(net::buffer(conn_.pending_), ec);
      conn_.pending_.erase(0, used);
      if (parser.is_header_done()) break;
      if (ec && ec != http::error::need_more) return std::nullopt;
      if (!ec && used > 0) continue;
    }
    if (!conn_.fill(deadline)) return std::nullopt;
  }
  return to_response(parser.get());
}

std::optional<BodyChunk> BodyReader::next(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto& parser = impl_->parser;
  if (!parser.is_header_done() || impl_->failed) return std::nullopt;
  while (!parser.is_done()) {
    auto& body = parser.get().body();
    body.data = impl_->buf.data();
    body.size = impl_->buf.size();
    error_code ec;
    std::size_t used = 0;
    if (!conn_.pending_.empty()) {
      used = parser.put(net::buffer(conn_.pending_), ec);
      conn_.pending_.erase(0, used);
    } else if (conn_.eof_) {
      parser.put_eof(ec);  // completes a body delimited by the close
    }
    const auto got = impl_->buf.size() - body.size;
    if (got > 0) return BodyChunk{conn_.last_read_, std::string(impl_->buf.data(), got)};
    if (parser.is_done()) break;
    if (ec == http::error::need_buffer) continue;
    if (ec && ec != http::error::need_more) {
      impl_->failed = true;
      return std::nullopt;
    }
    if (used > 0) continue;
    if (conn_.eof_) {  // closed mid-frame: what is left can never complete
      impl_->failed = true;
      return std::nullopt;
    }
    if (!conn_.fill(deadline) && !conn_.eof_) return std::nullopt;
  }
  return std::nullopt;
}

std::vector<BodyChunk> BodyReader::read_all(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<BodyChunk> chunks;
  while (auto chunk = next(std::chrono::milliseconds(remaining_ms(deadline)))) {
    chunks.push_back(std::move(*chunk));
  }
  return chunks;
}

bool BodyReader::done() const { return impl_->parser.is_done(); }

std::string StreamedResponse::body() const {
  std::string all;
  for (const auto& chunk : chunks) all += chunk.second;
  return all;
}

StreamedResponse read_streamed(Conn& conn, std::chrono::milliseconds timeout, bool head_request) {
  const auto deadline = Clock::now() + timeout;
  StreamedResponse streamed;
  BodyReader reader(conn, head_request);
  streamed.head = reader.read_head(timeout);
  if (!streamed.head) return streamed;
  streamed.head_at = conn.last_read();
  streamed.chunks = reader.read_all(std::chrono::milliseconds(remaining_ms(deadline)));
  streamed.complete = reader.done();
  return streamed;
}

std::string format_request(std::string_view method, std::string_view target, std::uint16_t port,
                           const Headers& headers, std::string_view body) {
  bool has_host = false;
  bool has_framing = false;
  for (const auto& [name, value] : headers) {
    has_host = has_host || iequals(name, "Host");
    has_framing =
        has_framing || iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding");
  }
  std::string raw;
  raw.reserve(128 + body.size());
  raw.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  if (!has_host) raw.append("Host: 127.0.0.1:").append(std::to_string(port)).append("\r\n");
  for (const auto& [name, value] : headers)
    raw.append(name).append(": ").append(value).append("\r\n");
  if (!body.empty() && !has_framing) {
    raw.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  raw.append("\r\n").append(body);
  return raw;
}

Response request(std::uint16_t port, std::string method, std::string target, Headers headers,
                 std::string body, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto conn = Conn::open(port);
  const bool head = method == "HEAD";
  const auto where = method + " " + target + " on port " + std::to_string(port);
  if (!conn.send(format_request(method, target, port, headers, body))) {
    throw std::runtime_error("cannot send " + where);
  }
  while (true) {
    auto res = conn.read_response(std::chrono::milliseconds(remaining_ms(deadline)), head);
    if (!res) throw std::runtime_error("no response to " + where);
    if (res->status >= 200 || res->status == 101) return std::move(*res);
  }
}

}  // namespace sluice::test
