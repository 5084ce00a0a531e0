// sluice-upstream: a fast, well-behaved HTTP/1.1 upstream for the demo, the end-to-end tests
// and the benchmarks. See upstream/server.hpp for the endpoints' home.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
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
    "                       [--capacity-schedule T:C,...] [--service-ms S] [--keepalive-ms K]\n"
    "                       [--sse-first-ms F]\n"
    "  --listen HOST:PORT  address to bind (default 127.0.0.1:0, a free port)\n"
    "  --threads N         I/O threads, one io_context each (default 1)\n"
    "  --capacity C        requests in flight before the over-capacity shape applies (default 0, "
    "unlimited)\n"
    "  --over-capacity X   above C in flight: 429 answers 429 with Retry-After: 1 at once (the "
    "default);\n"
    "                      queue makes the request wait, first come first served, for a slot\n"
    "  --capacity-schedule T1:C1,T2:C2,...\n"
    "                      the capacity becomes Ci from Ti seconds (decimals allowed) after the\n"
    "                      first request served (not /stats) on, --capacity before T1; times\n"
    "                      increase, Ci >= 1. With --capacity 8, 10:4,20:8 means 8 slots, 4\n"
    "                      from 10 s, 8 again from 20 s. /stats reports the capacity in force\n"
    "                      and schedule_ms (since that first request; null before it)\n"
    "  --service-ms S      extra time before each response except /sse and /stats (default 0)\n"
    "  --sse-first-ms F    /sse's first event F ms after its head (default: its interval)\n"
    "  --keepalive-ms K    close a keep-alive connection idle this long (default 120000)\n"
    "endpoints: /echo /headers /slow?ms=N /sse?n=N&interval_ms=M[&echo=HEADER] "
    "/status/NNN[?ratelimit=LIMIT,REMAINING,RESET&retry_after=S] /drop[?reset=1] "
    "/raw?kind=bad_status|two_lengths|short_length|to_close|short_chunked|sse_reset\n"
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

// "T1:C1,T2:C2,...": capacity Ci from Ti seconds (decimals allowed) after the first request.
std::vector<sluice::upstream::CapacityChange> parse_schedule(std::string_view text) {
  const auto bad = [text](const std::string& what) {
    usage_error("--capacity-schedule: " + what + " in '" + std::string(text) +
                "' (expected T1:C1,T2:C2,...: capacity Ci from Ti seconds after the first "
                "request, Ti increasing and above 0, Ci at least 1; e.g. 10:4,20:8)");
  };
  std::vector<sluice::upstream::CapacityChange> changes;
  for (std::string_view rest = text;;) {
    const auto comma = rest.find(',');
    const auto entry = rest.substr(0, comma);
    const auto colon = entry.find(':');
    if (colon == std::string_view::npos) bad("'" + std::string(entry) + "' is not T:C");
    const auto time = entry.substr(0, colon);
    const auto cap = entry.substr(colon + 1);
    double seconds = 0;
    const auto [time_end, time_ec] =
        std::from_chars(time.data(), time.data() + time.size(), seconds);
    if (time.empty() || time_ec != std::errc{} || time_end != time.data() + time.size() ||
        !(seconds > 0) || seconds > 86'400'000) {
      bad("'" + std::string(time) + "' is not a time in seconds above 0");
    }
    std::uint64_t capacity = 0;
    const auto [cap_end, cap_ec] = std::from_chars(cap.data(), cap.data() + cap.size(), capacity);
    if (cap.empty() || cap_ec != std::errc{} || cap_end != cap.data() + cap.size() ||
        capacity == 0) {
      bad("'" + std::string(cap) + "' is not a capacity of at least 1");
    }
    const auto at = std::chrono::milliseconds(std::llround(seconds * 1000));
    if (at.count() == 0) bad("'" + std::string(time) + "' rounds to 0 ms");
    if (!changes.empty() && at <= changes.back().at) {
      bad("the times do not increase at '" + std::string(entry) + "'");
    }
    changes.push_back({at, capacity});
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return changes;
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
    } else if (arg == "--capacity-schedule") {
      options.capacity_schedule = parse_schedule(value);
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
    } else if (arg == "--sse-first-ms") {
      options.sse_first =
          std::chrono::milliseconds(parse_number<std::int64_t>(arg, value, 0, 86'400'000));
    } else if (arg == "--service-ms") {
      options.service_time =
          std::chrono::milliseconds(parse_number<std::int64_t>(arg, value, 0, 86'400'000));
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (!options.capacity_schedule.empty() && options.capacity == 0) {
    usage_error("--capacity-schedule needs --capacity C, the capacity until its first change");
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
  shared.capacity.configure(shared.options.capacity, shared.options.capacity_schedule);

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

  // Wakes at each change of the capacity schedule, from its first request on.
  std::optional<net::steady_timer> schedule_timer;
  std::function<void()> arm_schedule;
  if (shared.capacity.scheduled()) {
    schedule_timer.emplace(*contexts.front());
    arm_schedule = [&] {
      const auto next = shared.capacity.next_change();
      if (!next) return;
      schedule_timer->expires_at(*next);
      schedule_timer->async_wait([&](boost::system::error_code wait_ec) {
        if (wait_ec) return;
        sluice::upstream::apply_capacity_schedule(shared);
        arm_schedule();
      });
    };
    shared.capacity.on_start = [&] { net::post(*contexts.front(), [&] { arm_schedule(); }); };
  }

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
  schedule_timer.reset();
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
