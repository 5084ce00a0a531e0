#pragma once
// HTTP/2 for clients: h2 by ALPN on the TLS listener, h2c (prior knowledge)
// on the plain one with SLUICE_H2C. nghttp2 does the framing, HPACK, flow
// control and the protocol's rules; Sluice does the rest.
//
// Each stream is a request like any other: the connection writes its head
// (and its body as it arrives) as the HTTP/1.1 request it means, and a
// Session reads it through a Stream (proxy/stream.hpp) as it reads a socket,
// so the stream gets its route, lane, admission decision, lease, upstream and
// access-log line by the same code as an HTTP/1.1 request. What the Session
// writes back, an HTTP/1.1 response, the stream turns into HEADERS and DATA.
// A refusal is that stream's 503 with Retry-After; the connection goes on.
//
// Threading: a connection, its streams and their Sessions live on one Worker.
#include <array>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <memory>
#include <string_view>

#include "proxy/net.hpp"
#include "proxy/stream.hpp"

namespace sluice::proxy {

class Worker;
struct Tracked;

// One stream of an HTTP/2 client connection, as a byte stream.
class H2Stream {
 public:
  using Handler = net::any_completion_handler<void(boost::system::error_code, std::size_t)>;
  // The buffers of one write (the first few: a write may take fewer bytes).
  struct Pieces {
    std::array<net::const_buffer, 8> items;
    std::size_t count = 0;
  };
  virtual ~H2Stream() = default;
  // The request's bytes as HTTP/1.1; eof after its end, connection_reset
  // once the stream is gone.
  virtual void read_some(net::mutable_buffer into, Handler h) = 0;
  // What is already here, taken at once without a handler (its head, when
  // its Session starts): the bytes copied into `into`.
  virtual std::size_t read_buffered(net::mutable_buffer into) = 0;
  // The response's bytes as HTTP/1.1 (heads, chunked or sized bodies, 1xx).
  virtual void write_some(const Pieces& pieces, Handler h) = 0;
  virtual void cancel() = 0;
  // Ends the stream: whole (END_STREAM after its last byte) or, when the
  // response is not whole, reset.
  virtual void close(bool graceful) = 0;
  virtual bool gone() const = 0;
  virtual SSL* ssl() const = 0;                      // its connection's, while that lasts
  virtual std::string_view tls_version() const = 0;  // its connection's ("TLSv1.3"), or empty
  virtual std::string_view client() const = 0;
  // The Session reading it: told (its deadline set to now) when the stream
  // goes while it waits on something else (a seat, an upstream).
  virtual void watch(Tracked* session) = 0;
};

// HTTP/2 on an accepted connection (after its TLS handshake agreed h2, or
// after `preread`, the start of an h2c preface, was read from it).
void start_h2(Worker& worker, Stream stream, std::string_view preread, std::string_view client);

// A Session for one stream (proxy/session.cpp).
// `closed`: a socket never opened, which the stream's Stream is moved from
// (it stays closed and usable): an HTTP/2 stream has no socket of its own,
// and a move costs no lookup of Asio's socket service.
void start_stream_session(Worker& worker, std::shared_ptr<H2Stream> stream, Socket& closed);

}  // namespace sluice::proxy
