#pragma once
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/intrusive/list.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "proxy/deadlines.hpp"
#include "proxy/host_set.hpp"
#include "proxy/net.hpp"
#include "proxy/stream.hpp"
#include "tls/tls.hpp"

namespace sluice::proxy {

class Worker;
struct UpstreamConnection;

// A pooled keep-alive connection to one host of an upstream.
struct UpstreamConnection : Tracked {
  UpstreamConnection(net::io_context& ioc, std::size_t host_index)
      : stream(ioc), host(host_index) {}
  void on_deadline() override;       // connect or TLS handshake timed out
  Stream stream;                     // TCP, or TLS to an https:// upstream
  boost::beast::flat_buffer buffer;  // bytes read from this connection, not yet parsed
  std::size_t host;
  std::string address;  // the host's address:port, for the access log
  Clock::time_point idle_since{};
  std::uint32_t uses = 0;  // requests served; > 0 means a reused connection
  // How long its TCP connect and its TLS handshake took (the first request's
  // access log line shows them; -1: no TLS).
  Clock::duration connect_time{-1}, tls_time{-1};
  // The host's ejection count when this connect began: a failure of a connect
  // begun before the host's latest ejection belongs to the outage already counted.
  std::uint32_t eject_epoch = 0;
  bool connect_timed_out = false;
};

// The error a waiter gets when the TLS handshake to an upstream failed: its
// value is a TlsResult (verify, timeout, ...). Never retried without TLS.
const boost::system::error_category& upstream_tls_category();

// One address of an upstream, as the directory (proxy/directory.hpp) gives it
// to each thread's pool: the name and port it came from (the index of the
// upstream's host in SLUICE_UPSTREAMS), and whether its health checks pass.
struct HostEntry {
  tcp::endpoint endpoint;
  std::size_t target = 0;
  bool healthy = true;
  bool operator==(const HostEntry&) const = default;
};

// The Host a request to this upstream host states when the client's is not
// passed: its name and port as configured (the port left out when it is the
// scheme's).
std::string upstream_authority(const config::Upstream& u, const config::Endpoint& host);

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
// Per request, the host is the HostSet's choice (proxy/host_set.hpp: the power
// of two choices on requests in flight, among the hosts not ejected after a
// failed connect). The request then reuses that host's newest idle connection,
// else connects a new one to it (when the pool is full, the oldest idle
// connection of another host is closed to make room), else waits, oldest
// first; a connection released while requests wait goes to the oldest of them,
// whatever its host. A connect that is refused or times out (any connect
// error) tells the HostSet, which may eject the host.
//
// The hosts change when the directory says so (update()): a new address is in
// the choice at once; one that went gets no new request, its idle connections
// close, and the connections of requests still on it close when they end.
//
// Everything here is per Worker and touched only by its thread.
class UpstreamPool {
 public:
  static constexpr std::chrono::milliseconds kEjectBase{1000};
  static constexpr std::chrono::milliseconds kEjectMax{30000};
  // No host until the first update().
  UpstreamPool(Worker& worker, std::size_t index, std::size_t max_connections,
               std::chrono::milliseconds eject_base = kEjectBase,
               std::chrono::milliseconds eject_max = kEjectMax);
  ~UpstreamPool();
  // Hands a connection to w: at once (inside this call) when one is idle, else
  // later. w must stay alive until then or cancel(). `now`: the caller's clock reading.
  void acquire(PoolWaiter& w, Clock::time_point now);
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
  std::size_t host_count() const { return hosts_.present(); }
  // The upstream's addresses now, and when its names are asked again (what
  // a request that finds no address is told to wait for).
  void update(const std::vector<HostEntry>& hosts, Clock::time_point retry_at);
  bool unresolved() const { return hosts_.present() == 0; }
  Clock::time_point retry_at() const { return retry_at_; }
  // The Host a request to `host` states when the client's is not passed: its
  // name and port as configured (the port left out when it is the scheme's).
  const std::string& authority(std::size_t host) const { return authority_[target_[host]]; }

  // One host as the admin view shows it (worker thread only).
  struct HostView {
    std::string address;  // host:port ([v6]:port)
    int in_flight;        // requests bound to the host: connecting or holding a connection
    bool ejected;
    bool checks_pass;        // the active health checks pass (or there are none)
    double ejected_for_s;    // seconds of ejection left (0 when not ejected)
    std::uint32_t failures;  // consecutive failed connects
  };
  // True when no host is eligible for a new connection at `now`.
  bool all_hosts_ejected(Clock::time_point now) const;
  std::vector<HostView> hosts_view(Clock::time_point now) const;

 private:
  void connect_for(PoolWaiter& w);  // chooses a host and connects to it
  void connect_to(PoolWaiter& w, std::size_t host);
  void no_host(PoolWaiter& w);  // no address at all: w gets host_not_found
  std::size_t add_host(const HostEntry& e);
  void note_oldest();          // publishes when the oldest queued request started waiting
  void closed(std::size_t n);  // n of this pool's connections are gone
  void serve_next();           // a slot is free: connect for the oldest waiter, if any
  void hand(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c, boost::system::error_code ec);
  // An https:// upstream: the handshake after the connect, then w gets the
  // connection, or an error of upstream_tls_category().
  void handshake(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c);
  void failed(PoolWaiter& w, std::unique_ptr<UpstreamConnection> c, boost::system::error_code ec);
  void note_tls_failure(std::size_t host, const std::string& detail);  // a log line, at most 1/s
  Clock::time_point last_tls_log_{};
  Worker& worker_;
  std::size_t index_;
  std::vector<tcp::endpoint> endpoints_;  // by host slot
  std::vector<std::size_t> target_;       // by host slot: its SLUICE_UPSTREAMS host
  std::vector<std::string> authority_;    // by SLUICE_UPSTREAMS host
  // https://: per host slot, the last TLS session it gave, resumed by the next connect.
  std::vector<tls::SessionSlot> sessions_;
  HostSet hosts_;
  Clock::time_point retry_at_{};
  std::size_t max_;
  std::size_t open_ = 0;                                   // idle + busy + connecting
  std::vector<std::unique_ptr<UpstreamConnection>> idle_;  // back = most recently used
  boost::intrusive::list<PoolWaiter,
                         boost::intrusive::member_hook<PoolWaiter, decltype(PoolWaiter::wait_hook),
                                                       &PoolWaiter::wait_hook>,
                         boost::intrusive::constant_time_size<false>>
      waiters_;
};

}  // namespace sluice::proxy
