// sluice_loadgen: an open-loop HTTP/1.1 load generator for bench/overload/run.sh.
//
// Requests arrive on a schedule (constant gaps or Poisson), whether or not earlier ones
// were answered: an overloaded server cannot slow the load down, as it can a closed loop
// such as wrk. Several request classes run at once, each with its own path, rate (which may
// change at given times: a step) and client timeout. A request that has no complete answer
// within its timeout (a stream: no response head) counts as a timeout and its connection is
// closed. Connections are kept alive and reused from one pool, grown on demand.
//
// Latency runs from the request's scheduled arrival, not from when it was written, so a
// generator that falls behind shows it as latency instead of hiding it.
//
// Retry-After honesty (--obey-retry-after): a request refused with 429 or 503 and a
// Retry-After retries exactly once. With probability 1 - P (--probe-share P) it waits
// exactly the Retry-After it was told ("obey"); otherwise it waits u x told, u uniform in
// (0, 1) ("probe"). The obeyers measure whether the told wait worked; the probes measure
// which shorter waits would have worked too (see bench/overload/analyze.py). Every first
// retry is one line of --retries FILE.
//
// A closed burst (--burst N): instead of the schedule, each class sends N requests at once at
// the start, each on its own connection, and the run ends when every one has its outcome: a
// cold start's wave of clients, as bench/cold_start.sh sends it.
//
// Single-threaded (one io_context): a few thousand requests per second is all it needs.
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr std::string_view kUsage =
    "usage: sluice_loadgen --target HOST:PORT --class SPEC [--class SPEC ...] [options]\n"
    "  --class SPEC        name=NAME,path=/p,rate=R[,step=T:R ...][,arrivals=constant|poisson]\n"
    "                      [,timeout_ms=1000][,stream=1]  (stream: the timeout covers the\n"
    "                      response head; the body is then read to its end)\n"
    "  --burst N           each class sends N requests at once at the start (rate, step and\n"
    "                      arrivals are then not needed and ignored) and the run ends when all\n"
    "                      are over; --warmup must be 0, --duration is ignored\n"
    "  --warmup S          seconds of load before the measured window (default 0)\n"
    "  --duration S        seconds of measured window (default 10); arrivals stop after it\n"
    "  --seed N            random seed (default 1)\n"
    "  --log FILE          one line per request of the whole run, warm-up and retries included:\n"
    "                      class, scheduled and done (s from the start), outcome, status, "
    "latency,\n"
    "                      Retry-After, whether it was a retry\n"
    "  --obey-retry-after  refused requests (429/503 with Retry-After) retry once\n"
    "  --probe-share P     share of those retrying after u x told, u uniform in (0,1) (default "
    "0.5)\n"
    "  --retry-horizon S   retries due later than S s after the arrivals end are not sent (default "
    "60)\n"
    "  --retries FILE      one line per first retry\n"
    "  --max-connections N open connections at most (default 4000); a request finding none\n"
    "                      counts as dropped\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "sluice_loadgen: %s\n%s", message.c_str(), kUsage.data());
  std::exit(2);
}

double parse_double(std::string_view what, std::string_view text) {
  try {
    std::size_t used = 0;
    const std::string copy(text);
    const double value = std::stod(copy, &used);
    if (used != copy.size() || !std::isfinite(value) || value < 0) throw std::invalid_argument("");
    return value;
  } catch (const std::exception&) {
    usage_error(std::string(what) + ": expected a non-negative number, got '" + std::string(text) +
                "'");
  }
}

struct ClassSpec {
  std::string name;
  std::string path = "/";
  std::vector<std::pair<double, double>> rates;  // (from second, requests per second)
  bool poisson = false;
  bool stream = false;
  bool has_rate = false;
  double timeout_s = 1.0;

  double rate_at(double t) const {
    double rate = 0;
    for (const auto& [from, r] : rates) {
      if (t >= from) rate = r;
    }
    return rate;
  }
  // The next time the rate changes after t, or infinity.
  double next_change(double t) const {
    double next = INFINITY;
    for (const auto& [from, r] : rates) {
      if (from > t) next = std::min(next, from);
    }
    return next;
  }
};

ClassSpec parse_class(std::string_view text) {
  ClassSpec spec;
  double base_rate = -1;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto eq = part.find('=');
    if (eq == std::string_view::npos)
      usage_error("--class: expected key=value, got '" + std::string(part) + "'");
    const auto key = part.substr(0, eq);
    const auto value = part.substr(eq + 1);
    if (key == "name") {
      spec.name = value;
    } else if (key == "path") {
      spec.path = value;
    } else if (key == "rate") {
      base_rate = parse_double("rate", value);
    } else if (key == "step") {
      const auto colon = value.find(':');
      if (colon == std::string_view::npos) usage_error("--class: step=T:RATE");
      spec.rates.emplace_back(parse_double("step", value.substr(0, colon)),
                              parse_double("step", value.substr(colon + 1)));
    } else if (key == "arrivals") {
      if (value == "poisson") {
        spec.poisson = true;
      } else if (value != "constant") {
        usage_error("--class: arrivals=constant|poisson");
      }
    } else if (key == "timeout_ms") {
      spec.timeout_s = parse_double("timeout_ms", value) / 1000.0;
    } else if (key == "stream") {
      spec.stream = value == "1";
    } else {
      usage_error("--class: unknown key '" + std::string(key) + "'");
    }
  }
  if (spec.name.empty()) usage_error("--class needs name=");
  spec.has_rate = base_rate >= 0;
  spec.rates.insert(spec.rates.begin(), {0.0, std::max(base_rate, 0.0)});
  return spec;
}

struct Options {
  std::string host = "127.0.0.1";
  std::string port;
  std::vector<ClassSpec> classes;
  double warmup_s = 0;
  double duration_s = 10;
  std::uint64_t seed = 1;
  std::string log_file;
  bool obey = false;
  double probe_share = 0.5;
  double retry_horizon_s = 60;
  std::string retries_file;
  std::size_t max_connections = 4000;
  std::size_t burst = 0;  // 0: the open-loop schedule
};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage.data(), stdout);
      std::exit(0);
    }
    if (arg == "--obey-retry-after") {
      o.obey = true;
      continue;
    }
    if (i + 1 >= argc) usage_error(std::string(arg) + ": missing value");
    const std::string_view value = argv[++i];
    if (arg == "--target") {
      const auto colon = value.rfind(':');
      if (colon == std::string_view::npos) usage_error("--target: expected HOST:PORT");
      o.host = value.substr(0, colon);
      o.port = value.substr(colon + 1);
    } else if (arg == "--class") {
      o.classes.push_back(parse_class(value));
    } else if (arg == "--warmup") {
      o.warmup_s = parse_double(arg, value);
    } else if (arg == "--duration") {
      o.duration_s = parse_double(arg, value);
    } else if (arg == "--seed") {
      o.seed = static_cast<std::uint64_t>(parse_double(arg, value));
    } else if (arg == "--log") {
      o.log_file = value;
    } else if (arg == "--probe-share") {
      o.probe_share = parse_double(arg, value);
      if (o.probe_share > 1) usage_error("--probe-share: at most 1");
    } else if (arg == "--retry-horizon") {
      o.retry_horizon_s = parse_double(arg, value);
    } else if (arg == "--retries") {
      o.retries_file = value;
    } else if (arg == "--max-connections") {
      o.max_connections = static_cast<std::size_t>(parse_double(arg, value));
    } else if (arg == "--burst") {
      const double n = parse_double(arg, value);
      if (n < 1 || n != std::floor(n) || n > 1e6) {
        usage_error("--burst: expected a whole number from 1 to 1000000, got '" +
                    std::string(value) + "'");
      }
      o.burst = static_cast<std::size_t>(n);
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (o.port.empty()) usage_error("--target is required");
  if (o.classes.empty()) usage_error("at least one --class is required");
  if (o.burst > 0 && o.warmup_s > 0) usage_error("--burst has no warm-up: --warmup must be 0");
  for (const auto& spec : o.classes) {
    if (o.burst == 0 && !spec.has_rate) usage_error("--class " + spec.name + " needs rate=");
  }
  return o;
}

enum class Outcome { kOk, kLate2xx, k503, k504, k429, kOther, kTimeout, kError, kDropped };

struct ClassStats {
  std::uint64_t sent = 0, ok = 0, late2xx = 0, s503 = 0, s504 = 0, s429 = 0, other = 0,
                timeouts = 0, errors = 0, dropped = 0, refused = 0, refused_with_retry_after = 0;
  std::vector<double> latencies_ms;  // 2xx within the timeout
};

struct LogRecord {
  std::size_t cls;
  double scheduled_s, done_s, latency_ms;
  Outcome outcome;
  int status;
  int retry_after;  // -1: none
  bool is_retry;
};

constexpr std::string_view kOutcomeNames[] = {"ok",    "late_2xx", "503",   "504",    "429",
                                              "other", "timeout",  "error", "dropped"};

struct RetryRecord {
  std::size_t cls;
  bool probe;
  double told_s, delay_s, refused_at_s;
  int status;  // 0: timeout or error
  bool ok;
};

double quantile(std::vector<double>& v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

class Generator;

// One keep-alive connection: carries one request at a time.
struct Connection {
  explicit Connection(net::io_context& io) : socket(io) {}
  tcp::socket socket;
  beast::flat_buffer buffer;
  bool used = false;  // has carried a request before (a stale keep-alive may fail at once)
};

struct Request {
  std::size_t cls = 0;
  Clock::time_point scheduled;
  bool measured = false;
  bool is_retry = false;
  bool probe = false;
  double told_s = 0, delay_s = 0, refused_at_s = 0;
  std::shared_ptr<Connection> conn;
  std::optional<http::response_parser<http::string_body>> parser;
  std::unique_ptr<net::steady_timer> timer;
  bool done = false;
  bool timed_out = false;
  bool head_seen = false;
  bool resent = false;
  bool recorded = false;
};

class Generator {
 public:
  Generator(net::io_context& io, Options options)
      : io_(io), o_(std::move(options)), rng_(o_.seed), stats_(o_.classes.size()) {
    tcp::resolver resolver(io_);
    endpoints_ = resolver.resolve(o_.host, o_.port);
    for (const auto& spec : o_.classes) {
      texts_.push_back("GET " + spec.path + " HTTP/1.1\r\nHost: " + o_.host + ":" + o_.port +
                       "\r\nUser-Agent: sluice_loadgen\r\n\r\n");
      arrival_timers_.push_back(std::make_unique<net::steady_timer>(io_));
    }
  }

  void start() {
    start_ = Clock::now();
    if (o_.burst > 0) {
      arrivals_end_ = start_;
      for (std::size_t c = 0; c < o_.classes.size(); ++c) {
        for (std::size_t i = 0; i < o_.burst; ++i) arrive(c, start_);
      }
    } else {
      arrivals_end_ = start_ + seconds(o_.warmup_s + o_.duration_s);
      for (std::size_t c = 0; c < o_.classes.size(); ++c) schedule_arrival(c, start_);
    }
    end_check_ = std::make_unique<net::steady_timer>(io_);
    check_end();
  }

  int report();

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  double since_start(Clock::time_point t) const {
    return std::chrono::duration<double>(t - start_).count();
  }

  // The next arrival of class c after `from`. A gap that would cross a change of rate ends
  // at the change instead, with no arrival there, and the new rate draws from it (Poisson
  // arrivals are memoryless; constant ones restart their phase).
  void schedule_arrival(std::size_t c, Clock::time_point from) {
    const auto& spec = o_.classes[c];
    const double t = since_start(from);
    const double rate = spec.rate_at(t);
    const double change = spec.next_change(t);
    Clock::time_point next;
    bool arrival = true;
    if (rate <= 0) {
      if (!std::isfinite(change)) return;
      next = start_ + seconds(change);
      arrival = false;
    } else {
      const double gap =
          spec.poisson ? std::exponential_distribution<double>(rate)(rng_) : 1.0 / rate;
      next = from + seconds(gap);
      if (std::isfinite(change) && since_start(next) >= change) {
        next = start_ + seconds(change);
        arrival = false;
      }
    }
    if (next >= arrivals_end_) return;
    auto& timer = *arrival_timers_[c];
    timer.expires_at(next);
    timer.async_wait([this, c, next, arrival](error_code ec) {
      if (ec) return;
      if (arrival) arrive(c, next);
      schedule_arrival(c, next);
    });
  }

  void arrive(std::size_t c, Clock::time_point scheduled) {
    auto req = std::make_shared<Request>();
    req->cls = c;
    req->scheduled = scheduled;
    req->measured = since_start(scheduled) >= o_.warmup_s;
    send(req);
  }

  void send(const std::shared_ptr<Request>& req) {
    auto& st = stats_[req->cls];
    if (req->measured && !req->is_retry) ++st.sent;
    ++in_flight_;
    req->timer = std::make_unique<net::steady_timer>(io_);
    arm_timer(req, req->scheduled + seconds(o_.classes[req->cls].timeout_s));
    if (!idle_.empty()) {
      req->conn = std::move(idle_.back());
      idle_.pop_back();
      write(req);
      return;
    }
    open_connection(req);
  }

  void arm_timer(const std::shared_ptr<Request>& req, Clock::time_point at) {
    req->timer->expires_at(at);
    req->timer->async_wait([this, req](error_code ec) {
      if (ec || req->done) return;
      req->timed_out = true;
      finish(req, Outcome::kTimeout, 0);
    });
  }

  void open_connection(const std::shared_ptr<Request>& req) {
    if (open_ >= o_.max_connections) return finish(req, Outcome::kDropped, 0);
    ++open_;
    req->conn = std::make_shared<Connection>(io_);
    net::async_connect(req->conn->socket, endpoints_,
                       [this, req](error_code ec, const tcp::endpoint&) {
                         if (req->done) return;
                         if (ec) return finish(req, Outcome::kError, 0);
                         req->conn->socket.set_option(tcp::no_delay(true), ec);
                         write(req);
                       });
  }

  void write(const std::shared_ptr<Request>& req) {
    req->parser.emplace();
    req->parser->body_limit(64 * 1024 * 1024);
    const auto& text = texts_[req->cls];
    net::async_write(req->conn->socket, net::buffer(text), [this, req](error_code ec, std::size_t) {
      if (req->done) return;
      if (ec) return failed(req);
      http::async_read_header(req->conn->socket, req->conn->buffer, *req->parser,
                              [this, req](error_code ec2, std::size_t) { on_header(req, ec2); });
    });
  }

  // A kept-alive connection the server closed meanwhile fails before any answer: the request
  // goes again once on a new connection, as browsers and HTTP libraries do.
  void failed(const std::shared_ptr<Request>& req) {
    if (req->conn->used && !req->head_seen && !req->resent) {
      req->resent = true;
      drop_connection(req->conn);
      return open_connection(req);
    }
    finish(req, Outcome::kError, 0);
  }

  void on_header(const std::shared_ptr<Request>& req, error_code ec) {
    if (req->done) return;
    if (ec) return failed(req);
    req->head_seen = true;
    const auto& spec = o_.classes[req->cls];
    const int status = static_cast<int>(req->parser->get().result_int());
    if (spec.stream && status / 100 == 2) {
      // The head was in time: the stream itself may last longer than the timeout (but
      // not forever).
      record(req, Outcome::kOk, status, Clock::now());
      arm_timer(req, Clock::now() + std::chrono::seconds(120));
    }
    http::async_read(req->conn->socket, req->conn->buffer, *req->parser,
                     [this, req](error_code ec2, std::size_t) {
                       if (req->done) return;
                       if (ec2) return finish(req, Outcome::kError, 0);
                       const int st = static_cast<int>(req->parser->get().result_int());
                       Outcome outcome = Outcome::kOther;
                       if (st / 100 == 2) {
                         outcome = Outcome::kOk;
                       } else if (st == 503) {
                         outcome = Outcome::k503;
                       } else if (st == 504) {
                         outcome = Outcome::k504;
                       } else if (st == 429) {
                         outcome = Outcome::k429;
                       }
                       finish(req, outcome, st);
                     });
  }

  // Counts the outcome (once per request) and, when the request is over, recycles or closes
  // its connection.
  void finish(const std::shared_ptr<Request>& req, Outcome outcome, int status) {
    if (req->done) return;
    req->done = true;
    req->timer->cancel();
    --in_flight_;
    record(req, outcome, status, Clock::now());
    auto conn = std::move(req->conn);
    if (!conn) return;
    if (outcome == Outcome::kTimeout || outcome == Outcome::kError ||
        outcome == Outcome::kDropped || !req->parser || !req->parser->is_done() ||
        !req->parser->get().keep_alive()) {
      drop_connection(conn);
      return;
    }
    conn->used = true;
    idle_.push_back(std::move(conn));
  }

  void drop_connection(const std::shared_ptr<Connection>& conn) {
    error_code ignored;
    conn->socket.close(ignored);
    --open_;
  }

  // Counts one request's outcome: the stream's at its head, the others' at their end.
  void record(const std::shared_ptr<Request>& req, Outcome outcome, int status,
              Clock::time_point now) {
    if (req->recorded) return;
    req->recorded = true;
    const auto& spec = o_.classes[req->cls];
    const double latency_ms =
        std::chrono::duration<double, std::milli>(now - req->scheduled).count();
    const bool in_time = latency_ms <= spec.timeout_s * 1000.0;
    if (outcome == Outcome::kOk && !in_time) outcome = Outcome::kLate2xx;
    const bool refused = outcome == Outcome::k503 || outcome == Outcome::k429;
    std::string_view retry_after;
    if (refused && req->parser) retry_after = req->parser->get()[http::field::retry_after];

    if (!o_.log_file.empty()) {
      int told = -1;
      if (!retry_after.empty()) {
        std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), told);
      }
      log_.push_back({req->cls, since_start(req->scheduled), since_start(now), latency_ms, outcome,
                      status, told, req->is_retry});
    }

    if (req->is_retry) {
      retries_.push_back({req->cls, req->probe, req->told_s, req->delay_s, req->refused_at_s,
                          outcome == Outcome::kTimeout ? 0 : status, outcome == Outcome::kOk});
      return;
    }
    if (!req->measured) return;
    auto& st = stats_[req->cls];
    switch (outcome) {
      case Outcome::kOk:
        ++st.ok;
        st.latencies_ms.push_back(latency_ms);
        break;
      case Outcome::kLate2xx:
        ++st.late2xx;
        break;
      case Outcome::k503:
        ++st.s503;
        break;
      case Outcome::k504:
        ++st.s504;
        break;
      case Outcome::k429:
        ++st.s429;
        break;
      case Outcome::kOther:
        ++st.other;
        break;
      case Outcome::kTimeout:
        ++st.timeouts;
        break;
      case Outcome::kError:
        ++st.errors;
        break;
      case Outcome::kDropped:
        ++st.dropped;
        break;
    }
    if (refused) {
      ++st.refused;
      if (!retry_after.empty()) ++st.refused_with_retry_after;
      if (o_.obey && !retry_after.empty()) schedule_retry(req, retry_after, now);
    }
  }

  void schedule_retry(const std::shared_ptr<Request>& refused, std::string_view retry_after,
                      Clock::time_point now) {
    unsigned told = 0;
    const auto [end, ec] =
        std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), told);
    if (ec != std::errc{} || end != retry_after.data() + retry_after.size()) return;
    auto retry = std::make_shared<Request>();
    retry->cls = refused->cls;
    retry->is_retry = true;
    retry->told_s = told;
    retry->refused_at_s = since_start(now);
    retry->probe = std::uniform_real_distribution<double>(0, 1)(rng_) < o_.probe_share;
    double delay = told;
    if (retry->probe) {
      // u in (0, 1): never 0, so a probe never retries at once.
      delay = told * std::uniform_real_distribution<double>(0, 1)(rng_);
      if (delay <= 0) delay = told * 0.5;
    }
    retry->delay_s = delay;
    retry->scheduled = now + seconds(delay);
    if (retry->scheduled > arrivals_end_ + seconds(o_.retry_horizon_s)) {
      ++beyond_horizon_;
      return;
    }
    ++pending_retries_;
    auto timer = std::make_shared<net::steady_timer>(io_, retry->scheduled);
    timer->async_wait([this, retry, timer](error_code wait_ec) {
      --pending_retries_;
      if (wait_ec) return;
      send(retry);
    });
  }

  // The run ends once the arrivals are over and nothing is in flight or due.
  void check_end() {
    end_check_->expires_after(std::chrono::milliseconds(50));
    end_check_->async_wait([this](error_code ec) {
      if (ec) return;
      if (Clock::now() >= arrivals_end_ && in_flight_ == 0 && pending_retries_ == 0) {
        end_ = Clock::now();
        for (auto& conn : idle_) {
          error_code ignored;
          conn->socket.close(ignored);
        }
        idle_.clear();
        for (auto& timer : arrival_timers_) timer->cancel();
        return;
      }
      check_end();
    });
  }

  net::io_context& io_;
  Options o_;
  std::mt19937_64 rng_;
  tcp::resolver::results_type endpoints_;
  std::vector<std::string> texts_;
  std::vector<std::unique_ptr<net::steady_timer>> arrival_timers_;
  std::unique_ptr<net::steady_timer> end_check_;
  std::vector<std::shared_ptr<Connection>> idle_;
  std::size_t open_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t pending_retries_ = 0;
  std::uint64_t beyond_horizon_ = 0;
  Clock::time_point start_, arrivals_end_, end_;
  std::vector<ClassStats> stats_;
  std::vector<LogRecord> log_;
  std::vector<RetryRecord> retries_;
};

int Generator::report() {
  // A burst's rates are over the time it took to answer it.
  const double duration_s =
      o_.burst > 0 ? std::chrono::duration<double>(end_ - start_).count() : o_.duration_s;
  if (o_.burst > 0) {
    std::fprintf(stderr, "sluice_loadgen: burst of %zu per class over in %.3f s\n", o_.burst,
                 duration_s);
  }
  std::printf(
      "class\tsent\tok\tlate_2xx\t503\t504\t429\tother\ttimeouts\terrors\tdropped\tp50_ms\tp99_ms\t"
      "refused\trefused_with_retry_after\toffered_rps\tgoodput_rps\n");
  for (std::size_t c = 0; c < o_.classes.size(); ++c) {
    auto& st = stats_[c];
    const double p50 = quantile(st.latencies_ms, 0.5);
    const double p99 = quantile(st.latencies_ms, 0.99);
    std::printf(
        "%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%.2f\t%.2f\t%llu\t%llu\t%."
        "1f\t%.1f\n",
        o_.classes[c].name.c_str(), static_cast<unsigned long long>(st.sent),
        static_cast<unsigned long long>(st.ok), static_cast<unsigned long long>(st.late2xx),
        static_cast<unsigned long long>(st.s503), static_cast<unsigned long long>(st.s504),
        static_cast<unsigned long long>(st.s429), static_cast<unsigned long long>(st.other),
        static_cast<unsigned long long>(st.timeouts), static_cast<unsigned long long>(st.errors),
        static_cast<unsigned long long>(st.dropped), p50, p99,
        static_cast<unsigned long long>(st.refused),
        static_cast<unsigned long long>(st.refused_with_retry_after),
        static_cast<double>(st.sent) / duration_s, static_cast<double>(st.ok) / duration_s);
  }
  if (o_.obey) {
    std::fprintf(stderr, "sluice_loadgen: %zu first retries sent, %llu due beyond the horizon\n",
                 retries_.size(), static_cast<unsigned long long>(beyond_horizon_));
  }
  if (!o_.log_file.empty()) {
    std::ofstream out(o_.log_file);
    out << "class\tscheduled_s\tdone_s\toutcome\tstatus\tlatency_ms\tretry_after\tretry\n";
    for (const auto& r : log_) {
      out << o_.classes[r.cls].name << '\t' << r.scheduled_s << '\t' << r.done_s << '\t'
          << kOutcomeNames[static_cast<int>(r.outcome)] << '\t' << r.status << '\t' << r.latency_ms
          << '\t' << r.retry_after << '\t' << (r.is_retry ? 1 : 0) << '\n';
    }
  }
  if (!o_.retries_file.empty()) {
    std::ofstream out(o_.retries_file);
    out << "class\tkind\ttold_s\tdelay_s\trefused_at_s\tstatus\tadmitted\n";
    for (const auto& r : retries_) {
      out << o_.classes[r.cls].name << '\t' << (r.probe ? "probe" : "obey") << '\t' << r.told_s
          << '\t' << r.delay_s << '\t' << r.refused_at_s << '\t' << r.status << '\t'
          << (r.ok ? 1 : 0) << '\n';
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto options = parse_args(argc, argv);
  net::io_context io(1);
  try {
    Generator generator(io, std::move(options));
    generator.start();
    io.run();
    return generator.report();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice_loadgen: %s\n", e.what());
    return 1;
  }
}
