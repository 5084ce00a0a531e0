// HTTP/2 client connections (proxy/h2.hpp): nghttp2's server session over a
// Stream, and each of its streams as the byte stream a Session reads and
// writes.
//
// Where a reader starts: Connection::start(), then on_read() (frames in),
// request_ready() (a stream's head is whole: its Session starts), flush()
// (frames out); StreamImpl::write_some() turns a Session's HTTP/1.1 response
// into HEADERS and the DATA that read_out() hands nghttp2.
//
// The limits: SETTINGS_MAX_CONCURRENT_STREAMS (SLUICE_H2_MAX_STREAMS; nghttp2
// refuses a stream over it), the header list (SLUICE_MAX_HEADER_BYTES: 431 for
// that stream), flow-control windows (SLUICE_H2_WINDOW per stream, four times
// that for the connection, opened again only as the Session reads the body),
// a budget of resets and cheap frames (SLUICE_H2_FRAME_BUDGET: GOAWAY
// ENHANCE_YOUR_CALM), and a deadline for output the client does not read
// (SLUICE_SEND_TIMEOUT). A stream's Session starts on a post, after the read
// that brought its head: a stream reset in the same read costs no upstream
// anything.
#include "proxy/h2.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "proxy/request_fields.hpp"
#include "proxy/response_bytes.hpp"
#include "proxy/runtime.hpp"
#include "proxy/stream_io.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr std::size_t kOutCap = 64 * 1024;  // response bytes a stream holds before its writer waits
constexpr std::size_t kWriteBatch = 64 * 1024;  // frames gathered into one socket write
constexpr std::size_t kReadSize = 16 * 1024;
constexpr int kFlushHops = 3;  // times a flush is posted behind the queue (schedule_flush)
constexpr auto kCheckEvery = std::chrono::milliseconds(250);
constexpr auto kAnnounceToGoaway = std::chrono::seconds(1);  // the drain's two GOAWAYs apart

// The fields of an HTTP/1.1 response that HTTP/2 forbids (RFC 9113 8.2.2):
// the framing and keep-alive Sluice wrote for HTTP/1.1. Names lowercased.
bool connection_specific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade";
}

// Fields whose value differs in every response go "never indexed": HPACK's
// dynamic table would take a new entry for each (evicting the ones that do
// repeat), and nghttp2 finds an entry by its name's hash, so a table full of one
// name's values is scanned whole for every response. Names lowercased.
bool unique_per_response(std::string_view name) {
  return name == "x-request-id" || name == "retry-after" || name == "set-cookie";
}

// ASCII lowercased, a byte at a time through a table.
constexpr auto kLower = [] {
  std::array<char, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return t;
}();

// A response head's fields as nghttp2 takes them, names lowercased: one per
// connection, reused for every response (nghttp2 copies what it is given).
struct HeaderList {
  std::string lower;
  std::vector<nghttp2_nv> nva;
};

class Connection;

class StreamImpl final : public H2Stream {
 public:
  StreamImpl(Connection& c, net::io_context& ioc, std::int32_t id, std::string_view tls_version,
             Clock::time_point read_at)
      : began(read_at), conn_(&c), ioc_(ioc), id_(id), tls_version_(tls_version) {}

  // ---- H2Stream (the Session's side) ----
  void read_some(net::mutable_buffer into, Handler h) override;
  std::size_t read_buffered(net::mutable_buffer into) override;
  void write_some(const Pieces& pieces, Handler h) override;
  void cancel() override {
    complete(read_h_, net::error::operation_aborted, 0);
    complete(write_h_, net::error::operation_aborted, 0);
  }
  void close(bool graceful) override;
  bool gone() const override { return gone_; }
  SSL* ssl() const override;
  std::string_view tls_version() const override { return tls_version_; }
  std::string_view client() const override;
  void watch(Tracked* session) override { watcher_ = session; }

  // ---- the connection's side ----
  // A field of the head: pseudo-headers kept, the rest written into in_ as
  // the HTTP/1.1 request's (nghttp2 lets no pseudo-header follow a field).
  void add_header(std::string_view name, std::string_view value, std::size_t limit);
  // The head is whole: in_ holds the HTTP/1.1 request it means.
  void compose(bool ended);
  // A GET or HEAD whose HEADERS did not end the stream: whether a body follows
  // is known at its first DATA (chunked) or its end (none), not before.
  bool body_undecided(bool ended) const {
    return !ended && !has_length_ && (method_ == "GET" || method_ == "HEAD");
  }
  // Answered by the connection itself (431): nobody reads what comes.
  void answered(bool ended) {
    closed_ = true;
    in_done_ = ended;
  }
  // What was received and not given back to flow control, for a stream that
  // ends: the connection's window must not shrink by it.
  std::size_t take_unconsumed() { return std::exchange(unconsumed_, 0); }
  void input(const std::uint8_t* data, std::size_t n);
  void end_input();
  // The stream closed (its end, a reset, or the connection's end).
  void ended();
  std::int32_t id() const { return id_; }
  bool too_large() const { return too_large_; }
  bool output_waiting() const { return out_.size() > out_off_; }
  bool input_done() const { return in_done_; }
  std::size_t slot = 0;     // in its connection's streams
  bool counted = false;     // in sluice_h2_streams
  bool undecided = false;   // its Session waits for body_undecided() to be decided
  Clock::time_point began;  // its HEADERS began

  static ssize_t read_out(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                          std::uint32_t* flags, nghttp2_data_source* source, void*);

 private:
  void complete(Handler& h, error_code ec, std::size_t n) {
    if (!h) return;
    net::post(ioc_, [h = std::move(h), ec, n]() mutable { std::move(h)(ec, n); });
  }
  void begin_head();
  void serve_read();
  bool feed(std::string_view bytes, error_code& ec);
  bool on_response_head(const ResponseBytes::Head& h);
  void reset(std::uint32_t code);
  void give_back_window();
  std::size_t buffered_in() const { return in_.size() - in_off_; }

  Connection* conn_;  // null once the connection ended
  net::io_context& ioc_;
  std::int32_t id_;
  std::string_view tls_version_;  // a static string of OpenSSL's
  // The request: its pseudo-headers and cookies as they come, its HTTP/1.1
  // bytes from the first field on.
  std::string method_, path_, authority_, cookies_;
  std::size_t header_bytes_ = 0;
  bool too_large_ = false;
  bool has_length_ = false;
  bool chunked_in_ = false;
  std::string in_;
  std::size_t in_off_ = 0;
  bool in_done_ = false;
  std::size_t unconsumed_ = 0;  // DATA bytes not yet given back to flow control
  net::mutable_buffer read_into_;
  Handler read_h_;
  // The response: read as written, its body bytes queued for DATA frames.
  std::optional<ResponseBytes> res_;  // made at the first write (HEAD known by then)
  std::string out_;
  std::size_t out_off_ = 0;
  bool submitted_ = false;
  bool res_done_ = false;
  bool deferred_ = false;  // nghttp2 waits for resume_data
  bool closed_ = false;    // the Session closed it
  bool gone_ = false;      // the stream closed under it
  Handler write_h_;
  std::size_t write_n_ = 0;
  Tracked* watcher_ = nullptr;
  friend class Connection;
};

class Connection final : public Tracked, public std::enable_shared_from_this<Connection> {
 public:
  Connection(Worker& w, Stream s, std::string_view client)
      : w_(w),
        cfg_(w.config()),
        st_(w.stats()),
        sock_(std::move(s)),
        client_(client),
        closed_socket_(w.ioc().get_executor()) {}

  ~Connection() override {
    teardown();
    if (s_) nghttp2_session_del(s_);
  }

  void start(std::string_view preread);

  void on_deadline() override;
  void on_drain() override {
    if (drain_ == Drain::none) announce(Clock::now());
  }

  nghttp2_session* session() const { return s_; }
  HeaderList& header_list() { return headers_; }
  SSL* ssl() const { return sock_.ssl(); }
  std::string_view client() const { return client_; }
  // Frames are due. They go out once the turn of the loop that made them is
  // over: a stream's Session ends its answer a handler or two after the one
  // that wrote it (its write completes, then it closes), and the other answers
  // read in the same turn are queued beside it. So the flush goes behind the
  // queue kFlushHops times and takes them all in one write and TLS record.
  void schedule_flush() {
    if (flush_posted_ || closed_) return;
    flush_posted_ = true;
    post_flush(kFlushHops);
  }
  void post_flush(int hops) {
    net::post(w_.ioc(), [self = shared_from_this(), hops] {
      if (hops > 1) return self->post_flush(hops - 1);
      self->flush_posted_ = false;
      self->flush();
    });
  }
  void count(H2Limit l) { bump(st_.h2_limited[static_cast<std::size_t>(l)]); }
  std::size_t window() const { return cfg_.h2_window; }

 private:
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* ud);
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* ud);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* ud);
  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                           const std::uint8_t* data, std::size_t len, void* ud);
  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* ud);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* f, void* ud);
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame*, int, void* ud);

  // A stream nghttp2 still has: its user data is the StreamImpl (no lookup).
  StreamImpl* stream(std::int32_t id) {
    return static_cast<StreamImpl*>(nghttp2_session_get_stream_user_data(s_, id));
  }
  void request_ready(StreamImpl& s, bool ended);
  void start(StreamImpl& s, bool ended);
  void answer_431(StreamImpl& s);
  // One unit of the frame budget; false once it is spent (GOAWAY queued).
  bool spend();
  void read();
  void on_read(error_code ec, std::size_t n);
  void flush();
  void announce(Clock::time_point now);
  void finish();
  void teardown();

  Worker& w_;
  const config::Config& cfg_;
  Shard& st_;
  Stream sock_;
  std::string client_;
  tls::HandshakeNotes notes_;  // renegotiations a client starts on it, counted at its end
  nghttp2_session* s_ = nullptr;
  // The open streams, each at its slot (StreamImpl::slot).
  std::vector<std::shared_ptr<StreamImpl>> streams_;
  std::vector<std::shared_ptr<StreamImpl>> to_start_;  // heads whole, Sessions not yet started
  Socket closed_socket_;  // never opened: each stream's Stream is moved from it
  HeaderList headers_;
  std::array<std::uint8_t, kReadSize> rbuf_{};
  std::string wbuf_;
  bool writing_ = false;
  bool flush_posted_ = false;
  bool closed_ = false;
  bool calm_ = false;  // over the frame budget: GOAWAY queued, nothing more read
  Clock::time_point write_started_{};
  Clock::time_point last_active_{};
  Clock::time_point blocked_since_{};  // output waiting on the client's windows since
  bool any_stream_ = false;
  double tokens_ = 0;
  Clock::time_point refilled_{};
  enum class Drain : std::uint8_t { none, announced, final } drain_ = Drain::none;
  Clock::time_point announced_at_{};
};

// ---------------------------------------------------------------- StreamImpl

SSL* StreamImpl::ssl() const { return conn_ ? conn_->ssl() : nullptr; }
std::string_view StreamImpl::client() const { return conn_ ? conn_->client() : std::string_view{}; }

void StreamImpl::add_header(std::string_view name, std::string_view value, std::size_t limit) {
  if (too_large_) return;
  header_bytes_ += name.size() + value.size() + 32;  // RFC 9113's accounting
  if (header_bytes_ > limit) {
    too_large_ = true;
    return;
  }
  if (!name.empty() && name[0] == ':') {
    if (name == ":method") method_ = value;
    if (name == ":path") path_ = value;
    if (name == ":authority") authority_ = value;
    return;  // :scheme is the connection's; :protocol is not taken
  }
  if (in_.empty()) begin_head();  // the first field: the request line first
  if (name == "host") {           // :authority stands for it (RFC 9113 8.3.1)
    if (authority_.empty()) append_field(in_, "Host", value);
    return;
  }
  if (name == "cookie") {  // HTTP/2 may split it; HTTP/1.1 has one (RFC 9113 8.2.3)
    if (!cookies_.empty()) cookies_ += "; ";
    cookies_ += value;
    return;
  }
  if (name == "content-length") has_length_ = true;
  append_field(in_, name, value);
}

// The request line, and :authority as Host (in_ is empty until then).
void StreamImpl::begin_head() {
  const std::string_view target =
      method_ == "CONNECT" ? std::string_view(authority_) : std::string_view(path_);
  in_.reserve(512);
  in_.append(method_).append(" ").append(target).append(" HTTP/1.1\r\n");
  if (!authority_.empty()) append_field(in_, "Host", authority_);
}

void StreamImpl::compose(bool ended) {
  if (in_.empty()) begin_head();
  if (!cookies_.empty()) append_field(in_, "Cookie", cookies_);
  chunked_in_ = !ended && !has_length_;
  if (chunked_in_) in_.append("Transfer-Encoding: chunked\r\n");
  in_.append("\r\n");  // one request per stream: its Session reads no other
  in_done_ = ended;
  std::string().swap(cookies_);
}

void StreamImpl::input(const std::uint8_t* data, std::size_t n) {
  if (in_done_ || gone_ || closed_) {  // nobody reads it: its window goes back at once
    if (conn_) nghttp2_session_consume(conn_->session(), id_, n);
    return;
  }
  if (chunked_in_) {
    char line[24];
    auto r = std::to_chars(line, line + 16, n, 16);
    in_.append(line, r.ptr).append("\r\n");
  }
  in_.append(reinterpret_cast<const char*>(data), n);
  if (chunked_in_) in_.append("\r\n");
  unconsumed_ += n;
  give_back_window();
  serve_read();
}

void StreamImpl::end_input() {
  if (in_done_) return;
  if (chunked_in_) in_.append("0\r\n\r\n");
  in_done_ = true;
  serve_read();
}

// Flow control: what the client sent is given back while the Session keeps
// up (up to a window's worth buffered), so a slow upstream slows the client.
void StreamImpl::give_back_window() {
  if (!conn_ || unconsumed_ == 0 || buffered_in() > conn_->window()) return;
  nghttp2_session_consume(conn_->session(), id_, std::exchange(unconsumed_, 0));
  conn_->schedule_flush();
}

void StreamImpl::read_some(net::mutable_buffer into, Handler h) {
  read_into_ = into;
  Handler(std::move(h)).swap(read_h_);  // (Boost 1.81's move assignment recurses)
  serve_read();
}

std::size_t StreamImpl::read_buffered(net::mutable_buffer into) {
  if (gone_ || closed_) return 0;
  const std::size_t n = std::min(into.size(), buffered_in());
  std::memcpy(into.data(), in_.data() + in_off_, n);
  in_off_ += n;
  if (in_off_ == in_.size()) {
    in_.clear();
    in_off_ = 0;
  }
  give_back_window();
  return n;
}

void StreamImpl::serve_read() {
  if (!read_h_) return;
  if (gone_ || closed_) return complete(read_h_, net::error::connection_reset, 0);
  if (buffered_in() > 0) return complete(read_h_, {}, read_buffered(read_into_));
  if (in_done_) complete(read_h_, net::error::eof, 0);
}

void StreamImpl::write_some(const Pieces& pieces, Handler h) {
  if (gone_ || closed_ || !conn_) return complete(h, net::error::connection_reset, 0);
  std::size_t total = 0;
  error_code ec;
  for (std::size_t i = 0; i < pieces.count && !ec; ++i) {
    std::string_view b(static_cast<const char*>(pieces.items[i].data()), pieces.items[i].size());
    total += b.size();
    feed(b, ec);
  }
  if (ec) {
    reset(NGHTTP2_INTERNAL_ERROR);
    return complete(h, ec, 0);
  }
  if (deferred_ && (output_waiting() || res_done_)) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_->session(), id_);
  }
  conn_->schedule_flush();
  if (out_.size() - out_off_ > kOutCap) {  // the client reads slower: the writer waits
    Handler(std::move(h)).swap(write_h_);
    write_n_ = total;
    return;
  }
  complete(h, {}, total);
}

// Takes bytes of the HTTP/1.1 response; false with ec when they are not one.
bool StreamImpl::feed(std::string_view bytes, error_code& ec) {
  if (!res_) res_.emplace(method_ == "HEAD");
  bool refused = false;
  const bool ok = res_->feed(bytes, out_, [&](const ResponseBytes::Head& h) {
    refused = !on_response_head(h);
    return !refused;
  });
  if (!ok) {
    ec = refused ? http::error::bad_status : http::error::bad_value;
    return false;
  }
  if (res_->done()) res_done_ = true;
  return true;
}

// A head is whole: HEADERS now (an interim 1xx, or the response's).
bool StreamImpl::on_response_head(const ResponseBytes::Head& h) {
  char code[3];
  std::to_chars(code, code + 3, h.status);
  // The names lowercased into one string sized first, so the pointers hold.
  auto& [lower, nva] = conn_->header_list();
  lower.clear();
  lower.reserve(h.fields.size());
  nva.clear();
  auto nv = [](std::string_view n, std::string_view v, std::uint8_t flags) {
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                      v.size(), flags};
  };
  nva.push_back(nv(":status", std::string_view(code, 3), NGHTTP2_NV_FLAG_NONE));
  ResponseBytes::for_each_field(h.fields, [&](std::string_view name, std::string_view value) {
    const std::size_t at = lower.size();
    lower.resize(at + name.size());  // within the reserve: the pointers taken so far hold
    char* out = lower.data() + at;
    for (char c : name) *out++ = kLower[static_cast<unsigned char>(c)];
    const std::string_view lname(lower.data() + at, name.size());
    if (connection_specific(lname)) return lower.resize(at);
    nva.push_back(nv(lname, value,
                     unique_per_response(lname) ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE));
  });
  auto* s = conn_->session();
  if (h.status < 200) {
    // Interim: 100 Continue and the like go as they are; a 101 has no place here.
    return h.status != 101 && nghttp2_submit_headers(s, NGHTTP2_FLAG_NONE, id_, nullptr, nva.data(),
                                                     nva.size(), nullptr) == 0;
  }
  submitted_ = true;
  nghttp2_data_provider dp;
  dp.source.ptr = this;
  dp.read_callback = &StreamImpl::read_out;
  const bool body = h.body || output_waiting();  // none: END_STREAM on the HEADERS
  if (!body) res_done_ = true;
  return nghttp2_submit_response(s, id_, nva.data(), nva.size(), body ? &dp : nullptr) == 0;
}

ssize_t StreamImpl::read_out(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                             std::uint32_t* flags, nghttp2_data_source* source, void*) {
  auto* self = static_cast<StreamImpl*>(source->ptr);
  const std::size_t avail = self->out_.size() - self->out_off_;
  if (avail == 0) {
    if (self->res_done_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    self->deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const std::size_t n = std::min(length, avail);
  std::memcpy(buf, self->out_.data() + self->out_off_, n);
  self->out_off_ += n;
  if (self->out_off_ == self->out_.size()) {
    self->out_.clear();
    self->out_off_ = 0;
    if (self->res_done_) *flags |= NGHTTP2_DATA_FLAG_EOF;
  } else if (self->out_off_ > kOutCap) {
    self->out_.erase(0, self->out_off_);
    self->out_off_ = 0;
  }
  if (self->write_h_ && self->out_.size() - self->out_off_ <= kOutCap)
    self->complete(self->write_h_, {}, std::exchange(self->write_n_, 0));
  return static_cast<ssize_t>(n);
}

void StreamImpl::close(bool graceful) {
  if (closed_) return;
  closed_ = true;
  cancel();
  watcher_ = nullptr;
  if (gone_ || !conn_) return;
  // What it was sent and nobody will read gives its window back.
  if (auto n = std::exchange(unconsumed_, 0); n > 0)
    nghttp2_session_consume(conn_->session(), id_, n);
  if (graceful && submitted_ && !res_done_ && res_) {
    res_->eof();  // a body delimited by the close ends here
    if (res_->done()) res_done_ = true;
  }
  if (!submitted_ || !res_done_) {
    reset(NGHTTP2_INTERNAL_ERROR);  // not whole: the client must not take it for whole
    return;
  }
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_->session(), id_);
  }
  conn_->schedule_flush();
}

void StreamImpl::reset(std::uint32_t code) {
  if (!conn_ || gone_) return;
  nghttp2_submit_rst_stream(conn_->session(), NGHTTP2_FLAG_NONE, id_, code);
  conn_->schedule_flush();
}

void StreamImpl::ended() {
  gone_ = true;
  conn_ = nullptr;
  complete(read_h_, net::error::connection_reset, 0);
  complete(write_h_, net::error::connection_reset, 0);
  if (watcher_ && !closed_) watcher_->deadline = Clock::now();  // its Session looks now
}

// ---------------------------------------------------------------- Connection

void Connection::start(std::string_view preread) {
  bump(st_.client_connections, std::int64_t{1});
  bump(st_.h2_connections, std::int64_t{1});
  if (auto* ssl = sock_.ssl()) {
    notes_.done = true;
    tls::attach(ssl, notes_);
  }
  bump(w_.active_sessions, std::int64_t{1});
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &Connection::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &Connection::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &Connection::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &Connection::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &Connection::on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &Connection::on_frame_send);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &Connection::on_invalid_frame);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // given back as the Session reads
  // RFC 7540's priority tree is deprecated (RFC 9113 5.3.2) and Sluice serves
  // streams as their Sessions answer: no tree, no closed streams kept for it.
  nghttp2_option_set_no_closed_streams(opt, 1);
  nghttp2_session_server_new2(&s_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);

  const std::uint32_t conn_window = std::min<std::uint64_t>(4ull * cfg_.h2_window, (1u << 31) - 1);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg_.h2_max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cfg_.h2_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(cfg_.max_header_bytes)},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  nghttp2_submit_settings(s_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(s_, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<std::int32_t>(conn_window));
  const auto now = Clock::now();
  tokens_ = 2.0 * cfg_.h2_frame_budget;
  refilled_ = now;
  last_active_ = now;
  w_.track(*this);
  deadline = now + kCheckEvery;
  if (!preread.empty()) {
    auto rv = nghttp2_session_mem_recv(s_, reinterpret_cast<const std::uint8_t*>(preread.data()),
                                       preread.size());
    if (rv < 0) {
      count(H2Limit::protocol);
      teardown();
      return;
    }
  }
  if (w_.runtime().draining.load(std::memory_order_relaxed)) announce(now);
  flush();
  read();
}

void Connection::read() {
  if (closed_ || calm_) return;
  sock_.async_read_some(
      net::buffer(rbuf_),
      [self = shared_from_this()](error_code ec, std::size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(error_code ec, std::size_t n) {
  if (ec || closed_) {
    teardown();
    return;
  }
  last_active_ = Clock::now();
  auto rv = nghttp2_session_mem_recv(s_, rbuf_.data(), n);
  if (rv < 0 && !calm_) {
    // Not HTTP/2 (a bad preface) or a frame that ends the connection: nghttp2
    // has queued its GOAWAY where the protocol has one.
    count(H2Limit::protocol);
    calm_ = true;
  }
  flush();
  read();
}

void Connection::flush() {
  if (writing_ || closed_) return;
  wbuf_.clear();
  while (wbuf_.size() < kWriteBatch) {
    const std::uint8_t* data = nullptr;
    auto n = nghttp2_session_mem_send(s_, &data);
    if (n < 0) {
      teardown();
      return;
    }
    if (n == 0) break;
    wbuf_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  if (wbuf_.empty()) {
    if (calm_ || (nghttp2_session_want_read(s_) == 0 && nghttp2_session_want_write(s_) == 0))
      finish();
    return;
  }
  writing_ = true;
  write_started_ = Clock::now();
  net::async_write(sock_, net::buffer(wbuf_),
                   [self = shared_from_this()](error_code ec, std::size_t) {
                     self->writing_ = false;
                     if (ec) return self->teardown();
                     self->flush();
                   });
}

// One unit of the budget: a reset, a PING, a SETTINGS, a PRIORITY, an empty
// DATA. The bucket holds two seconds' worth and refills at the budget a second.
bool Connection::spend() {
  const auto now = Clock::now();
  const double rate = cfg_.h2_frame_budget;
  tokens_ =
      std::min(2.0 * rate, tokens_ + rate * std::chrono::duration<double>(now - refilled_).count());
  refilled_ = now;
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  if (!calm_) {
    calm_ = true;
    count(H2Limit::frame_budget);
    nghttp2_session_terminate_session(s_, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  return false;
}

void Connection::announce(Clock::time_point now) {
  // The first of the drain's two GOAWAYs: no new connections here, please;
  // streams still come (the last stream id follows a second later).
  drain_ = Drain::announced;
  announced_at_ = now;
  nghttp2_submit_shutdown_notice(s_);
  schedule_flush();
}

void Connection::on_deadline() {
  if (closed_) return;
  const auto now = Clock::now();
  deadline = now + kCheckEvery;
  // Draining, or the no_keepalive emergency action: clients are asked to
  // go (HTTP/2's Connection: close), and the streams under way finish.
  const auto& rt = w_.runtime();
  if (drain_ == Drain::none && (rt.draining.load(std::memory_order_relaxed) ||
                                rt.published.acting(admission::Action::no_keepalive)))
    announce(now);
  if (drain_ == Drain::announced && now >= announced_at_ + kAnnounceToGoaway) {
    drain_ = Drain::final;
    nghttp2_submit_goaway(s_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(s_),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    schedule_flush();
  }
  if (writing_ && now - write_started_ > cfg_.send_timeout) {
    // Output the client has not read within SLUICE_SEND_TIMEOUT: its streams
    // cannot end, so neither can it.
    count(H2Limit::unread);
    teardown();
    return;
  }
  // Output held by a connection window the client does not open, as long (a
  // stream's own window held shut is its Session's send timeout).
  bool blocked = false, requests = false;
  for (auto& s : streams_) {
    if (s->output_waiting() && nghttp2_session_get_remote_window_size(s_) <= 0) blocked = true;
    if (s->counted && !s->undecided) {
      requests = true;
    } else if (now - s->began > cfg_.header_timeout) {
      // A head (or a GET's first DATA) not whole within SLUICE_HEADER_TIMEOUT:
      // the slowloris of HTTP/2.
      bump(st_.client_timeouts[static_cast<std::size_t>(ClientTimeout::header)]);
      calm_ = true;
      nghttp2_session_terminate_session(s_, NGHTTP2_PROTOCOL_ERROR);
      flush();
      return;
    }
  }
  if (!blocked) {
    blocked_since_ = {};
  } else if (blocked_since_ == Clock::time_point{}) {
    blocked_since_ = now;
  } else if (now - blocked_since_ > cfg_.send_timeout) {
    count(H2Limit::unread);
    calm_ = true;
    nghttp2_session_terminate_session(s_, NGHTTP2_FLOW_CONTROL_ERROR);
    flush();
    return;
  }
  if (!requests && !writing_) {
    auto idle = std::chrono::milliseconds(any_stream_ ? cfg_.idle_timeout : cfg_.header_timeout);
    if (rt.published.acting(admission::Action::short_timeouts))  // as a Session's
      idle = std::min(idle, std::max(std::chrono::milliseconds{1000}, idle / 10));
    if (drain_ == Drain::final || now - last_active_ > idle) {
      calm_ = true;
      nghttp2_session_terminate_session(s_, NGHTTP2_NO_ERROR);
      flush();
    }
  }
}

void Connection::finish() {
  if (closed_) return;
  sock_.shutdown_close();
  teardown();
}

void Connection::teardown() {
  if (closed_) return;
  closed_ = true;
  sock_.close();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& s : streams) {
    if (s->counted) bump(st_.h2_streams, std::int64_t{-1});
    s->ended();
  }
  if (notes_.renegotiations > 0) bump(st_.tls_renegotiations, std::uint64_t{notes_.renegotiations});
  bump(st_.client_connections, std::int64_t{-1});
  bump(st_.h2_connections, std::int64_t{-1});
  w_.runtime().connections.fetch_sub(1, std::memory_order_relaxed);
  bump(w_.active_sessions, std::int64_t{-1});
}

void Connection::request_ready(StreamImpl& s, bool ended) {
  any_stream_ = true;
  s.counted = true;
  bump(st_.h2_streams, std::int64_t{1});
  bump(st_.h2_streams_total);
  if (s.too_large()) {
    s.answered(ended);
    answer_431(s);
    return;
  }
  if (s.body_undecided(ended)) {
    s.undecided = true;  // started by its first DATA (a body) or its end (none)
    return;
  }
  start(s, ended);
}

void Connection::start(StreamImpl& s, bool ended) {
  s.undecided = false;
  s.compose(ended);
  // Started after this read's frames, all in one post: a stream reset in
  // them starts nothing.
  to_start_.push_back(streams_[s.slot]);
  if (to_start_.size() > 1) return;
  net::post(w_.ioc(), [self = shared_from_this()] {
    std::vector<std::shared_ptr<StreamImpl>> starting;
    starting.swap(self->to_start_);
    for (auto& st : starting)
      if (!st->gone()) start_stream_session(self->w_, std::move(st), self->closed_socket_);
    starting.clear();
    if (self->to_start_.empty()) self->to_start_.swap(starting);  // its memory, for the next read's
  });
}

void Connection::answer_431(StreamImpl& s) {
  count(H2Limit::header_list);
  static constexpr char kStatus[] = "431";
  nghttp2_nv nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(":status")),
                reinterpret_cast<std::uint8_t*>(const_cast<char*>(kStatus)), 7, 3,
                NGHTTP2_NV_FLAG_NONE};
  nghttp2_submit_response(s_, s.id(), &nv, 1, nullptr);
}

int Connection::on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  // Its clock reading is the read's that brought its HEADERS.
  auto s = std::make_shared<StreamImpl>(*c, c->w_.ioc(), f->hd.stream_id, c->sock_.tls_version(),
                                        c->last_active_);
  s->slot = c->streams_.size();
  nghttp2_session_set_stream_user_data(c->s_, f->hd.stream_id, s.get());
  c->streams_.push_back(std::move(s));
  return 0;
}

int Connection::on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                          std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                          std::uint8_t, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  if (auto* s = c->stream(f->hd.stream_id))
    s->add_header({reinterpret_cast<const char*>(name), namelen},
                  {reinterpret_cast<const char*>(value), valuelen}, c->cfg_.max_header_bytes);
  return 0;
}

int Connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  const bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  switch (f->hd.type) {
    case NGHTTP2_HEADERS:
      if (auto* s = c->stream(f->hd.stream_id)) {
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST)
          c->request_ready(*s, end);
        else if (end && s->undecided)
          c->start(*s, true);
        else if (end)
          s->end_input();  // trailers: the body's end (their fields are not forwarded)
      }
      return 0;
    case NGHTTP2_DATA:
      if (auto* s = c->stream(f->hd.stream_id); s && end && s->undecided)
        c->start(*s, true);  // no body after all (its DATA frames were empty)
      else if (s && end)
        s->end_input();
      if (f->hd.length == 0 && !end && !c->spend()) return NGHTTP2_ERR_CALLBACK_FAILURE;
      return 0;
    case NGHTTP2_RST_STREAM:
    case NGHTTP2_PRIORITY:
      return c->spend() ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
    case NGHTTP2_PING:
    case NGHTTP2_SETTINGS:
      if ((f->hd.flags & NGHTTP2_FLAG_ACK) != 0) return 0;
      return c->spend() ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
    default:
      return 0;
  }
}

int Connection::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                              const std::uint8_t* data, std::size_t len, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  if (auto* s = c->stream(id)) {
    if (s->undecided && len > 0) c->start(*s, false);  // a body: chunked
    s->input(data, len);
  } else
    nghttp2_session_consume(c->s_, id, len);  // a stream already answered: its window goes back
  return 0;
}

int Connection::on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  auto* found = c->stream(id);
  if (!found) return 0;
  auto s = std::move(c->streams_[found->slot]);
  if (s->slot + 1 != c->streams_.size()) {  // the last one takes its slot
    c->streams_[s->slot] = std::move(c->streams_.back());
    c->streams_[s->slot]->slot = s->slot;
  }
  c->streams_.pop_back();
  if (s->counted) bump(c->st_.h2_streams, std::int64_t{-1});
  // Bytes it held unread: the stream's window goes with it, the connection's
  // must not shrink by them.
  if (auto n = s->take_unconsumed(); n > 0) nghttp2_session_consume_connection(c->s_, n);
  s->ended();
  return 0;
}

int Connection::on_frame_send(nghttp2_session* session, const nghttp2_frame* f, void* ud) {
  auto* c = static_cast<Connection*>(ud);
  if (f->hd.type == NGHTTP2_RST_STREAM && f->rst_stream.error_code == NGHTTP2_REFUSED_STREAM)
    c->count(H2Limit::concurrent_streams);
  // The response ended before the request did (a 413, a refusal): the rest of
  // the body is not wanted (RFC 9113 8.1).
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0)
    if (auto* s = c->stream(f->hd.stream_id); s && !s->input_done())
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
  return 0;
}

int Connection::on_invalid_frame(nghttp2_session*, const nghttp2_frame*, int, void* ud) {
  static_cast<Connection*>(ud)->count(H2Limit::protocol);
  return 0;
}

}  // namespace

void start_h2(Worker& worker, Stream stream, std::string_view preread, std::string_view client) {
  std::make_shared<Connection>(worker, std::move(stream), client)->start(preread);
}

}  // namespace sluice::proxy
