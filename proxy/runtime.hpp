#pragma once
// The proxy's threads and their state.
//
// Threading: one io_context per I/O thread (a Worker), each run by exactly one
// thread, so a connection's handlers never race and need no strand or lock.
// Everything a Worker owns (sessions, upstream pools, stats shard, log buffer)
// is touched only by its thread; other threads read the stats shards' atomics
// and post work to a Worker's io_context.
#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/intrusive/list.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/gate.hpp"
#include "admission/lease_token.hpp"
#include "admission/resilience.hpp"
#include "config/config.hpp"
#include "proxy/access_log.hpp"
#include "proxy/stats.hpp"

namespace sluice::proxy {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// Sockets bound to an io_context's own executor: no type-erased executor to
// copy on every asynchronous operation.
using Socket = net::basic_stream_socket<tcp, net::io_context::executor_type>;

// Steady-clock nanoseconds: how times cross threads through atomics.
inline std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Something with a deadline on a Worker. Deadlines are checked by the Worker's
// heartbeat (every SLUICE_LAG_PROBE_INTERVAL), not by a timer per operation:
// arming and cancelling a timer per read or write would cost system calls on
// every request, while a sweep over the live connections costs a few ns each.
struct Tracked : boost::intrusive::list_base_hook<
                     boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
  Clock::time_point deadline = Clock::time_point::max();
  virtual ~Tracked() = default;
  virtual void on_deadline() = 0;  // the deadline passed; cancel what is pending
  virtual void on_drain() {}       // the proxy is draining
};
using TrackedList =
    boost::intrusive::list<Tracked, boost::intrusive::constant_time_size<false>>;

// Fixed-size relay buffers, recycled per Worker: a body relay borrows one and
// gives it back, so steady-state relaying allocates nothing and idle
// connections hold no relay buffer.
class BlockPool {
 public:
  static constexpr std::size_t kBlockSize = 16 * 1024;
  struct Deleter {
    BlockPool* pool;
    void operator()(char* p) const { pool->free_.push_back(p); }
  };
  using Block = std::unique_ptr<char[], Deleter>;
  ~BlockPool() {
    for (char* p : free_) delete[] p;
  }
  Block get() {
    if (free_.empty()) return Block(new char[kBlockSize], Deleter{this});
    char* p = free_.back();
    free_.pop_back();
    return Block(p, Deleter{this});
  }

 private:
  std::vector<char*> free_;
};

class Worker;
struct UpstreamConnection;

// A pooled keep-alive connection to one host of an upstream.
struct UpstreamConnection : Tracked {
  UpstreamConnection(net::io_context& ioc, std::size_t host_index)
      : socket(ioc.get_executor()), host(host_index) {}
  void on_deadline() override;  // connect timed out
  Socket socket;
  boost::beast::flat_buffer buffer;  // bytes read from this connection, not yet parsed
  std::size_t host;
  Clock::time_point idle_since{};
  std::uint32_t uses = 0;  // requests served; > 0 means a reused connection
  // The host's ejection count when this connect began: a failure of a connect
  // begun before the host's latest ejection belongs to the outage already counted.
  std::uint32_t eject_epoch = 0;
  bool connect_timed_out = false;
};

// Someone waiting for a connection from an UpstreamPool.
struct PoolWaiter {
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>
      wait_hook;
  Clock::time_point wait_start{};
  // A replay: it gets a new connection, never an idle one (those may be as
  // dead as the one that just failed).
  bool fresh = false;
  std::size_t avoid_host = SIZE_MAX;  // a replay's failed host, left out while another is eligible
  // A request that cannot be replayed: an idle connection is checked (one
  // MSG_PEEK) before it carries it, however briefly it was idle.
  bool must_check = false;
  virtual ~PoolWaiter() = default;
  // Exactly one call per acquire() that did not get cancel()ed first.
  virtual void on_connection(std::unique_ptr<UpstreamConnection> c,
                             boost::system::error_code ec) = 0;
};

// A Worker's bounded pool of connections to one upstream (its share of
// SLUICE_UPSTREAM_MAX_CONNECTIONS), over the upstream's hosts.
//
// Host choice, per request: the power of two choices on requests in flight.
// Two distinct hosts that are not ejected are drawn at random and the one with
// fewer requests in flight wins (a tie: either, at random). The request then
// reuses that host's newest idle connection, else connects a new one to it
// (when the pool is full, the oldest idle connection of another host is closed
// to make room), else waits, oldest first; a connection released while
// requests wait goes to the oldest of them, whatever its host. With one host
// there is no choice to make.
//
// Ejection: a connect to a host that is refused or times out (any connect
// error) ejects the host from the choice for a backoff of base x 2^(n-1),
// capped at max, n being its consecutive failures; a successful connect resets
// n and ends the ejection. An ejected host is eligible again when its backoff is
// over: the next choice may pick it, and a failure ejects it for twice as long.
// When every host is ejected, the one whose ejection ends first is chosen (the
// connect decides). Connects that were already under way when a host was
// ejected and fail too are not counted again.
//
// Everything here is per Worker and touched only by its thread.
class UpstreamPool {
 public:
  static constexpr std::chrono::milliseconds kEjectBase{1000};
  static constexpr std::chrono::milliseconds kEjectMax{30000};
  UpstreamPool(Worker& worker, std::size_t index, std::vector<tcp::endpoint> hosts,
               std::size_t max_connections, std::chrono::milliseconds eject_base = kEjectBase,
               std::chrono::milliseconds eject_max = kEjectMax);
  ~UpstreamPool();
  // Hands a connection to w: at once (inside this call) when one is idle, else
  // later. w must stay alive until then or cancel().
  void acquire(PoolWaiter& w);
  // Takes w out of the queue; false when w is not queued (its connect is under
  // way and will still call back).
  bool cancel(PoolWaiter& w);
  // Returns a connection after a request: kept for reuse if reusable.
  void release(std::unique_ptr<UpstreamConnection> c, bool reusable);
  void sweep(Clock::time_point now);  // closes connections idle for too long
  void close_idle();                  // drain: idle connections are closed
  // A connection to `host` died before its response: the host's idle ones,
  // likely as dead (an upstream going down), are closed rather than tried.
  void close_idle(std::size_t host);
  std::size_t index() const { return index_; }
  std::size_t host_count() const { return hosts_.size(); }

  // One host as the admin view shows it (worker thread only).
  struct HostView {
    std::string address;     // host:port ([v6]:port)
    int in_flight;           // requests bound to the host: connecting or holding a connection
    bool ejected;
    double ejected_for_s;    // seconds of ejection left (0 when not ejected)
    std::uint32_t failures;  // consecutive failed connects
  };
  // True when no host is eligible for a new connection at `now`.
  bool all_hosts_ejected(Clock::time_point now) const;
  std::vector<HostView> hosts_view(Clock::time_point now) const;

 private:
  struct Host {
    tcp::endpoint endpoint;
    std::int64_t in_flight = 0;
    std::uint32_t failures = 0;         // consecutive failed connects
    std::uint32_t ejections = 0;        // ejections so far (UpstreamConnection::eject_epoch)
    Clock::time_point ejected_until{};  // ejected while now < ejected_until
  };
  static constexpr std::size_t kNoHost = SIZE_MAX;
  // The host for a new request, `avoid` left out while another is eligible.
  std::size_t choose(Clock::time_point now, std::size_t avoid = kNoHost);
  void connect_for(PoolWaiter& w);            // chooses a host and connects to it
  void connect_to(PoolWaiter& w, std::size_t host);
  void connect_failed(std::size_t host, std::uint32_t epoch);
  void note_oldest();  // publishes when the oldest queued request started waiting
  void closed(std::size_t n);  // n of this pool's connections are gone
  void serve_next();           // a slot is free: connect for the oldest waiter, if any
  void hand(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c, boost::system::error_code ec);
  Worker& worker_;
  std::size_t index_;
  std::vector<Host> hosts_;
  std::size_t max_;
  std::chrono::milliseconds eject_base_;
  std::chrono::milliseconds eject_max_;
  std::size_t open_ = 0;  // idle + busy + connecting
  std::vector<std::unique_ptr<UpstreamConnection>> idle_;  // back = most recently used
  boost::intrusive::list<
      PoolWaiter,
      boost::intrusive::member_hook<PoolWaiter, decltype(PoolWaiter::wait_hook),
                                    &PoolWaiter::wait_hook>,
      boost::intrusive::constant_time_size<false>>
      waiters_;
};

// Upstream-wait samples of one Worker, newest last, for the sampler's p95 over
// the last 1.5 ticks. Single writer; the sampler reads slots racily, which at
// worst mixes one sample's fields: it is a sample either way.
class WaitRing {
 public:
  static constexpr std::size_t kSize = 1024;
  void add(Clock::time_point at, Clock::duration wait, std::size_t upstream) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(wait).count();
    auto wait_us = static_cast<std::uint32_t>(std::clamp<std::int64_t>(us, 0, UINT32_MAX));
    auto i = next_.load(std::memory_order_relaxed);
    slots_[i % kSize].t_ns.store(to_ns(at), std::memory_order_relaxed);
    slots_[i % kSize].value.store((std::uint64_t{upstream} << 32) | wait_us,
                                  std::memory_order_relaxed);
    next_.store(i + 1, std::memory_order_release);
  }
  // Calls f(upstream, wait_us) for every sample taken at or after since_ns.
  template <class F>
  void for_each_since(std::int64_t since_ns, F f) const {
    auto end = next_.load(std::memory_order_acquire);
    auto begin = end > kSize ? end - kSize : 0;
    for (auto i = end; i-- > begin;) {
      const auto& s = slots_[i % kSize];
      if (s.t_ns.load(std::memory_order_relaxed) < since_ns) break;
      auto v = s.value.load(std::memory_order_relaxed);
      f(static_cast<std::uint16_t>(v >> 32), static_cast<std::uint32_t>(v));
    }
  }

 private:
  struct Slot {
    std::atomic<std::int64_t> t_ns{0};
    std::atomic<std::uint64_t> value{0};
  };
  std::array<Slot, kSize> slots_{};
  std::atomic<std::uint64_t> next_{0};
};

// What a live reload may change for requests: one immutable generation. Each
// Worker holds a pointer to the current one, replaced by a post to its own
// thread, so the request path reads it with no lock and no atomic. Generations
// are kept for the process's life (a reload is rare and small), so a request
// that started under an old one finishes with it.
struct Live {
  routes::Table routes;
  admission::Gate gate;
  admission::RetryBands retry;
  admission::LanePolicy lanes;
  std::vector<int> close_statuses;  // SLUICE_CLOSE_STATUSES
};

// The live leases of one Worker, by slot. A slot's generation is odd while its
// lease lives and moves on when it ends, so a token (admission/lease_token.hpp)
// names a live lease exactly while the generations match. The owner thread
// opens and closes; any thread may ask live().
class LeaseTable {
 public:
  explicit LeaseTable(std::size_t slots) : gen_(new std::atomic<std::uint64_t>[slots]()) {
    free_.reserve(slots);
    for (std::size_t i = slots; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    size_ = slots;
  }
  // A slot and its generation; none when every slot is taken (no token then).
  bool open(std::uint32_t& slot, std::uint64_t& generation) {
    if (free_.empty()) return false;
    slot = free_.back();
    free_.pop_back();
    generation = gen_[slot].load(std::memory_order_relaxed) + 1;
    gen_[slot].store(generation, std::memory_order_release);
    return true;
  }
  void close(std::uint32_t slot) {
    gen_[slot].store(gen_[slot].load(std::memory_order_relaxed) + 1, std::memory_order_release);
    free_.push_back(slot);
  }
  bool live(std::uint32_t slot, std::uint64_t generation) const {
    return slot < size_ && (generation & 1) &&
           gen_[slot].load(std::memory_order_acquire) == generation;
  }

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> gen_;
  std::vector<std::uint32_t> free_;
  std::size_t size_ = 0;
};

// An upstream's closure (seed 001 §9), one for the whole process: a refusal no
// load change cures closes every thread's way to it. Requests read `closed`
// (one relaxed load); only while it is set, or to change it, does a thread take
// the mutex, so the request path takes no lock while every upstream is open.
struct UpstreamGate {
  std::atomic<bool> closed{false};
  std::mutex mutex;
  admission::Closure closure;
  std::atomic<std::uint64_t> probes_ok{0}, probes_failed{0}, closures{0};
  explicit UpstreamGate(const admission::ClosurePolicy& p) : closure(p) {}
  void close(admission::Micros now, std::optional<admission::Micros> until) {
    std::lock_guard lock(mutex);
    if (!closure.closed()) closures.fetch_add(1, std::memory_order_relaxed);
    closure.close(now, until);
    closed.store(true, std::memory_order_relaxed);
  }
  // admit / probe / closed; `running` is what runs on the upstream now.
  // `running()` (what runs on the upstream now) is only asked while it is closed.
  template <class Running>
  admission::Verdict ask(admission::Micros now, Running running) {
    if (!closed.load(std::memory_order_relaxed)) return admission::Verdict::admit;
    int n = running();
    std::lock_guard lock(mutex);
    auto v = closure.ask(now, n);
    closed.store(closure.closed(), std::memory_order_relaxed);
    return v;
  }
  void probe_ended(bool clean) {
    std::lock_guard lock(mutex);
    closure.probe_ended(clean);
    (clean ? probes_ok : probes_failed).fetch_add(1, std::memory_order_relaxed);
    closed.store(closure.closed(), std::memory_order_relaxed);
  }
  admission::Micros reopen_hint(admission::Micros now) {
    std::lock_guard lock(mutex);
    return closure.reopen_hint(now);
  }
  struct View {
    bool closed = false;
    std::optional<admission::Micros> until, last_probe;
    admission::Micros next_probe{0};
  };
  void set_policy(const admission::ClosurePolicy& p) {
    std::lock_guard lock(mutex);
    closure.set_policy(p);
  }
  View view() {
    std::lock_guard lock(mutex);
    return {closure.closed(), closure.closed_until(), closure.last_probe(), closure.next_probe()};
  }
};

// SLUICE_HEAVY_MAX_IN_FLIGHT: one count for every bulkhead of the process.
// Only heavy requests touch it.
class HeavyCap final : public admission::LeaseCap {
 public:
  explicit HeavyCap(std::int64_t cap) : cap_(cap) {}
  bool try_take() override {
    if (taken_.fetch_add(1, std::memory_order_relaxed) < cap_) return true;
    taken_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  void give_back() override { taken_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t cap() const { return cap_; }

 private:
  const std::int64_t cap_;
  std::atomic<std::int64_t> taken_{0};
};

// What the ticker publishes for every request to read: a few relaxed loads.
struct Published {
  std::atomic<std::uint8_t> level{0};
  // Per lane: ms until the level admits the lane again (-1: not foreseeable).
  std::array<std::atomic<std::int64_t>, admission::kLaneCount> readmit_ms{};
};

struct Runtime;

class Worker {
 public:
  Worker(Runtime& rt, std::size_t index, int log_fd);
  ~Worker();
  net::io_context& ioc() { return ioc_; }
  Runtime& runtime() { return rt_; }
  const config::Config& config() const;
  std::size_t index() const { return index_; }
  Shard& stats() { return stats_; }
  AccessLog& log() { return log_; }
  BlockPool& blocks() { return blocks_; }
  UpstreamPool& pool(std::size_t upstream) { return *pools_[upstream]; }
  void track(Tracked& t) { tracked_.push_back(t); }
  char* request_id(char* out);  // writes a fresh id (kRequestIdLen chars) and returns its end
  static constexpr std::size_t kRequestIdLen = 24;

  void start();  // starts the thread
  void join();
  void begin_drain();  // posted by the drain sequence
  void stop() { ioc_.stop(); }
  // Nanoseconds (steady clock) of the last heartbeat: the watchdog reads it.
  std::atomic<std::int64_t> heartbeat_ns{0};
  // The largest lag seen in a tick epoch, tagged with the epoch (pack_lag).
  std::atomic<std::uint64_t> lag_epoch_max{0};
  static constexpr std::uint64_t kLagMask = (std::uint64_t{1} << 48) - 1;
  static std::uint64_t pack_lag(std::uint64_t epoch, std::uint64_t lag_us) {
    return ((epoch & 0xFFFF) << 48) | std::min(lag_us, kLagMask);
  }
  static std::uint64_t lag_epoch(std::uint64_t packed) { return packed >> 48; }
  static std::uint64_t lag_us(std::uint64_t packed) { return packed & kLagMask; }
  WaitRing waits;
  admission::Rng& rng() { return rng_; }
  const Live& live() const { return *live_; }
  void set_live(const Live* live);  // on this worker's thread
  std::atomic<std::int64_t> active_sessions{0};
  admission::Bulkhead& bulkhead(std::size_t upstream) { return *bulkheads_[upstream]; }
  const admission::Bulkhead& bulkhead(std::size_t upstream) const { return *bulkheads_[upstream]; }
  LeaseTable& leases() { return leases_; }
  // The bulkheads as the heartbeat last saw them (any thread).
  std::vector<admission::BulkheadView> views() const {
    std::lock_guard lock(views_mutex_);
    return views_;
  }
  // Each upstream's hosts as this thread's pool last saw them (any thread).
  std::vector<std::vector<UpstreamPool::HostView>> host_views() const {
    std::lock_guard lock(views_mutex_);
    return host_views_;
  }
  // When this thread's youngest live heavy lease began (Micros; -1: none).
  std::atomic<std::int64_t> youngest_heavy_us{-1};
  void note_heavy();  // a heavy seat came or went: republish youngest_heavy_us

 private:
  void arm_heartbeat();
  void on_heartbeat();
  Runtime& rt_;
  std::size_t index_;
  net::io_context ioc_{1};
  net::steady_timer heartbeat_;
  Clock::time_point expected_{};
  Shard stats_;
  AccessLog log_;
  BlockPool blocks_;
  std::vector<std::unique_ptr<UpstreamPool>> pools_;
  TrackedList tracked_;
  std::thread thread_;
  std::uint64_t id_seq_ = 0;
  std::uint64_t lag_epoch_ = ~std::uint64_t{0};
  std::uint64_t lag_max_us_ = 0;
  admission::Rng rng_{0};
  const Live* live_ = nullptr;
  char id_prefix_[16];
  std::vector<std::unique_ptr<admission::Bulkhead>> bulkheads_;  // one per upstream
  LeaseTable leases_;
  // Off the request path: the heartbeat writes, the admin thread copies.
  mutable std::mutex views_mutex_;
  std::vector<admission::BulkheadView> views_;
  std::vector<std::vector<UpstreamPool::HostView>> host_views_;
};

struct Runtime {
  explicit Runtime(const config::Config& c);
  const config::Config& config;
  std::vector<std::vector<tcp::endpoint>> upstream_hosts;  // resolved once at start
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<bool> draining{false};
  std::atomic<std::int64_t> connections{0};  // open client connections, all workers
  // Every generation of the live settings; the admin thread appends, workers
  // are posted the new pointer.
  std::vector<std::unique_ptr<const Live>> generations;
  Published published;
  // Lag samples are grouped by tick: the ticker advances the epoch, each Worker
  // tags its lag maximum with the epoch it was taken in.
  std::atomic<std::uint64_t> tick_epoch{0};
  // The admission core's clock: Micros since start.
  const Clock::time_point epoch = Clock::now();
  admission::Micros micros(Clock::time_point t) const {
    return std::chrono::duration_cast<admission::Micros>(t - epoch);
  }
  std::unique_ptr<HeavyCap> heavy_cap;  // SLUICE_HEAVY_MAX_IN_FLIGHT, when set
  std::vector<std::unique_ptr<UpstreamGate>> gates;  // one per upstream
  // Requests running on an upstream: this thread's exactly, the others' as of
  // their last heartbeat (for "a probe only while nothing runs on it").
  int running_on(std::size_t upstream, const Worker& self) const;
  // Per upstream, every thread's bulkhead as of its last heartbeat, merged.
  std::vector<admission::BulkheadView> bulkhead_views() const;
  // Lease tokens: signed with SLUICE_LEASE_KEY bound to this start's random
  // instance id, so they verify only in this process.
  admission::LeaseKey lease_key{};
  std::uint64_t instance = 0;
};

// One generation of the live settings from a configuration.
Live make_live(const config::Config& c);

// Starts a client session on the worker that owns the socket's io_context.
void start_session(Worker& worker, Socket socket);

}  // namespace sluice::proxy
