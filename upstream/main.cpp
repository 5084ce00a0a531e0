// sluice-upstream: a fast, well-behaved HTTP/1.1 upstream for the demo, the end-to-end tests
// and the benchmarks. See upstream/server.hpp for the endpoints' home.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "upstream/server.hpp"

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr std::string_view kUsage =
    "usage: sluice-upstream [--listen HOST:PORT] [--threads N] [--capacity C] [--over-capacity "
    "429|queue]\n"
    "                       [--service-ms S] [--keepalive-ms K]\n"
    "  --listen HOST:PORT  address to bind (default 127.0.0.1:0, a free port)\n"
    "  --threads N         I/O threads, one io_context each (default 1)\n"
    "  --capacity C        requests in flight before the over-capacity shape applies (default 0, "
    "unlimited)\n"
    "  --over-capacity X   above C in flight: 429 answers 429 with Retry-After: 1 at once (the "
    "default);\n"
    "                      queue makes the request wait, first come first served, for a slot\n"
    "  --service-ms S      extra time before each response except /sse and /stats (default 0)\n"
    "  --keepalive-ms K    close a keep-alive connection idle this long (default 120000)\n"
    "endpoints: /echo /headers /slow?ms=N /sse?n=N&interval_ms=M[&echo=HEADER] "
    "/status/NNN[?ratelimit=LIMIT,REMAINING,RESET&retry_after=S] /drop[?reset=1] "
    "/raw?kind=bad_status|two_lengths|short_length|short_chunked|sse_reset\n"
    "           /large?bytes=N[&chunked=1] /stats[?reset_max=1] /ws (upgrade, then echo), anything "
    "else answers "
    "\"ok\"\n"
    "           (/sse with echo=HEADER: the first event's data is that request header's value)\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "sluice-upstream: %s\n%s", message.c_str(), kUsage.data());
  std::exit(2);
}

template <class T>
T parse_number(std::string_view flag, std::string_view text, T min, T max) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max) {
    usage_error(std::string(flag) + ": expected a number from " + std::to_string(min) + " to " +
                std::to_string(max) + ", got '" + std::string(text) + "'");
  }
  return value;
}

// "HOST:PORT" or "[V6]:PORT"; "localhost" means the IPv4 loopback.
void parse_listen(std::string_view text, sluice::upstream::Options& options) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) usage_error("--listen: expected HOST:PORT");
  auto host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  options.host = host == "localhost" ? "127.0.0.1" : std::string(host);
  options.port = parse_number<std::uint16_t>("--listen", text.substr(colon + 1), 0, 65535);
}

sluice::upstream::Options parse_args(int argc, char** argv) {
  sluice::upstream::Options options;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage.data(), stdout);
      std::exit(0);
    }
    std::string_view value;
    if (const auto eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(std::string(arg) + ": missing value");
    }
    if (arg == "--listen") {
      parse_listen(value, options);
    } else if (arg == "--threads") {
      options.threads = parse_number<int>(arg, value, 1, 1024);
    } else if (arg == "--capacity") {
      options.capacity = parse_number<std::uint64_t>(arg, value, 0, UINT64_MAX);
    } else if (arg == "--over-capacity") {
      if (value == "queue") {
        options.queue_over_capacity = true;
      } else if (value == "429") {
        options.queue_over_capacity = false;
      } else {
        usage_error("--over-capacity: expected 429 or queue, got '" + std::string(value) + "'");
      }
    } else if (arg == "--keepalive-ms") {
      options.keepalive =
          std::chrono::milliseconds(parse_number<std::int64_t>(arg, value, 1, 86'400'000));
    } else if (arg == "--service-ms") {
      options.service_time =
          std::chrono::milliseconds(parse_number<std::int64_t>(arg, value, 0, 86'400'000));
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  return options;
}

std::string format_endpoint(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address().to_string();
  const auto port = std::to_string(endpoint.port());
  return endpoint.address().is_v6() ? "[" + address + "]:" + port : address + ":" + port;
}

}  // namespace

int main(int argc, char** argv) {
  // Writes to a vanished client must fail with EPIPE, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);

  // Declared before the contexts: sessions destroyed with them still touch the counters.
  sluice::upstream::Shared shared;
  shared.options = parse_args(argc, argv);

  boost::system::error_code ec;
  const auto address = net::ip::make_address(shared.options.host, ec);
  if (ec) usage_error("--listen: '" + shared.options.host + "' is not an IP address");

  std::vector<std::unique_ptr<net::io_context>> contexts;
  std::vector<net::io_context*> pointers;
  for (int i = 0; i < shared.options.threads; ++i) {
    contexts.push_back(std::make_unique<net::io_context>(1));
    pointers.push_back(contexts.back().get());
  }

  std::shared_ptr<sluice::upstream::Listener> listener;
  try {
    listener = std::make_shared<sluice::upstream::Listener>(
        pointers, tcp::endpoint(address, shared.options.port), shared);
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "sluice-upstream: cannot listen on %s: %s\n",
                 format_endpoint(tcp::endpoint(address, shared.options.port)).c_str(),
                 e.code().message().c_str());
    return 1;
  }
  const auto local = listener->local_endpoint();
  shared.port_text = std::to_string(local.port());
  std::fprintf(stderr, "sluice-upstream: listening on %s\n", format_endpoint(local).c_str());
  std::fflush(stderr);

  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  for (auto& context : contexts) guards.push_back(net::make_work_guard(*context));

  std::optional<net::signal_set> signals(std::in_place, *contexts.front(), SIGINT, SIGTERM);
  signals->async_wait([&](boost::system::error_code, int) {
    listener->stop();
    for (auto& context : contexts) context->stop();
  });

  listener->run();
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < contexts.size(); ++i) {
    threads.emplace_back([context = contexts[i].get()] { context->run(); });
  }
  contexts.front()->run();
  for (auto& thread : threads) thread.join();

  // The acceptor lives on the first context and its pending accept holds a socket of another
  // context: drop the listener first, then destroy the contexts from the first onward.
  guards.clear();
  signals.reset();
  // Queued requests hold their sessions, whose sockets belong to the contexts.
  std::deque<std::function<void()>> waiters;
  {
    std::lock_guard lock(shared.slot_queue.mutex);
    waiters.swap(shared.slot_queue.waiters);
  }
  waiters.clear();
  listener.reset();
  for (auto& context : contexts) context.reset();
  return 0;
}
