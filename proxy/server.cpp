// serve(): resolves upstreams, binds the listeners, starts the I/O threads, the
// watchdog and the admin listener, and runs the drain sequence on SIGTERM.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <system_error>

#include "proxy/admin.hpp"
#include "proxy/directory.hpp"
#include "proxy/redis_link.hpp"
#include "proxy/runtime.hpp"
#include "proxy/serve.hpp"
#include "proxy/ticker.hpp"

namespace sluice::proxy {

using boost::system::error_code;

namespace {

// 10,000 client connections need more descriptors than the usual soft limit.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int open_log(const config::Config& cfg) {
  switch (cfg.access_log) {
    case config::AccessLog::stdout_:
      return STDOUT_FILENO;
    case config::AccessLog::stderr_:
      return STDERR_FILENO;
    case config::AccessLog::off:
      return -1;
    case config::AccessLog::file:
      break;
  }
  int fd = ::open(cfg.access_log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw config::ConfigError("SLUICE_ACCESS_LOG",
                              "cannot open " + cfg.access_log_path + ": " + std::strerror(err));
  }
  return fd;
}

tcp::endpoint bind_endpoint(net::io_context& ioc, const config::Endpoint& e, error_code& ec) {
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(e.host, std::to_string(e.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) return {};
  return results.begin()->endpoint();
}

bool listen_on(tcp::acceptor& a, const tcp::endpoint& ep, std::string_view what, error_code& ec) {
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(4096, ec);
  if (ec)
    std::fprintf(stderr, "sluice: cannot listen on %s for %.*s: %s\n",
                 (ep.address().to_string() + ":" + std::to_string(ep.port())).c_str(),
                 static_cast<int>(what.size()), what.data(), ec.message().c_str());
  return !ec;
}

// Every worker accepts: each has its own descriptor of the one listening
// socket (a dup), in its own io_context, and serves what it accepts. A
// connection waits in the one kernel queue until a worker that runs takes it,
// so a stalled worker takes none and the others accept and serve them all.
// (SO_REUSEPORT's listener per worker would hash a stalled worker's share of
// new connections into its own queue, to wait there.) A new connection wakes
// every waiting worker; one accepts it, the others find nothing: a few cheap
// system calls per connection, not per request. A worker that holds more than
// its share of the open connections (kept-alive ones stay where they were
// accepted) waits a millisecond before it accepts again, so the others take
// the next ones; a stalled worker holds nobody back that way either.
//
// On the HTTPS listener, at the highest level (3) a new connection is closed
// as soon as it is accepted, before it costs a handshake (counted as shed):
// handshakes run on the I/O threads, and the connections already open are
// served first.
class Acceptor {
 public:
  Acceptor(Runtime& rt, Worker& w, tcp::acceptor& listener, bool tls)
      : rt_(rt), w_(w), a_(w.ioc()), backoff_(w.ioc()), tls_(tls) {
    int fd = ::dup(listener.native_handle());
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "dup");
    a_.assign(listener.local_endpoint().protocol(), fd);
  }
  void start() {
    net::post(w_.ioc(), [this] { accept(); });
  }
  // On the drain: stops accepting (posted to the worker's own thread).
  void stop() {
    net::post(w_.ioc(), [this] {
      error_code ignored;
      a_.close(ignored);
    });
  }

 private:
  void accept() {
    a_.async_accept(w_.ioc(), [this](error_code ec, Socket s) {
      if (ec == net::error::operation_aborted || !a_.is_open()) return;
      if (ec) {
        // Out of descriptors or similar: pause instead of spinning.
        backoff_.expires_after(std::chrono::milliseconds(50));
        backoff_.async_wait([this](error_code e) {
          if (!e) accept();
        });
        return;
      }
      if (tls_ && rt_.published.process.level.load(std::memory_order_relaxed) >= 3) {
        bump(w_.stats().tls_shed);
        error_code ignored;
        s.close(ignored);
        accept();
        return;
      }
      auto open = rt_.connections.fetch_add(1, std::memory_order_relaxed) + 1;
      const bool over_max = open > static_cast<std::int64_t>(rt_.config.max_connections);
      // The refuse_connections emergency action: closed at once above its floor.
      const bool over_floor = rt_.published.acting(admission::Action::refuse_connections) &&
                              open > rt_.published.connection_floor.load(std::memory_order_relaxed);
      if (over_max || over_floor) {
        rt_.connections.fetch_sub(1, std::memory_order_relaxed);
        bump(over_max ? w_.stats().connections_refused : w_.stats().emergency_refused);
        error_code ignored;
        s.close(ignored);
      } else {
        start_session(w_, std::move(s), tls_);
      }
      if (over_share(open)) {
        backoff_.expires_after(std::chrono::milliseconds(1));
        backoff_.async_wait([this](error_code e) {
          if (!e) accept();
        });
        return;
      }
      accept();
    });
  }
  // More sessions than the open connections' even share, and one more.
  bool over_share(std::int64_t open) const {
    auto threads = static_cast<std::int64_t>(rt_.workers.size());
    return threads > 1 && w_.active_sessions.load(std::memory_order_relaxed) > open / threads + 1;
  }
  Runtime& rt_;
  Worker& w_;
  tcp::acceptor a_;
  net::steady_timer backoff_;
  bool tls_;
};

// The proxy from start-up to the end of the drain. A start-up error (a name
// that does not resolve, a log that cannot be opened) is a config::ConfigError,
// thrown before any thread starts; serve() prints it.
int start_and_serve(const config::Config& cfg) {
  raise_fd_limit();
  std::signal(SIGPIPE, SIG_IGN);
  Runtime rt(cfg);

  net::io_context admin_ioc{1};
  // The upstreams' names: asked before anything is served (a name that does
  // not answer within a few seconds is served 503 unresolved until it does).
  Directory directory(rt, admin_ioc);
  rt.directory = &directory;
  directory.start(std::chrono::seconds(5));

  int log_fd = open_log(cfg);
  for (int i = 0; i < cfg.threads; ++i)
    rt.workers.push_back(std::make_unique<Worker>(rt, static_cast<std::size_t>(i), log_fd));
  Watchdog watchdog(rt);
  Ticker ticker(rt, watchdog, admin_ioc, log_fd);  // opens SLUICE_TICK_LOG

  error_code ec;
  tcp::endpoint listen_ep, tls_ep;
  if (cfg.plain_listener()) {
    listen_ep = bind_endpoint(admin_ioc, cfg.listen, ec);
    if (ec) throw config::ConfigError("SLUICE_LISTEN", "cannot resolve " + cfg.listen.str());
  }
  if (cfg.tls.on()) {
    tls_ep = bind_endpoint(admin_ioc, cfg.tls.listen, ec);
    if (ec)
      throw config::ConfigError("SLUICE_TLS_LISTEN", "cannot resolve " + cfg.tls.listen.str());
  }
  auto admin_ep = bind_endpoint(admin_ioc, cfg.admin_listen, ec);
  if (ec)
    throw config::ConfigError("SLUICE_ADMIN_LISTEN", "cannot resolve " + cfg.admin_listen.str());
  // The signals are caught from here on: a SIGTERM that arrives as soon as the
  // listeners are announced drains, it does not kill the process.
  net::signal_set hangup(admin_ioc, SIGHUP);
  net::signal_set signals(admin_ioc, SIGTERM, SIGINT);
  tcp::acceptor listener(admin_ioc);  // each worker accepts on its own dup of it
  tcp::acceptor tls_listener(admin_ioc);
  tcp::acceptor admin(admin_ioc);
  if (cfg.plain_listener() && !listen_on(listener, listen_ep, "clients", ec)) return 1;
  if (cfg.tls.on() && !listen_on(tls_listener, tls_ep, "HTTPS clients", ec)) return 1;
  if (!listen_on(admin, admin_ep, "admin", ec)) return 1;
  // "listening on" names the plain listener, or the HTTPS one when it is the only one.
  std::string where;
  if (cfg.plain_listener()) where = show(listener.local_endpoint());
  if (cfg.tls.on())
    where += cfg.plain_listener() ? ", https on " + show(tls_listener.local_endpoint())
                                  : show(tls_listener.local_endpoint()) + " (https only)";
  std::fprintf(stderr, "sluice: listening on %s, admin on %s, %d threads\n", where.c_str(),
               show(admin.local_endpoint()).c_str(), cfg.threads);
  std::fflush(stderr);

  std::vector<std::unique_ptr<Acceptor>> acceptors;
  for (auto& w : rt.workers) {
    if (cfg.plain_listener())
      acceptors.push_back(std::make_unique<Acceptor>(rt, *w, listener, false));
    if (cfg.tls.on()) acceptors.push_back(std::make_unique<Acceptor>(rt, *w, tls_listener, true));
  }
  // The fleet's tenant counts (SLUICE_REDIS_URL), reconciled off the request
  // path; its first round before the first request.
  std::unique_ptr<RedisLink> redis;
  if (cfg.redis.on()) {
    redis = std::make_unique<RedisLink>(rt, admin_ioc);
    rt.redis = redis.get();
    redis->start();
  }
  for (auto& w : rt.workers) w->start();
  watchdog.start();
  ticker.start();
  for (auto& a : acceptors) a->start();
  start_admin(admin, rt, watchdog, ticker);

  // Drain: /readyz turns 503 at once; clients are still accepted for the
  // drain delay (load balancers deregister meanwhile); then the listener
  // closes, idle connections close, SSE streams end cleanly, and in-flight
  // requests get up to the drain timeout.
  // SIGHUP: live reload of the configuration (routes, thresholds, factors,
  // bands) and of the HTTPS listener's certificates.
  std::function<void()> on_hangup = [&] {
    hangup.async_wait([&](error_code e, int) {
      if (e) return;
      ticker.reload("SIGHUP");
      ticker.reload_certificates("SIGHUP");
      on_hangup();
    });
  };
  on_hangup();

  net::steady_timer drain_timer(admin_ioc);
  Clock::time_point drain_deadline{};
  std::function<void()> wait_idle = [&] {
    std::int64_t active = 0;
    for (auto& w : rt.workers) active += w->active_sessions.load();
    if (active == 0 || Clock::now() >= drain_deadline) {
      for (auto& w : rt.workers) w->stop();
      if (redis) redis->stop();
      admin_ioc.stop();
      return;
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([&](error_code e) {
      if (!e) wait_idle();
    });
  };
  signals.async_wait([&](error_code e, int sig) {
    if (e) return;
    std::fprintf(stderr, "sluice: signal %d: draining (delay %lldms, timeout %lldms)\n", sig,
                 static_cast<long long>(cfg.drain_delay.count()),
                 static_cast<long long>(cfg.drain_timeout.count()));
    rt.draining.store(true);
    signals.async_wait([&](error_code e2, int) {
      if (e2) return;
      // A second signal: stop at once.
      for (auto& w : rt.workers) w->stop();
      admin_ioc.stop();
      hangup.cancel();
    });
    drain_timer.expires_after(cfg.drain_delay);
    drain_timer.async_wait([&](error_code e2) {
      if (e2) return;
      for (auto& a : acceptors) a->stop();
      error_code ignored;
      listener.close(ignored);
      tls_listener.close(ignored);
      for (auto& w : rt.workers) net::post(w->ioc(), [&w] { w->begin_drain(); });
      drain_deadline = Clock::now() + cfg.drain_timeout;
      wait_idle();
    });
  });

  admin_ioc.run();
  watchdog.stop();
  for (auto& w : rt.workers) w->join();  // each flushes its access log as it ends
  std::fprintf(stderr, "sluice: stopped\n");
  std::fflush(nullptr);
  // Whatever is left (sessions cut at the drain timeout, pooled connections)
  // belongs to stopped loops; the process ends without unwinding them.
  ::_exit(0);
}

}  // namespace

int serve(const config::Config& cfg) {
  try {
    return start_and_serve(cfg);
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "sluice: config: %s\n", e.what());
    return 2;
  }
}

}  // namespace sluice::proxy
