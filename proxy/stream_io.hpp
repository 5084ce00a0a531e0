#pragma once
// Stream's asynchronous operations (proxy/stream.hpp), and its TLS half.
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <utility>

#include "proxy/stream.hpp"

namespace sluice::proxy {

struct TlsLayer {
  TlsLayer(Socket s, net::ssl::context& ctx) : stream(std::move(s), ctx) {}
  boost::beast::ssl_stream<Socket> stream;
};

template <class MutableBuffers, class Handler>
void Stream::async_read_some(const MutableBuffers& buffers, Handler&& handler) {
  if (tls_)
    tls_->stream.async_read_some(buffers, std::forward<Handler>(handler));
  else
    plain_.async_read_some(buffers, std::forward<Handler>(handler));
}

template <class ConstBuffers, class Handler>
void Stream::async_write_some(const ConstBuffers& buffers, Handler&& handler) {
  if (tls_)
    tls_->stream.async_write_some(buffers, std::forward<Handler>(handler));
  else
    plain_.async_write_some(buffers, std::forward<Handler>(handler));
}

template <class Handler>
void Stream::async_handshake(bool as_server, Handler&& handler) {
  using Kind = net::ssl::stream_base::handshake_type;
  tls_->stream.async_handshake(as_server ? Kind::server : Kind::client,
                               std::forward<Handler>(handler));
}

}  // namespace sluice::proxy
