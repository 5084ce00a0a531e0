// A client connection: reads requests, routes them, admits or refuses them,
// relays them to an upstream connection from the Worker's pool and relays the
// response back, streaming bodies in both directions through one borrowed
// block. Beast's parser reads both directions; Sluice writes the heads and the
// body framing itself (one reused string, one gathered write per piece).
//
// Threading: a Session lives on one Worker and its handlers run on that
// Worker's only thread.
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <span>
#include <memory_resource>
#include <optional>

#include "proxy/request_fields.hpp"
#include "proxy/request_head.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using admission::Lane;

namespace {

constexpr std::size_t kReadChunk = 4096;
constexpr std::size_t kMaxResponseHeader = 64 * 1024;
// A write to the client still pending after this is a slow reader's (see write_client).
constexpr Clock::duration kStalledWrite = std::chrono::milliseconds(250);

std::string_view reason_phrase(int status) {
  return http::obsolete_reason(static_cast<http::status>(status));
}

bool is_idempotent(http::verb v) {
  switch (v) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::options:
    case http::verb::put:
    case http::verb::delete_:
    case http::verb::trace:
      return true;
    default:
      return false;
  }
}

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

bool contains_ci(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (iequals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

bool valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

using Alloc = HeadAlloc;
using Request = RequestHead;

enum class Phase : std::uint8_t {
  head,           // waiting for / reading a request head
  queued,         // waiting for a bulkhead slot
  acquire,        // waiting for an upstream connection
  request_body,   // reading the request body from the client
  send_upstream,  // writing the request to the upstream
  response_head,  // waiting for the upstream's response head
  response_body,  // reading the response body from the upstream
  write_client,   // writing to the client
  tunnel,         // WebSocket (or other upgrade) tunnel
  closing,
};

class Session : public Tracked,
                public PoolWaiter,
                public admission::Seat,
                public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& w, Socket s)
      : w_(w), cfg_(w.config()), st_(w.stats()), sock_(std::move(s)) {}

  ~Session() override {
    release_seat();
    if (lane_counted_) bump(st_.lane[admission::index(lane_)].in_flight, std::int64_t{-1});
    bump(st_.client_connections, std::int64_t{-1});
    w_.runtime().connections.fetch_sub(1, std::memory_order_relaxed);
    bump(w_.active_sessions, std::int64_t{-1});
  }

  void run() {
    bump(st_.client_connections, std::int64_t{1});
    bump(w_.active_sessions, std::int64_t{1});
    error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);
    if (cfg_.client_send_buffer != 0)
      sock_.set_option(net::socket_base::send_buffer_size(static_cast<int>(cfg_.client_send_buffer)), ec);
    auto ep = sock_.remote_endpoint(ec);
    if (!ec) {
      auto s = ep.address().to_string();
      client_len_ = std::min(s.size(), sizeof client_);
      std::memcpy(client_, s.data(), client_len_);
    }
    buf_.max_size(cfg_.max_header_bytes + kReadChunk);
    w_.track(*this);
    start_request();
  }

  // ---- Tracked ----
  void on_deadline() override {
    if (phase_ == Phase::write_client && Clock::now() < write_started_ + cfg_.send_timeout) {
      // The client reads slower than the upstream sends: the response now
      // waits on the client, not on the upstream, so its bulkhead slot goes
      // back (its upstream connection stays until the end or the cut).
      release_stalled_seat();
      deadline = write_started_ + cfg_.send_timeout;
      return;
    }
    timed_out_ = true;
    error_code ec;
    switch (phase_) {
      case Phase::queued: {
        // The lane's queue window is over: 503 queue_timeout.
        auto self = std::move(self_);
        auto now = Clock::now();
        bulkhead().cancel(*this, w_.runtime().micros(now));
        note_queue_wait(now);
        note_upstream_wait(now, queue_wait_);
        refuse_queue(now);
        break;
      }
      case Phase::acquire:
        // Queued for a connection: give up now. A connect under way has its
        // own deadline and will call back.
        if (w_.pool(upstream_).cancel(*this)) {
          auto self = std::move(self_);
          upstream_wait_ = Clock::now() - wait_start;
          respond_error(504, "upstream_busy", true);
        }
        break;
      case Phase::send_upstream:
      case Phase::response_head:
      case Phase::response_body:
        if (up_) up_->socket.cancel(ec);
        break;
      case Phase::head:
      case Phase::request_body:
        sock_.cancel(ec);
        break;
      case Phase::write_client:
        // A client that stopped reading: the write was not done within SLUICE_SEND_TIMEOUT.
        // The exchange is logged and counted as 408 send_timeout, never as the clean status.
        count_timeout(ClientTimeout::send);
        status_override_ = 408;
        reason_ = "send_timeout";
        sock_.close(ec);
        if (up_) up_->socket.close(ec);
        break;
      case Phase::tunnel:
      case Phase::closing:
        sock_.close(ec);
        if (up_) up_->socket.close(ec);
        break;
    }
  }

  void on_drain() override {
    error_code ec;
    if (phase_ == Phase::head && !request_started_) {
      sock_.cancel(ec);  // idle keep-alive connection: close it now
    } else if (phase_ == Phase::response_body && sse_ && up_) {
      end_stream_ = true;  // end the SSE stream cleanly at this event boundary
      up_->socket.cancel(ec);
    }
  }

  // ---- Seat ----
  // A bulkhead slot came free for this queued request (inside another
  // request's release or the heartbeat): carry on from this Worker's queue.
  void on_seated() override {
    deadline = Clock::time_point::max();
    phase_ = Phase::acquire;
    net::post(w_.ioc(), [self = std::move(self_)] {
      self->note_queue_wait(Clock::now());
      if (self->forwarded_) {  // it waited for an alternative after a failed connect
        self->acquire();
        return;
      }
      self->count_decision();
      self->forward();
    });
  }

  // ---- PoolWaiter ----

  // A connect failed. When every host of the upstream refuses, the upstream
  // closes. Nothing was sent, so the request may go on to another host, or to
  // an alternative, whatever its method. True when it went on.
  bool connect_failed(Clock::time_point now) {
    auto& rt = w_.runtime();
    auto now_us = rt.micros(now);
    bool all_down = w_.pool(upstream_).all_hosts_ejected(now);
    if (all_down) rt.gates[upstream_]->close(now_us, std::nullopt);
    if (moves_ >= kMaxMoves) return false;
    ++moves_;
    if (!all_down) {  // another host (still this upstream's probe, if it is one)
      bump(st_.upstream[upstream_].retries);
      acquire();
      return true;
    }
    if (route_->pin || route_->alternatives.empty() || !Seat::seated) return false;
    return go_elsewhere(now, Fallback::connect_failed);
  }

  // Moves a request that went out to an alternative: one that admits it now,
  // else it waits for one. False when none is open (it stays where it was).
  bool go_elsewhere(Clock::time_point now, Fallback why) {
    auto now_us = w_.runtime().micros(now);
    auto from = upstream_;
    leave_upstream(now_us);
    if (!delegated_ && move(now_us, why)) {
      acquire();
      return true;
    }
    if (!wait_on_alternative(why)) {
      bulkhead().seat_probe(*this, now_us);  // keeps a seat where it was, to end there
      upstream_ = from;
      return false;
    }
    if (reseat(now, now_us)) acquire();
    return true;
  }

  void acquire() {
    must_check = !is_idempotent(method_);
    phase_ = Phase::acquire;
    deadline = Clock::now() + cfg_.response_timeout;
    self_ = shared_from_this();
    w_.pool(upstream_).acquire(*this);
  }
  void on_connection(std::unique_ptr<UpstreamConnection> c, error_code ec) override {
    auto self = std::move(self_);
    auto now = Clock::now();
    upstream_wait_ = now - wait_start;
    note_upstream_wait(now, queue_wait_ + upstream_wait_);
    if (ec) {
      // A connect that failed or timed out: the upstream could not be reached.
      if (ec == net::error::timed_out) signal_ = admission::Signal::timeout;
      if (connect_failed(now)) return;
      respond_error(502,
                    ec == net::error::timed_out ? "upstream_connect_timeout" : "upstream_connect_failed",
                    !req_->is_done());
      return;
    }
    up_ = std::move(c);
    up_->buffer.clear();
    send_request();
  }

 private:
  // ---------------------------------------------------------------- request head
  void start_request() {
    phase_ = Phase::head;
    // The last request's fields go, and their memory with them, at once.
    res_.reset();
    req_.reset();
    arena_.release();
    req_.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(Alloc(&arena_)));
    req_->header_limit(static_cast<std::uint32_t>(cfg_.max_header_bytes));
    req_->body_limit(cfg_.max_body_bytes);
    request_sent_ = false;
    response_sent_ = false;
    request_started_ = false;
    timed_out_ = false;
    prebuffered_ = 0;
    body_stride_ = 0;
    body_budget_ = cfg_.body_timeout;
    retried_ = false;
    sse_ = false;
    header_sent_ = false;
    route_ = nullptr;
    path_ = {};
    reason_ = {};
    id_len_ = 0;
    status_override_ = 0;
    end_stream_ = false;
    decision_ = {};
    retry_after_ = -1;
    client_keep_alive_ = true;
    close_both_ = false;
    bytes_in_ = bytes_out_ = 0;
    upstream_wait_ = Clock::duration(-1);
    ttfb_ = Clock::duration(-1);
    queue_wait_ = Clock::duration(0);
    signal_ = admission::Signal::none;
    probe_ = false;
    closing_status_ = false;
    fresh = false;
    avoid_host = SIZE_MAX;
    forwarded_ = false;
    delegated_ = false;
    moves_ = 0;
    fallback_from_ = -1;
    if (buf_.size() > 0) {  // a pipelined request is already here
      begin_request();
      parse_head();
      return;
    }
    read_head();
  }

  void begin_request() {
    request_started_ = true;
    start_ = Clock::now();
    start_wall_ = std::chrono::system_clock::now();
    head_deadline_ = start_ + cfg_.header_timeout;
  }

  void read_head() {
    // Draining: a kept-alive connection is not waited on again (its last
    // response said Connection: close); a new one still gets its request
    // served while the listener is open.
    if (!request_started_ && !first_ && w_.runtime().draining.load(std::memory_order_relaxed)) {
      close();
      return;
    }
    deadline = request_started_ ? head_deadline_
                                : Clock::now() + (first_ ? cfg_.header_timeout : cfg_.idle_timeout);
    std::size_t room = buf_.max_size() - buf_.size();
    if (room == 0) {
      respond_error(431, "header_too_large", true);
      return;
    }
    sock_.async_read_some(buf_.prepare(std::min(room, kReadChunk)),
                          beast::bind_front_handler(&Session::on_read_head, shared_from_this()));
  }

  void on_read_head(error_code ec, std::size_t n) {
    if (ec) {
      if (timed_out_ && request_started_) {
        count_timeout(ClientTimeout::header);
        respond_error(408, "header_timeout", true);
      } else {
        // Nothing of a request came: a new connection that sent nothing within
        // SLUICE_HEADER_TIMEOUT, or a kept-alive one idle for SLUICE_IDLE_TIMEOUT.
        if (timed_out_) count_timeout(first_ ? ClientTimeout::header : ClientTimeout::idle);
        close();
      }
      return;
    }
    buf_.commit(n);
    if (!request_started_) begin_request();
    parse_head();
  }

  void parse_head() {
    // Empty lines (CRLF) before a request line are ignored (RFC 9112 section
    // 2.2): some clients send one after a body. Only whole CRLF pairs go.
    while (buf_.size() >= 2 && !req_->got_some()) {
      auto* p = static_cast<const char*>(buf_.data().data());
      if (p[0] != '\r' || p[1] != '\n') break;
      buf_.consume(2);
    }
    if (buf_.size() == 0) {
      read_head();
      return;
    }
    error_code ec;
    auto used = req_->put(buf_.data(), ec);
    // The head is read: check_request_head (proxy/request_head.hpp) decides on
    // what Beast accepted, with the raw bytes before they are consumed.
    HeadVerdict verdict;
    if (!ec)
      verdict = check_request_head(
          req_->get(), std::string_view(static_cast<const char*>(buf_.data().data()), used),
          req_->chunked());
    buf_.consume(used);
    if (ec == http::error::need_more) {
      read_head();
      return;
    }
    if (ec) {
      refuse_malformed(ec);
      return;
    }
    if (verdict.status != 0) {
      respond_error(verdict.status, verdict.why, true);
      return;
    }
    close_both_ = verdict.close_after;
    on_head();
  }

  void refuse_malformed(error_code ec) {
    int status = 400;
    std::string_view why = "bad_request";
    if (ec == http::error::header_limit) {
      status = 431;
      why = "header_too_large";
    } else if (ec == http::error::body_limit) {
      status = 413;
      why = "body_too_large";
    }
    respond_error(status, why, true);
  }

  void on_head() {
    auto& m = req_->get();
    std::string_view why;
    if (int status = check_target(m, why); status != 0) {
      respond_error(status, why, true);
      return;
    }
    auto target = m.target();
    path_ = target.substr(0, target.find('?'));
    client_keep_alive_ = req_->keep_alive() && !close_both_;
    client_version_ = m.version();
    method_ = m.method();
    upgrade_ = req_->upgrade();
    take_request_id();

    // Route: every request gets its route, lane and upstream before anything is forwarded.
    routes::RequestView view;
    view.method = m.method_string();
    view.path = path_;
    view.ctx = &m;
    view.header = [](const void* ctx, std::string_view name) -> std::string_view {
      auto& msg = *static_cast<const Request*>(ctx);
      auto it = msg.find(name);
      return it == msg.end() ? std::string_view{} : std::string_view(it->value());
    };
    if (auto accept = m.find(http::field::accept); accept != m.end())
      view.accepts_sse = contains_ci(accept->value(), "text/event-stream");
    if (auto len = req_->content_length()) view.body_bytes = *len;
    live_ = &w_.live();  // this request's settings, whatever a reload does meanwhile
    route_ = live_->routes.match(view);
    if (!route_) {
      respond_error(404, "no_route", !req_->is_done());
      return;
    }
    lane_ = route_->lane;
    upstream_ = route_->upstream;
    if (!req_->is_done() && !upgrade_ && m.find(http::field::expect) == m.end()) {
      prebuffer_body();
      return;
    }
    admit();
  }

  // Reads the body's first block (all of a small body) before admission, so a
  // client that trickles its body holds no slot and no upstream connection
  // while it does, only its own connection. With Expect: 100-continue the
  // client waits for the 100, which comes once an upstream connection is ready.
  void prebuffer_body() {
    if (!block_) block_ = w_.blocks().get();
    auto& body = req_->get().body();
    body.data = block_.get() + prebuffered_;
    body.size = BlockPool::kBlockSize - prebuffered_;
    read_body(&Session::on_prebuffered);
  }

  void on_prebuffered(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return body_failed(ec);
    std::size_t n = BlockPool::kBlockSize - prebuffered_ - req_->get().body().size;
    prebuffered_ += n;
    bytes_in_ += n;
    body_progress(n);
    if (prebuffered_ < BlockPool::kBlockSize && !req_->is_done()) {
      prebuffer_body();
      return;
    }
    admit();
  }

  // One read of request body from the client. The client's time is metered:
  // each kBlockSize of body (or its end) must arrive within SLUICE_BODY_TIMEOUT
  // of reading time, so a trickle that keeps making a little progress is cut
  // like a stalled one; time spent waiting on the upstream does not count.
  template <class Handler>
  void read_body(Handler handler) {
    phase_ = Phase::request_body;
    body_read_start_ = Clock::now();
    deadline = body_read_start_ + body_budget_;
    http::async_read_some(sock_, buf_, *req_,
                          beast::bind_front_handler(handler, shared_from_this()));
  }

  void body_progress(std::size_t n) {
    body_budget_ -= Clock::now() - body_read_start_;
    body_stride_ += n;
    if (body_stride_ >= BlockPool::kBlockSize || req_->is_done()) {
      body_stride_ = 0;
      body_budget_ = cfg_.body_timeout;
    }
  }

  void body_failed(error_code ec) {
    if (timed_out_) {
      count_timeout(ClientTimeout::body);
      respond_error(408, "body_timeout", true);
    } else if (ec == http::error::body_limit) {
      respond_error(413, "body_too_large", true);
    } else if (ec == net::error::eof || ec == net::error::connection_reset ||
               ec == http::error::partial_message) {
      abort();
    } else {
      respond_error(400, "bad_request", true);
    }
  }

  // Admission: a delegated request is seated at once; any other passes the
  // level gate (a relaxed load of the published level and one draw), then
  // asks its upstream's bulkhead for a slot, waiting up to its lane's window.
  void admit() {
    auto& rt = w_.runtime();
    level_ = static_cast<admission::Level>(rt.published.level.load(std::memory_order_relaxed));
    const auto mode = live_->gate.mode();
    if (mode == admission::Mode::off) {
      count_decision();
      forward();
      return;
    }
    auto now = Clock::now();
    if (delegate(now)) {
      count_decision();
      forward();
      return;
    }
    decision_ = live_->gate.admit(lane_, level_, w_.rng());
    if (decision_.outcome == admission::Outcome::shed) {
      count_decision();
      refuse(derived_level_wait());
      return;
    }
    Seat::lane = lane_;
    Seat::pinned = route_->pin;
    if (!seat(now)) return;  // queued, or refused
    count_decision();
    forward();
  }

  // Seats the request on its route's upstream or, when that refuses it now
  // (closed, or full past what the lane may borrow), on an alternative that
  // admits it now (seed 001 §8); a pinned route never moves. False when the
  // request was queued or refused.
  bool seat(Clock::time_point now) {
    auto& rt = w_.runtime();
    auto now_us = rt.micros(now);
    const bool may_move = !route_->pin && !route_->alternatives.empty();
    auto& gate = *rt.gates[upstream_];
    auto verdict = gate.ask(now_us, [&] { return rt.running_on(upstream_, w_); });
    if (verdict == admission::Verdict::probe) {
      // The one request a closed upstream lets through per probe interval.
      bulkhead().seat_probe(*this, now_us);
      probe_ = true;
      return true;
    }
    bool wait_here = !may_move;
    if (verdict == admission::Verdict::closed) {
      if (may_move && move(now_us, Fallback::closed)) return true;
      // No alternative admits it now: it waits for an open one, not for a closed upstream.
      if (!may_move || !wait_on_alternative(Fallback::closed)) {
        if (live_->gate.mode() == admission::Mode::observe) {
          mark_would_shed(admission::Reason::pool_closed);
          return true;
        }
        refuse_closed(now);
        return false;
      }
      wait_here = true;
    }
    if (bulkhead().ask(*this, now_us, w_.rng(), nullptr, wait_here)) return true;
    if (!wait_here) {
      if (move(now_us, Fallback::full)) return true;
      // No alternative admits it now: it waits for its own upstream.
      if (bulkhead().ask(*this, now_us, w_.rng())) return true;
    }
    if (live_->gate.mode() == admission::Mode::observe) {
      // Observe mode forwards everything: a request that would have waited
      // goes now, unseated, and counts as would_shed.
      bulkhead().cancel(*this, now_us);
      mark_would_shed(admission::Reason::queue_timeout);
      return true;
    }
    return wait_or_refuse(now);
  }

  // Not seated: it waits in its lane's queue until the window ends, or, with a
  // zero window, it is refused now. False either way: it does not go on yet.
  bool wait_or_refuse(Clock::time_point now) {
    if (Seat::queued) {
      phase_ = Phase::queued;
      queue_start_ = now;
      deadline = now + std::chrono::duration_cast<Clock::duration>(
                           live_->lanes.queue_window[admission::index(lane_)]);
      self_ = shared_from_this();
      return false;
    }
    refuse_queue(now);
    return false;
  }

  void mark_would_shed(admission::Reason why) {
    if (decision_.outcome == admission::Outcome::admitted)
      decision_ = {admission::Outcome::would_shed, why};
  }

  // Moves the request to one of its route's alternatives that admits it now:
  // open, and its lane's rules allow it there. Among several, Thompson
  // sampling picks (success counts and mean latency of this thread's bulkheads).
  // Alternatives Thompson sampling picks among: what each thread's bulkhead
  // knows of them (successes, failures, mean latency). No allocation.
  struct Candidates {
    static constexpr std::size_t kMax = 16;
    std::array<std::size_t, kMax> ids{};
    std::array<admission::Candidate, kMax> known{};
    std::size_t n = 0;
    bool full() const { return n == kMax; }
    void add(std::size_t alt, const admission::Bulkhead& b) {
      ids[n] = alt;
      known[n++] = {b.successes(), b.failures(), b.mean_latency()};
    }
    std::size_t pick(admission::Rng& rng) const {
      return admission::thompson_pick(std::span(known.data(), n), rng);
    }
    void drop(std::size_t i) {
      ids[i] = ids[n - 1];
      known[i] = known[--n];
    }
  };

  bool move(admission::Micros now_us, Fallback why) {
    auto& rt = w_.runtime();
    Candidates c;
    for (std::size_t alt : route_->alternatives) {
      if (alt == upstream_ || c.full()) continue;
      auto verdict = rt.gates[alt]->ask(now_us, [&] { return rt.running_on(alt, w_); });
      if (verdict == admission::Verdict::probe) {
        // A closed alternative's probe is due: this request is it.
        w_.bulkhead(alt).seat_probe(*this, now_us);
        probe_ = true;
        moved_to(alt, why);
        return true;
      }
      if (verdict == admission::Verdict::closed) continue;
      auto& b = w_.bulkhead(alt);
      if (admission::decide(b.lanes(), b.census(now_us), lane_, 0.0) == admission::Hold::none)
        c.add(alt, b);
    }
    while (c.n > 0) {
      auto i = c.pick(w_.rng());
      if (w_.bulkhead(c.ids[i]).ask(*this, now_us, w_.rng(), nullptr, false)) {
        moved_to(c.ids[i], why);
        return true;
      }
      c.drop(i);
    }
    return false;
  }

  // The open alternative a request of a closed upstream waits on when none
  // admits it now (Thompson sampling among them); false when all are closed.
  bool wait_on_alternative(Fallback why) {
    auto& rt = w_.runtime();
    Candidates c;
    for (std::size_t alt : route_->alternatives)
      if (alt != upstream_ && !c.full() && !rt.gates[alt]->closed.load(std::memory_order_relaxed))
        c.add(alt, w_.bulkhead(alt));
    if (c.n == 0) return false;
    moved_to(c.ids[c.pick(w_.rng())], why);
    return true;
  }

  void moved_to(std::size_t alt, Fallback why) {
    bump(st_.upstream[upstream_].fallbacks[alt][static_cast<std::size_t>(why)]);
    if (fallback_from_ < 0) {
      fallback_from_ = static_cast<int>(upstream_);
      fallback_why_ = why;
    }
    upstream_ = alt;
  }

  // Before a request that went out moves on: its seat here goes back with what
  // the upstream said (a heavy-cap unit stays with it), and a probe here failed.
  void leave_upstream(admission::Micros now_us) {
    if (probe_) {
      w_.runtime().gates[upstream_]->probe_ended(false);
      probe_ = false;
    }
    if (!Seat::seated) return;
    if (bulkhead().release(*this, signal_, up_ttfb_, now_us, w_.rng(), /*keep_cap=*/true))
      bump(st_.upstream[upstream_].exhausted[static_cast<std::size_t>(bulkhead().estimate().why())]);
    signal_ = admission::Signal::none;
    Seat::lane = lane_;
  }

  // Seats a request that already went out (counted, its lease open) on the
  // upstream it moved to: a delegated one at once, any other by the lane
  // rules, waiting within its lane's window; observe mode never waits.
  // Returns false when it was refused (the 503 is written).
  bool reseat(Clock::time_point now, admission::Micros now_us) {
    if (delegated_) {
      bulkhead().seat_delegated(*this, now_us);
      return true;
    }
    if (live_->gate.mode() == admission::Mode::observe) return true;  // forwarded unseated
    if (bulkhead().ask(*this, now_us, w_.rng())) return true;
    return wait_or_refuse(now);
  }

  // A request for a closed upstream that may not move: 503 pool_closed, to come
  // back when the next probe may have reopened it.
  void refuse_closed(Clock::time_point now) {
    decision_ = {admission::Outcome::shed, admission::Reason::pool_closed};
    count_decision();
    auto& rt = w_.runtime();
    auto hint = rt.gates[upstream_]->reopen_hint(rt.micros(now));
    refuse(std::chrono::ceil<admission::Millis>(hint));
  }

  // A request carrying the token of a live lease is part of that lease's work:
  // seated at once on the parent's lane (refusing it could only stall the parent).
  bool delegate(Clock::time_point now) {
    if (!cfg_.admission.delegation) return false;
    auto& m = req_->get();
    auto it = m.find(kLeaseHeader);
    if (it == m.end()) return false;
    auto& rt = w_.runtime();
    auto id = admission::parse_lease_token(rt.lease_key, it->value());
    if (!id || id->worker >= rt.workers.size() ||
        !rt.workers[id->worker]->leases().live(id->slot, id->generation))
      return false;  // forged, from another instance, or its lease has ended: nothing earned
    lane_ = id->lane;
    Seat::lane = lane_;
    bulkhead().seat_delegated(*this, rt.micros(now));
    delegated_ = true;
    bump(st_.lane[admission::index(lane_)].delegated);
    return true;
  }

  void count_decision() {
    bump(st_.lane[admission::index(lane_)]
             .decisions[static_cast<std::size_t>(decision_.outcome)]
                       [static_cast<std::size_t>(decision_.reason)]);
  }

  // The upstream wait the controller reads: for a bulkhead slot, then for a
  // connection. A request refused at the end of its window waited all of it.
  void note_upstream_wait(Clock::time_point now, Clock::duration wait) {
    st_.upstream[upstream_].wait.observe(std::chrono::duration<double>(wait).count());
    w_.waits.add(now, wait, upstream_);
  }

  void note_queue_wait(Clock::time_point now) {
    queue_wait_ = now - queue_start_;
    st_.lane[admission::index(lane_)].queue_wait.observe(
        std::chrono::duration<double>(queue_wait_).count());
  }

  admission::Bulkhead& bulkhead() { return w_.bulkhead(upstream_); }

  // Admitted: counted in flight, given a lease token, and on to the upstream.
  void forward() {
    forwarded_ = true;
    auto& m = req_->get();
    if (Seat::seated) {
      if (lane_ == Lane::heavy) w_.note_heavy();
      lease_open_ = cfg_.admission.delegation && w_.leases().open(lease_slot_, lease_gen_);
    }
    bump(st_.lane[admission::index(lane_)].in_flight, std::int64_t{1});
    lane_counted_ = true;

    expect_continue_ = false;
    if (auto it = m.find(http::field::expect); it != m.end()) {
      if (!iequals(it->value(), "100-continue")) {
        respond_error(417, "expectation", true);
        return;
      }
      expect_continue_ = !req_->is_done();  // Sluice answers it; Expect is not forwarded
    }
    acquire();
  }

  // Request id: the client's when it sent a usable one, else a fresh one.
  void take_request_id() {
    auto& m = req_->get();
    if (auto it = m.find("x-request-id"); it != m.end() && valid_request_id(it->value())) {
      id_len_ = it->value().size();
      std::memcpy(id_, it->value().data(), id_len_);
    } else {
      id_len_ = static_cast<std::size_t>(w_.request_id(id_) - id_);
    }
  }

  // A level refusal's Retry-After: when the controller expects the lane back.
  std::optional<admission::Millis> derived_level_wait() const {
    auto readmit = w_.runtime().published.readmit_ms[admission::index(lane_)].load(
        std::memory_order_relaxed);
    if (readmit < 0) return std::nullopt;
    return admission::Millis(readmit);
  }

  // No slot within the lane's window. Retry-After (seed 004): the larger of the
  // window waited and the age of the lane's youngest live lease, the time
  // since its capacity last turned over (heavy: across every thread).
  void refuse_queue(Clock::time_point now) {
    decision_ = {admission::Outcome::shed, admission::Reason::queue_timeout};
    if (!forwarded_) count_decision();  // else it was counted admitted, before its connect failed
    auto& rt = w_.runtime();
    auto now_us = rt.micros(now);
    std::optional<admission::Micros> youngest;
    if (lane_ == Lane::heavy) {
      for (auto& w : rt.workers) {
        auto y = w.get() == &w_ ? -1 : w->youngest_heavy_us.load(std::memory_order_relaxed);
        if (y >= 0 && (!youngest || admission::Micros(y) > *youngest)) youngest = admission::Micros(y);
      }
      for (std::size_t u = 0; u < cfg_.upstreams.size(); ++u)
        if (auto y = w_.bulkhead(u).youngest(lane_); y && (!youngest || *y > *youngest)) youngest = y;
    } else {
      youngest = bulkhead().youngest(lane_);
    }
    std::optional<admission::Micros> age;
    if (youngest) age = std::max(admission::Micros{0}, now_us - *youngest);
    auto waited = std::chrono::duration_cast<admission::Micros>(queue_wait_);
    refuse(admission::lease_retry_after(waited, age));
  }

  // SPEC's refusal: 503, Retry-After derived from what was observed, clamped to
  // the lane's band with jitter that only adds, X-Sluice-Reject, and a JSON body.
  void refuse(std::optional<admission::Millis> derived) {
    auto lane = admission::index(lane_);
    retry_after_ = admission::retry_after_seconds(derived, live_->retry[lane], w_.rng());
    auto& b = own_body_;
    b.clear();
    b += "{\"error\":\"admission_rejected\",\"reason\":\"";
    b += admission::to_string(decision_.reason);
    b += "\",\"lane\":\"";
    b += admission::to_string(lane_);
    b += "\",\"level\":";
    append_number(b, static_cast<std::uint64_t>(level_));
    b += ",\"retry_after_s\":";
    append_number(b, static_cast<std::uint64_t>(retry_after_));
    b += ",\"request_id\":\"";
    append_json_escaped(b, std::string_view(id_, id_len_));
    b += "\"}\n";
    write_own_response(503, !req_->is_done());
  }

  // The head Sluice sends upstream, written once into a reused string: the
  // client's fields minus hop-by-hop ones (and those Connection names), the
  // framing as Sluice read it, and the forwarding headers.
  void build_request_head() {
    auto& m = req_->get();
    std::string& h = out_;
    h.clear();
    auto passed = append_upstream_head(h, *req_, close_both_);
    if (!passed.has_host) append_field(h, "Host", cfg_.upstreams[upstream_].hosts.front().str());
    h += "X-Forwarded-For: ";
    if (passed.forwarded_for && !cfg_.forwarded_for_replace)  // replace: Sluice is the edge
      for (const auto& f : m)
        if (iequals(f.name_string(), "x-forwarded-for")) {
          h += f.value();
          h += ", ";
        }
    h += std::string_view(client_, client_len_);
    h += "\r\nX-Real-IP: ";
    h += std::string_view(client_, client_len_);
    h += "\r\nX-Forwarded-Proto: http\r\n";
    if (lease_open_) {
      // This request's lease: a request the upstream makes back through
      // Sluice with it is seated at once on this lane (delegation).
      auto& rt = w_.runtime();
      admission::LeaseId id{static_cast<std::uint32_t>(w_.index()), lease_slot_, lease_gen_, lane_};
      char token[admission::kLeaseTokenMax];
      h += kLeaseHeader;
      h += ": ";
      h.append(token, admission::format_lease_token(rt.lease_key, id, token));
      h += "\r\n";
    }
    end_head(h);
  }

  // The upstream's response fields the client may see: not the hop-by-hop ones
  // (keep_upgrade: Connection and Upgrade of a 101 do pass), nor X-Request-Id,
  // which is Sluice's to state.
  void append_upstream_fields(std::string& h, bool keep_upgrade) {
    const auto& m = res_->get();
    for (const auto& f : m) {
      if (skip_field(m, f, keep_upgrade) || iequals(f.name_string(), "x-request-id")) continue;
      append_field(h, f.name_string(), f.value());
    }
  }

  // Every head Sluice writes ends with the request's id.
  void end_head(std::string& h) const {
    h += "X-Request-Id: ";
    h += std::string_view(id_, id_len_);
    h += "\r\n\r\n";
  }

  // "HTTP/1.x NNN reason\r\n"; the standard reason when none is given.
  static void append_status_line(std::string& h, bool http11, int status, std::string_view reason) {
    h += http11 ? "HTTP/1.1 " : "HTTP/1.0 ";
    char code[4] = {static_cast<char>('0' + status / 100), static_cast<char>('0' + status / 10 % 10),
                    static_cast<char>('0' + status % 10), ' '};
    h.append(code, 4);
    h += reason.empty() ? reason_phrase(status) : reason;
    h += "\r\n";
  }

  static void append_number(std::string& h, std::uint64_t n) {
    char tmp[24];
    auto r = std::to_chars(tmp, tmp + sizeof tmp, n);
    h.append(tmp, r.ptr);
  }

  static void append_number_field(std::string& h, std::string_view name, std::uint64_t n) {
    h += name;
    h += ": ";
    append_number(h, n);
    h += "\r\n";
  }

  // One gathered write: the head if it is still to go, then a body piece framed
  // as the outgoing message needs (chunked: size line, data, CRLF; the last
  // chunk after the last piece).
  template <class Handler>
  void write_piece(Socket& to, std::string& head, bool chunked, const char* data, std::size_t n,
                   bool last, Handler&& handler) {
    std::string_view tail;
    std::size_t line = 0;
    if (chunked) {
      if (n > 0) {
        auto r = std::to_chars(chunk_line_, chunk_line_ + 16, n, 16);
        r.ptr[0] = '\r';
        r.ptr[1] = '\n';
        line = static_cast<std::size_t>(r.ptr + 2 - chunk_line_);
        tail = last ? std::string_view("\r\n0\r\n\r\n") : std::string_view("\r\n");
      } else if (last) {
        tail = "0\r\n\r\n";
      }
    }
    // The head moves to sending_, which holds it until the write is done (the
    // previous write, if any, is done now); swapping moves no bytes.
    sending_.clear();
    sending_.swap(head);
    std::array<net::const_buffer, 4> bufs{net::buffer(sending_), net::buffer(chunk_line_, line),
                                          net::buffer(data, n), net::buffer(tail.data(), tail.size())};
    std::size_t total = sending_.size() + line + n + tail.size();
    if (total == 0) {  // nothing to say (a raw body's end): carry on without a write
      handler(error_code{}, 0);
      return;
    }
    net::async_write(to, bufs, std::forward<Handler>(handler));
  }

  // ---------------------------------------------------------------- request out
  void send_request() {
    phase_ = Phase::send_upstream;
    sent_at_ = Clock::now();
    build_request_head();
    if (expect_continue_ && buf_.size() == 0) {
      expect_continue_ = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      phase_ = Phase::write_client;
      deadline = Clock::now() + cfg_.send_timeout;
      net::async_write(sock_, net::buffer(kContinue.data(), kContinue.size()),
                       [self = shared_from_this()](error_code ec, std::size_t) {
                         if (ec) return self->abort();
                         self->request_body_step();
                       });
      return;
    }
    request_body_step();
  }

  // Reads the next piece of the request body (or none) and writes it with the
  // head still unsent, so a small request leaves in one write.
  void request_body_step() {
    if (prebuffered_ > 0) {  // read before admission: it leaves with the head
      auto n = std::exchange(prebuffered_, 0);
      write_upstream(n);
      return;
    }
    if (req_->is_done()) {
      write_upstream(0);
      return;
    }
    if (!block_) block_ = w_.blocks().get();
    auto& body = req_->get().body();
    body.data = block_.get();
    body.size = BlockPool::kBlockSize;
    read_body(&Session::on_request_body);
  }

  void on_request_body(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return body_failed(ec);
    std::size_t n = BlockPool::kBlockSize - req_->get().body().size;
    body_progress(n);
    if (n == 0 && !req_->is_done()) {  // a chunk header alone: read on
      request_body_step();
      return;
    }
    bytes_in_ += n;
    write_upstream(n);
  }

  void write_upstream(std::size_t n) {
    phase_ = Phase::send_upstream;
    deadline = Clock::now() + cfg_.send_timeout;
    request_sent_ = req_->is_done();
    write_piece(up_->socket, out_, req_->chunked(), n ? block_.get() : nullptr, n, request_sent_,
                beast::bind_front_handler(&Session::on_upstream_written, shared_from_this()));
  }

  void on_upstream_written(error_code ec, std::size_t) {
    if (ec) {
      upstream_failed(ec, "upstream_write");
      return;
    }
    if (!request_sent_) {
      request_body_step();
      return;
    }
    read_response_head();
  }

  // An upstream failed before any of its response reached the client.
  void upstream_failed(error_code ec, std::string_view what) {
    bool timed_out = timed_out_;
    std::size_t failed_host = up_ ? up_->host : SIZE_MAX;
    release_upstream(false);
    bool cut = ec == net::error::eof || ec == net::error::connection_reset ||
               ec == net::error::broken_pipe || ec == http::error::end_of_stream;
    if (cut && failed_host != SIZE_MAX) w_.pool(upstream_).close_idle(failed_host);
    // The connection closed or reset before any response byte (a kept-alive
    // connection the upstream had already closed, or an upstream going down):
    // replay once, on a fresh connection (the pool's choice of host; an
    // alternative when every host then refuses), but only a request that is
    // idempotent and whose body (none) can be sent again. Nothing reached the
    // client yet.
    if (!timed_out && !retried_ && is_idempotent(method_) && bytes_in_ == 0 && req_->is_done() &&
        cut) {
      retried_ = true;
      fresh = true;
      avoid_host = failed_host;
      bump(st_.upstream[upstream_].retries);
      // To another host, or, with one host, to an alternative when the route has one.
      if (w_.pool(upstream_).host_count() == 1 && Seat::seated && !route_->pin &&
          !route_->alternatives.empty() && go_elsewhere(Clock::now(), Fallback::replay))
        return;
      acquire();
      return;
    }
    if (timed_out) {
      bump(st_.upstream[upstream_].timeouts);
      signal_ = admission::Signal::timeout;
      respond_error(504, "upstream_timeout", true);
    } else {
      respond_error(502, what, !req_->is_done() || !client_keep_alive_);
    }
  }

  // ---------------------------------------------------------------- response
  void read_response_head() {
    phase_ = Phase::response_head;
    deadline = Clock::now() + cfg_.response_timeout;
    res_.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(Alloc(&arena_)));
    res_->header_limit(kMaxResponseHeader);
    res_->body_limit(boost::none);
    if (method_ == http::verb::head) res_->skip(true);
    http::async_read_header(up_->socket, up_->buffer, *res_,
                            beast::bind_front_handler(&Session::on_response_head, shared_from_this()));
  }

  void on_response_head(error_code ec, std::size_t) {
    if (ec) {
      upstream_failed(ec, "upstream_bad_response");
      return;
    }
    auto& m = res_->get();
    int status = m.result_int();
    if (status >= 100 && status < 200 && status != 101) {
      read_response_head();  // interim responses are Sluice's to answer, not forwarded
      return;
    }
    auto now = Clock::now();
    ttfb_ = now - start_;
    up_ttfb_ = std::chrono::duration_cast<admission::Micros>(now - sent_at_);
    if (Seat::seated) signal_ = bulkhead().classify(status, up_ttfb_);
    read_quota(m, status, now);
    if (status == 101) {
      if (!upgrade_) {
        upstream_failed(http::error::bad_status, "upstream_bad_response");
        return;
      }
      start_tunnel();
      return;
    }
    if (auto ct = m.find(http::field::content_type); ct != m.end())
      sse_ = ct->value().starts_with("text/event-stream");
    upstream_keep_alive_ = res_->keep_alive();
    build_response_head(status);
    response_body_step();
  }

  // What the upstream says about its quota: RateLimit-Limit / -Remaining /
  // -Reset (or X-RateLimit-*) give this thread's bulkhead a budget reading; a
  // status in SLUICE_CLOSE_STATUSES closes the upstream until its Retry-After
  // or quota reset, else for SLUICE_CLOSE_FOR. One pass over the fields.
  template <class Fields>
  void read_quota(const Fields& m, int status, Clock::time_point now) {
    std::string_view limit, remaining, reset;
    for (const auto& f : m) {
      auto name = f.name_string();
      if (name.size() < 15) continue;
      if (iequals(name.substr(0, 2), "x-")) name.remove_prefix(2);
      if (!iequals(name.substr(0, 10), "ratelimit-")) continue;
      auto what = name.substr(10);
      if (iequals(what, "limit")) limit = f.value();
      else if (iequals(what, "remaining")) remaining = f.value();
      else if (iequals(what, "reset")) reset = f.value();
    }
    auto& rt = w_.runtime();
    auto now_us = rt.micros(now);
    auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
    std::optional<admission::BudgetReading> budget;
    if (!limit.empty()) budget = admission::read_budget(limit, remaining, reset, now_us, unix_now);
    if (budget) bulkhead().note_budget(*budget);
    const auto& closing = live_->close_statuses;
    if (std::find(closing.begin(), closing.end(), status) == closing.end()) return;
    closing_status_ = true;
    std::optional<admission::Micros> until;
    if (auto it = m.find(http::field::retry_after); it != m.end()) {
      std::int64_t seconds = 0;
      auto v = it->value();
      auto r = std::from_chars(v.data(), v.data() + v.size(), seconds);
      if (r.ec == std::errc{} && r.ptr == v.data() + v.size() && seconds > 0)
        until = now_us + admission::Micros(seconds * 1'000'000);
    }
    if (!until && budget) until = budget->until;
    rt.gates[upstream_]->close(now_us, until);
  }

  // The head the client gets: the upstream's fields minus hop-by-hop ones, the
  // framing this client can read, keep-alive as Sluice decides, X-Request-Id.
  void build_response_head(int status) {
    auto& m = res_->get();
    bool body_possible = method_ != http::verb::head && status != 204 && status != 304;
    bool keep = client_keep_alive_ && !w_.runtime().draining.load(std::memory_order_relaxed);
    auto len = res_->content_length();
    // Chunked out: the upstream's chunks, or a close-delimited body, to an HTTP/1.1
    // client. An HTTP/1.0 client reads either until the connection closes.
    res_chunked_out_ = false;
    if (body_possible && !len) {
      if (client_version_ >= 11)
        res_chunked_out_ = true;
      else
        keep = false;
    }
    client_keep_alive_ = keep;
    std::string& h = out_;
    h.clear();
    append_status_line(h, client_version_ >= 11, status, m.reason());
    append_upstream_fields(h, false);
    if (res_chunked_out_) {
      h += "Transfer-Encoding: chunked\r\n";
    } else if (len) {
      append_number_field(h, "Content-Length", *len);  // a HEAD's length describes the GET
    }
    if (!keep && client_version_ >= 11) h += "Connection: close\r\n";
    if (keep && client_version_ < 11) h += "Connection: keep-alive\r\n";
    end_head(h);
  }

  void response_body_step() {
    if (res_->is_done() || end_stream_) {
      write_client(0, true);
      return;
    }
    if (!header_sent_ && up_->buffer.size() == 0) {
      // No body bytes are here yet: send the head now so the client sees it at
      // once (an SSE stream's first event may be far off).
      write_client(0, false);
      return;
    }
    if (!block_) block_ = w_.blocks().get();
    auto& body = res_->get().body();
    body.data = block_.get();
    body.size = BlockPool::kBlockSize;
    phase_ = Phase::response_body;
    deadline = Clock::now() + (sse_ ? cfg_.sse_idle_timeout : cfg_.response_timeout);
    http::async_read_some(up_->socket, up_->buffer, *res_,
                          beast::bind_front_handler(&Session::on_response_body, shared_from_this()));
  }

  void on_response_body(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      if (end_stream_ && ec == net::error::operation_aborted) {
        response_body_step();  // draining: the stream ends cleanly here
        return;
      }
      if (timed_out_) bump(st_.upstream[upstream_].timeouts);
      // The head is out: the only honest signal left is a cut connection, so
      // the client never mistakes a truncated body for a complete one.
      status_override_ = 502;
      abort();
      return;
    }
    std::size_t n = BlockPool::kBlockSize - res_->get().body().size;
    if (n == 0 && !res_->is_done()) {  // a chunk header alone: read on
      response_body_step();
      return;
    }
    write_client(n, res_->is_done());
  }

  void write_client(std::size_t n, bool last) {
    phase_ = Phase::write_client;
    write_started_ = Clock::now();
    // A seated request looks again after kStalledWrite: a write still pending
    // then means a slow reader, whose slot release_stalled_seat() gives back.
    deadline = write_started_ + (holds_stallable_seat() ? std::min<Clock::duration>(
                                                             kStalledWrite, cfg_.send_timeout)
                                                       : cfg_.send_timeout);
    header_sent_ = true;
    response_sent_ = last;
    write_piece(sock_, out_, res_chunked_out_, n ? block_.get() : nullptr, n, last,
                beast::bind_front_handler(&Session::on_client_written, shared_from_this()));
  }

  void on_client_written(error_code ec, std::size_t n) {
    bytes_out_ += n;
    if (ec) {
      abort();
      return;
    }
    if (!response_sent_) {
      response_body_step();
      return;
    }
    finish(res_->get().result_int());
  }

  // ---------------------------------------------------------------- tunnel
  void start_tunnel() {
    bump(st_.websocket_tunnels);
    auto& m = res_->get();
    std::string& h = out_;
    h.clear();
    append_status_line(h, true, 101, m.reason());
    append_upstream_fields(h, true);  // Connection and Upgrade stay: the switch is agreed
    end_head(h);
    phase_ = Phase::tunnel;
    deadline = Clock::now() + cfg_.send_timeout;
    header_sent_ = true;
    net::async_write(sock_, net::buffer(out_), [self = shared_from_this()](error_code ec, std::size_t n) {
      self->bytes_out_ += n;
      if (ec) return self->abort();
      self->up_block_ = self->w_.blocks().get();
      if (!self->block_) self->block_ = self->w_.blocks().get();
      self->pump(true);
      self->pump(false);
    });
  }

  // One direction of the tunnel: client->upstream (up == true) or back.
  void pump(bool up) {
    auto& from = up ? sock_ : up_->socket;
    auto& left = up ? buf_ : up_->buffer;  // bytes read before the tunnel began
    char* block = up ? block_.get() : up_block_.get();
    deadline = Clock::now() + cfg_.sse_idle_timeout;
    if (left.size() > 0) {
      std::size_t n = net::buffer_copy(net::buffer(block, BlockPool::kBlockSize), left.data());
      left.consume(n);
      pump_write(up, n);
      return;
    }
    from.async_read_some(net::buffer(block, BlockPool::kBlockSize),
                         [self = shared_from_this(), up](error_code ec, std::size_t n) {
                           if (ec) return self->pump_end(up, ec);
                           self->pump_write(up, n);
                         });
  }

  void pump_write(bool up, std::size_t n) {
    auto& to = up ? up_->socket : sock_;
    char* block = up ? block_.get() : up_block_.get();
    (up ? bytes_in_ : bytes_out_) += n;
    net::async_write(to, net::buffer(block, n), [self = shared_from_this(), up](error_code ec, std::size_t) {
      if (ec) return self->pump_end(up, ec);
      self->pump(up);
    });
  }

  void pump_end(bool up, error_code ec) {
    error_code ignored;
    if (!ec || ec == net::error::eof) {
      // Half close: pass the end on and let the other direction finish.
      (up ? up_->socket : sock_).shutdown(tcp::socket::shutdown_send, ignored);
    } else {
      sock_.close(ignored);
      up_->socket.close(ignored);
    }
    if (++tunnel_ends_ == 2) {
      sock_.close(ignored);
      release_upstream(false);
      log(101);
    }
  }

  // ---------------------------------------------------------------- endings
  void count_timeout(ClientTimeout t) { bump(st_.client_timeouts[static_cast<std::size_t>(t)]); }

  // A heavy lease lasts its whole response (an SSE stream included); any other
  // slot measures the upstream's concurrency, which a slow reader no longer uses.
  bool holds_stallable_seat() const { return Seat::seated && lane_ != Lane::heavy; }

  void release_stalled_seat() {
    if (!holds_stallable_seat()) return;
    bump(st_.stalled_writes);
    release_bulkhead_seat();  // its lease stays open: the request is live until logged
  }

  void release_upstream(bool reusable) {
    if (!up_) return;
    w_.pool(upstream_).release(std::move(up_), reusable);
  }

  void finish(int status) {
    bool reusable = upstream_keep_alive_ && res_->is_done() && request_sent_ &&
                    up_->buffer.size() == 0 && !end_stream_ && !close_both_;
    release_upstream(reusable);
    end_exchange(status, !client_keep_alive_ || end_stream_);
  }

  // The lease ends with its response (an SSE stream's or a tunnel's included):
  // the slot goes back, and what the upstream said teaches the estimate.
  void release_seat() {
    if (lease_open_) {
      w_.leases().close(lease_slot_);
      lease_open_ = false;
    }
    release_bulkhead_seat();
  }

  void release_bulkhead_seat() {
    if (!Seat::seated) {  // queued, or refused after it left its first upstream
      bulkhead().cancel(*this, w_.runtime().micros(Clock::now()));
      return;
    }
    bool heavy = lane_ == Lane::heavy;
    if (probe_) {
      // A probe that ended cleanly reopens its upstream at once.
      bool clean = !closing_status_ &&
                   (signal_ == admission::Signal::clean || signal_ == admission::Signal::slow);
      w_.runtime().gates[upstream_]->probe_ended(clean);
      probe_ = false;
    }
    // A clean answer can end a queue window that decreases the estimate: count it by
    // what the estimate says moved it.
    if (bulkhead().release(*this, signal_, up_ttfb_, w_.runtime().micros(Clock::now()), w_.rng()))
      bump(st_.upstream[upstream_].exhausted[static_cast<std::size_t>(bulkhead().estimate().why())]);
    if (heavy) w_.note_heavy();
  }

  void log(int status) {
    release_seat();
    auto now = Clock::now();
    auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    double duration = std::chrono::duration<double>(now - start_).count();
    std::size_t lane = admission::index(lane_);
    if (route_) {
      bump(st_.lane[lane].requests[static_cast<std::size_t>(status) % kStatusSlots]);
      st_.lane[lane].duration.observe(duration);
    } else {
      bump(st_.client_errors[static_cast<std::size_t>(status) % kStatusSlots]);
    }
    if (lane_counted_) {
      bump(st_.lane[lane].in_flight, std::int64_t{-1});
      lane_counted_ = false;
    }
    AccessLog& log = w_.log();
    if (!log.enabled()) return;
    AccessRecord r;
    r.ts = start_wall_;
    r.request_id = std::string_view(id_, id_len_);
    if (req_ && req_->is_header_done()) r.method = req_->get().method_string();
    r.path = path_;
    r.status = status;
    r.lane = route_ ? admission::to_string(lane_) : "";
    r.route = route_ ? std::string_view(route_->name) : "";
    r.upstream = route_ ? std::string_view(cfg_.upstreams[upstream_].name) : "";
    if (fallback_from_ >= 0) {
      r.fallback_from = cfg_.upstreams[static_cast<std::size_t>(fallback_from_)].name;
      r.fallback_why = to_string(fallback_why_);
    }
    r.decision = route_ ? admission::to_string(decision_.outcome) : "";
    r.reason = decision_.reason != admission::Reason::none ? admission::to_string(decision_.reason)
                                                           : reason_;
    r.level = static_cast<int>(level_);
    r.retry_after_s = retry_after_;
    r.client = std::string_view(client_, client_len_);
    r.queue_ms = ms(queue_wait_);
    r.upstream_wait_ms = upstream_wait_.count() >= 0 ? ms(upstream_wait_) : -1;
    r.ttfb_ms = ttfb_.count() >= 0 ? ms(ttfb_) : -1;
    r.duration_ms = duration * 1000.0;
    r.bytes_in = bytes_in_;
    r.bytes_out = bytes_out_;
    log.write(r);
  }

  // An error Sluice answers itself.
  void respond_error(int status, std::string_view reason, bool close_after) {
    release_upstream(false);
    if (header_sent_) {  // too late for a status: cut the connection
      status_override_ = status;
      abort();
      return;
    }
    if (id_len_ == 0) id_len_ = static_cast<std::size_t>(w_.request_id(id_) - id_);
    reason_ = reason;
    auto& b = own_body_;
    b.clear();
    b += "{\"error\":\"";
    b += reason;
    b += "\",\"status\":";
    append_number(b, static_cast<std::uint64_t>(status));
    b += ",\"request_id\":\"";
    append_json_escaped(b, std::string_view(id_, id_len_));
    b += "\"}\n";
    write_own_response(status, close_after);
  }

  // Writes a response Sluice makes itself (errors, refusals): own_body_ as JSON,
  // and for a refusal (retry_after_ set) Retry-After and X-Sluice-Reject.
  void write_own_response(int status, bool close_after) {
    if (w_.runtime().draining.load(std::memory_order_relaxed)) close_after = true;
    bool close = close_after || !client_keep_alive_;
    std::string& h = out_;
    h.clear();
    append_status_line(h, true, status, {});
    h += "Content-Type: application/json\r\n";
    if (retry_after_ >= 0) {
      append_number_field(h, "Retry-After", static_cast<std::uint64_t>(retry_after_));
      append_field(h, "X-Sluice-Reject", admission::to_string(decision_.reason));
    }
    append_number_field(h, "Content-Length", own_body_.size());
    if (close) h += "Connection: close\r\n";
    end_head(h);
    h += own_body_;
    header_sent_ = true;
    phase_ = Phase::write_client;
    deadline = Clock::now() + cfg_.send_timeout;
    net::async_write(sock_, net::buffer(out_),
                     [self = shared_from_this(), status, close](error_code ec, std::size_t n) {
                       self->bytes_out_ += n;
                       self->end_exchange(status, close || ec);
                     });
  }

  // The exchange is over: log it, then read the next request or close.
  void end_exchange(int status, bool close) {
    block_.reset();
    log(status);
    if (close) {
      graceful_close();
      return;
    }
    first_ = false;
    start_request();
  }

  // Something broke mid-exchange: both connections go, nothing is reused.
  void abort() {
    error_code ec;
    sock_.close(ec);
    release_upstream(false);
    block_.reset();
    up_block_.reset();
    if (request_started_ && phase_ != Phase::closing) log(status_override_ ? status_override_ : 499);
    phase_ = Phase::closing;
  }

  void graceful_close() {
    phase_ = Phase::closing;
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    sock_.close(ec);
  }

  void close() {
    phase_ = Phase::closing;
    error_code ec;
    sock_.close(ec);
  }

  Worker& w_;
  const config::Config& cfg_;
  Shard& st_;
  Socket sock_;
  beast::flat_buffer buf_;
  // Both messages' fields live in a per-session arena, released between
  // requests: parsing a head allocates nothing in steady state.
  alignas(std::max_align_t) std::array<char, 2048> arena_buf_;
  std::pmr::monotonic_buffer_resource arena_{arena_buf_.data(), arena_buf_.size(),
                                             std::pmr::new_delete_resource()};
  std::optional<http::request_parser<http::buffer_body, Alloc>> req_;
  std::optional<http::response_parser<http::buffer_body, Alloc>> res_;
  std::unique_ptr<UpstreamConnection> up_;
  BlockPool::Block block_{nullptr, BlockPool::Deleter{nullptr}};
  BlockPool::Block up_block_{nullptr, BlockPool::Deleter{nullptr}};
  std::shared_ptr<Session> self_;  // keeps the session alive while it waits for the pool
  std::string out_;
  std::string sending_;   // a head being written
  std::string own_body_;  // the body of a response Sluice writes itself
  Phase phase_ = Phase::head;
  bool first_ = true;
  bool request_started_ = false;
  bool timed_out_ = false;
  bool retried_ = false;
  bool client_keep_alive_ = true;
  bool close_both_ = false;  // this exchange ends both connections (check_request_head)
  bool upstream_keep_alive_ = false;
  bool expect_continue_ = false;
  bool upgrade_ = false;
  bool sse_ = false;
  bool end_stream_ = false;
  bool header_sent_ = false;
  bool lane_counted_ = false;
  bool request_sent_ = false;     // the whole request is with the upstream
  bool response_sent_ = false;    // the last piece of the response was written
  bool res_chunked_out_ = false;  // the client's response is chunked by Sluice
  char chunk_line_[20];
  int tunnel_ends_ = 0;
  int status_override_ = 0;
  unsigned client_version_ = 11;
  http::verb method_ = http::verb::get;

  const Live* live_ = nullptr;
  const routes::Route* route_ = nullptr;
  Lane lane_ = Lane::standard;
  admission::Level level_ = admission::Level::normal;
  admission::GateDecision decision_{};
  int retry_after_ = -1;
  std::size_t upstream_ = 0;
  std::string_view path_;
  std::string_view reason_;
  Clock::time_point start_{};
  Clock::time_point head_deadline_{};
  Clock::time_point write_started_{};  // when the pending write to the client began
  std::size_t prebuffered_ = 0;       // body bytes read before admission, in block_
  std::size_t body_stride_ = 0;       // body bytes since the budget was last renewed
  Clock::duration body_budget_{};     // client time left for the rest of this stride
  Clock::time_point body_read_start_{};
  std::chrono::system_clock::time_point start_wall_{};
  Clock::duration upstream_wait_{-1};
  Clock::duration ttfb_{-1};
  Clock::duration queue_wait_{0};
  Clock::time_point queue_start_{};
  Clock::time_point sent_at_{};
  admission::Micros up_ttfb_{0};  // request sent to response head: what the estimate learns from
  admission::Signal signal_ = admission::Signal::none;
  bool probe_ = false;           // this request is its closed upstream's probe
  bool closing_status_ = false;  // the upstream answered a status that closes it
  int moves_ = 0;                // hosts or alternatives tried after a failed connect
  static constexpr int kMaxMoves = 3;
  int fallback_from_ = -1;       // the route's upstream, when the request moved off it
  bool forwarded_ = false;       // counted in flight and on its way upstream
  bool delegated_ = false;       // seated on a live parent lease's lane
  Fallback fallback_why_ = Fallback::closed;
  bool lease_open_ = false;
  std::uint32_t lease_slot_ = 0;
  std::uint64_t lease_gen_ = 0;
  std::uint64_t bytes_in_ = 0, bytes_out_ = 0;
  char id_[128];
  std::size_t id_len_ = 0;
  char client_[46];
  std::size_t client_len_ = 0;
};

}  // namespace

void start_session(Worker& worker, Socket socket) {
  std::make_shared<Session>(worker, std::move(socket))->run();
}

}  // namespace sluice::proxy
