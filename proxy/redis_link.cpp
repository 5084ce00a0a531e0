#include "proxy/redis_link.hpp"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "proxy/fleet_script.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

namespace {

using error_code = boost::system::error_code;

constexpr std::string_view kInstances = "sluice:instances";
constexpr std::string_view kKeyTtlMs = "3000";  // a window key outlives its window and the next
constexpr std::string_view kFleetChannel = "sluice:fleet";

// One command, as RESP, appended to out.
void command(std::string& out, std::initializer_list<std::string_view> args) {
  std::array<const char*, 20> argv{};
  std::array<std::size_t, 20> len{};
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

std::string sha1_hex(std::string_view text) {
  std::array<unsigned char, SHA_DIGEST_LENGTH> d{};
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d.data());
  std::string out;
  for (unsigned char c : d) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
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
  // The fleet's: each upstream's EVALSHA reply, by its place among the replies.
  std::vector<std::size_t> fleet_at;
  std::vector<std::array<double, 8>> fleet;
  std::array<char, 16 * 1024> buf{};
  redisReader* reader = redisReaderCreate();
  ~Round() { redisReaderFree(reader); }
};

RedisLink::RedisLink(Runtime& rt, net::io_context& ioc)
    : rt_(rt),
      ioc_(ioc),
      resolver_(ioc),
      socket_(ioc),
      timer_(ioc),
      deadline_(ioc),
      sha_(sha1_hex(kFleetScript)),
      sub_(ioc) {
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rt.instance));
  id_ = id;
  view_.fleet = rt.config.fleet_capacity;
  if (view_.fleet)
    for (std::size_t u = 0; u < rt.config.upstreams.size(); ++u)
      fleet_.emplace_back(
          rt.instance, std::chrono::duration_cast<admission::Micros>(3 * rt.config.redis_interval));
}

void RedisLink::ReaderDeleter::operator()(void* r) const {
  redisReaderFree(static_cast<redisReader*>(r));
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
  sub_.close(ignored);
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
  fleet_tick();
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
  if (!fleet_.empty()) {  // once per connection: every round after runs it by its SHA-1
    command(round_->out, {"SCRIPT", "LOAD", kFleetScript});
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
  send_fleet(r);
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
          const std::size_t place = r.replies.size();
          const auto fleet = std::find(r.fleet_at.begin(), r.fleet_at.end(), place);
          if (fleet != r.fleet_at.end() && rep->type == REDIS_REPLY_ARRAY) {
            auto& out = r.fleet[static_cast<std::size_t>(fleet - r.fleet_at.begin())];
            for (std::size_t i = 0; i < std::min<std::size_t>(rep->elements, out.size()); ++i)
              if (rep->element[i]->type == REDIS_REPLY_STRING)
                out[i] = std::strtod(rep->element[i]->str, nullptr);
          } else if (rep->type == REDIS_REPLY_INTEGER)
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
  finish_fleet(r);
  if (!view_.up && view_.failed > 0)
    std::fprintf(stderr, "sluice: redis %s: answering again; the fleet's counts are in force\n",
                 rt_.config.redis.at.str().c_str());
  view_.up = true;
  view_.instances = instances;
  view_.tenants = r.items.size();
  view_.round_trip_s = std::chrono::duration<double>(Clock::now() - r.started).count();
  view_.last_ok = Clock::now();
  ++view_.ok;
  subscribe();
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

// ------------------------------------------------------------ the fleet's capacity

void RedisLink::send_fleet(Round& r) {
  if (fleet_.empty()) return;
  const auto interval_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(rt_.config.redis_interval).count();
  const std::string expiry = std::to_string(3 * interval_ms);
  const std::string hold = std::to_string(std::max<std::int64_t>(3000, 30 * interval_ms));
  const std::string max = number(rt_.config.admission.estimate.max);
  for (std::size_t u = 0; u < fleet_.size(); ++u) {
    const auto rep = fleet_[u].report(rt_.bulkhead(u));
    const auto& name = rt_.config.upstreams[u].name;
    const std::string key = "sluice:fleet:" + name;
    command(r.out, {"EVALSHA", sha_, "2", key, key + ":m", id_, expiry, hold,
                    std::to_string(rep.in_flight), std::to_string(rep.demand),
                    std::to_string(static_cast<int>(rep.change)), number(rep.khat),
                    number(rep.carrying), std::to_string(rep.epoch), max, kFleetChannel, name});
    r.fleet_at.push_back(r.expected++);
  }
  r.fleet.assign(fleet_.size(), {});
}

void RedisLink::finish_fleet(Round& r) {
  for (std::size_t u = 0; u < fleet_.size() && u < r.fleet.size(); ++u) {
    const auto& a = r.fleet[u];
    admission::FleetReply reply;
    reply.khat = a[0];
    reply.carrying = a[1];
    reply.epoch = static_cast<std::uint64_t>(a[2]);
    reply.members = static_cast<int>(a[3]);
    reply.slots = static_cast<int>(a[4]);
    reply.others = static_cast<int>(a[5]);
    reply.decreased = a[6] > 0;
    reply.others_held = static_cast<int>(a[7]);
    const bool was_local = fleet_[u].source() == admission::FleetMember::Source::local &&
                           fleet_[u].last_answer() > admission::Micros{0};
    fleet_[u].answered(rt_.bulkhead(u), reply, r.now);
    if (was_local)
      std::fprintf(stderr,
                   "sluice: redis %s: upstream %s: the fleet's capacity is in force again\n",
                   rt_.config.redis.at.str().c_str(), rt_.config.upstreams[u].name.c_str());
  }
}

void RedisLink::fleet_tick() {
  const auto now = rt_.micros(Clock::now());
  for (std::size_t u = 0; u < fleet_.size(); ++u)
    if (fleet_[u].tick(rt_.bulkhead(u), now))
      std::fprintf(stderr,
                   "sluice: redis %s: upstream %s: no fleet answer for 3 intervals; estimating "
                   "alone from its share (%d of the fleet's slots, %d instances)\n",
                   rt_.config.redis.at.str().c_str(), rt_.config.upstreams[u].name.c_str(),
                   fleet_[u].last().slots, fleet_[u].last().members);
}

void RedisLink::subscribe() {
  if (fleet_.empty() || stopped_ || sub_.is_open() || sub_connecting_) return;
  error_code ec;
  const auto at = socket_.remote_endpoint(ec);
  if (ec) return;
  sub_connecting_ = true;
  sub_.async_connect(at, [this](const error_code& e) { on_sub_connected(e); });
}

void RedisLink::on_sub_connected(const error_code& ec) {
  sub_connecting_ = false;
  if (stopped_) return;
  if (ec) return drop_sub();
  sub_out_.clear();
  const auto& redis = rt_.config.redis;
  if (!redis.password.empty()) {
    if (redis.user.empty())
      command(sub_out_, {"AUTH", redis.password});
    else
      command(sub_out_, {"AUTH", redis.user, redis.password});
  }
  command(sub_out_, {"SUBSCRIBE", kFleetChannel});
  sub_reader_.reset(redisReaderCreate());
  if (!sub_buf_) sub_buf_ = std::make_unique<std::array<char, 4096>>();
  net::async_write(sub_, net::buffer(sub_out_), [this](const error_code& e, std::size_t) {
    if (stopped_) return;
    if (e) return drop_sub();
    view_.subscribed = true;
    read_sub();
  });
}

void RedisLink::read_sub() {
  sub_.async_read_some(net::buffer(*sub_buf_), [this](const error_code& ec, std::size_t n) {
    if (stopped_) return;
    if (ec) return drop_sub();
    auto* reader = static_cast<redisReader*>(sub_reader_.get());
    if (redisReaderFeed(reader, sub_buf_->data(), n) != REDIS_OK) return drop_sub();
    for (;;) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader, &reply) != REDIS_OK) return drop_sub();
      if (!reply) break;
      auto* rep = static_cast<redisReply*>(reply);
      if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
          rep->element[0]->type == REDIS_REPLY_STRING &&
          std::string_view(rep->element[0]->str, rep->element[0]->len) == "message" &&
          rep->element[2]->type == REDIS_REPLY_STRING)
        on_pushed(std::string_view(rep->element[2]->str, rep->element[2]->len));
      freeReplyObject(rep);
    }
    read_sub();
  });
}

// "<upstream> <epoch> <khat> <k>", published by the fleet's script on a decrease.
void RedisLink::on_pushed(std::string_view payload) {
  const auto sp = payload.find(' ');
  if (sp == std::string_view::npos) return;
  const std::string_view name = payload.substr(0, sp);
  unsigned long long epoch = 0;
  double khat = 0, k = 0;
  const std::string rest(payload.substr(sp + 1));
  if (std::sscanf(rest.c_str(), "%llu %lf %lf", &epoch, &khat, &k) != 3) return;
  for (std::size_t u = 0; u < fleet_.size(); ++u) {
    if (rt_.config.upstreams[u].name != name) continue;
    const auto before = fleet_[u].last().epoch;
    fleet_[u].pushed(rt_.bulkhead(u), khat, k, epoch, rt_.micros(Clock::now()));
    if (fleet_[u].last().epoch != before) ++view_.pushed;
  }
}

void RedisLink::drop_sub() {
  error_code ignored;
  sub_.close(ignored);
  view_.subscribed = false;
}

}  // namespace sluice::proxy
