#include "proxy/upstream_pool.hpp"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdio>

#include "proxy/runtime.hpp"
#include "proxy/stream_io.hpp"

namespace sluice::proxy {

namespace {
class UpstreamTlsCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sluice.upstream_tls"; }
  std::string message(int v) const override {
    return "TLS handshake to the upstream failed: " +
           std::string(to_string(static_cast<TlsResult>(v)));
  }
};
}  // namespace

const boost::system::error_category& upstream_tls_category() {
  static const UpstreamTlsCategory category;
  return category;
}

std::string upstream_authority(const config::Upstream& u, const config::Endpoint& host) {
  // https:// on 443: the name alone, as a client reaching it would send.
  if (u.tls && host.port == 443)
    return host.host.find(':') != std::string::npos ? "[" + host.host + "]" : host.host;
  return host.str();
}

// ---- UpstreamConnection ----

void UpstreamConnection::on_deadline() {
  connect_timed_out = true;
  boost::system::error_code ignored;
  stream.socket().close(ignored);
}

// ---- UpstreamPool ----

UpstreamPool::UpstreamPool(Worker& worker, std::size_t index, std::size_t max_connections,
                           std::chrono::milliseconds eject_base,
                           std::chrono::milliseconds eject_max)
    : worker_(worker), index_(index), hosts_(0, eject_base, eject_max), max_(max_connections) {
  idle_.reserve(max_);
  const auto& u = worker.config().upstreams[index];
  for (const auto& h : u.hosts) authority_.push_back(upstream_authority(u, h));
}

std::size_t UpstreamPool::add_host(const HostEntry& e) {
  std::size_t slot = hosts_.add(e.healthy);
  if (slot == endpoints_.size()) {
    endpoints_.push_back(e.endpoint);
    target_.push_back(e.target);
    sessions_.emplace_back();
  } else {
    endpoints_[slot] = e.endpoint;
    target_[slot] = e.target;
    sessions_[slot].set(nullptr);  // another address: its session would not resume
  }
  return slot;
}

void UpstreamPool::update(const std::vector<HostEntry>& hosts, Clock::time_point retry_at) {
  retry_at_ = retry_at;
  auto listed = [&](std::size_t slot) -> const HostEntry* {
    for (const auto& e : hosts)
      if (e.endpoint == endpoints_[slot] && e.target == target_[slot]) return &e;
    return nullptr;
  };
  for (std::size_t slot = 0; slot < endpoints_.size(); ++slot) {
    if (!hosts_[slot].present) continue;
    if (const auto* e = listed(slot)) {
      hosts_.set_healthy(slot, e->healthy);
      continue;
    }
    hosts_.remove(slot);  // gone: no new request; its idle connections close now
    close_idle(slot);
  }
  for (const auto& e : hosts) {
    bool known = false;
    for (std::size_t slot = 0; slot < endpoints_.size() && !known; ++slot)
      known = hosts_[slot].present && endpoints_[slot] == e.endpoint && target_[slot] == e.target;
    if (!known) add_host(e);
  }
}

UpstreamPool::~UpstreamPool() { waiters_.clear(); }

namespace {
// A connection idle this long may have been closed by the upstream meanwhile;
// one peek (a system call only for such connections, never under steady load)
// finds out before a request is written into it.
constexpr auto kCheckIdleAfter = std::chrono::milliseconds(500);

bool still_open(Socket& s) {
  char c;
  ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // open, and nothing unasked-for
}
}  // namespace

void UpstreamPool::acquire(PoolWaiter& w, Clock::time_point now) {
  w.wait_start = now;
  const std::size_t host = hosts_.choose(now, worker_.rng(), w.avoid_host);
  if (host == HostSet::kNoHost) {
    no_host(w);
    return;
  }
  // The chosen host's newest idle connection (with one host: the newest, at the back).
  for (std::size_t i = w.fresh ? 0 : idle_.size(); i-- > 0;) {
    if (idle_[i]->host != host) continue;
    auto c = std::move(idle_[i]);
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
    if ((w.must_check || now - c->idle_since >= kCheckIdleAfter) &&
        !still_open(c->stream.socket())) {
      closed(1);
      continue;
    }
    hosts_.bind(host);
    w.on_connection(std::move(c), {});  // the caller is w itself: no need to go round the queue
    return;
  }
  if (open_ >= max_ && !idle_.empty()) {
    // The pool is full and the chosen host has nothing idle: the oldest idle
    // connection (another host's) makes room, or connections placed while a
    // host was ejected would keep the traffic away from it for good.
    idle_.erase(idle_.begin());
    closed(1);
  }
  if (open_ < max_) {
    connect_to(w, host);
    return;
  }
  waiters_.push_back(w);
  bump(worker_.stats().upstream[index_].waiting, std::int64_t{1});
  note_oldest();
}

void UpstreamPool::closed(std::size_t n) {
  open_ -= n;
  bump(worker_.stats().upstream[index_].connections, -static_cast<std::int64_t>(n));
}

void UpstreamPool::serve_next() {
  if (waiters_.empty() || open_ >= max_) return;
  auto& w = waiters_.front();
  cancel(w);
  connect_for(w);
}

void UpstreamPool::note_oldest() {
  std::int64_t since = 0;
  if (!waiters_.empty()) since = to_ns(waiters_.front().wait_start);
  worker_.stats().upstream[index_].oldest_waiting_since_ns.store(since, std::memory_order_relaxed);
}

bool UpstreamPool::cancel(PoolWaiter& w) {
  if (!w.wait_hook.is_linked()) return false;
  w.wait_hook.unlink();
  bump(worker_.stats().upstream[index_].waiting, std::int64_t{-1});
  note_oldest();
  return true;
}

void UpstreamPool::hand(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c,
                        boost::system::error_code ec) {
  // Always through the queue: the waiter's continuation never runs inside the
  // caller's handler, whichever session that is.
  net::post(worker_.ioc(),
            [&w, c = std::move(c), ec]() mutable { w.on_connection(std::move(c), ec); });
}

void UpstreamPool::connect_for(PoolWaiter& w) {
  auto host = hosts_.choose(Clock::now(), worker_.rng());
  if (host == HostSet::kNoHost) return no_host(w);
  connect_to(w, host);
}

void UpstreamPool::no_host(PoolWaiter& w) { hand(w, nullptr, net::error::host_not_found); }

void UpstreamPool::connect_to(PoolWaiter& w, std::size_t host) {
  ++open_;
  bump(worker_.stats().upstream[index_].connections, std::int64_t{1});
  hosts_.bind(host);  // the request is bound to the host from now on
  auto c = std::make_unique<UpstreamConnection>(worker_.ioc(), host);
  c->address = show(endpoints_[host]);
  c->eject_epoch = hosts_.epoch(host);
  c->deadline = Clock::now() + worker_.config().connect_timeout;
  worker_.track(*c);
  auto* raw = c.get();
  raw->stream.socket().async_connect(
      endpoints_[host],
      [this, &w, c = std::move(c), started = Clock::now()](boost::system::error_code ec) mutable {
        c->unlink();
        c->deadline = Clock::time_point::max();
        const bool connected = !ec;
        if (connected) {
          hosts_.connected(c->host);
          c->stream.socket().set_option(tcp::no_delay(true), ec);
          if (!ec) {
            c->connect_time = Clock::now() - started;
            worker_.stats().upstream[index_].connect.observe(
                std::chrono::duration<double>(c->connect_time).count());
            if (worker_.config().upstreams[index_].tls) {
              handshake(w, std::move(c));
              return;
            }
            w.on_connection(std::move(c), {});
            return;
          }
        }
        if (c->connect_timed_out) ec = net::error::timed_out;
        bump(worker_.stats().upstream[index_].connect_failures);
        if (!connected && hosts_.connect_failed(c->host, c->eject_epoch, Clock::now()))
          bump(worker_.stats().upstream[index_].host_ejections);
        failed(w, std::move(c), ec);
      });
}

void UpstreamPool::failed(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c,
                          boost::system::error_code ec) {
  hosts_.unbind(c->host);
  c.reset();
  closed(1);
  w.on_connection(nullptr, ec);
  serve_next();  // the slot freed here may serve someone queued behind
}

void UpstreamPool::handshake(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c) {
  c->stream.start_tls(*worker_.runtime().upstream_tls);
  tls::prepare_client(c->stream.ssl(),
                      worker_.config().upstreams[index_].hosts[target_[c->host]].host,
                      sessions_[c->host]);
  c->deadline = Clock::now() + worker_.config().connect_timeout;
  worker_.track(*c);
  auto* raw = c.get();
  raw->stream.async_handshake(false, [this, &w, c = std::move(c), started = Clock::now()](
                                         boost::system::error_code ec) mutable {
    c->unlink();
    c->deadline = Clock::time_point::max();
    auto& st = worker_.stats().upstream[index_];
    if (!ec) {
      c->tls_time = Clock::now() - started;
      st.tls_handshake.observe(std::chrono::duration<double>(c->tls_time).count());
      bool resumed = SSL_session_reused(c->stream.ssl()) == 1;
      bump(st.tls_handshakes[static_cast<std::size_t>(resumed ? TlsResult::resumed
                                                              : TlsResult::full)]);
      w.on_connection(std::move(c), {});
      return;
    }
    auto failure =
        tls::classify(ec.value(), ec.category() == net::error::get_ssl_category(), c->stream.ssl());
    auto result = c->connect_timed_out ? TlsResult::timeout : tls_result(failure.reason);
    bump(st.tls_handshakes[static_cast<std::size_t>(result)]);
    note_tls_failure(
        c->host, c->connect_timed_out ? "no handshake within the connect timeout" : failure.detail);
    failed(w, std::move(c), {static_cast<int>(result), upstream_tls_category()});
  });
}

void UpstreamPool::note_tls_failure(std::size_t host, const std::string& detail) {
  // A log line naming the host and OpenSSL's reason, at most one a second.
  auto now = Clock::now();
  if (now - last_tls_log_ < std::chrono::seconds(1)) return;
  last_tls_log_ = now;
  std::fprintf(stderr, "sluice: upstream %s host %s (%s): TLS handshake failed: %s\n",
               worker_.config().upstreams[index_].name.c_str(),
               worker_.config().upstreams[index_].hosts[target_[host]].str().c_str(),
               show(endpoints_[host]).c_str(), detail.c_str());
}

void UpstreamPool::release(std::unique_ptr<UpstreamConnection> c, bool reusable) {
  // A connection to a host that went is not kept or handed on: it closes.
  if (reusable && hosts_[c->host].present &&
      !worker_.runtime().draining.load(std::memory_order_relaxed)) {
    ++c->uses;
    if (!waiters_.empty() && !waiters_.front().fresh) {
      // Handed on at once: the host keeps this request's place in flight.
      auto& w = waiters_.front();
      cancel(w);
      hand(w, std::move(c), {});
      return;
    }
    if (waiters_.empty()) {
      hosts_.unbind(c->host);
      c->idle_since = Clock::now();
      idle_.push_back(std::move(c));
      return;
    }
    // The next waiter wants a new connection: this one makes room for it.
  }
  hosts_.unbind(c->host);
  c.reset();
  closed(1);
  serve_next();
}

bool UpstreamPool::all_hosts_ejected(Clock::time_point now) const {
  return hosts_.all_ejected(now);
}

std::vector<UpstreamPool::HostView> UpstreamPool::hosts_view(Clock::time_point now) const {
  std::vector<HostView> out;
  out.reserve(hosts_.size());
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    const auto& h = hosts_[i];
    if (!h.present) continue;
    std::string address = show(endpoints_[i]);
    const bool ejected = hosts_.ejected(i, now);
    out.push_back(HostView{
        std::move(address), static_cast<int>(h.in_flight), ejected, h.healthy,
        ejected ? std::chrono::duration<double>(h.ejected_until - now).count() : 0.0, h.failures});
  }
  return out;
}

void UpstreamPool::sweep(Clock::time_point now) {
  // idle_ is ordered by idle_since: the oldest are at the front.
  auto limit = worker_.config().upstream_idle_timeout;
  std::size_t n = 0;
  while (n < idle_.size() && now - idle_[n]->idle_since >= limit) ++n;
  if (n == 0) return;
  idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(n));
  closed(n);
}

void UpstreamPool::close_idle() {
  closed(idle_.size());
  idle_.clear();
}

void UpstreamPool::close_idle(std::size_t host) {
  auto dead =
      std::remove_if(idle_.begin(), idle_.end(), [host](const auto& c) { return c->host == host; });
  closed(static_cast<std::size_t>(idle_.end() - dead));
  idle_.erase(dead, idle_.end());
}

}  // namespace sluice::proxy
