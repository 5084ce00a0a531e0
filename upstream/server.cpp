#include "upstream/server.hpp"

#include <sys/socket.h>

#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

namespace sluice::upstream {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

// Long idle timeout: a proxy's pooled connections should not be closed under it in tests.
constexpr auto kIdleTimeout = std::chrono::seconds(120);
constexpr auto kIoTimeout = std::chrono::seconds(60);
// A lingering close drains what the client still sends, so our 400 is not lost to a reset.
constexpr auto kLingerTimeout = std::chrono::seconds(2);
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
constexpr std::uint32_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kPiece = 16 * 1024;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr std::string_view kPortHeader = "X-Upstream-Port";

// /large repeats a 16-byte pattern; a piece holds a whole number of them, so every piece is
// the same bytes and one static buffer serves all responses.
const std::array<char, kPiece> kPattern = [] {
  std::array<char, kPiece> pattern{};
  constexpr std::string_view kUnit = "0123456789abcdef";
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = kUnit[i % kUnit.size()];
  return pattern;
}();

enum class Route {
  kOk,
  kEcho,
  kHeaders,
  kSlow,
  kSse,
  kStatus,
  kLarge,
  kStats,
  kWs,
  kDrop,
  kRaw,
  kBadRequest
};

enum class Seat { kHeld, kRefused, kQueued };

void note_high(std::atomic<std::uint64_t>& max, std::uint64_t now) {
  auto high = max.load(std::memory_order_relaxed);
  while (now > high && !max.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
  }
}

// What a client offered: `at_upstream` less the answers being written.
void note_offered(Stats& stats, std::uint64_t at_upstream) {
  const auto answering = stats.answering.load(std::memory_order_relaxed);
  note_high(stats.max_offered, at_upstream > answering ? at_upstream - answering : 0);
}

// Starts the oldest waiters while fewer than the capacity in force are in flight: after the
// scheduled capacity rose, a release hands on one slot and would leave the new ones idle.
void admit_waiters(Shared& shared) {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(shared.slot_queue.mutex);
    auto& stats = shared.stats;
    const auto capacity = shared.capacity.capacity();
    auto& waiters = shared.slot_queue.waiters;
    while (!waiters.empty() && stats.in_flight.load(std::memory_order_relaxed) < capacity) {
      ready.push_back(std::move(waiters.front()));
      waiters.pop_front();
      stats.waiting.fetch_sub(1, std::memory_order_relaxed);
      note_high(stats.max_in_flight, stats.in_flight.fetch_add(1, std::memory_order_relaxed) + 1);
    }
  }
  for (auto& resume : ready) resume();
}

// The capacity in force now (0: unlimited). Without a schedule it is --capacity; with one, a
// change that is due is applied first (`start`: this call may start the schedule's clock).
std::uint64_t capacity_now(Shared& shared, bool start) {
  auto& schedule = shared.capacity;
  if (schedule.scheduled() && schedule.advance(CapacitySchedule::Clock::now(), start) &&
      shared.options.queue_over_capacity) {
    admit_waiters(shared);
  }
  return schedule.capacity();
}

// A move-only lease on one in-flight slot (seastar's semaphore_units): the destructor gives the
// slot back, so a session that dies mid-request cannot leak it. With the queue shape a release
// hands the slot to the oldest waiter instead, unless the capacity has dropped below what is
// in flight: requests already in service finish, new ones start only below the new capacity.
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { release(); }

  // kHeld: a slot is held. kRefused (429 shape): the capacity in force is in flight, no slot is
  // held. kQueued (queue shape): as many are in flight, so `resume` waits in the slot queue;
  // a release runs it (on the releasing thread) once the slot is this request's, and the
  // session then calls adopt() on its own thread.
  Seat acquire(Shared& shared, std::function<void()>&& resume) {
    auto& stats = shared.stats;
    const auto capacity = capacity_now(shared, true);
    if (shared.options.queue_over_capacity && capacity != 0) {
      std::lock_guard lock(shared.slot_queue.mutex);
      note_offered(stats, stats.in_flight.load(std::memory_order_relaxed) +
                              stats.waiting.load(std::memory_order_relaxed) + 1);
      // Read under the lock: a rise applied since has admitted only the waiters queued before.
      if (stats.in_flight.load(std::memory_order_relaxed) >= shared.capacity.capacity()) {
        shared.slot_queue.waiters.push_back(std::move(resume));
        stats.queued.fetch_add(1, std::memory_order_relaxed);
        stats.waiting.fetch_add(1, std::memory_order_relaxed);
        return Seat::kQueued;
      }
      note_high(stats.max_in_flight, stats.in_flight.fetch_add(1, std::memory_order_relaxed) + 1);
      shared_ = &shared;
      return Seat::kHeld;
    }
    auto current = stats.in_flight.load(std::memory_order_relaxed);
    do {
      if (capacity != 0 && current >= capacity) {
        stats.rejected.fetch_add(1, std::memory_order_relaxed);
        auto refusing = stats.refusing.fetch_add(1, std::memory_order_relaxed) + 1;
        note_offered(stats, current + refusing);
        refusing_ = &shared;  // until its 429 is written (release())
        return Seat::kRefused;
      }
    } while (
        !stats.in_flight.compare_exchange_weak(current, current + 1, std::memory_order_relaxed));
    note_high(stats.max_in_flight, current + 1);
    note_offered(stats, current + 1 + stats.refusing.load(std::memory_order_relaxed));
    shared_ = &shared;
    return Seat::kHeld;
  }

  // The slot a release handed over (in_flight already counts it).
  void adopt(Shared& shared) { shared_ = &shared; }

  // Its answer is being written: from here the client may have it.
  void answering() {
    Shared* shared = shared_ ? shared_ : refusing_;
    if (shared == nullptr || answering_ != nullptr) return;
    answering_ = shared;
    shared->stats.answering.fetch_add(1, std::memory_order_relaxed);
  }

  void release() {
    if (answering_)
      std::exchange(answering_, nullptr)->stats.answering.fetch_sub(1, std::memory_order_relaxed);
    if (refusing_)
      std::exchange(refusing_, nullptr)->stats.refusing.fetch_sub(1, std::memory_order_relaxed);
    if (shared_ == nullptr) return;
    auto& shared = *shared_;
    shared_ = nullptr;
    if (shared.options.queue_over_capacity && shared.options.capacity != 0) {
      capacity_now(shared, true);
      std::function<void()> next;
      bool room = false;  // more slots than this one free (a rise): admit_waiters starts them
      {
        std::lock_guard lock(shared.slot_queue.mutex);
        auto& stats = shared.stats;
        auto& waiters = shared.slot_queue.waiters;
        const auto capacity = shared.capacity.capacity();
        const auto others = stats.in_flight.load(std::memory_order_relaxed) - 1;
        if (waiters.empty() || others >= capacity) {
          stats.in_flight.fetch_sub(1, std::memory_order_relaxed);
        } else {
          next = std::move(waiters.front());
          waiters.pop_front();
          stats.waiting.fetch_sub(1, std::memory_order_relaxed);
          room = !waiters.empty() && others + 1 < capacity;
        }
      }
      if (next) next();
      if (room) admit_waiters(shared);
      return;
    }
    shared.stats.in_flight.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  Shared* shared_ = nullptr;
  Shared* refusing_ = nullptr;   // a 429 being answered
  Shared* answering_ = nullptr;  // an answer being written
};

// The value of `name` in "a=1&b=2", or "" when absent.
std::string_view query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    const auto eq = part.find('=');
    if (part.substr(0, eq) == name) return eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return {};
}

template <class T>
T number_or(std::string_view text, T fallback) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return fallback;
  return value;
}

// Parse errors deserve a 400; anything else (reset, timeout, partial message) means the
// client is gone and there is nobody to answer.
bool is_parse_error(const error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category() &&
         ec != http::error::partial_message && ec != http::error::end_of_stream;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& shared)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), shared_(shared) {}

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::read_header, shared_from_this()));
  }

 private:
  using Parser = http::request_parser<http::buffer_body>;
  using SmallResponse = http::response<http::span_body<const char>>;
  using StreamResponse = http::response<http::buffer_body>;
  using StreamSerializer = http::response_serializer<http::buffer_body>;

  void read_header() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // Bodies are relayed or counted piece by piece, never stored, so any size is fine.
    parser_->body_limit(boost::none);
    stream_.expires_after(shared_.options.keepalive);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream) return shutdown();
    if (ec) return fail(ec);

    const auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    body_bytes_ = 0;
    classify(req.target());

    if (route_ != Route::kStats) {
      shared_.stats.requests.fetch_add(1, std::memory_order_relaxed);
      auto resume = [self = shared_from_this()] {
        net::post(self->stream_.get_executor(), [self] {
          self->lease_.adopt(self->shared_);
          self->seated();
        });
      };
      switch (lease_.acquire(shared_, std::move(resume))) {
        case Seat::kHeld:
          break;
        case Seat::kRefused:
          return reply_over_capacity();
        case Seat::kQueued:
          return;  // a release resumes it with seated()
      }
    }
    seated();
  }

  void seated() {
    const auto& req = parser_->get();
    if (!parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
      stream_.expires_after(kIoTimeout);
      net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                       beast::bind_front_handler(&Session::on_continue, shared_from_this()));
      return;
    }
    after_continue();
  }

  void classify(std::string_view target) {
    const auto question = target.find('?');
    const auto path = target.substr(0, question);
    const auto query =
        question == std::string_view::npos ? std::string_view{} : target.substr(question + 1);
    constexpr std::string_view kStatusPrefix = "/status/";
    if (path == "/echo") {
      route_ = Route::kEcho;
    } else if (path == "/headers") {
      route_ = Route::kHeaders;
    } else if (path == "/slow") {
      route_ = Route::kSlow;
      slow_ms_ = number_or<std::uint64_t>(query_param(query, "ms"), 0);
    } else if (path == "/sse") {
      route_ = Route::kSse;
      sse_count_ = number_or<std::uint64_t>(query_param(query, "n"), 5);
      sse_interval_ms_ = number_or<std::uint64_t>(query_param(query, "interval_ms"), 100);
      sse_echo_ = query_param(query, "echo");
    } else if (path == "/large") {
      route_ = Route::kLarge;
      large_left_ = number_or<std::uint64_t>(query_param(query, "bytes"), 0);
      large_chunked_ = query_param(query, "chunked") == "1";
    } else if (path == "/stats") {
      // reset_max=1: after this answer, the highest in flight counts from now on.
      route_ = Route::kStats;
      stats_reset_max_ = query_param(query, "reset_max") == "1";
    } else if (path == "/ws") {
      route_ = Route::kWs;
    } else if (path == "/raw") {
      // A misbehaving upstream: writes one broken answer, then closes.
      route_ = Route::kRaw;
      raw_kind_ = query_param(query, "kind");
    } else if (path == "/drop") {
      // A misbehaving upstream: reads the request, then closes (or, with
      // reset=1, resets) the connection without a byte of answer.
      route_ = Route::kDrop;
      drop_reset_ = query_param(query, "reset") == "1";
    } else if (path.substr(0, kStatusPrefix.size()) == kStatusPrefix) {
      status_ = number_or<unsigned>(path.substr(kStatusPrefix.size()), 0);
      // Quota headers as an API publishes them: ratelimit=LIMIT,REMAINING,RESET;
      // retry_after=SECONDS.
      ratelimit_ = query_param(query, "ratelimit");
      retry_after_ = query_param(query, "retry_after");
      route_ = status_ >= 200 && status_ <= 599 ? Route::kStatus : Route::kBadRequest;
    } else {
      route_ = Route::kOk;
    }
  }

  void on_continue(error_code ec, std::size_t) {
    if (ec) return;
    after_continue();
  }

  void after_continue() {
    const auto service_time = shared_.options.service_time;
    if (service_time.count() > 0 && route_ != Route::kSse && route_ != Route::kStats) {
      timer_.expires_after(service_time);
      timer_.async_wait(beast::bind_front_handler(&Session::on_service_time, shared_from_this()));
      return;
    }
    start_route();
  }

  void on_service_time(error_code ec) {
    if (ec) return;
    start_route();
  }

  void start_route() {
    if (route_ == Route::kEcho && !head_) return start_echo();
    drain_body();
  }

  // Reads and counts the request body so the connection can carry the next request.
  void drain_body() {
    if (parser_->is_done()) return respond();
    auto& body = parser_->get().body();
    body.data = piece_.data();
    body.size = piece_.size();
    stream_.expires_after(kIoTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_drained, shared_from_this()));
  }

  void on_drained(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail(ec);
    body_bytes_ += piece_.size() - parser_->get().body().size;
    drain_body();
  }

  void respond() {
    switch (route_) {
      case Route::kOk:
        return write_small(prepare_small(http::status::ok, "text/plain", "ok\n"));
      case Route::kEcho: {  // HEAD only: the answer a GET without a body would get
        const auto type = parser_->get()[http::field::content_type];
        return write_small(
            prepare_small(http::status::ok, type.empty() ? "application/octet-stream" : type, ""));
      }
      case Route::kHeaders:
        body_ = headers_json();
        return write_small(prepare_small(http::status::ok, "application/json", body_));
      case Route::kSlow:
        timer_.expires_after(std::chrono::milliseconds(slow_ms_));
        timer_.async_wait(beast::bind_front_handler(&Session::on_slow, shared_from_this()));
        return;
      case Route::kSse:
        return start_sse();
      case Route::kRaw:
        return write_raw();
      case Route::kDrop:
        return close_now(drop_reset_);
      case Route::kStatus: {
        body_ = "status " + std::to_string(status_) + "\n";
        auto& res = prepare_small(static_cast<http::status>(status_), "text/plain", body_);
        if (auto parts = split3(ratelimit_)) {
          res.set("RateLimit-Limit", (*parts)[0]);
          res.set("RateLimit-Remaining", (*parts)[1]);
          res.set("RateLimit-Reset", (*parts)[2]);
        }
        if (!retry_after_.empty()) res.set(http::field::retry_after, retry_after_);
        return write_small(res);
      }
      case Route::kLarge:
        return start_large();
      case Route::kWs:
        return start_ws();
      case Route::kStats:
        body_ = stats_json();
        if (stats_reset_max_) {
          auto& st = shared_.stats;
          auto now = st.in_flight.load(std::memory_order_relaxed);
          st.max_in_flight.store(now, std::memory_order_relaxed);
          st.max_offered.store(0, std::memory_order_relaxed);
          note_offered(st, now + st.waiting.load(std::memory_order_relaxed) +
                               st.refusing.load(std::memory_order_relaxed));
        }
        return write_small(prepare_small(http::status::ok, "application/json", body_));
      case Route::kBadRequest:
        return write_small(prepare_small(http::status::bad_request, "text/plain", "bad request\n"));
    }
  }

  void on_slow(error_code ec) {
    if (ec) return;
    write_small(prepare_small(http::status::ok, "text/plain", "slow\n"));
  }

  std::string headers_json() const {
    const auto& req = parser_->get();
    auto headers = nlohmann::ordered_json::array();
    for (const auto& field : req) {
      headers.push_back(nlohmann::ordered_json::array(
          {std::string(field.name_string()), std::string(field.value())}));
    }
    nlohmann::ordered_json doc;
    doc["method"] = std::string(req.method_string());
    doc["target"] = std::string(req.target());
    doc["version"] = req.version();
    doc["headers"] = std::move(headers);
    doc["body_bytes"] = body_bytes_;
    // Header bytes need not be UTF-8; replacing beats throwing on the data path.
    return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }

  std::string stats_json() const {
    const auto& stats = shared_.stats;
    // The capacity in force, with a due change applied (its clock is not started by /stats).
    const auto capacity = capacity_now(shared_, false);
    char text[256];
    const int n = std::snprintf(
        text, sizeof text,
        R"({"requests":%llu,"in_flight":%llu,"max_in_flight":%llu,"max_offered":%llu,"rejected":%llu,"queued":%llu,"waiting":%llu)",
        static_cast<unsigned long long>(stats.requests.load()),
        static_cast<unsigned long long>(stats.in_flight.load()),
        static_cast<unsigned long long>(stats.max_in_flight.load()),
        static_cast<unsigned long long>(stats.max_offered.load()),
        static_cast<unsigned long long>(stats.rejected.load()),
        static_cast<unsigned long long>(stats.queued.load()),
        static_cast<unsigned long long>(stats.waiting.load()));
    std::string out(text, static_cast<std::size_t>(n));
    // Unlimited has no number: "capacity" only when one is set.
    if (capacity != 0) out += ",\"capacity\":" + std::to_string(capacity);
    if (shared_.capacity.scheduled()) {
      const auto elapsed = shared_.capacity.elapsed(CapacitySchedule::Clock::now());
      out += ",\"schedule_ms\":";
      out += elapsed.count() < 0
                 ? std::string("null")
                 : std::to_string(
                       std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count());
    }
    out += '}';
    return out;
  }

  // /raw?kind=K: one broken answer, then the connection ends.
  //   bad_status     a status line that is not HTTP
  //   two_lengths    two different Content-Lengths
  //   short_length   a body shorter than its Content-Length
  //   short_chunked  chunks without the last chunk
  //   sse_reset      an SSE stream reset after two events
  //   sse_split      an SSE event sent in two halves 1 s apart, then the end
  void write_raw() {
    const std::string port = std::string(kPortHeader) + ": " + shared_.port_text + "\r\n";
    bool reset = false;
    if (raw_kind_ == "bad_status") {
      body_ = "HTTP/1.1 2x0 Maybe\r\n" + port + "Content-Length: 2\r\n\r\nok";
    } else if (raw_kind_ == "two_lengths") {
      body_ = "HTTP/1.1 200 OK\r\n" + port + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!";
    } else if (raw_kind_ == "short_length") {
      body_ = "HTTP/1.1 200 OK\r\n" + port + "Content-Length: 100\r\n\r\nonly part of it";
    } else if (raw_kind_ == "to_close") {
      body_ = "HTTP/1.1 200 OK\r\n" + port + "Connection: close\r\n\r\nall of it, to the close";
    } else if (raw_kind_ == "short_chunked") {
      body_ = "HTTP/1.1 200 OK\r\n" + port + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
    } else if (raw_kind_ == "sse_reset") {
      body_ = "HTTP/1.1 200 OK\r\n" + port +
              "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
              "f\r\ndata: event 1\n\n\r\nf\r\ndata: event 2\n\n\r\n";
      reset = true;
    } else if (raw_kind_ == "sse_split") {
      body_ = "HTTP/1.1 200 OK\r\n" + port +
              "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
              "10\r\nid: 1\ndata: half\r\n";
      stream_.expires_after(kIoTimeout);
      net::async_write(
          stream_, net::buffer(body_), [self = shared_from_this()](error_code ec, std::size_t) {
            if (ec) return;
            self->timer_.expires_after(std::chrono::seconds(1));
            self->timer_.async_wait([self](error_code) {
              self->body_ = "9\r\n and all\n\r\n1\r\n\n\r\n0\r\n\r\n";
              net::async_write(self->stream_, net::buffer(self->body_),
                               [self](error_code, std::size_t) { self->close_now(false); });
            });
          });
      return;
    } else {
      return write_small(prepare_small(http::status::bad_request, "text/plain", "unknown kind\n"));
    }
    stream_.expires_after(kIoTimeout);
    net::async_write(stream_, net::buffer(body_),
                     [self = shared_from_this(), reset](error_code, std::size_t) {
                       if (!reset) return self->close_now(false);
                       // Let the events reach the client before the reset discards the rest.
                       self->timer_.expires_after(std::chrono::milliseconds(50));
                       self->timer_.async_wait([self](error_code) { self->close_now(true); });
                     });
  }

  void close_now(bool reset) {
    error_code ec;
    auto& socket = stream_.socket();
    if (reset) socket.set_option(net::socket_base::linger(true, 0), ec);
    socket.close(ec);
  }

  // "a,b,c" -> {a, b, c}; none unless there are exactly three parts.
  static std::optional<std::array<std::string, 3>> split3(std::string_view v) {
    std::array<std::string, 3> out;
    for (std::size_t i = 0; i < 3; ++i) {
      auto comma = v.find(',');
      if ((comma == std::string_view::npos) != (i == 2) || v.empty()) return std::nullopt;
      out[i] = std::string(v.substr(0, comma));
      v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    }
    return out;
  }

  // Small responses point into a static string or into body_, so the body is not copied.
  SmallResponse& prepare_small(http::status status, std::string_view type, std::string_view body) {
    auto& res = small_.emplace();
    res.result(status);
    res.version(version_);
    res.set(kPortHeader, shared_.port_text);
    res.keep_alive(keep_alive_);
    // 204 and 304 carry no body, and 204 not even a Content-Length (RFC 9110 8.6).
    if (status == http::status::no_content || status == http::status::not_modified) return res;
    res.set(http::field::content_type, type);
    res.body() = {body.data(), body.size()};
    res.prepare_payload();
    // HEAD keeps the Content-Length a GET would get but sends no body.
    if (head_) res.body() = {};
    return res;
  }

  void write_small(SmallResponse& res) {
    lease_.answering();
    stream_.expires_after(kIoTimeout);
    http::async_write(stream_, res,
                      beast::bind_front_handler(&Session::on_small_written, shared_from_this()));
  }

  void on_small_written(error_code ec, std::size_t) {
    if (ec) return;
    finish();
  }

  void reply_over_capacity() {
    // An unread body would be taken for the next request; closing is simpler than draining
    // a body the client may hold back (Expect: 100-continue).
    if (!parser_->is_done()) keep_alive_ = false;
    auto& res = prepare_small(http::status::too_many_requests, "text/plain", "over capacity\n");
    res.set(http::field::retry_after, "1");
    write_small(res);
  }

  void fail(error_code ec) {
    if (!is_parse_error(ec)) return;  // the stream closes with the session
    version_ = 11;
    keep_alive_ = false;
    head_ = false;
    write_small(prepare_small(http::status::bad_request, "text/plain", "bad request\n"));
  }

  void finish() {
    lease_.release();
    if (!keep_alive_) return shutdown();
    read_header();
  }

  void shutdown() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(kLingerTimeout);
    linger();
  }

  void linger() {
    stream_.async_read_some(net::buffer(piece_),
                            beast::bind_front_handler(&Session::on_linger, shared_from_this()));
  }

  void on_linger(error_code ec, std::size_t) {
    if (ec) return;
    linger();
  }

  // A body of unknown length is chunked for HTTP/1.1 and ends with the connection for 1.0.
  void frame_unknown_length(StreamResponse& res) {
    if (version_ >= 11) {
      res.chunked(true);
    } else {
      keep_alive_ = false;
      res.keep_alive(false);
    }
  }

  StreamResponse& prepare_stream(std::string_view type) {
    auto& res = stream_res_.emplace();
    res.result(http::status::ok);
    res.version(version_);
    res.set(http::field::content_type, type);
    res.set(kPortHeader, shared_.port_text);
    res.keep_alive(keep_alive_);
    res.body().data = nullptr;
    res.body().more = true;
    return res;
  }

  // /echo: relay each piece of the request body as it is parsed, like Beast's relay example.
  void start_echo() {
    const auto& req = parser_->get();
    const auto type = req[http::field::content_type];
    auto& res = prepare_stream(type.empty() ? "application/octet-stream" : type);
    if (req.chunked()) {
      frame_unknown_length(res);
    } else {
      res.content_length(parser_->content_length().value_or(0));
    }
    serializer_.emplace(res);
    stream_.expires_after(kIoTimeout);
    http::async_write_header(
        stream_, *serializer_,
        beast::bind_front_handler(&Session::on_echo_written, shared_from_this()));
  }

  void echo_read() {
    if (parser_->is_done()) {
      auto& out = stream_res_->body();
      out.data = nullptr;
      out.size = 0;
      out.more = false;
      return echo_write();
    }
    auto& in = parser_->get().body();
    in.data = piece_.data();
    in.size = piece_.size();
    stream_.expires_after(kIoTimeout);
    http::async_read_some(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::on_echo_read, shared_from_this()));
  }

  void on_echo_read(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return;  // the response has started, so a broken body can only end the connection
    const auto got = piece_.size() - parser_->get().body().size;
    // A parse step may consume only chunk framing; an empty piece would end a chunked body.
    if (got == 0 && !parser_->is_done()) return echo_read();
    auto& out = stream_res_->body();
    out.data = got == 0 ? nullptr : piece_.data();
    out.size = got;
    out.more = !parser_->is_done();
    echo_write();
  }

  void echo_write() {
    stream_.expires_after(kIoTimeout);
    http::async_write(stream_, *serializer_,
                      beast::bind_front_handler(&Session::on_echo_written, shared_from_this()));
  }

  void on_echo_written(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return;
    if (serializer_->is_done()) return finish();
    echo_read();
  }

  // /large: the static pattern in 16 KiB pieces.
  void start_large() {
    auto& res = prepare_stream("application/octet-stream");
    if (large_chunked_) {
      frame_unknown_length(res);
    } else {
      res.content_length(large_left_);
    }
    serializer_.emplace(res);
    stream_.expires_after(kIoTimeout);
    if (head_) {
      http::async_write_header(
          stream_, *serializer_,
          beast::bind_front_handler(&Session::on_large_written, shared_from_this()));
      return;
    }
    large_next();
  }

  void large_next() {
    const auto n = std::min<std::uint64_t>(kPiece, large_left_);
    large_left_ -= n;
    auto& body = stream_res_->body();
    // The serializer only reads from the buffer.
    body.data = n == 0 ? nullptr : const_cast<char*>(kPattern.data());
    body.size = n;
    body.more = large_left_ > 0;
    stream_.expires_after(kIoTimeout);
    http::async_write(stream_, *serializer_,
                      beast::bind_front_handler(&Session::on_large_written, shared_from_this()));
  }

  void on_large_written(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return;
    if (head_ || serializer_->is_done()) return finish();
    large_next();
  }

  // /sse: the header at once, then one event per interval, each flushed as its own chunk.
  void start_sse() {
    auto& res = prepare_stream("text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    frame_unknown_length(res);
    serializer_.emplace(res);
    stream_.expires_after(kIoTimeout);
    http::async_write_header(
        stream_, *serializer_,
        beast::bind_front_handler(&Session::on_sse_header, shared_from_this()));
  }

  void on_sse_header(error_code ec, std::size_t) {
    if (ec) return abandon();
    if (head_) return finish();
    sse_sent_ = 0;
    sse_active_ = true;
    watch_peer();
    sse_wait();
  }

  // Between events nothing reads the socket, so a vanished client would go unnoticed until
  // a write fails; waiting for readability notices it at once without consuming any bytes.
  void watch_peer() {
    stream_.socket().async_wait(
        tcp::socket::wait_read,
        beast::bind_front_handler(&Session::on_peer_readable, shared_from_this()));
  }

  void on_peer_readable(error_code ec) {
    if (ec || !sse_active_) return;
    char byte;
    const auto n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // a pipelined request: the client is still there
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch_peer();
    abandon();
  }

  void sse_wait() {
    if (sse_sent_ == sse_count_) {
      auto& body = stream_res_->body();
      body.data = nullptr;
      body.size = 0;
      body.more = false;
      stream_.expires_after(kIoTimeout);
      http::async_write(stream_, *serializer_,
                        beast::bind_front_handler(&Session::on_sse_end, shared_from_this()));
      return;
    }
    const auto first = shared_.options.sse_first;
    timer_.expires_after(
        sse_sent_ == 0 && first.count() >= 0 ? first : std::chrono::milliseconds(sse_interval_ms_));
    timer_.async_wait(beast::bind_front_handler(&Session::on_sse_tick, shared_from_this()));
  }

  void on_sse_tick(error_code ec) {
    if (ec || !sse_active_) return;
    ++sse_sent_;
    body_ = "id: " + std::to_string(sse_sent_) + "\ndata: ";
    if (sse_sent_ == 1 && !sse_echo_.empty()) {
      // echo=NAME: the first event carries that request header's value (header values hold
      // no line breaks, so it stays one data line).
      body_ += parser_->get()[sse_echo_];
    } else {
      body_ += "event " + std::to_string(sse_sent_);
    }
    body_ += "\n\n";
    auto& body = stream_res_->body();
    body.data = body_.data();
    body.size = body_.size();
    body.more = true;
    stream_.expires_after(kIoTimeout);
    http::async_write(stream_, *serializer_,
                      beast::bind_front_handler(&Session::on_sse_event, shared_from_this()));
  }

  void on_sse_event(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return abandon();
    sse_wait();
  }

  void on_sse_end(error_code ec, std::size_t) {
    if (ec) return abandon();
    sse_active_ = false;
    error_code ignored;
    stream_.socket().cancel(ignored);  // ends watch_peer before the next read starts
    finish();
  }

  // /ws: an upgrade (WebSocket or any other protocol) answered 101, after
  // which every byte is echoed back until the peer closes.
  void start_ws() {
    if (!parser_->upgrade()) {
      body_ = "upgrade required\n";
      return write_small(prepare_small(http::status::upgrade_required, "text/plain", body_));
    }
    body_ = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: " +
            std::string(parser_->get()[http::field::upgrade]) +
            "\r\nConnection: Upgrade\r\nX-Upstream-Port: " + shared_.port_text + "\r\n\r\n";
    stream_.expires_after(kIoTimeout);
    net::async_write(stream_, net::buffer(body_),
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       if (ec) return self->abandon();
                       self->ws_echo();
                     });
  }

  void ws_echo() {
    if (buffer_.size() > 0) {  // bytes that came with the upgrade request
      auto n = net::buffer_copy(net::buffer(piece_), buffer_.data());
      buffer_.consume(n);
      return ws_write(n);
    }
    stream_.expires_after(kIdleTimeout);
    stream_.async_read_some(net::buffer(piece_),
                            [self = shared_from_this()](error_code ec, std::size_t n) {
                              if (ec) return self->abandon();
                              self->ws_write(n);
                            });
  }

  void ws_write(std::size_t n) {
    stream_.expires_after(kIoTimeout);
    net::async_write(stream_, net::buffer(piece_.data(), n),
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       if (ec) return self->abandon();
                       self->ws_echo();
                     });
  }

  // Closing cancels the peer watch and the timer's successor writes, so the session can die.
  void abandon() {
    sse_active_ = false;
    timer_.cancel();
    error_code ignored;
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer timer_;
  Shared& shared_;
  std::optional<Parser> parser_;
  std::optional<SmallResponse> small_;
  std::optional<StreamResponse> stream_res_;
  std::optional<StreamSerializer> serializer_;
  InFlight lease_;
  std::string body_;  // text of the current small body or SSE event; its capacity is reused
  std::array<char, kPiece> piece_;  // request body bytes on their way back or to nowhere

  // The current request.
  Route route_ = Route::kOk;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_ = false;
  std::uint64_t body_bytes_ = 0;
  std::uint64_t slow_ms_ = 0;
  unsigned status_ = 200;
  std::string ratelimit_, retry_after_;  // /status/N query options
  bool stats_reset_max_ = false;         // /stats?reset_max=1
  bool drop_reset_ = false;              // /drop?reset=1
  std::string raw_kind_;                 // /raw?kind=...
  std::uint64_t large_left_ = 0;
  bool large_chunked_ = false;
  std::uint64_t sse_count_ = 0;
  std::uint64_t sse_interval_ms_ = 0;
  std::uint64_t sse_sent_ = 0;
  std::string_view sse_echo_;  // echo=NAME of /sse, pointing into the parsed target
  bool sse_active_ = false;
};

}  // namespace

void CapacitySchedule::configure(std::uint64_t initial, std::vector<CapacityChange> changes) {
  changes_ = std::move(changes);
  capacity_.store(initial, std::memory_order_release);
  next_ = 0;
  next_at_.store(kNotStarted, std::memory_order_release);
  start_.store(kNotStarted, std::memory_order_release);
}

bool CapacitySchedule::advance(Clock::time_point now, bool start) {
  const auto t = now.time_since_epoch().count();
  const auto next_at = next_at_.load(std::memory_order_acquire);
  if (next_at == kNotStarted ? !start : t < next_at) return false;
  const auto ticks = [](std::chrono::milliseconds at) {
    return std::chrono::duration_cast<Clock::duration>(at).count();
  };
  bool started = false;
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    if (start_.load(std::memory_order_relaxed) == kNotStarted) {
      start_.store(t, std::memory_order_release);
      started = true;
    }
    const auto begin = start_.load(std::memory_order_relaxed);
    while (next_ < changes_.size() && begin + ticks(changes_[next_].at) <= t) {
      const auto capacity = changes_[next_++].capacity;
      changed |= capacity_.exchange(capacity, std::memory_order_acq_rel) != capacity;
    }
    next_at_.store(next_ < changes_.size() ? begin + ticks(changes_[next_].at)
                                           : std::numeric_limits<Clock::rep>::max(),
                   std::memory_order_release);
  }
  if (started && on_start) on_start();
  return changed;
}

std::optional<CapacitySchedule::Clock::time_point> CapacitySchedule::next_change() const {
  const auto next_at = next_at_.load(std::memory_order_acquire);
  if (next_at == kNotStarted || next_at == std::numeric_limits<Clock::rep>::max()) {
    return std::nullopt;
  }
  return Clock::time_point(Clock::duration(next_at));
}

CapacitySchedule::Clock::duration CapacitySchedule::elapsed(Clock::time_point now) const {
  const auto start = start_.load(std::memory_order_acquire);
  if (start == kNotStarted) return Clock::duration(-1);
  return now - Clock::time_point(Clock::duration(start));
}

void apply_capacity_schedule(Shared& shared) { capacity_now(shared, false); }

Listener::Listener(std::vector<net::io_context*> contexts, tcp::endpoint endpoint, Shared& shared)
    : contexts_(std::move(contexts)),
      acceptor_(*contexts_.front()),
      retry_timer_(*contexts_.front()),
      shared_(shared) {
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
}

tcp::endpoint Listener::local_endpoint() const { return acceptor_.local_endpoint(); }

void Listener::run() {
  net::dispatch(acceptor_.get_executor(),
                beast::bind_front_handler(&Listener::accept, shared_from_this()));
}

void Listener::stop() {
  error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
}

void Listener::accept() {
  // Round-robin over the contexts keeps even a handful of benchmark connections balanced.
  auto& context = *contexts_[next_++ % contexts_.size()];
  acceptor_.async_accept(context,
                         beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
}

void Listener::on_accept(error_code ec, tcp::socket socket) {
  if (!acceptor_.is_open()) return;
  if (ec) {
    // Out of descriptors and the like: back off rather than spin on the error.
    retry_timer_.expires_after(kAcceptRetry);
    retry_timer_.async_wait(beast::bind_front_handler(&Listener::on_retry, shared_from_this()));
    return;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  std::make_shared<Session>(std::move(socket), shared_)->run();
  accept();
}

void Listener::on_retry(error_code ec) {
  if (ec) return;
  accept();
}

}  // namespace sluice::upstream
