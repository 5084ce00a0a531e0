#pragma once
// The fleet's tenant counts, reconciled with Redis (SLUICE_REDIS_URL) off the
// request path, in the shape of Envoy's RLQS: the request path only ever reads
// and writes the tenant table (tenants/limits.hpp); this link, on the admin
// thread, every SLUICE_REDIS_INTERVAL:
//   1. collects what each tenant with a rate admitted since the last round,
//      by window (1 s of wall-clock time, the same in every instance);
//   2. sends it in one pipeline: this instance's heartbeat (ZADD
//      sluice:instances, dropping instances silent for 3 intervals, at least
//      2 s, then ZCARD), and per tenant its total in the current window as
//      its field of the hash sluice:rate:<tenant hash>:<window> (HSET, PEXPIRE
//      3 s; a whole total, not an increment: a round that timed out and still
//      reaches Redis counts nothing twice), the window before's too when it
//      has more, and both hashes' values (HVALS), whose sum is the fleet's;
//   3. with every answer in within the interval, sets each tenant's allowance
//      until the next round (tenants::fleet_allowance) and holds the table up;
//      else (Redis slow, down, refusing) gives the counts back for the next
//      round, closes the connection and holds the table down: each tenant's
//      bucket refills at its rate / the instances last seen, within one
//      interval. A connection is tried again each round.
// hiredis (Debian libhiredis-dev) formats the commands and parses the replies
// (redisFormatCommandArgv, redisReader); the socket is Asio's, on the admin
// io_context, so nothing blocks a thread and no thread is added.
//
// With SLUICE_FLEET_CAPACITY on (the default), the same round carries each
// upstream's capacity report (admission/fleet.hpp): one EVALSHA of the
// fleet's script (proxy/fleet_script.hpp, loaded once per connection) per
// upstream, whose answer sets the upstream's bulkhead to its share; and a
// second connection, subscribed to sluice:fleet, applies a decrease another
// instance made the moment Redis publishes it. Rounds that fail for 3
// intervals: each bulkhead estimates alone from its share (FleetMember::tick).
//
// Threading: the admin io_context's thread; view() too.
#include <array>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "admission/fleet.hpp"
#include "proxy/clock.hpp"
#include "proxy/net.hpp"
#include "tenants/limits.hpp"

namespace sluice::proxy {

struct Runtime;

class RedisLink {
 public:
  RedisLink(Runtime& rt, net::io_context& ioc);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;
  void start();
  void stop();

  struct View {
    bool up = false;                   // the last round was answered in time
    int instances = 1;                 // seen in the last round answered
    std::uint64_t ok = 0, failed = 0;  // rounds
    std::uint64_t tenants = 0;         // reconciled in the last round answered
    double round_trip_s = 0;           // the last round's, answered
    std::string error;                 // why the last failed round failed
    Clock::time_point last_ok{};       // epoch: never
    bool fleet = false;                // SLUICE_FLEET_CAPACITY on
    std::uint64_t pushed = 0;          // decreases received from other instances
    bool subscribed = false;           // the push connection is up
  };
  const View& view() const { return view_; }
  // Per upstream, its side of the fleet (empty: capacity not shared).
  const std::vector<admission::FleetMember>& fleet() const { return fleet_; }

 private:
  struct Round;
  void arm();
  void begin();
  void on_resolved(const boost::system::error_code& ec, tcp::resolver::results_type results);
  void on_connected(const boost::system::error_code& ec);
  void send();
  void read();
  void finish();
  void fail(const std::string& why);
  void send_fleet(Round& r);
  void finish_fleet(Round& r);
  void fleet_tick();
  // The push connection (SUBSCRIBE sluice:fleet).
  void subscribe();
  void on_sub_connected(const boost::system::error_code& ec);
  void read_sub();
  void on_pushed(std::string_view payload);
  void drop_sub();

  Runtime& rt_;
  net::io_context& ioc_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  net::steady_timer timer_;     // the next round
  net::steady_timer deadline_;  // the round's answers
  bool stopped_ = false;
  std::unique_ptr<Round> round_;  // the round in flight, if any
  std::uint64_t seq_ = 0;         // its number: a handler of an earlier round does nothing
  bool live(std::uint64_t seq) const { return round_ && seq == seq_; }
  std::string id_;  // this instance, in sluice:instances
  View view_;
  std::vector<admission::FleetMember> fleet_;
  std::string sha_;  // the fleet script's SHA-1
  tcp::socket sub_;
  bool sub_connecting_ = false;
  std::string sub_out_;
  std::unique_ptr<std::array<char, 4096>> sub_buf_;
  struct ReaderDeleter {
    void operator()(void* r) const;
  };
  std::unique_ptr<void, ReaderDeleter> sub_reader_;
};

}  // namespace sluice::proxy
