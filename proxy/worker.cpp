#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "proxy/directory.hpp"
#include "proxy/run_loop.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

namespace {
thread_local Worker* t_worker = nullptr;
// One lease slot per connection this thread may hold, and some room.
std::size_t lease_slots(const config::Config& c) {
  return c.max_connections / static_cast<std::size_t>(c.threads) + 64;
}
}  // namespace

Worker::Worker(Runtime& rt, std::size_t index, int log_fd)
    : rt_(rt),
      index_(index),
      heartbeat_(ioc_),
      kept_slots_(ioc_),
      stats_(rt.config.upstreams.size()),
      log_(log_fd),
      leases_(lease_slots(rt.config)) {
  const auto& cfg = rt.config;
  std::size_t threads = static_cast<std::size_t>(cfg.threads);
  for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
    // This thread's share of the upstream's connections, at least one.
    std::size_t share =
        std::max<std::size_t>(1, cfg.upstream_max_connections / threads +
                                     (index < cfg.upstream_max_connections % threads ? 1 : 0));
    pools_.push_back(
        std::make_unique<UpstreamPool>(*this, u, share, cfg.host_eject_base, cfg.host_eject_max));
    pools_.back()->update(rt.directory->hosts(u), rt.directory->retry_at(u));
  }
  host_views_.resize(cfg.upstreams.size());
  std::random_device rd;
  std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd() ^ (std::uint64_t{index} << 56);
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) id_prefix_[i] = kHex[(r >> (i * 4)) & 15];
  live_ = rt.generations.back().get();
  server_tls_ = rt.server_tls;
  // The gate's draws: seeded per thread, so a run can be repeated.
  rng_ = admission::Rng(0x5eed0000ull + index);
}

Worker::~Worker() {
  log_.flush();
  pools_.clear();
}

const config::Config& Worker::config() const { return rt_.config; }

void Worker::set_live(const Live* live) { live_ = live; }

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
    t_worker = this;
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
  last_lag_ = std::max(Clock::duration::zero(), now - expected_);
  last_heartbeat_ = now;
  double lag = std::chrono::duration<double>(last_lag_).count();
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
  // The bulkheads' clock: growth, a re-ask of the waiters, starvation. Every
  // thread ticks them (a stalled one holds nobody back); a lane that became
  // starving is counted by the thread whose tick saw it.
  auto now_us = rt_.micros(now);
  for (auto& b : rt_.bulkheads) {
    auto became = b->tick(now_us);
    for (auto lane : admission::kLanes)
      if (became[admission::index(lane)]) bump(stats_.lane[admission::index(lane)].starved);
  }
  {
    std::lock_guard lock(views_mutex_);
    for (std::size_t u = 0; u < pools_.size(); ++u) host_views_[u] = pools_[u]->hosts_view(now);
  }
  log_.flush();

  expected_ = now + config().lag_probe_interval;
  arm_heartbeat();
}

namespace {
constexpr auto kStall = std::chrono::milliseconds(5);
}

void Worker::saw_stall(Clock::time_point now, Clock::duration late) {
  if (late > kStall)
    stalled_until_ = std::max(stalled_until_, now + late + config().lag_probe_interval);
}

admission::Micros Worker::own_delay(Clock::time_point now) const {
  const auto overdue = now - expected_;
  if (overdue > kStall || now < stalled_until_ ||
      (last_lag_ > kStall && now - last_heartbeat_ < last_lag_ + config().lag_probe_interval))
    return admission::Micros::max();
  return std::chrono::duration_cast<admission::Micros>(
      std::max({last_lag_, overdue, Clock::duration::zero()}));
}

Worker* Worker::current() { return t_worker; }

void Worker::wake_bulkheads_at(admission::Micros when) {
  if (kept_slots_at_ && *kept_slots_at_ <= when) return;  // it fires first, and re-arms
  kept_slots_at_ = when;
  kept_slots_.expires_at(rt_.epoch + when);
  kept_slots_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_kept_slots_end();
  });
}

void Worker::on_kept_slots_end() {
  kept_slots_at_.reset();
  const auto now = rt_.micros(Clock::now());
  std::optional<admission::Micros> next;
  for (auto& b : rt_.bulkheads)
    if (auto at = b->expire(now)) next = next ? std::min(*next, *at) : *at;
  if (next) wake_bulkheads_at(*next);
}

void Worker::begin_drain() {
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    Tracked& t = *it++;
    t.on_drain();
  }
  for (auto& p : pools_) p->close_idle();
}

}  // namespace sluice::proxy
