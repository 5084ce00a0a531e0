#pragma once
// A tunnel after a 101 (a WebSocket, or any agreed upgrade): bytes both ways
// between the client and the upstream connection, through one borrowed block
// per direction, until both directions end. It owns both streams. A direction
// that ends cleanly passes its end on (a half close) and lets the other finish;
// an error closes both. Nothing in either direction for SLUICE_SSE_IDLE_TIMEOUT
// closes both.
//
// Threading: the Worker's thread.
#include <cstdint>
#include <functional>
#include <memory>

#include "proxy/exchange.hpp"

namespace sluice::proxy {

class Tunnel final : public Tracked, public std::enable_shared_from_this<Tunnel> {
 public:
  // Called once, when both directions have ended: bytes sent up and down.
  using Done = std::function<void(std::uint64_t up, std::uint64_t down)>;
  // `client_read`: what was read from the client after its head, relayed first
  // (the upstream connection's buffer likewise, the other way).
  static void start(Worker& w, Stream client, boost::beast::flat_buffer client_read,
                    Checkout upstream, Done done);
  Tunnel(Worker& w, Stream client, boost::beast::flat_buffer client_read, Checkout upstream,
         Done done);
  void on_deadline() override;

 private:
  static constexpr std::size_t kUp = 0, kDown = 1;
  void pump(std::size_t dir);
  void write(std::size_t dir, std::size_t n);
  void end(std::size_t dir, boost::system::error_code ec);
  Stream& from(std::size_t dir) { return dir == kUp ? client_ : up_->stream; }
  Stream& to(std::size_t dir) { return dir == kUp ? up_->stream : client_; }
  boost::beast::flat_buffer& read(std::size_t dir) {
    return dir == kUp ? client_read_ : up_->buffer;
  }

  Worker& w_;
  Stream client_;
  boost::beast::flat_buffer client_read_;
  Checkout up_;
  Done done_;
  std::array<BlockPool::Block, 2> blocks_;
  std::array<std::uint64_t, 2> bytes_{};
  int ends_ = 0;
};

}  // namespace sluice::proxy
