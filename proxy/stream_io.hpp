#pragma once
// Stream's asynchronous operations (proxy/stream.hpp), and its TLS half.
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <utility>

#include "proxy/h2.hpp"
#include "proxy/stream.hpp"

namespace sluice::proxy {

struct TlsLayer {
  TlsLayer(Socket s, net::ssl::context& ctx) : stream(std::move(s), ctx) {}
  boost::beast::ssl_stream<Socket> stream;
};

template <class MutableBuffers, class Handler>
void Stream::async_read_some(const MutableBuffers& buffers, Handler&& handler) {
  if (h2_) {
    net::mutable_buffer first;
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it)
      if (net::mutable_buffer b(*it); b.size() > 0) {
        first = b;
        break;
      }
    h2_->read_some(first, H2Stream::Handler(std::forward<Handler>(handler)));
  } else if (tls_)
    tls_->stream.async_read_some(buffers, std::forward<Handler>(handler));
  else
    plain_.async_read_some(buffers, std::forward<Handler>(handler));
}

template <class ConstBuffers, class Handler>
void Stream::async_write_some(const ConstBuffers& buffers, Handler&& handler) {
  if (h2_) {
    H2Stream::Pieces pieces;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && pieces.count < pieces.items.size(); ++it)
      if (net::const_buffer b(*it); b.size() > 0) pieces.items[pieces.count++] = b;
    h2_->write_some(pieces, H2Stream::Handler(std::forward<Handler>(handler)));
  } else if (tls_)
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
