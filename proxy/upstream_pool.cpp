#include "proxy/upstream_pool.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <sys/socket.h>

#include <cerrno>

#include "proxy/runtime.hpp"

namespace sluice::proxy {

// ---- UpstreamConnection ----

void UpstreamConnection::on_deadline() {
  connect_timed_out = true;
  boost::system::error_code ignored;
  socket.close(ignored);
}

// ---- UpstreamPool ----

UpstreamPool::UpstreamPool(Worker& worker, std::size_t index, std::vector<tcp::endpoint> hosts,
                           std::size_t max_connections, std::chrono::milliseconds eject_base,
                           std::chrono::milliseconds eject_max)
    : worker_(worker),
      index_(index),
      max_(max_connections),
      eject_base_(eject_base),
      eject_max_(std::max(eject_base, eject_max)) {
  hosts_.reserve(hosts.size());
  for (auto& e : hosts) hosts_.push_back(Host{e});
  idle_.reserve(max_);
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

std::size_t UpstreamPool::choose(Clock::time_point now, std::size_t avoid) {
  const std::size_t n = hosts_.size();
  if (n == 1) return 0;
  // A replay avoids the host that just failed it, while another is eligible.
  auto ok = [&](std::size_t i) { return hosts_[i].ejected_until <= now && i != avoid; };
  std::size_t eligible = 0;
  for (std::size_t i = 0; i < n; ++i) eligible += ok(i);
  if (eligible == 0 && avoid < n) return choose(now, kNoHost);
  if (eligible == 0) {
    // Every host is ejected: the one back soonest gets the attempt.
    std::size_t best = 0;
    for (std::size_t i = 1; i < n; ++i)
      if (hosts_[i].ejected_until < hosts_[best].ejected_until) best = i;
    return best;
  }
  // The k-th eligible host (k < eligible).
  auto nth = [&](std::size_t k) {
    if (eligible == n) return k;
    for (std::size_t i = 0;; ++i)
      if (ok(i) && k-- == 0) return i;
  };
  if (eligible == 1) return nth(0);
  // Two distinct eligible hosts, drawn as an ordered pair: a is uniform, so
  // keeping a on a tie breaks ties at random.
  auto r = worker_.rng().next();
  std::size_t a = static_cast<std::size_t>(r & 0xFFFFFFFFu) % eligible;
  std::size_t b = static_cast<std::size_t>(r >> 32) % (eligible - 1);
  if (b >= a) ++b;
  a = nth(a);
  b = nth(b);
  return hosts_[b].in_flight < hosts_[a].in_flight ? b : a;
}

void UpstreamPool::acquire(PoolWaiter& w) {
  auto now = Clock::now();
  w.wait_start = now;
  const std::size_t host = choose(now, w.avoid_host);
  // The chosen host's newest idle connection (with one host: the newest, at the back).
  for (std::size_t i = w.fresh ? 0 : idle_.size(); i-- > 0;) {
    if (idle_[i]->host != host) continue;
    auto c = std::move(idle_[i]);
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
    if ((w.must_check || now - c->idle_since >= kCheckIdleAfter) && !still_open(c->socket)) {
      closed(1);
      continue;
    }
    ++hosts_[host].in_flight;
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
  net::post(worker_.ioc(), [&w, c = std::move(c), ec]() mutable {
    w.on_connection(std::move(c), ec);
  });
}

void UpstreamPool::connect_for(PoolWaiter& w) { connect_to(w, choose(Clock::now())); }

void UpstreamPool::connect_to(PoolWaiter& w, std::size_t host) {
  ++open_;
  bump(worker_.stats().upstream[index_].connections, std::int64_t{1});
  auto& h = hosts_[host];
  ++h.in_flight;  // the request is bound to the host from now on
  auto c = std::make_unique<UpstreamConnection>(worker_.ioc(), host);
  c->eject_epoch = h.ejections;
  c->deadline = Clock::now() + worker_.config().connect_timeout;
  worker_.track(*c);
  auto* raw = c.get();
  raw->socket.async_connect(
      h.endpoint, [this, &w, c = std::move(c)](boost::system::error_code ec) mutable {
        c->unlink();
        c->deadline = Clock::time_point::max();
        const bool connected = !ec;
        if (connected) {
          auto& host = hosts_[c->host];
          host.failures = 0;
          host.ejected_until = {};
          c->socket.set_option(tcp::no_delay(true), ec);
          if (!ec) {
            w.on_connection(std::move(c), {});
            return;
          }
        }
        if (c->connect_timed_out) ec = net::error::timed_out;
        bump(worker_.stats().upstream[index_].connect_failures);
        --hosts_[c->host].in_flight;
        if (!connected) connect_failed(c->host, c->eject_epoch);
        c.reset();
        closed(1);
        w.on_connection(nullptr, ec);
        serve_next();  // the slot freed here may serve someone queued behind
      });
}

void UpstreamPool::connect_failed(std::size_t host, std::uint32_t epoch) {
  auto& h = hosts_[host];
  if (epoch != h.ejections) return;  // begun before the host's latest ejection: counted already
  ++h.failures;
  auto backoff = eject_base_;
  for (std::uint32_t i = 1; i < h.failures && backoff < eject_max_ && backoff.count() > 0; ++i)
    backoff *= 2;
  backoff = std::min(backoff, eject_max_);
  h.ejected_until = Clock::now() + backoff;
  ++h.ejections;
  bump(worker_.stats().upstream[index_].host_ejections);
}

void UpstreamPool::release(std::unique_ptr<UpstreamConnection> c, bool reusable) {
  if (reusable && !worker_.runtime().draining.load(std::memory_order_relaxed)) {
    ++c->uses;
    if (!waiters_.empty() && !waiters_.front().fresh) {
      // Handed on at once: the host keeps this request's place in flight.
      auto& w = waiters_.front();
      cancel(w);
      hand(w, std::move(c), {});
      return;
    }
    if (waiters_.empty()) {
      --hosts_[c->host].in_flight;
      c->idle_since = Clock::now();
      idle_.push_back(std::move(c));
      return;
    }
    // The next waiter wants a new connection: this one makes room for it.
  }
  --hosts_[c->host].in_flight;
  c.reset();
  closed(1);
  serve_next();
}

bool UpstreamPool::all_hosts_ejected(Clock::time_point now) const {
  for (const auto& h : hosts_)
    if (h.ejected_until <= now) return false;
  return true;
}

std::vector<UpstreamPool::HostView> UpstreamPool::hosts_view(Clock::time_point now) const {
  std::vector<HostView> out;
  out.reserve(hosts_.size());
  for (const auto& h : hosts_) {
    const auto& addr = h.endpoint.address();
    std::string address = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
    address += ':';
    address += std::to_string(h.endpoint.port());
    const bool ejected = now < h.ejected_until;
    out.push_back(HostView{std::move(address), static_cast<int>(h.in_flight), ejected,
                           ejected ? std::chrono::duration<double>(h.ejected_until - now).count()
                                   : 0.0,
                           h.failures});
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
  auto dead = std::remove_if(idle_.begin(), idle_.end(), [host](const auto& c) { return c->host == host; });
  closed(static_cast<std::size_t>(idle_.end() - dead));
  idle_.erase(dead, idle_.end());
}

}  // namespace sluice::proxy
