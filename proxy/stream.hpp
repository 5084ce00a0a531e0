#pragma once
// A connection's byte stream: a TCP socket, TLS over one, or one HTTP/2
// stream of a client connection (proxy/h2.hpp), read as the HTTP/1.1 request
// it carries and written as the HTTP/1.1 response it answers with. The request
// path reads and writes a Stream whichever it is, so HTTP, HTTPS and HTTP/2
// share one code path; only the handshake differs. The TLS half is Beast's ssl_stream (over
// OpenSSL), which also gathers a write's buffers into one TLS record.
//
// This header is light (it is in UpstreamConnection, which the runtime holds):
// the asynchronous operations are defined in proxy/stream_io.hpp, which the files
// that do I/O include.
#include <memory>
#include <string_view>

#include "proxy/net.hpp"

using SSL = struct ssl_st;
namespace boost::asio::ssl {
class context;
}

namespace sluice::proxy {

class H2Stream;   // proxy/h2.hpp
struct TlsLayer;  // proxy/stream_io.hpp
struct TlsLayerDelete {
  void operator()(TlsLayer* t) const noexcept;
};

class Stream {
 public:
  using executor_type = Socket::executor_type;
  explicit Stream(Socket s) : plain_(std::move(s)) {}
  explicit Stream(net::io_context& ioc) : plain_(ioc.get_executor()) {}
  // An HTTP/2 stream's: `closed` is a socket never opened, moved from (it
  // stays closed and usable for the next).
  Stream(Socket& closed, std::shared_ptr<H2Stream> h2);
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  ~Stream();

  // From now on TLS over the socket this holds, with ctx's settings (the
  // handshake is still to do: stream_io.hpp's async_handshake).
  void start_tls(net::ssl::context& ctx);
  SSL* ssl() const;  // nullptr when plain (an HTTP/2 stream's: its connection's)
  H2Stream* h2() const { return h2_.get(); }
  // The TLS version agreed ("TLSv1.3"; an HTTP/2 stream's connection's), or empty.
  std::string_view tls_version() const;
  // The peer is gone: an HTTP/2 stream the client reset or whose connection
  // ended (a socket says so only at its next read or write).
  bool gone() const;

  // Pending reads and writes end with operation_aborted.
  void cancel();
  // Closed now: an HTTP/2 stream whose response is not whole is reset.
  void close();
  // Closed after what was written: a TCP FIN first; an HTTP/2 stream ends
  // its response (reset when it is not whole).
  void shutdown_close();

  Socket& socket() { return tls_ ? tls_socket() : plain_; }
  executor_type get_executor() { return plain_.get_executor(); }

  // The TLS handshake (after start_tls), as the server (the client listener)
  // or as a client (to an upstream): handler(error_code).
  template <class Handler>
  void async_handshake(bool as_server, Handler&& handler);
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler);
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler);

 private:
  Socket& tls_socket();
  Socket plain_;  // the socket while plain; moved into tls_ by start_tls
  std::unique_ptr<TlsLayer, TlsLayerDelete> tls_;
  std::shared_ptr<H2Stream> h2_;
};

}  // namespace sluice::proxy
