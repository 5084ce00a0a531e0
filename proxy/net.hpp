#pragma once
// The Asio names the proxy uses.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace sluice::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;
// Sockets bound to an io_context's own executor: no type-erased executor to
// copy on every asynchronous operation.
using Socket = net::basic_stream_socket<tcp, net::io_context::executor_type>;

// "address:port", "[v6]:port".
inline std::string show(const tcp::endpoint& ep) {
  auto a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

}  // namespace sluice::proxy
