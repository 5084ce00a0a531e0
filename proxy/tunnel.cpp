#include "proxy/tunnel.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>

#include "proxy/stream_io.hpp"

namespace sluice::proxy {

using boost::system::error_code;

Tunnel::Tunnel(Worker& w, Stream client, boost::beast::flat_buffer client_read, Checkout upstream,
               Done done)
    : w_(w),
      client_(std::move(client)),
      client_read_(std::move(client_read)),
      up_(std::move(upstream)),
      done_(std::move(done)),
      blocks_{w.blocks().get(), w.blocks().get()} {}

void Tunnel::start(Worker& w, Stream client, boost::beast::flat_buffer client_read,
                   Checkout upstream, Done done) {
  auto t = std::make_shared<Tunnel>(w, std::move(client), std::move(client_read),
                                    std::move(upstream), std::move(done));
  w.track(*t);
  t->pump(kUp);
  t->pump(kDown);
}

void Tunnel::on_deadline() {
  error_code ec;
  client_.socket().close(ec);
  up_->stream.socket().close(ec);
}

void Tunnel::pump(std::size_t dir) {
  deadline = Clock::now() + w_.config().sse_idle_timeout;
  char* block = blocks_[dir].get();
  if (auto& left = read(dir); left.size() > 0) {  // read before the switch
    std::size_t n = net::buffer_copy(net::buffer(block, BlockPool::kBlockSize), left.data());
    left.consume(n);
    write(dir, n);
    return;
  }
  from(dir).async_read_some(net::buffer(block, BlockPool::kBlockSize),
                            [self = shared_from_this(), dir](error_code ec, std::size_t n) {
                              if (ec) return self->end(dir, ec);
                              self->write(dir, n);
                            });
}

void Tunnel::write(std::size_t dir, std::size_t n) {
  bytes_[dir] += n;
  net::async_write(to(dir), net::buffer(blocks_[dir].get(), n),
                   [self = shared_from_this(), dir](error_code ec, std::size_t) {
                     if (ec) return self->end(dir, ec);
                     self->pump(dir);
                   });
}

void Tunnel::end(std::size_t dir, error_code ec) {
  error_code ignored;
  if (!ec || ec == net::error::eof) {
    to(dir).socket().shutdown(tcp::socket::shutdown_send, ignored);  // a half close passes on
  } else {
    client_.socket().close(ignored);
    up_->stream.socket().close(ignored);
  }
  if (++ends_ < 2) return;
  client_.socket().close(ignored);
  up_.reset();
  deadline = Clock::time_point::max();
  std::exchange(done_, nullptr)(bytes_[kUp], bytes_[kDown]);
}

}  // namespace sluice::proxy
