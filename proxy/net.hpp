#pragma once
// The Asio names the proxy uses.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace sluice::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;
// Sockets bound to an io_context's own executor: no type-erased executor to
// copy on every asynchronous operation.
using Socket = net::basic_stream_socket<tcp, net::io_context::executor_type>;

}  // namespace sluice::proxy
