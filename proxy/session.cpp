// A client connection: reads requests, routes them, asks the admission core
// where each goes (admission/placement.hpp) and applies the answer, relays the
// request to an upstream connection from the Worker's pool and the response
// back, streaming bodies both ways through one borrowed block. Beast's parser
// reads both directions; Sluice writes heads and framing itself
// (proxy/request_fields.hpp, proxy/heads.hpp), one gathered write per piece.
//
// Where a reader starts: run() and start_request(), then the phases in order
// (head, admission, upstream connection, request out, response, end). What one
// request holds is one Exchange (ex_), reset by assignment; everything in it
// that must be given back (lease, lease slot, in-flight count, upstream
// connection) gives itself back when dropped.
//
// Threading: a Session lives on one Worker and its handlers run on that
// Worker's only thread.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory_resource>
#include <optional>

#include "proxy/exchange.hpp"
#include "proxy/h2.hpp"
#include "proxy/heads.hpp"
#include "proxy/request_fields.hpp"
#include "proxy/request_head.hpp"
#include "proxy/stream_io.hpp"
#include "proxy/tunnel.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
using admission::Lane;
using admission::Placed;
using boost::system::error_code;

namespace {

constexpr std::size_t kReadChunk = 4096;
constexpr std::size_t kHeadReserve = 1024;  // a head written (request or response), most fit
// See Session::own_lateness.
constexpr admission::Micros kAskKernelAbove{10'000};
constexpr admission::Micros kKernelTick{4'000};  // a 250 Hz kernel's
constexpr std::size_t kMaxResponseHeader = 64 * 1024;
// A write to the client still pending after this is a slow reader's (see write_client).
constexpr Clock::duration kStalledWrite = std::chrono::milliseconds(250);
constexpr int kMaxMoves = 3;  // hosts or alternatives tried after failed connects

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

bool valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

enum class Phase : std::uint8_t {
  handshake,      // the TLS handshake of an HTTPS connection
  head,           // waiting for / reading a request head
  queued,         // waiting for a bulkhead slot
  ingest_wait,    // waiting for room in SLUICE_INGEST_BUDGET
  acquire,        // waiting for an upstream connection
  request_body,   // reading the request body from the client
  send_upstream,  // writing the request to the upstream
  response_head,  // waiting for the upstream's response head
  response_body,  // reading the response body from the upstream
  write_client,   // writing to the client
  tunnel,         // the connection is a Tunnel's now
  closing,
};

class Session : public Tracked,
                public PoolWaiter,
                public admission::Seat,
                public admission::IngestWaiter,
                public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& w, Socket s, bool tls)
      : w_(w), cfg_(w.config()), st_(w.stats()), ups_(w), sock_(std::move(s)) {
    if (tls) tls_ = w.server_tls();
  }
  // One stream of an HTTP/2 connection (proxy/h2.hpp): one request, then the end.
  Session(Worker& w, std::shared_ptr<H2Stream> stream, Socket& closed)
      : w_(w),
        cfg_(w.config()),
        st_(w.stats()),
        ups_(w),
        sock_(closed, std::move(stream)),
        connection_(false) {}

  ~Session() override {
    // Whatever the exchange still holds goes back with it (a session dropped
    // mid-exchange, after a handler threw).
    if (auto* budget = w_.runtime().ingest.get()) budget->cancel(*this);
    ex_ = Exchange{};
    if (tls_notes_.renegotiations > 0)
      bump(st_.tls_renegotiations, std::uint64_t{tls_notes_.renegotiations});
    if (auto* h2 = sock_.h2()) {
      h2->watch(nullptr);
      h2->close(false);  // a stream whose Session ended without an answer is reset, never left open
    }
    if (connection_) {  // an accepted connection (an HTTP/2 one counts itself)
      bump(st_.client_connections, std::int64_t{-1});
      if (!handed_over_) w_.runtime().connections.fetch_sub(1, std::memory_order_relaxed);
    }
    bump(w_.active_sessions, std::int64_t{-1});
  }

  void run() {
    bump(w_.active_sessions, std::int64_t{1});
    buf_.max_size(cfg_.max_header_bytes + kReadChunk);
    // The two head buffers take turns (out_, then sending_ while it is written):
    // sized once for a usual head, not grown from nothing by each field.
    out_.reserve(kHeadReserve);
    sending_.reserve(kHeadReserve);
    if (auto* h2 = sock_.h2()) {
      auto client = h2->client();
      client_len_ = std::min(client.size(), sizeof client_);
      std::memcpy(client_, client.data(), client_len_);
      w_.track(*this);
      h2->watch(this);
      // Its head is here already: parsed now, not after a read's post.
      buf_.commit(h2->read_buffered(buf_.prepare(kReadChunk)));
      first_request();
      return;
    }
    bump(st_.client_connections, std::int64_t{1});
    error_code ec;
    sock_.socket().set_option(tcp::no_delay(true), ec);
    if (cfg_.client_send_buffer != 0)
      sock_.socket().set_option(
          net::socket_base::send_buffer_size(static_cast<int>(cfg_.client_send_buffer)), ec);
    auto ep = sock_.socket().remote_endpoint(ec);
    if (!ec) {
      auto s = ep.address().to_string();
      client_len_ = std::min(s.size(), sizeof client_);
      std::memcpy(client_, s.data(), client_len_);
    }
    w_.track(*this);
    if (tls_) {
      start_handshake();
      return;
    }
    first_request();
  }

  // The lane's queue window is over, or the bulkhead dropped it from a
  // standing line: refused for what held it (observe: on, seated outside the
  // rules), unless another thread seated it just now.
  void queue_over() {
    ex_.timed_out = true;
    auto self = std::move(self_);
    auto now = Clock::now();
    ex_.queue_wait = now - ex_.queue_start;  // ask() tells it
    auto p = admission::timed_out(ask(), *this, ex_.lease, ups_, micros(now));
    if (p.how == Placed::queued) {  // an unmeasured estimate: it waits on
      ex_.timed_out = false;
      ex_.lease = std::move(p.lease);
      deadline = now + std::chrono::duration_cast<Clock::duration>(p.wait_for);
      self_ = std::move(self);
      return;
    }
    note_queue_wait(now);
    note_upstream_wait(now, seat_wait());
    if (apply(std::move(p), now)) carry_on();
  }

  // ---- Tracked ----
  void on_deadline() override {
    if (sock_.gone() && phase_ != Phase::closing) {
      client_gone();
      return;
    }
    if (first_event_overdue()) {
      // No head (or first event) in time: the upstream is cut, and the
      // handler of its pending read moves the request (first_event_failover).
      ex_.first_event_late = true;
      error_code ec;
      ex_.up->stream.socket().cancel(ec);
      return;
    }
    if (phase_ == Phase::response_body && keep_alive_writing_ &&
        Clock::now() >= keep_alive_started_ + cfg_.send_timeout) {
      // A keep-alive comment not written within SLUICE_SEND_TIMEOUT: a client
      // that stopped reading. Its write handler ends the exchange.
      count_timeout(ClientTimeout::send);
      ex_.status_override = 408;
      ex_.reason = "send_timeout";
      error_code ec;
      sock_.close();
      if (ex_.up) ex_.up->stream.socket().close(ec);
      return;
    }
    if (phase_ == Phase::response_body && Clock::now() < ex_.idle_cut) {
      keep_alive();  // an SSE keep-alive is due, well before the idle cut
      return;
    }
    if (phase_ == Phase::write_client && Clock::now() < ex_.write_started + cfg_.send_timeout) {
      // The client reads slower than the upstream sends: the response now
      // waits on the client, not on the upstream, so its bulkhead slot goes
      // back (its upstream connection stays until the end or the cut).
      release_stalled_seat();
      deadline = ex_.write_started + cfg_.send_timeout;
      return;
    }
    ex_.timed_out = true;
    error_code ec;
    switch (phase_) {
      case Phase::queued:
        queue_over();
        break;
      case Phase::ingest_wait: {
        // Its wait for room in the ingest budget is over: refused, told how
        // long the bytes ahead take to drain, unless room came just now.
        auto& budget = *w_.runtime().ingest;
        if (!budget.cancel(*this)) {  // granted: its post carries on
          ex_.timed_out = false;
          break;
        }
        auto self = std::move(self_);
        ex_.queue_wait = Clock::now() - ex_.queue_start;
        ex_.decision = {admission::Outcome::shed, admission::Reason::ingest_budget};
        count_decision();
        auto wait = budget.wait_for(ingest_lane, ingest_bytes);
        refuse(wait ? std::optional<admission::Millis>(std::chrono::ceil<admission::Millis>(*wait))
                    : std::nullopt);
        break;
      }
      case Phase::acquire:
        // Queued for a connection: give up now. A connect under way has its
        // own deadline and will call back.
        if (w_.pool(ex_.upstream).cancel(*this)) {
          auto self = std::move(self_);
          ex_.upstream_wait = Clock::now() - wait_start;
          respond_error(504, "upstream_busy", true);
        }
        break;
      case Phase::send_upstream:
      case Phase::response_head:
      case Phase::response_body:
        if (ex_.up) ex_.up->stream.socket().cancel(ec);
        break;
      case Phase::handshake:
      case Phase::head:
      case Phase::request_body:
        sock_.cancel();
        break;
      case Phase::write_client:
        // A client that stopped reading: the write was not done within SLUICE_SEND_TIMEOUT.
        // The exchange is logged and counted as 408 send_timeout, never as the clean status.
        count_timeout(ClientTimeout::send);
        ex_.status_override = 408;
        ex_.reason = "send_timeout";
        sock_.close();
        if (ex_.up) ex_.up->stream.socket().close(ec);
        break;
      case Phase::tunnel:  // the 101 is still being written (then the Tunnel's deadlines apply)
      case Phase::closing:
        sock_.close();
        if (ex_.up) ex_.up->stream.socket().close(ec);
        break;
    }
  }

  void on_drain() override {
    error_code ec;
    if (phase_ == Phase::head && !ex_.started) {
      sock_.cancel();  // idle keep-alive connection: close it now
    } else if (phase_ == Phase::response_body && ex_.sse && ex_.up) {
      ex_.end_stream = true;  // end the SSE stream cleanly at this event boundary
      ex_.up->stream.socket().cancel(ec);
    }
  }

  // An HTTP/2 stream the client reset, or whose connection ended, while the
  // exchange waited on something other than the stream: what it holds goes
  // back, nothing is held against the upstream, and it is logged 499. A read
  // or write pending on the stream fails by itself; one pending on the
  // upstream is cancelled, and its handler ends the exchange.
  void client_gone() {
    error_code ec;
    switch (phase_) {
      case Phase::queued: {
        auto self = std::move(self_);
        ex_.lease.cancel();
        abort();
        return;
      }
      case Phase::ingest_wait:
        if (w_.runtime().ingest->cancel(*this)) {  // else granted: its post carries on, and stops
          auto self = std::move(self_);
          abort();
        }
        return;
      case Phase::acquire:
        if (w_.pool(ex_.upstream).cancel(*this)) {  // else a connect calls back, and stops
          auto self = std::move(self_);
          ex_.lease.cancel();
          abort();
        }
        return;
      case Phase::send_upstream:
      case Phase::response_head:
      case Phase::response_body:
        if (ex_.up) ex_.up->stream.socket().cancel(ec);
        return;
      default:
        return;
    }
  }

  // ---- Seat ----
  // A bulkhead slot came free for this queued request, inside another
  // request's release or a heartbeat, on any thread and under the bulkhead's
  // lock: only a post to this session's own thread, which carries on unless
  // the window ended first (then the seat is given back or kept there).
  void on_seated() override {
    net::post(w_.ioc(), [self = shared_from_this()] {
      if (self->phase_ != Phase::queued || !self->ex_.lease.seated()) return;
      auto keep = std::move(self->self_);
      self->note_queue_wait(Clock::now());
      self->carry_on();
    });
  }
  void on_dropped() override {
    net::post(w_.ioc(), [self = shared_from_this()] {
      if (self->phase_ != Phase::queued || self->ex_.lease.seated()) return;
      self->queue_over();
    });
  }

  // ---- PoolWaiter ----
  void on_connection(std::unique_ptr<UpstreamConnection> c, error_code ec) override {
    auto self = std::move(self_);
    if (sock_.gone()) {  // its HTTP/2 stream went meanwhile: the connection is for the next
      if (!ec && c) w_.pool(ex_.upstream).release(std::move(c), true);
      ex_.lease.cancel();
      abort();
      return;
    }
    auto now = Clock::now();
    ex_.upstream_wait = now - wait_start;
    note_upstream_wait(now, seat_wait() + ex_.upstream_wait);
    if (ec.category() == upstream_tls_category()) {
      // The TLS handshake failed (a certificate that does not verify, a
      // version or cipher in common with none): 502 naming it, never a retry
      // without TLS, nor on another host that would fail alike.
      auto r = static_cast<TlsResult>(ec.value());
      respond_error(502,
                    r == TlsResult::verify    ? "upstream_tls_verify"
                    : r == TlsResult::timeout ? "upstream_tls_timeout"
                                              : "upstream_tls_handshake",
                    !req_->is_done());
      return;
    }
    if (ec) {
      // A connect that failed or timed out: the upstream could not be reached.
      if (ec == net::error::timed_out) ex_.signal = admission::Signal::timeout;
      if (connect_failed(now)) return;
      respond_error(
          502, ec == net::error::timed_out ? "upstream_connect_timeout" : "upstream_connect_failed",
          !req_->is_done());
      return;
    }
    if (c->uses == 0) {  // a new connection: its first request's log line shows its cost
      ex_.connect_time = c->connect_time;
      ex_.tls_time = c->tls_time;
    }
    ex_.upstream_addr_len =
        static_cast<std::uint8_t>(std::min(c->address.size(), ex_.upstream_addr.size()));
    std::memcpy(ex_.upstream_addr.data(), c->address.data(), ex_.upstream_addr_len);
    ex_.up = checkout(w_.pool(ex_.upstream), std::move(c));
    ex_.up->buffer.clear();
    send_request(now);
  }

 private:
  admission::Micros micros(Clock::time_point t) const { return w_.runtime().micros(t); }

  // ---------------------------------------------------------------- TLS handshake
  void start_handshake() {
    phase_ = Phase::handshake;
    sock_.start_tls(tls_->default_context());
    tls::attach(sock_.ssl(), tls_notes_);
    deadline = Clock::now() + cfg_.tls.handshake_timeout;
    sock_.async_handshake(true,
                          beast::bind_front_handler(&Session::on_handshake, shared_from_this()));
  }

  void on_handshake(error_code ec) {
    deadline = Clock::time_point::max();
    if (!ec) {
      tls_notes_.done = true;
      bump(st_.tls_handshakes[static_cast<std::size_t>(
          SSL_session_reused(sock_.ssl()) == 1 ? TlsResult::resumed : TlsResult::full)]);
      if (tls_notes_.sni_unknown) bump(st_.tls_sni_unknown);
      if (cfg_.h2 && tls::negotiated_h2(sock_.ssl())) {
        hand_over({});
        return;
      }
      start_request();
      return;
    }
    TlsResult result = TlsResult::timeout;
    if (!ex_.timed_out)
      result = tls_result(
          tls::classify(ec.value(), ec.category() == net::error::get_ssl_category(), nullptr)
              .reason);
    bump(st_.tls_handshakes[static_cast<std::size_t>(result)]);
    if (result != TlsResult::http_request) {
      close();
      return;
    }
    // Plain HTTP on the HTTPS port: a plain answer that says so (OpenSSL has
    // read the request line), then the connection closes.
    static constexpr std::string_view kPlainOnTls =
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 55\r\n"
        "Connection: close\r\n\r\nThis port speaks HTTPS: send the request with https://\n";
    phase_ = Phase::closing;
    deadline = Clock::now() + cfg_.send_timeout;
    net::async_write(
        sock_.socket(), net::buffer(kPlainOnTls.data(), kPlainOnTls.size()),
        [self = shared_from_this()](error_code, std::size_t) { self->graceful_close(); });
  }

  // ---------------------------------------------------------------- request head
  void start_request() {
    // The last request's state and fields go, and their memory with them, at once.
    ex_ = Exchange{};
    replay_body_.clear();
    res_.reset();
    req_.reset();
    arena_.release();
    first_request();
  }

  // A request on a session that has had none (an HTTP/2 stream's: its one).
  void first_request() {
    phase_ = Phase::head;
    req_.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(HeadAlloc(&arena_)));
    req_->header_limit(static_cast<std::uint32_t>(cfg_.max_header_bytes));
    req_->body_limit(cfg_.max_body_bytes);
    ex_.body_budget = cfg_.body_timeout;
    fresh = false;
    avoid_host = SIZE_MAX;
    if (buf_.size() > 0) {  // a pipelined request is already here
      begin_request();
      parse_head();
      return;
    }
    read_head();
  }

  void begin_request() {
    ex_.started = true;
    ex_.start = Clock::now();
    ex_.start_wall = std::chrono::system_clock::now();
    ex_.head_deadline = ex_.start + client_timeout(cfg_.header_timeout);
    ex_.level = published_level();
  }

  // A client header or idle timeout, cut to a tenth (at least 1 s) while the
  // short_timeouts emergency action is applied.
  std::chrono::milliseconds client_timeout(std::chrono::milliseconds t) const {
    if (!w_.runtime().published.acting(admission::Action::short_timeouts)) return t;
    return std::min(t, std::max(std::chrono::milliseconds{1000}, t / 10));
  }
  // Responses say Connection: close: draining, or the no_keepalive emergency action.
  bool closing_connections() const {
    const auto& rt = w_.runtime();
    return rt.draining.load(std::memory_order_relaxed) ||
           rt.published.acting(admission::Action::no_keepalive);
  }

  // The process's level, or once the route is known, the higher of that and
  // its upstream's.
  admission::Level published_level() const {
    const auto& p = w_.runtime().published;
    auto level = p.process.level.load(std::memory_order_relaxed);
    if (ex_.route)
      level = std::max(level, p.upstreams[ex_.upstream].level.load(std::memory_order_relaxed));
    return static_cast<admission::Level>(level);
  }

  void read_head() {
    // Draining: a kept-alive connection is not waited on again (its last
    // response said Connection: close); a new one still gets its request
    // served while the listener is open.
    if (!ex_.started && !first_ && w_.runtime().draining.load(std::memory_order_relaxed)) {
      close();
      return;
    }
    deadline = ex_.started ? ex_.head_deadline
                           : Clock::now() +
                                 client_timeout(first_ ? cfg_.header_timeout : cfg_.idle_timeout);
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
      if (ex_.timed_out && ex_.started) {
        count_timeout(ClientTimeout::header);
        respond_error(408, "header_timeout", true);
      } else {
        // Nothing of a request came: a new connection that sent nothing within
        // SLUICE_HEADER_TIMEOUT, or a kept-alive one idle for SLUICE_IDLE_TIMEOUT.
        if (ex_.timed_out) count_timeout(first_ ? ClientTimeout::header : ClientTimeout::idle);
        close();
      }
      return;
    }
    buf_.commit(n);
    if (!ex_.started) begin_request();
    parse_head();
  }

  // The connection speaks HTTP/2 (ALPN h2, or an h2c preface): an HTTP/2
  // connection takes its stream and what was read of it, and this session ends.
  void hand_over(std::string_view preread) {
    handed_over_ = true;
    phase_ = Phase::closing;
    deadline = Clock::time_point::max();
    start_h2(w_, std::move(sock_), preread, std::string_view(client_, client_len_));
  }

  // SLUICE_H2C: a plain connection whose first bytes are HTTP/2's preface is
  // an HTTP/2 one. True when it was handed over or more bytes are needed.
  bool h2c_preface() {
    static constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    std::string_view got(static_cast<const char*>(buf_.data().data()), buf_.size());
    const auto n = std::min(got.size(), kPreface.size());
    if (got.substr(0, n) != kPreface.substr(0, n)) {
      sniffed_ = true;
      return false;
    }
    if (n < kPreface.size())
      read_head();
    else
      hand_over(got);
    return true;
  }

  void parse_head() {
    if (!sniffed_ && cfg_.h2c && !tls_ && !sock_.h2() && h2c_preface()) return;
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
    ex_.close_both = verdict.close_after;
    on_head();
  }

  void refuse_malformed(error_code ec) {
    if (ec == http::error::header_limit)
      respond_error(431, "header_too_large", true);
    else if (ec == http::error::body_limit)
      respond_error(413, "body_too_large", true);
    else
      respond_error(400, "bad_request", true);
  }

  void on_head() {
    auto& m = req_->get();
    std::string_view why;
    if (int status = check_target(m, why); status != 0) {
      respond_error(status, why, true);
      return;
    }
    auto target = m.target();
    ex_.path = target.substr(0, target.find('?'));
    // An HTTP/2 stream carries one request (its connection stays, whatever
    // the answer says: the framing fields never reach HTTP/2).
    ex_.keep_alive = connection_ && req_->keep_alive() && !ex_.close_both;
    ex_.version = m.version();
    ex_.method = m.method();
    ex_.upgrade = req_->upgrade();
    take_request_id();

    // Route: every request gets its route, lane and upstream before anything is forwarded.
    ex_.live = &w_.live();  // this request's settings, whatever a reload does meanwhile
    ex_.route = route_of(ex_.live->routes, *req_, ex_.path);
    if (!ex_.route) {
      respond_error(404, "no_route", !req_->is_done());
      return;
    }
    ex_.lane = ex_.route->lane;
    ex_.upstream = ex_.route->upstream;
    route = route_key(static_cast<std::size_t>(ex_.route - ex_.live->routes.routes().data()),
                      ex_.method);  // the seat's: its answers judged against their own
    ex_.tenant = tenant_of(ex_.route->tenant_key ? *ex_.route->tenant_key : cfg_.tenants.key);
    tenant = ex_.tenant;  // the seat's: its flow in its lane's queue, and its turn's size
    weight = cfg_.tenants.weight(tenant);
    if (!req_->is_done() && !ex_.upgrade && m.find(http::field::expect) == m.end()) {
      prebuffer_body();
      return;
    }
    admit();
  }

  // The request's tenant by `key`, hashed at once (0: none, the shared tenant).
  tenants::Id tenant_of(const tenants::Key& key) const {
    auto& m = req_->get();
    switch (key.kind) {
      case tenants::Key::Kind::none:
        return 0;
      case tenants::Key::Kind::header:
        if (auto it = m.find(key.name); it != m.end()) return tenants::hash(it->value());
        return 0;
      case tenants::Key::Kind::client_ip:
        return tenants::hash({client_, client_len_});
      case tenants::Key::Kind::jwt:
        if (auto it = m.find(http::field::authorization); it != m.end()) {
          std::array<char, 4096>
              payload;  // NOLINT(cppcoreguidelines-pro-type-member-init): written before read
          return tenants::hash(
              tenants::jwt_claim(it->value(), key.name, cfg_.tenants.jwt_key, payload));
        }
        return 0;
    }
    return 0;
  }

  // Request id: the client's when it sent a usable one, else a fresh one.
  void take_request_id() {
    auto& m = req_->get();
    if (auto it = m.find("x-request-id"); it != m.end() && valid_request_id(it->value())) {
      std::memcpy(id_.data(), it->value().data(), it->value().size());
      ex_.request_id = {id_.data(), it->value().size()};
    } else {
      fresh_request_id();
    }
  }

  void fresh_request_id() {
    ex_.request_id = {id_.data(), static_cast<std::size_t>(w_.request_id(id_.data()) - id_.data())};
  }

  // Reads the body's first block (all of a small body) before admission, so a
  // client that trickles its body holds no slot and no upstream connection
  // while it does, only its own connection. With Expect: 100-continue the
  // client waits for the 100, which comes once an upstream connection is ready.
  void prebuffer_body() {
    if (!block_) block_ = w_.blocks().get();
    auto& body = req_->get().body();
    body.data = block_.get() + ex_.prebuffered;
    body.size = BlockPool::kBlockSize - ex_.prebuffered;
    read_body(&Session::on_prebuffered);
  }

  void on_prebuffered(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return body_failed(ec);
    std::size_t n = BlockPool::kBlockSize - ex_.prebuffered - req_->get().body().size;
    ex_.prebuffered += n;
    ex_.bytes_in += n;
    body_progress(n);
    if (ex_.prebuffered < BlockPool::kBlockSize && !req_->is_done()) {
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
    ex_.body_read_start = Clock::now();
    deadline = ex_.body_read_start + ex_.body_budget;
    http::async_read_some(sock_, buf_, *req_,
                          beast::bind_front_handler(handler, shared_from_this()));
  }

  void body_progress(std::size_t n) {
    ex_.body_budget -= Clock::now() - ex_.body_read_start;
    ex_.body_stride += n;
    if (ex_.body_stride >= BlockPool::kBlockSize || req_->is_done()) {
      ex_.body_stride = 0;
      ex_.body_budget = cfg_.body_timeout;
    }
  }

  void body_failed(error_code ec) {
    if (ex_.timed_out) {
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

  // ---------------------------------------------------------------- admission
  // A delegated request is placed at once; any other passes the level gate (a
  // relaxed load of the published level and one draw), then placement.
  void admit() {
    ex_.level = published_level();
    if (w_.pool(ex_.upstream).unresolved()) {
      // No address to send it to, whatever the mode: refused until a lookup
      // finds one, and told when the next one is.
      ex_.decision = {admission::Outcome::shed, admission::Reason::unresolved};
      count_decision();
      auto wait = w_.pool(ex_.upstream).retry_at() - Clock::now();
      refuse(std::chrono::ceil<admission::Millis>(std::max(wait, Clock::duration{0})));
      return;
    }
    if (ex_.live->gate.mode() == admission::Mode::off) {
      count_decision();
      forward();
      return;
    }
    if (auto token_lane = delegated_lane()) {
      ex_.lane = *token_lane;
      ex_.delegated = true;
      bump(st_.lane[admission::index(ex_.lane)].delegated);
    } else {
      ex_.decision = ex_.live->gate.admit(ex_.lane, ex_.level, w_.rng());
      if (ex_.decision.outcome == admission::Outcome::shed) {
        count_decision();
        refuse(derived_level_wait());
        return;
      }
    }
    auto now = Clock::now();
    if (!ex_.delegated && !within_tenant_limits(micros(now))) return;
    if (!within_ingest_budget(now)) return;
    place(now);
  }

  void place(Clock::time_point now) {
    if (sock_.gone()) {  // its HTTP/2 stream went while it waited for ingest room
      ex_.ingest.give_back();
      abort();
      return;
    }
    if (!apply(admission::place(ask(), *this, ups_, micros(now), w_.rng()), now)) return;
    count_decision();
    forward();
  }

  // SLUICE_INGEST_BUDGET: a request with a body holds its bytes (a declared
  // Content-Length whole, a chunked body one block, then as read) before it
  // is placed. True when it goes on now; false when it waits for room
  // (on_granted) or was refused. A delegated request is part of its parent's
  // work: its bytes are held, never waited for. Observe mode goes on, counted
  // would_shed ingest_budget.
  bool within_ingest_budget(Clock::time_point now) {
    auto* budget = w_.runtime().ingest.get();
    if (!budget || (req_->is_done() && ex_.prebuffered == 0)) return true;
    const auto declared = req_->content_length();
    if (declared && *declared == 0) return true;
    ingest_lane = ex_.lane;
    ingest_bytes = declared ? *declared : admission::IngestBudget::kChunkedReserve;
    const bool observe = ex_.live->gate.mode() == admission::Mode::observe;
    if (ex_.delegated) {
      budget->meter(ingest_lane, ingest_bytes);
      hold_ingest();
      return true;
    }
    if (budget->reserve(*this, micros(now), !observe)) {
      hold_ingest();
      return true;
    }
    if (observe) {
      if (ex_.decision.outcome == admission::Outcome::admitted)
        ex_.decision = {admission::Outcome::would_shed, admission::Reason::ingest_budget};
      return true;
    }
    phase_ = Phase::ingest_wait;
    ex_.queue_start = now;
    const auto window = ex_.live->lanes.queue_window[admission::index(ex_.lane)];
    deadline = now + std::max<Clock::duration>(std::chrono::seconds(1), window);
    self_ = shared_from_this();
    return false;
  }

  void hold_ingest() {
    ex_.ingest = IngestHold(*w_.runtime().ingest, ingest_lane, ingest_bytes);
    ex_.ingest.read(ex_.prebuffered);
  }

  // ---- IngestWaiter ----
  // Room in the ingest budget, inside another request's release on any thread
  // and under the budget's lock: only a post to this session's own thread.
  void on_granted() override {
    // (It is still waiting then: a wait that ended cancelled it first, and
    // one cancelled too late stays in ingest_wait for this post.)
    net::post(w_.ioc(), [self = shared_from_this()] {
      auto keep = std::move(self->self_);
      auto now = Clock::now();
      self->deadline = Clock::time_point::max();
      self->hold_ingest();
      self->ex_.queue_wait = now - self->ex_.queue_start;  // the log's queue_ms; no seat wait
      self->place(now);
    });
  }

  // Its tenant's limits, its route's own first, then the process's (a
  // delegated request is part of its parent's work: never limited). True when
  // it goes on; else its 429 is on its way. Observe mode goes on, counted
  // would_shed tenant_limit.
  bool within_tenant_limits(admission::Micros now) {
    const auto& own = ex_.route->tenant_limits;
    const auto& all = cfg_.tenants.limits;
    if (!own.on() && !all.on()) return true;
    auto& table = *w_.runtime().tenant_table;
    auto ask = [&](std::size_t i, std::uint64_t key, const tenants::Limits& l) {
      ex_.tenant_holds[i] = TenantHold(table, table.acquire(key, l, now));
      return ex_.tenant_holds[i].grant();
    };
    tenants::Grant g;
    const tenants::Limits* limits = &own;
    if (own.on()) g = ask(0, tenants::Table::scoped(ex_.tenant, ex_.route->tenant_scope), own);
    if (!limited(g) && all.on()) {
      limits = &all;
      g = ask(1, ex_.tenant, all);
    }
    if (!limited(g)) return true;
    bump(st_.tenant_limited[g.limited == tenants::Limited::rate ? 1 : 0]);
    if (ex_.live->gate.mode() == admission::Mode::observe) {
      if (ex_.decision.outcome == admission::Outcome::admitted)
        ex_.decision = {admission::Outcome::would_shed, admission::Reason::tenant_limit};
      return true;
    }
    ex_.decision = {admission::Outcome::shed, admission::Reason::tenant_limit};
    count_decision();
    rate_fields_.clear();
    std::optional<admission::Millis> wait;
    if (g.limited == tenants::Limited::rate) {
      wait = std::chrono::ceil<admission::Millis>(g.retry_after);
      // The IETF RateLimit fields: the bucket as a quota of B per the B / R
      // seconds that refill it, and none left for t seconds.
      const auto window = static_cast<std::uint64_t>(std::ceil(limits->bucket() / limits->rate));
      const auto t = static_cast<std::uint64_t>(
          std::ceil(std::chrono::duration<double>(g.retry_after).count()));
      rate_fields_ += "RateLimit-Policy: \"tenant\";q=";
      append_number(rate_fields_, static_cast<std::uint64_t>(limits->bucket()));
      rate_fields_ += ";w=";
      append_number(rate_fields_, std::max<std::uint64_t>(1, window));
      rate_fields_ += "\r\nRateLimit: \"tenant\";r=0;t=";
      append_number(rate_fields_, t);
      rate_fields_ += "\r\n";
    }
    refuse(wait, 429);
    return false;
  }

  static bool limited(const tenants::Grant& g) {
    return g.limited == tenants::Limited::concurrency || g.limited == tenants::Limited::rate;
  }

  admission::Ask ask() const {
    admission::Ask a;
    a.lane = ex_.lane;
    a.upstream = ex_.upstream;
    a.alternatives = ex_.route->alternatives;
    a.pinned = ex_.route->pin;
    a.mode = ex_.live->gate.mode();
    a.delegated = ex_.delegated;
    a.waited = std::chrono::duration_cast<admission::Micros>(ex_.queue_wait);
    a.level_refused = ex_.decision.outcome == admission::Outcome::would_shed &&
                      ex_.decision.reason == admission::Reason::level;
    return a;
  }

  // Applies a placement: true when the request goes on now; false when it
  // waits in its lane's queue or was refused (the 503 is on its way).
  bool apply(admission::Placement p, Clock::time_point now) {
    if (p.fell_back) {
      bump(
          st_.upstream[ex_.upstream].fallbacks[p.upstream][static_cast<std::size_t>(*p.fell_back)]);
      if (ex_.fallback_from < 0) {
        ex_.fallback_from = static_cast<int>(ex_.upstream);
        ex_.fallback_why = *p.fell_back;
      }
    }
    ex_.upstream = p.upstream;
    ex_.lease = std::move(p.lease);
    switch (p.how) {
      case Placed::seated:
      case Placed::stayed:
        return true;
      case Placed::observed:
        // Observe mode forwards what enforce would have refused, counted as that refusal.
        if (ex_.decision.outcome == admission::Outcome::admitted)
          ex_.decision = {admission::Outcome::would_shed, p.reason};
        return true;
      case Placed::queued:
        phase_ = Phase::queued;
        ex_.queue_start = now;
        ex_.seat_wait_pressure = w_.runtime().bulkhead(p.upstream).pool_bound();
        deadline = now + std::chrono::duration_cast<Clock::duration>(p.wait_for);
        self_ = shared_from_this();
        return false;
      case Placed::refused:
        ex_.decision = {admission::Outcome::shed, p.reason};
        if (!ex_.forwarded)
          count_decision();  // else it was counted admitted, before its connect failed
        refuse(p.retry_after);
        return false;
    }
    return false;
  }

  // The lane of a live lease whose token the request carries: part of that
  // lease's work, seated at once (refusing it could only stall the parent).
  std::optional<Lane> delegated_lane() const {
    if (!cfg_.admission.delegation) return std::nullopt;
    auto& m = req_->get();
    auto it = m.find(kLeaseHeader);
    if (it == m.end()) return std::nullopt;
    auto& rt = w_.runtime();
    auto id = admission::parse_lease_token(rt.lease_key, it->value());
    if (!id || id->worker >= rt.workers.size() ||
        !rt.workers[id->worker]->leases().live(id->slot, id->generation))
      return std::nullopt;  // forged, from another instance, or its lease has ended: nothing earned
    return id->lane;
  }

  void count_decision() {
    bump(st_.lane[admission::index(ex_.lane)].decisions[static_cast<std::size_t>(
        ex_.decision.outcome)][static_cast<std::size_t>(ex_.decision.reason)]);
  }

  // The part of its wait for a seat that is pressure: all of it when the
  // bulkhead held it at the connection pool's share (a wait for a connection),
  // none when it held it for the capacity measured or in slow start.
  Clock::duration seat_wait() const {
    return ex_.seat_wait_pressure ? ex_.queue_wait : Clock::duration{0};
  }

  // The upstream wait the controller reads: for a bulkhead slot, then for a
  // connection. A request refused at the end of its window waited all of it.
  void note_upstream_wait(Clock::time_point now, Clock::duration wait) {
    st_.upstream[ex_.upstream].wait.observe(std::chrono::duration<double>(wait).count());
    w_.waits.add(now, wait, ex_.upstream);
  }

  void note_queue_wait(Clock::time_point now) {
    ex_.queue_wait = now - ex_.queue_start;
    st_.lane[admission::index(ex_.lane)].queue_wait.observe(
        std::chrono::duration<double>(ex_.queue_wait).count());
  }

  // Admitted: counted in flight, given a lease slot, and on to the upstream.
  void forward() {
    ex_.forwarded = true;
    if (ex_.lease.seated()) {
      if (cfg_.admission.delegation) ex_.slot = open_slot(w_.leases());
    }
    ex_.in_flight = count_in_flight(st_.lane[admission::index(ex_.lane)].in_flight);
    auto& m = req_->get();
    if (auto it = m.find(http::field::expect); it != m.end()) {
      if (!iequals(it->value(), "100-continue")) {
        respond_error(417, "expectation", true);
        return;
      }
      ex_.expect_continue = !req_->is_done();  // Sluice answers it; Expect is not forwarded
    }
    acquire();
  }

  // A level refusal's Retry-After: when the controller expects the lane back.
  std::optional<admission::Millis> derived_level_wait() const {
    // Both levels must admit the lane again: the later of the two.
    const auto& p = w_.runtime().published;
    const auto l = admission::index(ex_.lane);
    auto process = p.process.readmit_ms[l].load(std::memory_order_relaxed);
    auto upstream = p.upstreams[ex_.upstream].readmit_ms[l].load(std::memory_order_relaxed);
    if (process < 0 || upstream < 0) return std::nullopt;
    return admission::Millis(std::max(process, upstream));
  }

  // A queued request got its seat (or goes on in observe mode): on to the
  // upstream. One that waited for an alternative after a failed connect was
  // counted when it first went out.
  void carry_on() {
    deadline = Clock::time_point::max();
    if (ex_.forwarded) {
      acquire();
      return;
    }
    count_decision();
    forward();
  }

  // ---------------------------------------------------------------- upstream connection
  void acquire() {
    if (sock_.gone()) {  // its HTTP/2 stream was reset while it waited: nothing goes out
      ex_.lease.cancel();
      abort();
      return;
    }
    must_check = !is_idempotent(ex_.method);
    phase_ = Phase::acquire;
    const auto now = Clock::now();
    deadline = now + cfg_.response_timeout;
    self_ = shared_from_this();
    w_.pool(ex_.upstream).acquire(*this, now);
  }

  // A connect failed. When every host of the upstream refuses, the upstream
  // closes. Nothing was sent, so the request may go on to another host, or to
  // an alternative, whatever its method. True when it went on.
  bool connect_failed(Clock::time_point now) {
    auto& rt = w_.runtime();
    bool all_down = w_.pool(ex_.upstream).all_hosts_ejected(now);
    if (all_down) rt.gates[ex_.upstream]->close(micros(now), std::nullopt);
    if (ex_.moves >= kMaxMoves) return false;
    ++ex_.moves;
    if (!all_down) {  // another host (still this upstream's probe, if it is one)
      bump(st_.upstream[ex_.upstream].retries);
      acquire();
      return true;
    }
    if (!movable()) return false;
    return go_elsewhere(now, admission::Fallback::connect_failed);
  }

  bool movable() const {
    return !ex_.route->pin && !ex_.route->alternatives.empty() && ex_.lease.seated();
  }

  // Moves a request that went out to an alternative (admission::relocate).
  // False when none is open: it stays where it was, to end there.
  bool go_elsewhere(Clock::time_point now, admission::Fallback why) {
    auto from = ex_.upstream;
    auto p = admission::relocate(ask(), *this, ex_.lease, ex_.signal, ex_.up_ttfb, why, ups_,
                                 micros(now), w_.rng());
    if (p.decreased) count_exhausted(from);
    ex_.signal = admission::Signal::none;
    bool stayed = p.how == Placed::stayed;
    if (apply(std::move(p), now) && !stayed) acquire();
    return !stayed;
  }

  // ---------------------------------------------------------------- request out
  // The head Sluice sends upstream, written once into a reused string.
  void build_request_head() {
    out_.clear();
    const bool own_host = cfg_.upstreams[ex_.upstream].tls;
    auto passed = append_upstream_head(out_, *req_, ex_.close_both, own_host);
    Forwarding f;
    if (!passed.has_host) f.default_host = w_.pool(ex_.upstream).authority(ex_.up->host);
    f.https = sock_.ssl() != nullptr;
    f.client = std::string_view(client_, client_len_);
    f.replace_forwarded_for = cfg_.forwarded_for_replace;
    f.request_id = ex_.request_id;
    char token[admission::kLeaseTokenMax];
    if (ex_.slot) {
      // This request's lease: a request the upstream makes back through
      // Sluice with it is seated at once on this lane (delegation).
      admission::LeaseId id{static_cast<std::uint32_t>(w_.index()), ex_.slot.get_deleter().slot,
                            ex_.slot.get_deleter().generation, ex_.lane};
      f.lease_token = {token, admission::format_lease_token(w_.runtime().lease_key, id, token)};
    }
    append_forwarding(out_, req_->get(), passed, f);
  }

  void send_request(Clock::time_point now) {
    phase_ = Phase::send_upstream;
    ex_.sent_at = now;
    ex_.first_event_due.reset();  // each send has its own (a replay, a second ask)
    // A route that may move a late stream keeps a body read whole before
    // admission, to send it again.
    if (ex_.route->first_event_timeout && !ex_.first_event_moved && ex_.prebuffered > 0 &&
        req_->is_done())
      replay_body_.assign(block_.get(), ex_.prebuffered);
    build_request_head();
    if (ex_.expect_continue && buf_.size() == 0) {
      ex_.expect_continue = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      phase_ = Phase::write_client;
      ex_.write_started = Clock::now();
      deadline = ex_.write_started + cfg_.send_timeout;
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
    if (ex_.prebuffered > 0) {  // read before admission: it leaves with the head
      write_upstream(std::exchange(ex_.prebuffered, 0));
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
    ex_.body_streamed = true;
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
    ex_.bytes_in += n;
    ex_.ingest.read(n);
    write_upstream(n);
  }

  void write_upstream(std::size_t n) {
    ex_.piece = n;
    phase_ = Phase::send_upstream;
    deadline = Clock::now() + cfg_.send_timeout;
    ex_.request_sent = req_->is_done();
    write_piece(ex_.up->stream, req_->chunked(), n, ex_.request_sent,
                beast::bind_front_handler(&Session::on_upstream_written, shared_from_this()));
  }

  void on_upstream_written(error_code ec, std::size_t) {
    if (ec) {
      upstream_failed(ec, "upstream_write");
      return;
    }
    if (ex_.ingest.on()) ex_.ingest.written(std::exchange(ex_.piece, 0), micros(Clock::now()));
    if (!ex_.request_sent) {
      request_body_step();
      return;
    }
    // The upstream's time runs from the end of a body streamed at the
    // client's pace: an upload's minutes are the client's, not slowness.
    if (ex_.body_streamed) ex_.sent_at = Clock::now();
    read_response_head();
  }

  // One gathered write: out_ (a head still to go, or nothing), then n bytes of
  // the block framed as the outgoing message needs (heads.hpp's frame_piece).
  template <class Handler>
  void write_piece(Stream& to, bool chunked, std::size_t n, bool last, Handler&& handler) {
    frame_ = frame_piece(chunked, n, last);
    // The head moves to sending_, which holds it until the write is done (the
    // previous write, if any, is done now); swapping moves no bytes.
    sending_.clear();
    sending_.swap(out_);
    auto line = frame_.size_line();
    std::array<net::const_buffer, 4> bufs{net::buffer(sending_),
                                          net::buffer(line.data(), line.size()),
                                          net::buffer(n ? block_.get() : nullptr, n),
                                          net::buffer(frame_.tail.data(), frame_.tail.size())};
    if (sending_.size() + line.size() + n + frame_.tail.size() == 0) {
      handler(error_code{}, 0);  // nothing to say (a raw body's end): carry on without a write
      return;
    }
    net::async_write(to, bufs, std::forward<Handler>(handler));
  }

  // An upstream failed before any of its response reached the client.
  void upstream_failed(error_code ec, std::string_view what) {
    if (std::exchange(ex_.first_event_late, false) && !ex_.header_sent) {
      first_event_failover();
      return;
    }
    if (sock_.gone()) {  // cancelled because the client left: the upstream did nothing wrong
      ex_.lease.cancel();
      ex_.up.reset();
      abort();
      return;
    }
    bool timed_out = ex_.timed_out;
    std::size_t failed_host = ex_.up ? ex_.up->host : SIZE_MAX;
    ex_.up.reset();
    bool cut = ec == net::error::eof || ec == net::error::connection_reset ||
               ec == net::error::broken_pipe || ec == http::error::end_of_stream;
    if (cut && failed_host != SIZE_MAX) w_.pool(ex_.upstream).close_idle(failed_host);
    // The connection closed or reset before any response byte (a kept-alive
    // connection the upstream had already closed, or an upstream going down):
    // replay once, on a fresh connection (the pool's choice of host; an
    // alternative when every host then refuses), but only a request that is
    // idempotent and whose body (none) can be sent again. Nothing reached the
    // client yet.
    if (!timed_out && !ex_.retried && is_idempotent(ex_.method) && ex_.bytes_in == 0 &&
        req_->is_done() && cut) {
      ex_.retried = true;
      fresh = true;
      avoid_host = failed_host;
      bump(st_.upstream[ex_.upstream].retries);
      // To another host, or, with one host, to an alternative when the route has one.
      if (w_.pool(ex_.upstream).host_count() == 1 && movable() &&
          go_elsewhere(Clock::now(), admission::Fallback::replay))
        return;
      acquire();
      return;
    }
    if (timed_out) {
      bump(st_.upstream[ex_.upstream].timeouts);
      ex_.signal = admission::Signal::timeout;
      respond_error(504, "upstream_timeout", true);
    } else {
      respond_error(502, what, !req_->is_done() || !ex_.keep_alive);
    }
  }

  // ---------------------------------------------------------------- first-event failover
  // A route's first_event_timeout: armed once the request is with the upstream,
  // when it can be sent again as it was (no body, or one read whole before
  // admission) and has not moved for it before.
  void arm_first_event() {
    const auto& t = ex_.route->first_event_timeout;
    if (!t || ex_.first_event_moved || ex_.first_event_due || ex_.body_streamed ||
        !req_->is_done() || ex_.upgrade)
      return;
    ex_.first_event_due = ex_.sent_at + *t;
  }

  bool first_event_overdue() const {
    return ex_.first_event_due && !ex_.first_event_late && !ex_.header_sent && ex_.up &&
           (phase_ == Phase::response_head || phase_ == Phase::response_body) &&
           Clock::now() >= *ex_.first_event_due;
  }

  // Its upstream sent no head (or first event) in time and nothing reached the
  // client: it moves once to an alternative (admission::relocate, counted and
  // logged as fallback first_event), or, with none open or none at all, goes
  // again to its own upstream. The late upstream's connection is closed.
  void first_event_failover() {
    ex_.first_event_late = false;
    ex_.first_event_due.reset();
    ex_.first_event_moved = true;
    const std::size_t late_host = ex_.up ? ex_.up->host : SIZE_MAX;
    ex_.up.reset();
    res_.reset();
    ex_.sse = false;
    ex_.signal = admission::Signal::none;
    ex_.request_sent = false;
    if (!replay_body_.empty()) {  // the body read before admission goes again
      std::memcpy(block_.get(), replay_body_.data(), replay_body_.size());
      ex_.prebuffered = replay_body_.size();
    }
    if (movable() && go_elsewhere(Clock::now(), admission::Fallback::first_event)) return;
    if (phase_ == Phase::closing || ex_.header_sent) return;  // refused where it stayed
    bump(st_.upstream[ex_.upstream].retries);
    fresh = true;
    avoid_host = late_host;  // another of its hosts, when it has one
    acquire();
  }

  // ---------------------------------------------------------------- response
  void read_response_head() {
    phase_ = Phase::response_head;
    deadline = Clock::now() + cfg_.response_timeout;
    arm_first_event();
    if (ex_.first_event_due) deadline = std::min(deadline, *ex_.first_event_due);
    res_.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(HeadAlloc(&arena_)));
    res_->header_limit(kMaxResponseHeader);
    res_->body_limit(boost::none);
    if (ex_.method == http::verb::head) res_->skip(true);
    read_upstream(&Session::on_response_head);
  }

  // The upstream's answer, parsed from its connection's buffer as Beast's
  // http::async_read_some does: what the buffer holds first, then a read at a
  // time while the parser needs more; an EOF ends a body that runs to the
  // close. Without its composed operation (a work guard per step, a post when
  // the buffer already held what was needed): `then` runs directly when no
  // read was needed. The parser stops at the head's end by itself, so the
  // same step reads a head or a piece of body.
  using UpstreamStep = void (Session::*)(error_code, std::size_t);

  void read_upstream(UpstreamStep then) {
    upstream_then_ = then;
    error_code ec;
    if (ex_.up->buffer.size() > 0 && parse_upstream(ec)) {
      (this->*then)(ec, 0);
      return;
    }
    read_upstream_more();
  }

  // True when the parser is done with what the buffer holds (ec: how).
  bool parse_upstream(error_code& ec) {
    auto& b = ex_.up->buffer;
    const auto used = res_->put(b.data(), ec);
    b.consume(used);
    return ec != http::error::need_more;
  }

  void read_upstream_more() {
    auto& b = ex_.up->buffer;
    const std::size_t size = beast::read_size(b, 65536);  // Beast's own choice of a read's size
    if (size == 0) {
      (this->*upstream_then_)(http::error::buffer_overflow, 0);
      return;
    }
    ex_.up->stream.async_read_some(
        b.prepare(size), beast::bind_front_handler(&Session::on_upstream_read, shared_from_this()));
  }

  void on_upstream_read(error_code ec, std::size_t n) {
    if (!ex_.up) return;  // the exchange ended meanwhile
    ex_.up->buffer.commit(n);
    if (ec == net::error::eof) {
      ec = {};
      if (res_->got_some())
        res_->put_eof(ec);  // a body delimited by the close ends here
      else
        ec = http::error::end_of_stream;
    } else if (!ec && !parse_upstream(ec)) {
      read_upstream_more();
      return;
    }
    (this->*upstream_then_)(ec, n);
  }

  void on_response_head(error_code ec, std::size_t) {
    if (!ec) ex_.first_event_late = false;  // it came as the wait ended: it stays
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
    ex_.ttfb = now - ex_.start;
    ex_.up_ttfb = std::chrono::duration_cast<admission::Micros>(now - ex_.sent_at);
    own_delay = own_lateness(now);
    if (ex_.lease.seated()) {
      ex_.signal = bulkhead().classify(status, route, ex_.up_ttfb, own_delay);
      bulkhead().note_head(*this, ex_.signal, ex_.up_ttfb, micros(now));
    }
    read_quota(m, status, now);
    if (ex_.signal == admission::Signal::refused && may_ask_again()) {
      ask_again(now);
      return;
    }
    if (status == 101) {
      if (!ex_.upgrade) {
        upstream_failed(http::error::bad_status, "upstream_bad_response");
        return;
      }
      start_tunnel();
      return;
    }
    if (auto ct = m.find(http::field::content_type); ct != m.end())
      ex_.sse = ct->value().starts_with("text/event-stream");
    if (!ex_.sse) ex_.first_event_due.reset();  // its head is its first byte: it came
    ex_.upstream_keep_alive = res_->keep_alive();
    std::optional<std::uint64_t> len;
    if (auto l = res_->content_length()) len = *l;
    auto framing = frame_response(ex_.method == http::verb::head, status, len, ex_.version,
                                  ex_.keep_alive && !closing_connections());
    ex_.keep_alive = framing.keep_alive;
    ex_.chunked_out = framing.chunked;
    // An SSE body keep-alive comments can go into: not length-delimited, not encoded.
    ex_.sse_open_ended =
        ex_.sse && (framing.chunked || !len) && m.find(http::field::content_encoding) == m.end();
    out_.clear();
    append_response_head(out_, m, len, ex_.version, framing, ex_.request_id);
    response_body_step();
  }

  admission::Bulkhead& bulkhead() { return w_.runtime().bulkhead(ex_.upstream); }

  // How late this thread read the answer's head: the thread's own lateness
  // (its heartbeat's), and for an answer that took kAskKernelAbove or more,
  // how long its bytes had been in the socket: the kernel's time since data
  // last came, counted in its clock ticks (up to kKernelTick each), so one tick
  // less. A stall shorter than a heartbeat interval, between two heartbeats,
  // is seen there only. One system call, for slow answers only.
  admission::Micros own_lateness(Clock::time_point now) {
    auto own = w_.own_delay(now);
    if (ex_.up_ttfb < kAskKernelAbove || own == admission::Micros::max()) return own;
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(ex_.up->stream.socket().native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) ==
        0) {
      const auto waited =
          admission::Micros(std::int64_t{info.tcpi_last_data_recv} * 1000) - kKernelTick;
      w_.saw_stall(now, waited);
      own = std::max(own, waited);
    }
    return own;
  }

  // The upstream refused it (429, 503) before doing any of its work. Once, a
  // request Sluice can send again as it was (idempotent and body-less: the
  // replay rule) asks for a seat again under enforce, unless the refusal
  // closed the upstream (its close statuses) or it was a closed upstream's
  // probe or a delegated call (admission::ask_again).
  bool may_ask_again() const {
    return !ex_.asked_again && !ex_.closing_status && !ex_.delegated && !ex_.lease.probe() &&
           ex_.live->gate.mode() == admission::Mode::enforce && is_idempotent(ex_.method) &&
           ex_.bytes_in == 0 && req_->is_done();
  }

  // Its seat goes back with the refusal (the estimate learns it) and it is
  // placed again as the oldest of its lane: on now, waiting for the next
  // release, or refused (503) at the end of its patience. The refusal's body
  // is not read: its connection closes.
  void ask_again(Clock::time_point now) {
    ex_.asked_again = true;
    bump(st_.upstream[ex_.upstream].asked_again);
    give_back(ex_.up, false);
    auto p = admission::ask_again(ask(), *this, ex_.lease, ex_.signal, ex_.up_ttfb, ups_,
                                  micros(now), w_.rng());
    if (p.decreased) count_exhausted(ex_.upstream);  // where it was refused (apply moves it)
    ex_.signal = admission::Signal::none;
    if (apply(std::move(p), now)) acquire();
  }

  // What the upstream's head says of its quota and whether it closes it
  // (heads.hpp's read_quota): a budget reading for its bulkhead, a closure.
  void read_quota(const ResponseHead& m, int status, Clock::time_point now) {
    // The wall clock's seconds, from the request's start (no second reading).
    auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                        (ex_.start_wall + (now - ex_.start)).time_since_epoch())
                        .count();
    auto q = proxy::read_quota(m, status, ex_.live->close_statuses, micros(now), unix_now);
    if (q.budget) bulkhead().note_budget(*q.budget);
    if (!q.closes) return;
    ex_.closing_status = true;
    w_.runtime().gates[ex_.upstream]->close(micros(now), q.until);
  }

  void response_body_step() {
    if (res_->is_done() || ex_.end_stream) {
      write_client(0, true);
      return;
    }
    if (!ex_.header_sent && ex_.up->buffer.size() == 0 && !ex_.first_event_due) {
      // No body bytes are here yet: send the head now so the client sees it at
      // once (an SSE stream's first event may be far off). Unless the stream
      // may still move for a late first event: then the head waits for it.
      write_client(0, false);
      return;
    }
    if (!block_) block_ = w_.blocks().get();
    auto& body = res_->get().body();
    body.data = block_.get();
    body.size = BlockPool::kBlockSize;
    phase_ = Phase::response_body;
    ex_.idle_cut = Clock::now() + (ex_.sse ? cfg_.sse_idle_timeout : cfg_.response_timeout);
    deadline = keep_alive_due();
    if (ex_.first_event_due && !ex_.header_sent)
      deadline = std::min(deadline, *ex_.first_event_due);
    read_upstream(&Session::on_response_body);
  }

  void on_response_body(error_code ec, std::size_t) {
    if (ec == http::error::need_buffer) ec = {};
    if (std::exchange(ex_.first_event_late, false) && ec && !ex_.header_sent) {
      first_event_failover();
      return;
    }
    if (ec) {
      if (ex_.end_stream && ec == net::error::operation_aborted) {
        response_body_step();  // draining: the stream ends cleanly here
        return;
      }
      if (!ex_.header_sent) {  // a held SSE head: the client still gets a status
        upstream_failed(ec, "upstream_bad_response");
        return;
      }
      // An SSE stream cut for idling is the stream's silence, not the upstream timing out.
      if (ex_.timed_out && !ex_.sse) bump(st_.upstream[ex_.upstream].timeouts);
      if (sock_.gone() && ex_.status_override == 0) ex_.status_override = 499;
      // The head is out: the only honest signal left is a cut connection, so
      // the client never mistakes a truncated body for a complete one (499: the
      // client left first, during a keep-alive comment).
      if (ex_.status_override == 0) ex_.status_override = 502;
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

  // ---------------------------------------------------------------- SSE keep-alive
  // A route's sse_keepalive: while the upstream is silent, before the first
  // event or between two, the client gets a comment line (which EventSource
  // ignores) so that an idle cut on the path does not end the stream.
  static constexpr std::string_view kKeepAlive = ": keep-alive\n\n";
  static constexpr std::string_view kKeepAliveChunk = "e\r\n: keep-alive\n\n\r\n";

  // Never before the head went (the first write's end), and only where a
  // comment can be framed: a chunked or close-delimited body, not encoded.
  Clock::time_point keep_alive_due() const {
    if (!ex_.sse || !ex_.route->sse_keepalive || !ex_.sse_open_ended ||
        ex_.client_written_at == Clock::time_point{})
      return ex_.idle_cut;
    return std::min(ex_.idle_cut, ex_.client_written_at + *ex_.route->sse_keepalive);
  }

  // At an event boundary: nothing of the body sent yet, or it ends in a blank line.
  bool sse_at_boundary() const {
    const std::uint32_t t = ex_.sse_tail;
    return !ex_.sse_started || (t & 0xFFFF) == 0x0A0A || t == 0x0D0A0D0A || (t & 0xFFFF) == 0x0D0D;
  }

  void note_sse_bytes(std::size_t n) {
    if (!ex_.sse || n == 0) return;
    ex_.sse_started = true;
    for (std::size_t i = n > 4 ? n - 4 : 0; i < n; ++i)
      ex_.sse_tail = (ex_.sse_tail << 8) | static_cast<unsigned char>(block_.get()[i]);
  }

  void keep_alive() {
    if (!ex_.sse || !ex_.route->sse_keepalive) return;
    const auto now = Clock::now();
    if (keep_alive_writing_ || !sse_at_boundary()) {  // mid-event: not now
      deadline = std::min(ex_.idle_cut, now + *ex_.route->sse_keepalive);
      return;
    }
    keep_alive_writing_ = true;
    keep_alive_started_ = now;
    deadline = std::min(ex_.idle_cut, now + cfg_.send_timeout);
    const auto text = ex_.chunked_out ? kKeepAliveChunk : kKeepAlive;
    net::async_write(sock_, net::buffer(text.data(), text.size()),
                     [self = shared_from_this()](error_code ec, std::size_t n) {
                       self->on_keep_alive_written(ec, n);
                     });
  }

  void on_keep_alive_written(error_code ec, std::size_t n) {
    keep_alive_writing_ = false;
    ex_.bytes_out += n;
    if (ec) {
      if (ex_.status_override == 0) ex_.status_override = 499;  // the client is gone
      if (std::exchange(deferred_, std::nullopt)) {
        abort();  // no upstream read is pending: nothing reads into what abort() frees
        return;
      }
      // The upstream read still pending ends now, and its handler ends the
      // exchange (abort() here would free what it reads into).
      error_code ignored;
      sock_.close();
      if (ex_.up) ex_.up->stream.socket().cancel(ignored);
      return;
    }
    bump(st_.sse_keepalives);
    ex_.client_written_at = Clock::now();
    if (deferred_) {  // a piece of the body arrived meanwhile
      auto [pn, last] = *std::exchange(deferred_, std::nullopt);
      write_client(pn, last);
      return;
    }
    if (phase_ == Phase::response_body) deadline = keep_alive_due();
  }

  void write_client(std::size_t n, bool last) {
    if (keep_alive_writing_) {  // one write at a time: after the comment
      deferred_ = {n, last};
      return;
    }
    note_sse_bytes(n);
    ex_.first_event_due.reset();  // the head goes: it stays where it is
    phase_ = Phase::write_client;
    ex_.write_started = Clock::now();
    // A seated request looks again after kStalledWrite: a write still pending
    // then means a slow reader, whose slot release_stalled_seat() gives back.
    deadline = ex_.write_started +
               (holds_stallable_seat() ? std::min<Clock::duration>(kStalledWrite, cfg_.send_timeout)
                                       : cfg_.send_timeout);
    ex_.header_sent = true;
    ex_.response_sent = last;
    write_piece(sock_, ex_.chunked_out, n, last,
                beast::bind_front_handler(&Session::on_client_written, shared_from_this()));
  }

  void on_client_written(error_code ec, std::size_t n) {
    ex_.bytes_out += n;
    if (ec) {
      abort();
      return;
    }
    if (ex_.sse) ex_.client_written_at = Clock::now();
    if (!ex_.response_sent) {
      response_body_step();
      return;
    }
    bool reusable = ex_.upstream_keep_alive && res_->is_done() && ex_.request_sent &&
                    ex_.up->buffer.size() == 0 && !ex_.end_stream && !ex_.close_both;
    give_back(ex_.up, reusable);
    end_exchange(res_->get().result_int(), !ex_.keep_alive || ex_.end_stream);
  }

  // ---------------------------------------------------------------- tunnel
  // The 101 goes to the client, then the connection is a Tunnel's; the lease
  // lasts the tunnel's whole life, and the exchange is logged when it ends.
  void start_tunnel() {
    bump(st_.websocket_tunnels);
    out_.clear();
    append_switch_head(out_, res_->get(), ex_.request_id);
    phase_ = Phase::tunnel;  // a 101 that does not leave in time closes both: 499
    deadline = Clock::now() + cfg_.send_timeout;
    ex_.header_sent = true;
    net::async_write(
        sock_, net::buffer(out_), [self = shared_from_this()](error_code ec, std::size_t n) {
          self->ex_.bytes_out += n;
          if (ec) return self->abort();
          self->deadline = Clock::time_point::max();
          self->block_.reset();
          Tunnel::start(self->w_, std::move(self->sock_), std::move(self->buf_),
                        std::move(self->ex_.up), [self](std::uint64_t up, std::uint64_t down) {
                          self->ex_.bytes_in += up;
                          self->ex_.bytes_out += down;
                          self->log(101);
                          self->phase_ = Phase::closing;
                        });
        });
  }

  // ---------------------------------------------------------------- endings
  void count_timeout(ClientTimeout t) { bump(st_.client_timeouts[static_cast<std::size_t>(t)]); }

  void count_exhausted(std::size_t upstream) {
    bump(
        st_.upstream[upstream]
            .exhausted[static_cast<std::size_t>(w_.runtime().bulkhead(upstream).estimate().why())]);
  }

  // A heavy lease lasts its whole response (an SSE stream included); any other
  // slot measures the upstream's concurrency, which a slow reader no longer uses.
  bool holds_stallable_seat() const { return ex_.lease.seated() && ex_.lane != Lane::heavy; }

  void release_stalled_seat() {
    if (!holds_stallable_seat()) return;
    bump(st_.stalled_writes);
    complete_lease(Clock::now());  // its lease slot stays open: the request is live until logged
  }

  // The seat goes back with what the upstream said, which teaches the estimate.
  void complete_lease(Clock::time_point now) {
    if (!ex_.lease) return;
    auto u = ex_.lease.upstream();
    if (ex_.lease.complete(ex_.signal, ex_.up_ttfb, micros(now), ex_.closing_status))
      count_exhausted(u);
  }

  // The exchange is over: what it holds goes back, and its line is written.
  void log(int status) {
    ex_.slot.reset();
    const auto now = Clock::now();
    complete_lease(now);
    ex_.in_flight.reset();
    double duration = std::chrono::duration<double>(now - ex_.start).count();
    auto& lane_stats = st_.lane[admission::index(ex_.lane)];
    if (ex_.route) {
      bump(lane_stats.requests[static_cast<std::size_t>(status) % kStatusSlots]);
      lane_stats.duration.observe(duration);
    } else {
      bump(st_.client_errors[static_cast<std::size_t>(status) % kStatusSlots]);
    }
    AccessLog& log = w_.log();
    if (!log.enabled()) return;
    std::string_view method;
    if (req_ && req_->is_header_done()) method = req_->get().method_string();
    auto record =
        access_record(ex_, status, method, std::string_view(client_, client_len_), cfg_, now);
    record.tls = sock_.tls_version();
    log.write(record);
  }

  // An error Sluice answers itself.
  void respond_error(int status, std::string_view reason, bool close_after) {
    ex_.up.reset();
    if (ex_.header_sent) {  // too late for a status: cut the connection
      ex_.status_override = status;
      abort();
      return;
    }
    if (ex_.request_id.empty()) fresh_request_id();
    ex_.reason = reason;
    OwnAnswer a;
    a.status = status;
    a.error = reason;
    write_own_answer(a, close_after);
  }

  // SPEC's refusal: 503, Retry-After derived from what was observed, clamped to
  // the route's band or else the lane's, with jitter that only adds,
  // X-Sluice-Reject, and a JSON body.
  void refuse(std::optional<admission::Millis> derived, int status = 503) {
    const auto& band = ex_.route && ex_.route->retry_after
                           ? *ex_.route->retry_after
                           : ex_.live->retry[admission::index(ex_.lane)];
    // A tenant's bucket tells its refill as it is: a client contract, not
    // the lane's estimate of an overload (no band, no jitter).
    ex_.retry_after = status == 429 && derived
                          ? static_cast<int>(std::max<std::int64_t>(
                                1, std::chrono::ceil<std::chrono::seconds>(*derived).count()))
                          : admission::retry_after_seconds(derived, band, w_.rng());
    // Refused after its tenant's limits let it through: it was not admitted,
    // and takes nothing of its tenant's rate.
    for (auto& h : ex_.tenant_holds) h.give_back(/*refund=*/true);
    ex_.ingest.give_back();  // its body goes nowhere
    OwnAnswer a;
    a.status = status;
    if (status == 429) a.fields = rate_fields_;
    a.error = admission::to_string(ex_.decision.reason);
    a.refusal = true;
    a.lane = admission::to_string(ex_.lane);
    a.level = static_cast<int>(ex_.level);
    a.retry_after_s = ex_.retry_after;
    write_own_answer(a, !req_->is_done());
  }

  // Every answer Sluice makes itself goes out here (heads.hpp's append_own_answer).
  void write_own_answer(OwnAnswer& a, bool close_after) {
    a.request_id = ex_.request_id;
    a.close = close_after || !ex_.keep_alive || closing_connections();
    out_.clear();
    append_own_answer(out_, own_body_, a);
    ex_.header_sent = true;
    phase_ = Phase::write_client;
    ex_.write_started = Clock::now();
    deadline = ex_.write_started + cfg_.send_timeout;
    net::async_write(sock_, net::buffer(out_),
                     [self = shared_from_this(), status = a.status, close = a.close](
                         error_code ec, std::size_t n) {
                       self->ex_.bytes_out += n;
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
    sock_.close();
    ex_.up.reset();
    block_.reset();
    if (ex_.started && phase_ != Phase::closing)
      log(ex_.status_override ? ex_.status_override : 499);
    phase_ = Phase::closing;
  }

  void graceful_close() {
    phase_ = Phase::closing;
    sock_.shutdown_close();
  }

  void close() {
    phase_ = Phase::closing;
    sock_.close();
  }

  Worker& w_;
  const config::Config& cfg_;
  Shard& st_;
  WorkerUpstreams ups_;
  Stream sock_;
  std::shared_ptr<const tls::ServerContexts> tls_;  // HTTPS: the certificates it handshakes with
  tls::HandshakeNotes tls_notes_;
  beast::flat_buffer buf_;
  // Both messages' fields live in a per-session arena, released between
  // requests: parsing a head allocates nothing in steady state.
  alignas(std::max_align_t) std::array<char, 2048> arena_buf_;
  std::pmr::monotonic_buffer_resource arena_{arena_buf_.data(), arena_buf_.size(),
                                             std::pmr::new_delete_resource()};
  std::optional<RequestParser> req_;
  std::optional<ResponseParser> res_;
  UpstreamStep upstream_then_ = nullptr;  // what read_upstream's read goes on with
  BlockPool::Block block_{nullptr, BlockPool::Deleter{nullptr}};
  std::shared_ptr<Session> self_;  // keeps the session alive while it waits for a slot or the pool
  std::string out_;                // the next head to write
  std::string sending_;            // a head being written
  std::string own_body_;           // scratch for the body of an answer Sluice writes itself
  std::string rate_fields_;        // the RateLimit fields of a 429 tenant_limit
  std::string replay_body_;        // a body a first-event failover sends again
  ChunkFrame frame_;               // the framing of the piece being written
  // An SSE keep-alive comment being written, since when, and a body piece
  // that waits for it to end.
  bool keep_alive_writing_ = false;
  Clock::time_point keep_alive_started_{};
  std::optional<std::pair<std::size_t, bool>> deferred_;
  Phase phase_ = Phase::head;
  bool first_ = true;         // no request finished on this connection yet
  bool connection_ = true;    // an accepted connection, not an HTTP/2 stream
  bool handed_over_ = false;  // the connection is an HTTP/2 one's now
  bool sniffed_ = false;      // its first bytes were looked at for an h2c preface
  char client_[46];
  std::size_t client_len_ = 0;
  std::array<char, 128> id_;  // the request id's bytes (ex_.request_id)
  Exchange ex_;               // last: what it holds goes back before the rest of the session goes
};

}  // namespace

void start_session(Worker& worker, Socket socket, bool tls) {
  std::make_shared<Session>(worker, std::move(socket), tls)->run();
}

void start_stream_session(Worker& worker, std::shared_ptr<H2Stream> stream, Socket& closed) {
  std::make_shared<Session>(worker, std::move(stream), closed)->run();
}

}  // namespace sluice::proxy
