#include "proxy/admin.hpp"

#include <nlohmann/json.hpp>

#include "proxy/admin_token.hpp"
#include "proxy/status_page.hpp"
#include "proxy/ticker.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/asio/post.hpp>
#include <charconv>
#include <optional>
#include <sstream>

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
namespace prom = prometheus;

// ---------------------------------------------------------------- Watchdog

Watchdog::Watchdog(Runtime& rt)
    : rt_(rt), stall_ns_(rt.workers.size()), in_episode_(rt.workers.size(), false) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

double Watchdog::stall_seconds(std::size_t worker) const {
  return static_cast<double>(stall_ns_[worker].load(std::memory_order_relaxed)) / 1e9;
}

void Watchdog::loop() {
  auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(rt_.config.lag_probe_interval);
  auto period = std::max(interval / 2, std::chrono::nanoseconds(std::chrono::milliseconds(5)));
  while (!stop_.load()) {
    std::this_thread::sleep_for(period);
    auto now = to_ns(Clock::now());
    heartbeat_ns_.store(now, std::memory_order_relaxed);
    for (std::size_t i = 0; i < rt_.workers.size(); ++i) {
      auto beat = rt_.workers[i]->heartbeat_ns.load(std::memory_order_relaxed);
      auto stall = std::max<std::int64_t>(0, now - beat - interval.count());
      stall_ns_[i].store(stall, std::memory_order_relaxed);
      auto seen = max_since_read_ns_.load(std::memory_order_relaxed);
      while (stall > seen && !max_since_read_ns_.compare_exchange_weak(seen, stall)) {
      }
      bool episode = static_cast<double>(stall) / 1e9 >= kStallEpisode;
      if (episode && !in_episode_[i]) stalls_total_.fetch_add(1, std::memory_order_relaxed);
      in_episode_[i] = episode;
    }
  }
}

// ---------------------------------------------------------------- metrics

namespace {

prom::MetricFamily family(std::string name, std::string help, prom::MetricType type) {
  prom::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

prom::ClientMetric with_labels(std::vector<prom::ClientMetric::Label> labels) {
  prom::ClientMetric m;
  m.label = std::move(labels);
  return m;
}

// A family with one unlabelled sample.
void add_scalar(std::vector<prom::MetricFamily>& out, std::string name, std::string help,
                prom::MetricType type, double value) {
  auto f = family(std::move(name), std::move(help), type);
  prom::ClientMetric m;
  (type == prom::MetricType::Counter ? m.counter.value : m.gauge.value) = value;
  f.metric.push_back(std::move(m));
  out.push_back(std::move(f));
}

template <std::size_t N, class Get>
prom::ClientMetric::Histogram sum_histograms(Runtime& rt, Get get) {
  std::array<std::uint64_t, N + 1> counts{};
  double sum = 0;
  for (auto& w : rt.workers) {
    const Histogram<N>& h = get(w->stats());
    for (std::size_t i = 0; i <= N; ++i) counts[i] += h.counts[i].load(std::memory_order_relaxed);
    sum += h.sum.load(std::memory_order_relaxed);
  }
  const Histogram<N>& first = get(rt.workers.front()->stats());
  prom::ClientMetric::Histogram out;
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < N; ++i) {
    cumulative += counts[i];
    out.bucket.push_back({cumulative, first.bounds[i]});
  }
  cumulative += counts[N];
  out.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  out.sample_count = cumulative;
  out.sample_sum = sum;
  return out;
}

template <class T, class Get>
T sum_workers(Runtime& rt, Get get) {
  T total{};
  for (auto& w : rt.workers) total += get(w->stats()).load(std::memory_order_relaxed);
  return total;
}

}  // namespace

std::string render_metrics(Runtime& rt, const Watchdog& watchdog, const Ticker& ticker) {
  using admission::kLanes;
  const auto& cfg = rt.config;
  std::vector<prom::MetricFamily> out;

  {
    const auto& c = ticker.controller();
    add_scalar(out, "sluice_admission_level", "The admission level: 0 normal .. 3 emergency.",
               prom::MetricType::Gauge, static_cast<double>(c.level()));

    auto changes = family("sluice_admission_level_changes_total",
                          "Level changes, by from, to and trigger.", prom::MetricType::Counter);
    auto suppressed = family("sluice_admission_rise_suppressed_total",
                             "Ticks whose evidence would have raised the level but the rise gate "
                             "held it back, by the level it would have entered and trigger.",
                             prom::MetricType::Counter);
    const auto& st = c.stats();
    for (std::size_t from = 0; from < admission::kLevelCount; ++from)
      for (std::size_t to = 0; to < admission::kLevelCount; ++to)
        for (std::size_t t = 0; t < admission::kTriggerCount; ++t)
          if (auto n = st.changes[from][to][t]) {
            auto m = with_labels({{"from", std::to_string(from)},
                                  {"to", std::to_string(to)},
                                  {"trigger", std::string(admission::to_string(
                                                  static_cast<admission::Trigger>(t)))}});
            m.counter.value = static_cast<double>(n);
            changes.metric.push_back(std::move(m));
          }
    for (std::size_t to = 0; to < admission::kLevelCount; ++to)
      for (std::size_t t = 0; t < admission::kTriggerCount; ++t)
        if (auto n = st.suppressed[to][t]) {
          auto m = with_labels(
              {{"to", std::to_string(to)},
               {"trigger", std::string(admission::to_string(static_cast<admission::Trigger>(t)))}});
          m.counter.value = static_cast<double>(n);
          suppressed.metric.push_back(std::move(m));
        }
    out.push_back(std::move(changes));
    out.push_back(std::move(suppressed));

    auto reloads = family("sluice_config_reloads_total",
                          "Live reloads of the configuration, by result (ok, failed).",
                          prom::MetricType::Counter);
    for (bool ok : {true, false}) {
      auto m = with_labels({{"result", ok ? "ok" : "failed"}});
      m.counter.value = static_cast<double>(ticker.reloads(ok));
      reloads.metric.push_back(std::move(m));
    }
    out.push_back(std::move(reloads));

    add_scalar(out, "sluice_admission_pinned", "1 while a pin holds the level.",
               prom::MetricType::Gauge, c.pin_state() ? 1 : 0);

    auto decisions = family("sluice_admission_decisions_total",
                            "Admission decisions, by lane, outcome and reason.",
                            prom::MetricType::Counter);
    for (auto lane : kLanes)
      for (std::size_t o = 0; o < kOutcomes; ++o)
        for (std::size_t r = 0; r < kReasons; ++r) {
          auto n = sum_workers<std::uint64_t>(rt, [&](Shard& s) -> auto& {
            return s.lane[admission::index(lane)].decisions[o][r];
          });
          // Admissions always show (a dashboard's denominator); refusals once they happen.
          if (n == 0 && o != 0) continue;
          if (o == 0 && r != 0) continue;
          auto m = with_labels(
              {{"lane", std::string(to_string(lane))},
               {"outcome", std::string(admission::to_string(static_cast<admission::Outcome>(o)))},
               {"reason", std::string(admission::to_string(static_cast<admission::Reason>(r)))}});
          m.counter.value = static_cast<double>(n);
          decisions.metric.push_back(std::move(m));
        }
    out.push_back(std::move(decisions));
  }

  {
    auto f = family("sluice_requests_total", "Requests answered, by lane and status code.",
                    prom::MetricType::Counter);
    for (auto lane : kLanes) {
      for (int code = 100; code < kStatusSlots; ++code) {
        auto n = sum_workers<std::uint64_t>(rt, [&](Shard& s) -> auto& {
          return s.lane[admission::index(lane)].requests[static_cast<std::size_t>(code)];
        });
        if (n == 0) continue;
        auto m = with_labels({{"code", std::to_string(code)}, {"lane", std::string(to_string(lane))}});
        m.counter.value = static_cast<double>(n);
        f.metric.push_back(std::move(m));
      }
    }
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_request_duration_seconds",
                    "Time from the first byte of a request to the end of its response, by lane.",
                    prom::MetricType::Histogram);
    for (auto lane : kLanes) {
      auto m = with_labels({{"lane", std::string(to_string(lane))}});
      m.histogram = sum_histograms<kLatencyBounds.size()>(
          rt, [&](Shard& s) -> auto& { return s.lane[admission::index(lane)].duration; });
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_lane_in_flight", "Requests admitted and not yet answered, by lane.",
                    prom::MetricType::Gauge);
    for (auto lane : kLanes) {
      auto m = with_labels({{"lane", std::string(to_string(lane))}});
      m.gauge.value = static_cast<double>(sum_workers<std::int64_t>(
          rt, [&](Shard& s) -> auto& { return s.lane[admission::index(lane)].in_flight; }));
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  {
    // The bulkheads, summed over the I/O threads (each estimates its own share).
    auto views = rt.bulkhead_views();
    auto estimate = family("sluice_upstream_capacity_estimate",
                           "The measured concurrency the upstream serves now (K-hat), all threads.",
                           prom::MetricType::Gauge);
    auto carrying = family("sluice_upstream_carrying_capacity",
                           "The load at which the upstream last said too much (K; 0: never), all threads.",
                           prom::MetricType::Gauge);
    auto exhausted = family("sluice_upstream_exhausted_total",
                            "Decreases of the capacity estimate, by upstream and what said too much.",
                            prom::MetricType::Counter);
    for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
      const auto& name = cfg.upstreams[u].name;
      auto m = with_labels({{"upstream", name}});
      m.gauge.value = views[u].estimate;
      estimate.metric.push_back(m);
      m.gauge.value = views[u].carrying;
      carrying.metric.push_back(m);
      for (auto why : {admission::Signal::refused, admission::Signal::timeout, admission::Signal::slow}) {
        auto mm = with_labels({{"upstream", name}, {"why", std::string(admission::to_string(why))}});
        mm.counter.value = static_cast<double>(sum_workers<std::uint64_t>(rt, [&](Shard& s) -> auto& {
          return s.upstream[u].exhausted[static_cast<std::size_t>(why)];
        }));
        exhausted.metric.push_back(std::move(mm));
      }
    }
    auto depth = family("sluice_lane_queue_depth", "Requests waiting for a bulkhead slot, by lane.",
                        prom::MetricType::Gauge);
    auto wait = family("sluice_lane_queue_wait_seconds",
                       "Time an admitted or timed-out request waited for a bulkhead slot, by lane.",
                       prom::MetricType::Histogram);
    auto starved = family("sluice_lane_starvation_total",
                          "Times a lane below its floor, or hard-pinned requests, had work waiting longer than SLUICE_STARVED_AFTER.",
                          prom::MetricType::Counter);
    auto delegated = family("sluice_lane_delegated_total",
                            "Requests seated at once on a live parent lease's lane (delegation).",
                            prom::MetricType::Counter);
    for (auto lane : kLanes) {
      auto l = admission::index(lane);
      std::vector<prom::ClientMetric::Label> labels{{"lane", std::string(to_string(lane))}};
      auto m = with_labels(labels);
      for (const auto& v : views) m.gauge.value += v.lanes[l].waiting;
      depth.metric.push_back(std::move(m));
      auto h = with_labels(labels);
      h.histogram = sum_histograms<kLatencyBounds.size()>(
          rt, [&](Shard& s) -> auto& { return s.lane[l].queue_wait; });
      wait.metric.push_back(std::move(h));
      auto c = with_labels(labels);
      c.counter.value = static_cast<double>(
          sum_workers<std::uint64_t>(rt, [&](Shard& s) -> auto& { return s.lane[l].starved; }));
      starved.metric.push_back(c);
      c.counter.value = static_cast<double>(
          sum_workers<std::uint64_t>(rt, [&](Shard& s) -> auto& { return s.lane[l].delegated; }));
      delegated.metric.push_back(std::move(c));
    }
    for (auto* f : {&estimate, &carrying, &exhausted, &depth, &wait, &starved, &delegated})
      out.push_back(std::move(*f));

    // Closures, probes, budgets and fallbacks (seed 001 §8, §9).
    auto closed = family("sluice_upstream_closed",
                         "1 while the upstream is closed (a refusal no load change cures).",
                         prom::MetricType::Gauge);
    auto closures = family("sluice_upstream_closures_total", "Times the upstream was closed.",
                           prom::MetricType::Counter);
    auto probes = family("sluice_upstream_probes_total",
                         "Probe requests to a closed upstream, by result (ok reopened it).",
                         prom::MetricType::Counter);
    auto budget = family("sluice_upstream_budget_remaining",
                         "The share of the upstream's quota left, from its RateLimit headers (1: no reading this window).",
                         prom::MetricType::Gauge);
    auto fallbacks = family("sluice_upstream_fallbacks_total",
                            "Requests that moved off their route's upstream to an alternative, by from, to and why.",
                            prom::MetricType::Counter);
    auto now_us = rt.micros(Clock::now());
    for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
      const auto& name = cfg.upstreams[u].name;
      auto& gate = *rt.gates[u];
      auto m = with_labels({{"upstream", name}});
      m.gauge.value = gate.closed.load(std::memory_order_relaxed) ? 1 : 0;
      closed.metric.push_back(m);
      m.gauge.value = 0;
      m.counter.value = static_cast<double>(gate.closures.load(std::memory_order_relaxed));
      closures.metric.push_back(m);
      for (auto [result, count] : {std::pair{"ok", &gate.probes_ok}, std::pair{"failed", &gate.probes_failed}}) {
        auto p = with_labels({{"upstream", name}, {"result", result}});
        p.counter.value = static_cast<double>(count->load(std::memory_order_relaxed));
        probes.metric.push_back(std::move(p));
      }
      auto b = with_labels({{"upstream", name}});
      const auto& reading = views[u].budget;
      b.gauge.value = reading && now_us < reading->until ? reading->remaining : 1.0;
      budget.metric.push_back(std::move(b));
      for (std::size_t to = 0; to < cfg.upstreams.size(); ++to)
        for (std::size_t why = 0; why < kFallbackWhys; ++why) {
          auto n = sum_workers<std::uint64_t>(
              rt, [&](Shard& s) -> auto& { return s.upstream[u].fallbacks[to][why]; });
          if (n == 0) continue;
          auto f = with_labels({{"from", name},
                                {"to", cfg.upstreams[to].name},
                                {"why", std::string(to_string(static_cast<Fallback>(why)))}});
          f.counter.value = static_cast<double>(n);
          fallbacks.metric.push_back(std::move(f));
        }
    }
    for (auto* f : {&closed, &closures, &probes, &budget, &fallbacks}) out.push_back(std::move(*f));
    double heavy = 0;
    for (const auto& v : views) heavy += v.lanes[admission::index(admission::Lane::heavy)].running;
    add_scalar(out, "sluice_heavy_leases",
               "Live heavy leases (a heavy request holds one for its whole response, an SSE stream included).",
               prom::MetricType::Gauge, heavy);
  }
  {
    auto f = family("sluice_client_errors_total",
                    "Requests answered before routing (malformed, too large, too slow, no route), by status code.",
                    prom::MetricType::Counter);
    for (int code = 100; code < kStatusSlots; ++code) {
      auto n = sum_workers<std::uint64_t>(
          rt, [&](Shard& s) -> auto& { return s.client_errors[static_cast<std::size_t>(code)]; });
      if (n == 0) continue;
      auto m = with_labels({{"code", std::to_string(code)}});
      m.counter.value = static_cast<double>(n);
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_event_loop_lag_seconds",
                    "Lateness of each I/O thread's probe timer (all threads).",
                    prom::MetricType::Histogram);
    prom::ClientMetric m;
    m.histogram = sum_histograms<kLagBounds.size()>(rt, [](Shard& s) -> auto& { return s.lag; });
    f.metric.push_back(std::move(m));
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_event_loop_stall_seconds",
                    "How long each I/O thread's loop has been stalled right now, seen by the watchdog.",
                    prom::MetricType::Gauge);
    for (std::size_t i = 0; i < rt.workers.size(); ++i) {
      auto m = with_labels({{"thread", std::to_string(i)}});
      m.gauge.value = watchdog.stall_seconds(i);
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
    add_scalar(out, "sluice_event_loop_stalls_total",
               "Stalls of at least 250ms seen by the watchdog while they lasted.",
               prom::MetricType::Counter, static_cast<double>(watchdog.stalls_total()));
  }
  {
    auto wait = family("sluice_upstream_wait_seconds",
                       "Time an admitted request waited for its upstream: for a bulkhead slot, then for a connection (pooled, new or queued).",
                       prom::MetricType::Histogram);
    auto timeouts = family("sluice_upstream_timeouts_total",
                           "Upstream response timeouts (no response head, or a stalled body).",
                           prom::MetricType::Counter);
    auto failures = family("sluice_upstream_connect_failures_total",
                           "Upstream connects refused or timed out.", prom::MetricType::Counter);
    auto retries = family("sluice_upstream_retries_total",
                          "Idempotent requests replayed once on a fresh connection.",
                          prom::MetricType::Counter);
    auto ejections = family("sluice_upstream_host_ejections_total",
                            "Upstream hosts ejected from the choice for a backoff after a refused or timed-out connect (each I/O thread ejects on its own).",
                            prom::MetricType::Counter);
    auto conns = family("sluice_upstream_connections", "Open upstream connections.",
                        prom::MetricType::Gauge);
    auto waiting = family("sluice_upstream_waiting", "Requests queued for an upstream connection.",
                          prom::MetricType::Gauge);
    for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
      std::vector<prom::ClientMetric::Label> l{{"upstream", cfg.upstreams[u].name}};
      auto m = with_labels(l);
      m.histogram = sum_histograms<kLatencyBounds.size()>(
          rt, [&](Shard& s) -> auto& { return s.upstream[u].wait; });
      wait.metric.push_back(std::move(m));
      auto counter = [&](prom::MetricFamily& f, auto get) {
        auto mm = with_labels(l);
        mm.counter.value = static_cast<double>(sum_workers<std::uint64_t>(rt, get));
        f.metric.push_back(std::move(mm));
      };
      auto gauge = [&](prom::MetricFamily& f, auto get) {
        auto mm = with_labels(l);
        mm.gauge.value = static_cast<double>(sum_workers<std::int64_t>(rt, get));
        f.metric.push_back(std::move(mm));
      };
      counter(timeouts, [&](Shard& s) -> auto& { return s.upstream[u].timeouts; });
      counter(failures, [&](Shard& s) -> auto& { return s.upstream[u].connect_failures; });
      counter(retries, [&](Shard& s) -> auto& { return s.upstream[u].retries; });
      counter(ejections, [&](Shard& s) -> auto& { return s.upstream[u].host_ejections; });
      gauge(conns, [&](Shard& s) -> auto& { return s.upstream[u].connections; });
      gauge(waiting, [&](Shard& s) -> auto& { return s.upstream[u].waiting; });
    }
    for (auto* f : {&wait, &timeouts, &failures, &retries, &ejections, &conns, &waiting})
      out.push_back(std::move(*f));
  }
  {
    add_scalar(out, "sluice_client_connections", "Open client connections.",
               prom::MetricType::Gauge,
               static_cast<double>(sum_workers<std::int64_t>(
                   rt, [](Shard& s) -> auto& { return s.client_connections; })));
    add_scalar(out, "sluice_client_connections_refused_total",
               "Client connections closed at once because SLUICE_MAX_CONNECTIONS were open.",
               prom::MetricType::Counter,
               static_cast<double>(sum_workers<std::uint64_t>(
                   rt, [](Shard& s) -> auto& { return s.connections_refused; })));
    auto timeouts = family("sluice_client_timeouts_total",
                           "Client connections cut at a deadline, by phase: header "
                           "(SLUICE_HEADER_TIMEOUT), body (SLUICE_BODY_TIMEOUT), send "
                           "(SLUICE_SEND_TIMEOUT), idle (SLUICE_IDLE_TIMEOUT).",
                           prom::MetricType::Counter);
    for (std::size_t t = 0; t < kClientTimeouts; ++t) {
      auto m = with_labels({{"phase", std::string(to_string(static_cast<ClientTimeout>(t)))}});
      m.counter.value = static_cast<double>(sum_workers<std::uint64_t>(
          rt, [&](Shard& s) -> auto& { return s.client_timeouts[t]; }));
      timeouts.metric.push_back(std::move(m));
    }
    out.push_back(std::move(timeouts));
    add_scalar(out, "sluice_client_stalled_writes_total",
               "Responses whose write to the client was still pending after 250 ms: a slow reader; "
               "its bulkhead slot was given back then (heavy leases excepted).",
               prom::MetricType::Counter,
               static_cast<double>(sum_workers<std::uint64_t>(
                   rt, [](Shard& s) -> auto& { return s.stalled_writes; })));
    add_scalar(out, "sluice_websocket_tunnels_total", "Upgraded connections tunnelled.",
               prom::MetricType::Counter,
               static_cast<double>(sum_workers<std::uint64_t>(
                   rt, [](Shard& s) -> auto& { return s.websocket_tunnels; })));
    add_scalar(out, "sluice_handler_exceptions_total",
               "Handlers on an I/O thread that threw; each was dropped, its thread went on "
               "(each is a line on stderr).",
               prom::MetricType::Counter,
               static_cast<double>(sum_workers<std::uint64_t>(
                   rt, [](Shard& s) -> auto& { return s.handler_exceptions; })));
    add_scalar(out, "sluice_draining", "1 while the instance drains after SIGTERM.",
               prom::MetricType::Gauge, rt.draining.load() ? 1 : 0);
  }

  std::ostringstream os;
  prom::TextSerializer{}.Serialize(os, out);
  return os.str();
}

// ---------------------------------------------------------------- admin sessions

namespace {

// Admin requests are small: a pin is a few dozen bytes of JSON.
constexpr std::uint32_t kAdminHeaderLimit = 8 * 1024;
constexpr std::uint64_t kAdminBodyLimit = 8 * 1024;

class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  AdminSession(tcp::socket s, Runtime& rt, const Watchdog& wd, Ticker& ticker)
      : sock_(std::move(s)), rt_(rt), wd_(wd), ticker_(ticker), timer_(sock_.get_executor()) {}

  void run() { read(); }

 private:
  void read() {
    req_ = {};
    parser_.emplace();
    parser_->header_limit(kAdminHeaderLimit);
    parser_->body_limit(kAdminBodyLimit);
    timer_.expires_after(std::chrono::seconds(30));
    timer_.async_wait([weak = weak_from_this()](error_code ec) {
      if (auto self = weak.lock(); self && !ec) {
        error_code ignored;
        self->sock_.close(ignored);
      }
    });
    http::async_read(sock_, buf_, *parser_,
                     beast::bind_front_handler(&AdminSession::on_read, shared_from_this()));
  }

  void on_read(error_code ec, std::size_t) {
    timer_.cancel();
    if (ec) {
      if (ec == http::error::end_of_stream || ec == net::error::operation_aborted) return close();
      // The request is refused unread: its rest is drained before the close
      // (linger()), so the client reads this answer instead of a reset.
      res_ = {};
      res_.keep_alive(false);
      lingering_ = true;
      if (ec == http::error::body_limit)
        return write_error(http::status::payload_too_large, "body_too_large",
                           "the body is larger than " + std::to_string(kAdminBodyLimit) + " bytes");
      if (ec == http::error::header_limit)
        return write_error(http::status::request_header_fields_too_large, "header_too_large",
                           "the head is larger than " + std::to_string(kAdminHeaderLimit) + " bytes");
      return write_error(http::status::bad_request, "bad_request", "malformed request: " + ec.message());
    }
    req_ = parser_->release();
    handle();
    write();
  }

  void handle() {
    res_ = {};
    res_.version(11);
    res_.keep_alive(req_.keep_alive());
    res_.set(http::field::content_type, "text/plain; charset=utf-8");
    auto target = req_.target();
    auto path = target.substr(0, target.find('?'));
    bool get = req_.method() == http::verb::get || req_.method() == http::verb::head;
    if (path == "/metrics" || path == "/healthz" || path == "/readyz" || path == "/") {
      if (!get) {
        res_.result(http::status::method_not_allowed);
        res_.set(http::field::allow, "GET, HEAD");
        res_.body() = "method not allowed\n";
        return;
      }
    }
    if (path.starts_with("/admin/")) {
      handle_admin(path, target);
      return;
    }
    if (path == "/metrics") {
      res_.result(http::status::ok);
      res_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res_.body() = render_metrics(rt_, wd_, ticker_);
    } else if (path == "/healthz") {
      res_.result(http::status::ok);
      res_.body() = "ok\n";
    } else if (path == "/") {
      // The status page (proxy/status.html): it reads /admin/state from the browser.
      res_.result(http::status::ok);
      res_.set(http::field::content_type, kStatusPageContentType);
      res_.set(http::field::cache_control, "no-store");
      res_.set("Content-Security-Policy", kStatusPageCsp);
      res_.body() = status_page_html();  // a HEAD answer drops it in write()
    } else if (path == "/readyz") {
      // Never fails because Sluice is shedding: only a draining instance is unready.
      bool draining = rt_.draining.load();
      res_.result(draining ? http::status::service_unavailable : http::status::ok);
      res_.body() = draining ? "draining\n" : "ready\n";
    } else {
      res_.result(http::status::not_found);
      res_.body() = "not found\n";
    }
  }

  // Mutating calls (POST and DELETE /admin/pins, POST /admin/debug/block) need
  // the bearer token when one is set, compared in constant time (admin_token.hpp).
  bool authorized() const {
    return admin_authorized(rt_.config.admin_token, req_[http::field::authorization]);
  }

  void unauthorized() {
    res_.set(http::field::www_authenticate, "Bearer");
    reply(http::status::unauthorized,
          R"({"error":"unauthorized","detail":"this call needs Authorization: Bearer <SLUICE_ADMIN_TOKEN>"})");
  }

  // A call that takes no body: one sent anyway is refused, not ignored.
  bool refuse_body() {
    if (req_.body().empty()) return false;
    bad_request("this call takes no body");
    return true;
  }

  void bad_request(std::string detail) {
    reply(http::status::bad_request,
          nlohmann::json{{"error", "bad_request"}, {"detail", std::move(detail)}}.dump());
  }

  static std::optional<std::string_view> query_value(std::string_view target, std::string_view key) {
    auto q = target.find('?');
    if (q == std::string_view::npos) return std::nullopt;
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
      auto amp = rest.find('&');
      auto pair = rest.substr(0, amp);
      if (pair.starts_with(key) && pair.size() > key.size() && pair[key.size()] == '=')
        return pair.substr(key.size() + 1);
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
    return std::nullopt;
  }

  static std::optional<long> query_number(std::string_view target, std::string_view key) {
    auto v = query_value(target, key);
    if (!v) return std::nullopt;
    long n = 0;
    auto r = std::from_chars(v->data(), v->data() + v->size(), n);
    if (r.ec != std::errc{} || r.ptr != v->data() + v->size()) return std::nullopt;
    return n;
  }

  // GET /admin/plan?lane=L&upstream=U&wanted=N (seed 001 §11): how many of N
  // requests of lane L to upstream U would start now with certainty, by every
  // thread's bulkhead as of its last heartbeat. Seats nothing.
  void handle_plan(std::string_view target) {
    using nlohmann::json;
    if (req_.method() != http::verb::get) {
      res_.set(http::field::allow, "GET");
      return reply(http::status::method_not_allowed, R"({"error":"method_not_allowed"})");
    }
    auto lane = admission::lane_from_string(query_value(target, "lane").value_or(""));
    const auto& ups = rt_.config.upstreams;
    auto name = query_value(target, "upstream").value_or(ups.front().name);
    std::size_t u = 0;
    while (u < ups.size() && ups[u].name != name) ++u;
    auto wanted = query_value(target, "wanted") ? query_number(target, "wanted").value_or(0) : 1;
    if (!lane || u == ups.size() || wanted < 1 || wanted > 1'000'000)
      return reply(http::status::bad_request,
                   json{{"error", "bad_request"},
                        {"valid", "lane=bulk|standard|heavy&upstream=<a name in SLUICE_UPSTREAMS>&wanted=1..1000000"}}
                       .dump());
    const auto& policy = rt_.generations.back()->lanes;  // appended on this thread only
    int start = 0;
    json threads = json::array();
    for (auto& w : rt_.workers) {
      const auto v = w->views()[u];
      admission::Census c;
      c.estimate = v.estimate;
      c.measured = v.carrying > 0;
      for (std::size_t l = 0; l < admission::kLaneCount; ++l) {
        c.running[l] = v.lanes[l].running;
        c.waiting[l] = v.lanes[l].waiting;
      }
      int n = admission::plan(policy, c, *lane, static_cast<int>(wanted) - start);
      threads.push_back(n);
      start += n;
    }
    reply(http::status::ok, json{{"lane", std::string(admission::to_string(*lane))},
                                 {"upstream", std::string(name)},
                                 {"wanted", wanted},
                                 {"start", start},
                                 {"per_thread", threads}}
                                .dump());
  }

  void reply(http::status status, std::string body) {
    res_.result(status);
    res_.set(http::field::content_type, "application/json");
    res_.body() = std::move(body);
  }

  void handle_admin(std::string_view path, std::string_view target) {
    if (path == "/admin/debug/block" && rt_.config.debug_endpoints) {
      if (req_.method() != http::verb::post) {
        res_.set(http::field::allow, "POST");
        return reply(http::status::method_not_allowed, R"({"error":"method_not_allowed"})");
      }
      if (!authorized()) return unauthorized();
      if (refuse_body()) return;
      auto thread = query_number(target, "thread").value_or(0);
      auto ms = query_number(target, "ms");
      if (!ms || *ms <= 0 || *ms > 60'000 || thread < 0 ||
          thread >= static_cast<long>(rt_.workers.size()))
        return reply(http::status::bad_request,
                     R"({"error":"bad_request","valid":"thread=0..threads-1&ms=1..60000"})");
      // Fault injection: the loop runs a handler that blocks it, as a slow
      // callback would in production.
      net::post(rt_.workers[static_cast<std::size_t>(thread)]->ioc(), [ms = *ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      });
      return reply(http::status::accepted, "{\"blocked_thread\":" + std::to_string(thread) +
                                               ",\"ms\":" + std::to_string(*ms) + "}");
    }
    if (path == "/admin/state") {
      if (req_.method() != http::verb::get) {
        res_.set(http::field::allow, "GET");
        return reply(http::status::method_not_allowed, R"({"error":"method_not_allowed"})");
      }
      return reply(http::status::ok, ticker_.state_json());
    }
    if (path == "/admin/pins") return handle_pins();
    if (path == "/admin/plan") return handle_plan(target);
    reply(http::status::not_found, R"({"error":"not_found"})");
  }

  // POST {"level":N,"ttl":"10m","reason":"...","who":"..."} pins; DELETE removes the pin.
  void handle_pins() {
    using nlohmann::json;
    if (req_.method() == http::verb::get) return reply(http::status::ok, ticker_.state_json());
    if (req_.method() != http::verb::post && req_.method() != http::verb::delete_) {
      res_.set(http::field::allow, "GET, POST, DELETE");
      return reply(http::status::method_not_allowed, R"({"error":"method_not_allowed"})");
    }
    if (!authorized()) return unauthorized();
    std::string who = "admin@" + peer();
    if (req_.method() == http::verb::delete_) {
      if (refuse_body()) return;
      ticker_.unpin(who);
      return reply(http::status::ok, ticker_.state_json());
    }
    // Every check names the field and what would be valid.
    static constexpr std::string_view kExample = R"(; e.g. {"level":2,"ttl":"10m","reason":"incident 42"})";
    json body = json::parse(req_.body(), nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return bad_request("the body must be a JSON object" + std::string(kExample));
    for (auto& [k, v] : body.items())
      if (k != "level" && k != "ttl" && k != "reason" && k != "who")
        return bad_request("unknown field \"" + k.substr(0, 40) + "\"; valid: level, ttl, reason, who");
    if (!body.contains("level") || !body["level"].is_number_integer())
      return bad_request("\"level\" is required, a whole number 0..3" + std::string(kExample));
    std::optional<admission::Millis> ttl;
    if (body.contains("ttl")) {
      if (!body["ttl"].is_string()) return bad_request("\"ttl\" must be a duration string such as \"10m\"");
      try {
        ttl = config::parse_duration(body["ttl"].get<std::string>());
      } catch (const std::exception&) {
        return bad_request("\"ttl\" is not a duration; use e.g. 30s, 10m, 1h");
      }
      if (ttl->count() <= 0) return bad_request("\"ttl\" must be above 0");
    }
    for (const char* field : {"reason", "who"})
      if (body.contains(field) && !body[field].is_string())
        return bad_request("\"" + std::string(field) + "\" must be a string");
    std::string reason = body.value("reason", std::string());
    if (reason.size() > 500) return bad_request("\"reason\" is longer than 500 bytes");
    if (body.contains("who")) {
      auto given = body["who"].get<std::string>();
      if (given.size() > 200) return bad_request("\"who\" is longer than 200 bytes");
      who = given + " (" + who + ")";
    }
    auto result = ticker_.pin(body["level"].get<int>(), ttl, reason, who);
    if (!result.ok) return bad_request(result.error);
    reply(http::status::ok, ticker_.state_json());
  }

  std::string peer() const {
    error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    return ec ? "unknown" : ep.address().to_string();
  }

  void write() {
    if (req_.method() == http::verb::head) {
      // A HEAD answer states the GET's length and carries no body.
      auto n = res_.body().size();
      res_.body().clear();
      res_.content_length(n);
    } else {
      res_.prepare_payload();
    }
    http::async_write(sock_, res_, [self = shared_from_this()](error_code ec, std::size_t) {
      if (!ec && self->lingering_) return self->linger();
      if (ec || !self->res_.keep_alive()) return self->close();
      self->read();
    });
  }

  // An error Sluice answers before it has read the whole request.
  void write_error(http::status status, std::string_view error, std::string detail) {
    res_.version(11);
    reply(status, nlohmann::json{{"error", error}, {"detail", std::move(detail)}}.dump());
    write();
  }

  // After an answer to a request left unread: stop sending, then read and drop
  // what the client still sends (at most kLingerBytes, for at most 2 s) so
  // closing with unread bytes does not reset the connection under the answer.
  void linger() {
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    timer_.expires_after(std::chrono::seconds(2));
    timer_.async_wait([weak = weak_from_this()](error_code e) {
      if (auto self = weak.lock(); self && !e) self->close();
    });
    drain();
  }

  void drain() {
    static constexpr std::size_t kLingerBytes = 1 << 20;
    buf_.consume(buf_.size());
    sock_.async_read_some(buf_.prepare(16 * 1024), [self = shared_from_this()](error_code ec,
                                                                                std::size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ >= kLingerBytes) {
        self->timer_.cancel();
        return self->close();
      }
      self->drain();
    });
  }

  void close() {
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    sock_.close(ec);
  }

  tcp::socket sock_;
  Runtime& rt_;
  const Watchdog& wd_;
  Ticker& ticker_;
  net::steady_timer timer_;
  bool lingering_ = false;
  std::size_t drained_ = 0;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

void do_accept(tcp::acceptor& acceptor, Runtime& rt, const Watchdog& wd, Ticker& ticker) {
  acceptor.async_accept([&acceptor, &rt, &wd, &ticker](error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted) return;
    if (!ec) std::make_shared<AdminSession>(std::move(s), rt, wd, ticker)->run();
    do_accept(acceptor, rt, wd, ticker);
  });
}

}  // namespace

void start_admin(tcp::acceptor& acceptor, Runtime& rt, const Watchdog& watchdog, Ticker& ticker) {
  do_accept(acceptor, rt, watchdog, ticker);
}

}  // namespace sluice::proxy
