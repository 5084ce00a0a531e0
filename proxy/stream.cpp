#include "proxy/stream_io.hpp"
#include "tls/tls.hpp"

namespace sluice::proxy {

void TlsLayerDelete::operator()(TlsLayer* t) const noexcept {
  tls::closing(t->stream.native_handle());
  delete t;
}

void Stream::start_tls(net::ssl::context& ctx) { tls_.reset(new TlsLayer(std::move(plain_), ctx)); }

SSL* Stream::ssl() const { return tls_ ? tls_->stream.native_handle() : nullptr; }

Socket& Stream::tls_socket() { return tls_->stream.next_layer(); }

}  // namespace sluice::proxy
