#include "proxy/stream_io.hpp"
#include "tls/tls.hpp"

namespace sluice::proxy {

void TlsLayerDelete::operator()(TlsLayer* t) const noexcept {
  tls::closing(t->stream.native_handle());
  delete t;
}

Stream::Stream(Socket& closed, std::shared_ptr<H2Stream> h2)
    : plain_(std::move(closed)), h2_(std::move(h2)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;
Stream::~Stream() = default;

void Stream::start_tls(net::ssl::context& ctx) { tls_.reset(new TlsLayer(std::move(plain_), ctx)); }

SSL* Stream::ssl() const {
  if (h2_) return h2_->ssl();
  return tls_ ? tls_->stream.native_handle() : nullptr;
}

std::string_view Stream::tls_version() const {
  if (h2_) return h2_->tls_version();
  return tls_ ? tls::version(tls_->stream.native_handle()) : std::string_view{};
}

Socket& Stream::tls_socket() { return tls_->stream.next_layer(); }

bool Stream::gone() const { return h2_ && h2_->gone(); }

void Stream::cancel() {
  if (h2_) return h2_->cancel();
  boost::system::error_code ignored;
  socket().cancel(ignored);
}

void Stream::close() {
  if (h2_) return h2_->close(false);
  boost::system::error_code ignored;
  socket().close(ignored);
}

void Stream::shutdown_close() {
  if (h2_) return h2_->close(true);
  boost::system::error_code ignored;
  socket().shutdown(tcp::socket::shutdown_send, ignored);
  socket().close(ignored);
}

}  // namespace sluice::proxy
