#pragma once
// The proxy's threads and their state.
//
// Threading: one io_context per I/O thread (a Worker), each run by exactly one
// thread, so a connection's handlers never race and need no strand or lock.
// Everything a Worker owns (sessions, upstream pools, stats shard, log buffer)
// is touched only by its thread; other threads read the stats shards' atomics
// and post work to a Worker's io_context. What the process measures of an
// upstream is one for every thread: its bulkhead (K̂, the lanes, the queue, the
// leases; it locks itself), its closure and the heavy cap.
#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/gate.hpp"
#include "admission/ingest.hpp"
#include "admission/lease_token.hpp"
#include "admission/resilience.hpp"
#include "config/config.hpp"
#include "proxy/access_log.hpp"
#include "proxy/block_pool.hpp"
#include "proxy/clock.hpp"
#include "proxy/deadlines.hpp"
#include "proxy/heavy_cap.hpp"
#include "proxy/lease_table.hpp"
#include "proxy/net.hpp"
#include "proxy/stats.hpp"
#include "proxy/upstream_gate.hpp"
#include "proxy/upstream_pool.hpp"
#include "proxy/wait_ring.hpp"
#include "tls/tls.hpp"

namespace sluice::proxy {

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

// What the ticker publishes of one level for every request to read.
struct PublishedLevel {
  std::atomic<std::uint8_t> level{0};
  // Per lane: ms until the level admits the lane again (-1: not foreseeable).
  std::array<std::atomic<std::int64_t>, admission::kLaneCount> readmit_ms{};
};
// The process's level (its own loops) and each upstream's (what waits on it):
// a request is gated at the higher of the process's and its upstream's.
struct Published {
  explicit Published(std::size_t n) : upstreams(new PublishedLevel[n]) {}
  PublishedLevel process;
  std::unique_ptr<PublishedLevel[]> upstreams;
  // The emergency actions applied now (admission::ActionSet), and
  // refuse_connections' floor.
  std::atomic<std::uint8_t> actions{0};
  std::atomic<std::int64_t> connection_floor{0};
  bool acting(admission::Action a) const {
    return admission::has(actions.load(std::memory_order_relaxed), a);
  }
};

struct Runtime;
class Directory;
class RedisLink;

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
  // The worker running on the calling thread (null: another thread).
  static Worker* current();
  // A bulkhead kept a released slot for its tenant until `when`: this
  // thread's timer hands it on then, if unclaimed (Bulkhead::expire).
  void wake_bulkheads_at(admission::Micros when);
  // How late this thread's loop runs at `now`, for an answer read now: its
  // last heartbeat's lag. Across a stall (a heartbeat overdue by 5 ms, or the
  // last one that late, until the stall is over by its length and an interval;
  // or one an answer's bytes told, see saw_stall) an answer's part of it is
  // unknown: Micros::max(). Read on its own thread.
  admission::Micros own_delay(Clock::time_point now) const;
  // An answer read at `now` had waited `late` in its socket: past 5 ms, the
  // loop stalled between two heartbeats. The answers read for its length and
  // an interval after it are the stall's as after a late heartbeat: the
  // requests the stall held back went to their upstreams at once, and the
  // queue they met there was the proxy's doing.
  void saw_stall(Clock::time_point now, Clock::duration late);
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
  // The HTTPS listener's certificates for new handshakes (null: no HTTPS).
  // Replaced whole by a reload, by a post to this thread; a session keeps the
  // generation it began with.
  const std::shared_ptr<const tls::ServerContexts>& server_tls() const { return server_tls_; }
  void set_server_tls(std::shared_ptr<const tls::ServerContexts> t) { server_tls_ = std::move(t); }
  std::atomic<std::int64_t> active_sessions{0};
  LeaseTable& leases() { return leases_; }
  // Each upstream's hosts as this thread's pool last saw them (any thread).
  std::vector<std::vector<UpstreamPool::HostView>> host_views() const {
    std::lock_guard lock(views_mutex_);
    return host_views_;
  }

 private:
  void arm_heartbeat();
  void on_heartbeat();
  void on_kept_slots_end();
  Runtime& rt_;
  std::size_t index_;
  net::io_context ioc_{1};
  net::steady_timer heartbeat_;
  net::steady_timer kept_slots_;
  std::optional<admission::Micros> kept_slots_at_;  // kept_slots_ is armed for then
  Clock::time_point expected_{};
  Clock::duration last_lag_{};  // the last heartbeat's, and when it ran
  Clock::time_point last_heartbeat_{};
  Clock::time_point stalled_until_{};  // saw_stall's: answers until then are the stall's
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
  std::shared_ptr<const tls::ServerContexts> server_tls_;
  char id_prefix_[16];
  LeaseTable leases_;
  // Off the request path: the heartbeat writes, the admin thread copies.
  mutable std::mutex views_mutex_;
  std::vector<std::vector<UpstreamPool::HostView>> host_views_;
};

// Kept slots (Bulkhead's anticipation) end at the timer of the thread that
// kept them.
class KeptSlotWaker final : public admission::Waker {
 public:
  void wake_at(admission::Micros when) override {
    if (Worker* w = Worker::current()) w->wake_bulkheads_at(when);
  }
};

struct Runtime {
  explicit Runtime(const config::Config& c);
  ~Runtime();
  const config::Config& config;
  // Every upstream's hosts: names resolved again within their TTL, health
  // checks; it posts each change to the pools (the admin thread's).
  Directory* directory = nullptr;
  RedisLink* redis = nullptr;  // SLUICE_REDIS_URL: the fleet's tenant counts (admin thread)
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<bool> draining{false};
  std::atomic<std::int64_t> connections{0};  // open client connections, all workers
  // Every generation of the live settings; the admin thread appends, workers
  // are posted the new pointer.
  std::vector<std::unique_ptr<const Live>> generations;
  Published published{config.upstreams.size()};
  // Lag samples are grouped by tick: the ticker advances the epoch, each Worker
  // tags its lag maximum with the epoch it was taken in.
  std::atomic<std::uint64_t> tick_epoch{0};
  // The admission core's clock: Micros since start.
  const Clock::time_point epoch = Clock::now();
  admission::Micros micros(Clock::time_point t) const {
    return std::chrono::duration_cast<admission::Micros>(t - epoch);
  }
  std::unique_ptr<HeavyCap> heavy_cap;  // SLUICE_HEAVY_MAX_IN_FLIGHT, when set
  KeptSlotWaker kept_slot_waker;
  std::unique_ptr<admission::IngestBudget> ingest;  // SLUICE_INGEST_BUDGET, when set
  // Per-tenant limits (SLUICE_TENANT_*, routes' own), every thread's.
  std::unique_ptr<tenants::Table> tenant_table;
  std::vector<std::unique_ptr<UpstreamGate>> gates;  // one per upstream
  // One per upstream, for every thread: the estimate never passes the
  // upstream's connections (SLUICE_UPSTREAM_MAX_CONNECTIONS).
  std::vector<std::unique_ptr<admission::Bulkhead>> bulkheads;
  admission::Bulkhead& bulkhead(std::size_t upstream) const { return *bulkheads[upstream]; }
  // Per upstream, its bulkhead now.
  std::vector<admission::BulkheadView> bulkhead_views() const;
  // Lease tokens: signed with SLUICE_LEASE_KEY bound to this start's random
  // instance id, so they verify only in this process.
  admission::LeaseKey lease_key{};
  std::uint64_t instance = 0;
  // TLS: the certificates in force (the ticker's reload and ticket rotation
  // replace them; each worker is posted the new ones), and the context of
  // https:// upstreams (null: none).
  std::shared_ptr<const tls::ServerContexts> server_tls;
  std::unique_ptr<net::ssl::context> upstream_tls;
};

// One generation of the live settings from a configuration.
Live make_live(const config::Config& c);

// The HTTPS listener's contexts for these settings (throws tls::Error): at
// start-up, on a certificate reload and at each ticket key rotation.
std::shared_ptr<const tls::ServerContexts> server_contexts(const config::Tls& t, bool h2);

// Starts a client session on the worker that owns the socket's io_context:
// plain HTTP, or HTTPS with the worker's certificates (a handshake first).
void start_session(Worker& worker, Socket socket, bool tls);

}  // namespace sluice::proxy
