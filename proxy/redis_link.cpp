#include "proxy/redis_link.hpp"

#include <hiredis/hiredis.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "proxy/runtime.hpp"

namespace sluice::proxy {

namespace {

using error_code = boost::system::error_code;

constexpr std::string_view kInstances = "sluice:instances";
constexpr std::string_view kKeyTtlMs = "3000";  // a window key outlives its window and the next

// One command, as RESP, appended to out.
void command(std::string& out, std::initializer_list<std::string_view> args) {
  std::array<const char*, 8> argv{};
  std::array<std::size_t, 8> len{};
  int argc = 0;
  for (auto a : args) {
    argv[static_cast<std::size_t>(argc)] = a.data();
    len[static_cast<std::size_t>(argc++)] = a.size();
  }
  char* cmd = nullptr;
  int n = redisFormatCommandArgv(&cmd, argc, argv.data(), len.data());
  if (n > 0) out.append(cmd, static_cast<std::size_t>(n));
  redisFreeCommand(cmd);
}

std::string key_of(std::uint64_t tenant, std::int64_t window) {
  auto h = tenants::hex(tenant);
  return "sluice:rate:" + std::string(h.data(), h.size()) + ":" + std::to_string(window);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct RedisLink::Round {
  Clock::time_point started = Clock::now();
  admission::Micros now{0};
  std::vector<tenants::FleetItem> items;
  std::string out;
  std::size_t expected = 0;  // replies
  std::size_t preamble = 0;  // AUTH and SELECT replies before the heartbeat's
  // Each reply as a number: an integer, a string's number, an array's sum of
  // them (HVALS); a nil: 0.
  std::vector<long long> replies;
  struct At {
    std::size_t current, previous;  // an item's HVALS replies
  };
  std::vector<At> at;
  std::array<char, 16 * 1024> buf{};
  redisReader* reader = redisReaderCreate();
  ~Round() { redisReaderFree(reader); }
};

RedisLink::RedisLink(Runtime& rt, net::io_context& ioc)
    : rt_(rt), ioc_(ioc), resolver_(ioc), socket_(ioc), timer_(ioc), deadline_(ioc) {
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rt.instance));
  id_ = id;
}

RedisLink::~RedisLink() { stop(); }

void RedisLink::start() {
  // Until a round is answered, each tenant gets its share of one instance: all of it.
  rt_.tenant_table->set_fleet(tenants::Table::Fleet::down, 1);
  begin();
  // The first round before anything is served (at most one interval): the
  // fleet's size is known from the first request on.
  while (round_ && ioc_.run_one_until(round_->started + rt_.config.redis_interval) > 0) {
  }
  if (ioc_.stopped()) ioc_.restart();
}

void RedisLink::stop() {
  stopped_ = true;
  round_.reset();  // its handlers, cancelled below, find no round
  ++seq_;
  error_code ignored;
  timer_.cancel();
  deadline_.cancel();
  resolver_.cancel();
  socket_.close(ignored);
}

void RedisLink::arm() {
  if (stopped_) return;
  timer_.expires_at(round_ ? round_->started + rt_.config.redis_interval
                           : Clock::now() + rt_.config.redis_interval);
  timer_.async_wait([this](const error_code& ec) {
    if (!ec) begin();
  });
}

// A round: connect if need be, then send.
void RedisLink::begin() {
  if (stopped_) return;
  if (round_) {  // still unanswered: its deadline fails it
    arm();
    return;
  }
  round_ = std::make_unique<Round>();
  ++seq_;
  deadline_.expires_at(round_->started + rt_.config.redis_interval);
  deadline_.async_wait([this, r = seq_](const error_code& ec) {
    if (!ec && live(r)) fail("no answer within SLUICE_REDIS_INTERVAL");
  });
  arm();
  if (socket_.is_open()) {  // connected in an earlier round (fail() closes it)
    send();
    return;
  }
  const auto& at = rt_.config.redis.at;
  resolver_.async_resolve(at.host, std::to_string(at.port),
                          [this, r = seq_](const error_code& ec, auto results) {
                            if (live(r)) on_resolved(ec, std::move(results));
                          });
}

void RedisLink::on_resolved(const error_code& ec, tcp::resolver::results_type results) {
  if (ec) return fail("cannot resolve " + rt_.config.redis.at.host + ": " + ec.message());
  net::async_connect(socket_, results, [this, r = seq_](const error_code& e, const tcp::endpoint&) {
    if (live(r)) on_connected(e);
  });
}

void RedisLink::on_connected(const error_code& ec) {
  if (ec) return fail("cannot connect: " + ec.message());
  error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  const auto& redis = rt_.config.redis;
  if (!redis.password.empty()) {
    if (redis.user.empty())
      command(round_->out, {"AUTH", redis.password});
    else
      command(round_->out, {"AUTH", redis.user, redis.password});
    ++round_->preamble;
  }
  if (redis.db != 0) {
    command(round_->out, {"SELECT", std::to_string(redis.db)});
    ++round_->preamble;
  }
  send();
}

void RedisLink::send() {
  Round& r = *round_;
  auto& table = *rt_.tenant_table;
  r.now = rt_.micros(Clock::now());
  r.items.reserve(64);
  table.collect(r.now, r.items);
  const auto now_ms = wall_ms();
  const auto stale = std::max<std::int64_t>(3 * rt_.config.redis_interval.count(), 2000);
  command(r.out, {"ZADD", kInstances, std::to_string(now_ms), id_});
  command(r.out, {"ZREMRANGEBYSCORE", kInstances, "-inf", std::to_string(now_ms - stale)});
  command(r.out, {"ZCARD", kInstances});
  // Per tenant and window, a hash of each instance's total in it: written
  // whole (HSET, not INCRBY), a round that timed out and still reaches Redis
  // later counts nothing twice; the fleet's count is the sum of its values.
  r.at.reserve(r.items.size());
  std::size_t n = r.preamble + 3;
  for (const auto& item : r.items) {
    const auto current = key_of(item.key, item.window);
    const auto previous = key_of(item.key, item.window - 1);
    command(r.out, {"HSET", current, id_, std::to_string(item.reported[0] + item.pending[0])});
    command(r.out, {"PEXPIRE", current, kKeyTtlMs});
    command(r.out, {"HVALS", current});
    Round::At at{n + 2, n + 3};
    n += 3;
    if (item.pending[1] > 0) {  // admitted at the end of the window before, not yet reported
      command(r.out, {"HSET", previous, id_, std::to_string(item.reported[1] + item.pending[1])});
      command(r.out, {"PEXPIRE", previous, kKeyTtlMs});
      at.previous += 2;
      n += 2;
    }
    command(r.out, {"HVALS", previous});
    ++n;
    r.at.push_back(at);
  }
  r.expected = n;
  r.replies.reserve(r.expected);
  net::async_write(socket_, net::buffer(r.out),
                   [this, rp = seq_](const error_code& ec, std::size_t) {
                     if (!live(rp)) return;
                     if (ec) return fail("cannot send: " + ec.message());
                     read();
                   });
}

void RedisLink::read() {
  socket_.async_read_some(
      net::buffer(round_->buf), [this, rp = seq_](const error_code& ec, std::size_t n) {
        if (!live(rp)) return;
        if (ec) return fail(ec == net::error::eof ? "Redis closed the connection" : ec.message());
        Round& r = *round_;
        if (redisReaderFeed(r.reader, r.buf.data(), n) != REDIS_OK) return fail("bad reply");
        void* reply = nullptr;
        while (r.replies.size() < r.expected) {
          if (redisReaderGetReply(r.reader, &reply) != REDIS_OK)
            return fail(std::string("bad reply: ") + r.reader->errstr);
          if (!reply) break;
          auto* rep = static_cast<redisReply*>(reply);
          long long v = 0;
          std::string error;
          if (rep->type == REDIS_REPLY_INTEGER)
            v = rep->integer;
          else if (rep->type == REDIS_REPLY_STRING)
            v = std::strtoll(rep->str, nullptr, 10);
          else if (rep->type == REDIS_REPLY_ARRAY)
            for (std::size_t i = 0; i < rep->elements; ++i)
              if (rep->element[i]->type == REDIS_REPLY_STRING)
                v += std::strtoll(rep->element[i]->str, nullptr, 10);
          if (rep->type == REDIS_REPLY_ERROR) error = std::string(rep->str, rep->len);
          freeReplyObject(rep);
          if (!error.empty()) return fail("Redis answered: " + error);
          r.replies.push_back(v);
        }
        if (r.replies.size() < r.expected) return read();
        finish();
      });
}

void RedisLink::finish() {
  Round& r = *round_;
  auto& table = *rt_.tenant_table;
  const int instances = static_cast<int>(std::max(1LL, r.replies[r.preamble + 2]));
  const double interval = std::chrono::duration<double>(rt_.config.redis_interval).count() /
                          std::chrono::duration<double>(tenants::Table::kWindow).count();
  const double elapsed = table.window_elapsed(r.now);
  for (std::size_t i = 0; i < r.items.size(); ++i) {
    const auto& item = r.items[i];
    tenants::FleetReading reading;
    reading.limit = item.rate * std::chrono::duration<double>(tenants::Table::kWindow).count();
    reading.current = static_cast<double>(r.replies[r.at[i].current]);
    reading.previous = static_cast<double>(r.replies[r.at[i].previous]);
    reading.mine = static_cast<double>(item.reported[0]) + item.pending[0] + item.reported[1] +
                   item.pending[1];
    reading.elapsed = elapsed;
    reading.interval = interval;
    reading.instances = instances;
    // Good for two intervals: a round that fails or is late leaves the
    // tenant to its share rather than to an allowance that no longer holds.
    table.set_allowance(
        item.key, tenants::fleet_allowance(reading), r.now,
        2 * std::chrono::duration_cast<admission::Micros>(rt_.config.redis_interval));
  }
  table.set_fleet(tenants::Table::Fleet::up, instances);
  if (!view_.up && view_.failed > 0)
    std::fprintf(stderr, "sluice: redis %s: answering again; the fleet's counts are in force\n",
                 rt_.config.redis.at.str().c_str());
  view_.up = true;
  view_.instances = instances;
  view_.tenants = r.items.size();
  view_.round_trip_s = std::chrono::duration<double>(Clock::now() - r.started).count();
  view_.last_ok = Clock::now();
  ++view_.ok;
  deadline_.cancel();
  round_.reset();
}

void RedisLink::fail(const std::string& why) {
  if (!round_) return;
  rt_.tenant_table->restore(round_->items);
  rt_.tenant_table->set_fleet(tenants::Table::Fleet::down, view_.instances);
  if (view_.up || view_.error != why)
    std::fprintf(stderr, "sluice: redis %s: %s; each tenant held to its share of its rate (1/%d)\n",
                 rt_.config.redis.at.str().c_str(), why.c_str(), view_.instances);
  view_.up = false;
  view_.error = why;
  ++view_.failed;
  error_code ignored;
  socket_.close(ignored);
  resolver_.cancel();
  deadline_.cancel();
  round_.reset();
}

}  // namespace sluice::proxy
