#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <random>
#include <string>

#include "proxy/run_loop.hpp"
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

// ---- Runtime ----

Live make_live(const config::Config& c) {
  return Live{c.routes, admission::Gate(c.admission.mode, c.admission.factors), c.admission.retry,
              c.admission.lanes, c.admission.close_statuses};
}

Runtime::Runtime(const config::Config& c) : config(c) {
  generations.push_back(std::make_unique<Live>(make_live(c)));
  for (std::size_t u = 0; u < c.upstreams.size(); ++u)
    gates.push_back(std::make_unique<UpstreamGate>(c.admission.closure));
  if (c.admission.heavy_max_in_flight)
    heavy_cap = std::make_unique<HeavyCap>(static_cast<std::int64_t>(*c.admission.heavy_max_in_flight));
  std::random_device rd;
  auto random64 = [&rd] { return (std::uint64_t{rd()} << 32) ^ rd(); };
  instance = random64();
  const auto& hex = c.admission.lease_key;  // validated: 32 hex digits, or empty
  admission::LeaseKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (hex.size() == 2 * key.size()) {
      std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, key[i], 16);
    } else {
      key[i] = static_cast<std::uint8_t>(rd());
    }
  }
  lease_key = admission::instance_key(key, instance);
}

int Runtime::running_on(std::size_t upstream, const Worker& self) const {
  int running = 0;
  for (const auto& w : workers)
    running += w.get() == &self ? self.bulkhead(upstream).census().total_running()
                                : w->views()[upstream].running;
  return running;
}

std::vector<admission::BulkheadView> Runtime::bulkhead_views() const {
  std::vector<admission::BulkheadView> total(config.upstreams.size());
  for (auto& w : workers) {
    auto views = w->views();
    for (std::size_t u = 0; u < views.size() && u < total.size(); ++u)
      admission::merge_view(total[u], views[u]);
  }
  return total;
}

// ---- Worker ----

namespace {
// One lease slot per connection this thread may hold, and some room.
std::size_t lease_slots(const config::Config& c) {
  return c.max_connections / static_cast<std::size_t>(c.threads) + 64;
}
}  // namespace

Worker::Worker(Runtime& rt, std::size_t index, int log_fd)
    : rt_(rt),
      index_(index),
      heartbeat_(ioc_),
      stats_(rt.config.upstreams.size()),
      log_(log_fd),
      leases_(lease_slots(rt.config)) {
  const auto& cfg = rt.config;
  std::size_t threads = static_cast<std::size_t>(cfg.threads);
  for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
    // This thread's share of the upstream's connections, at least one.
    std::size_t share = std::max<std::size_t>(
        1, cfg.upstream_max_connections / threads +
               (index < cfg.upstream_max_connections % threads ? 1 : 0));
    pools_.push_back(std::make_unique<UpstreamPool>(*this, u, rt.upstream_hosts[u], share,
                                                    cfg.host_eject_base, cfg.host_eject_max));
    // Each thread estimates its own share of the upstream, as each instance of
    // a fleet does; the estimate never passes the connections it may open.
    admission::EstimatePolicy ep = cfg.admission.estimate;
    ep.seed = std::max(1.0, ep.seed / static_cast<double>(threads));
    ep.max = static_cast<double>(share);
    bulkheads_.push_back(std::make_unique<admission::Bulkhead>(
        cfg.admission.lanes, admission::Estimate(ep), rt.heavy_cap.get()));
  }
  views_.resize(cfg.upstreams.size());
  host_views_.resize(cfg.upstreams.size());
  std::random_device rd;
  std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd() ^ (std::uint64_t{index} << 56);
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) id_prefix_[i] = kHex[(r >> (i * 4)) & 15];
  live_ = rt.generations.back().get();
  // The gate's draws: seeded per thread, so a run can be repeated.
  rng_ = admission::Rng(0x5eed0000ull + index);
}

Worker::~Worker() {
  log_.flush();
  pools_.clear();
}

const config::Config& Worker::config() const { return rt_.config; }

void Worker::set_live(const Live* live) {
  live_ = live;
  for (auto& b : bulkheads_) b->set_lanes(live->lanes);
}

void Worker::note_heavy() {
  std::optional<admission::Micros> youngest;
  for (auto& b : bulkheads_)
    if (auto y = b->youngest(admission::Lane::heavy); y && (!youngest || *y > *youngest)) youngest = y;
  youngest_heavy_us.store(youngest ? youngest->count() : -1, std::memory_order_relaxed);
}

char* Worker::request_id(char* out) {
  // 16 hex digits unique to this thread and run, then 8 of a counter.
  static constexpr char kHex[] = "0123456789abcdef";
  std::memcpy(out, id_prefix_, 16);
  std::uint64_t n = ++id_seq_;
  for (int i = 7; i >= 0; --i) {
    out[16 + i] = kHex[n & 15];
    n >>= 4;
  }
  return out + kRequestIdLen;
}

void Worker::start() {
  auto now = Clock::now();
  heartbeat_ns.store(to_ns(now), std::memory_order_relaxed);
  expected_ = now + config().lag_probe_interval;
  arm_heartbeat();
  thread_ = std::thread([this] {
    run_loop(ioc_, [this](std::string_view what) {
      bump(stats_.handler_exceptions);
      std::string line(what);  // one line, whatever the message holds
      for (char& c : line)
        if (c == '\n' || c == '\r') c = ' ';
      std::fprintf(stderr, "sluice: worker %zu: handler exception: %s\n", index_, line.c_str());
    });
    log_.flush();
  });
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::arm_heartbeat() {
  heartbeat_.expires_at(expected_);
  heartbeat_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_heartbeat();
  });
}

void Worker::on_heartbeat() {
  auto now = Clock::now();
  // Lag: how late the loop ran a timer that was due at expected_.
  double lag = std::max(0.0, std::chrono::duration<double>(now - expected_).count());
  stats_.lag.observe(lag);
  heartbeat_ns.store(to_ns(now), std::memory_order_relaxed);
  auto epoch = rt_.tick_epoch.load(std::memory_order_relaxed) & 0xFFFF;
  auto lag_us = static_cast<std::uint64_t>(lag * 1e6);
  lag_max_us_ = epoch == lag_epoch_ ? std::max(lag_max_us_, lag_us) : lag_us;
  lag_epoch_ = epoch;
  lag_epoch_max.store(pack_lag(epoch, lag_max_us_), std::memory_order_relaxed);

  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = *it++;
    if (t.deadline <= now) {
      t.deadline = Clock::time_point::max();
      t.on_deadline();
    }
  }
  for (auto& p : pools_) p->sweep(now);
  // The bulkheads' clock: growth, a re-ask of the waiters, starvation.
  auto now_us = rt_.micros(now);
  for (auto& b : bulkheads_) {
    auto became = b->tick(now_us, rng_);
    for (auto lane : admission::kLanes)
      if (became[admission::index(lane)]) bump(stats_.lane[admission::index(lane)].starved);
  }
  {
    std::lock_guard lock(views_mutex_);
    for (std::size_t u = 0; u < bulkheads_.size(); ++u) views_[u] = bulkheads_[u]->view(now_us);
    for (std::size_t u = 0; u < pools_.size(); ++u)
      if (pools_[u]->host_count() > 1) host_views_[u] = pools_[u]->hosts_view(now);
  }
  log_.flush();

  expected_ = now + config().lag_probe_interval;
  arm_heartbeat();
}

void Worker::begin_drain() {
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = *it++;
    t.on_drain();
  }
  for (auto& p : pools_) p->close_idle();
}

}  // namespace sluice::proxy
