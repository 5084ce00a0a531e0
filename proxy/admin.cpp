#include "proxy/admin.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <type_traits>
#include <utility>

#include "proxy/admin_token.hpp"
#include "proxy/directory.hpp"
#include "proxy/redis_link.hpp"
#include "proxy/status_page.hpp"
#include "proxy/ticker.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
namespace prom = prometheus;

// ---------------------------------------------------------------- metrics

namespace {

// Which way a trigger can move the level.
enum class Moves { up, down, either, never };
constexpr Moves moves(admission::Trigger t) {
  using admission::Trigger;
  switch (t) {
    case Trigger::lag:
    case Trigger::upstream_wait:
    case Trigger::upstream_timeout:
    case Trigger::stall:
      return Moves::up;
    case Trigger::decay:
    case Trigger::signal_loss:
      return Moves::down;
    case Trigger::pin:
    case Trigger::unpin:
      return Moves::either;
    case Trigger::none:
      return Moves::never;
  }
  return Moves::never;
}

}  // namespace

bool level_change_known(std::size_t from, std::size_t to, admission::Trigger trigger) {
  switch (moves(trigger)) {
    case Moves::up:
      return to > from;
    case Moves::down:
      return to < from;
    case Moves::either:
      return to != from;
    case Moves::never:
      return false;
  }
  return false;
}

bool rise_suppressed_known(std::size_t to, admission::Trigger trigger) {
  // A stall passes the gate: no streak of it is ever held back.
  return to > 0 && moves(trigger) == Moves::up && trigger != admission::Trigger::stall;
}

namespace {

constexpr std::array<std::string_view, admission::kLevelCount> kLevelLabels{"0", "1", "2", "3"};

// What one scrape reads besides the shards: the bulkheads' views are taken
// (each under its bulkhead's lock) once for every family.
struct Scrape {
  Runtime& rt;
  const Watchdog& watchdog;
  const Ticker& ticker;
  std::vector<admission::BulkheadView> views;
  admission::Micros now_us;
  // [from * upstreams + to]: a route may move requests from `from` to `to`.
  std::vector<bool> fallback_known;
};

using Label = std::pair<std::string_view, std::string_view>;

// The samples of one family, as its entry's read function adds them.
class Samples {
 public:
  explicit Samples(prom::MetricFamily& f) : f_(f) {}

  template <class T>
  requires std::is_arithmetic_v<T>
  void add(T value, std::initializer_list<Label> labels = {}) {
    auto& m = push(labels);
    (f_.type == prom::MetricType::Counter ? m.counter.value : m.gauge.value) =
        static_cast<double>(value);
  }
  void add(prom::ClientMetric::Histogram h, std::initializer_list<Label> labels = {}) {
    push(labels).histogram = std::move(h);
  }

 private:
  prom::ClientMetric& push(std::initializer_list<Label> labels) {
    auto& m = f_.metric.emplace_back();
    m.label.reserve(labels.size());
    for (auto [name, value] : labels) m.label.push_back({std::string(name), std::string(value)});
    return m;
  }
  prom::MetricFamily& f_;
};

// One metric family: its name, help and type, and how its samples are read.
struct FamilySpec {
  std::string_view name;
  std::string_view help;
  prom::MetricType type;
  void (*read)(const Scrape&, Samples&);
};

// The sum over the I/O threads of one counter or gauge of their shards.
template <class Get>
auto sum_workers(Runtime& rt, Get get) {
  decltype(get(rt.workers.front()->stats()).load()) total{};
  for (auto& w : rt.workers) total += get(w->stats()).load(std::memory_order_relaxed);
  return total;
}

// The sum over the I/O threads of one histogram of their shards.
template <class Get>
prom::ClientMetric::Histogram sum_histograms(Runtime& rt, Get get) {
  const auto& first = get(rt.workers.front()->stats());
  constexpr std::size_t N = std::tuple_size_v<decltype(first.counts)> - 1;
  std::array<std::uint64_t, N + 1> counts{};
  double sum = 0;
  for (auto& w : rt.workers) {
    const auto& h = get(w->stats());
    for (std::size_t i = 0; i <= N; ++i) counts[i] += h.counts[i].load(std::memory_order_relaxed);
    sum += h.sum.load(std::memory_order_relaxed);
  }
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

// One sample per lane (label `lane`) of value(lane index).
template <class Value>
void per_lane(Samples& out, Value value) {
  for (auto lane : admission::kLanes)
    out.add(value(admission::index(lane)), {{"lane", admission::to_string(lane)}});
}

// One sample per upstream (label `upstream`) of value(upstream index).
// A controller's level changes, every one it can make (at 0 until it does):
// emit(n, from, to, trigger) adds one sample. The process's and each upstream's.
template <class Emit>
void level_changes(const admission::ControllerStats& st, Emit emit) {
  for (std::size_t from = 0; from < admission::kLevelCount; ++from)
    for (std::size_t to = 0; to < admission::kLevelCount; ++to)
      for (std::size_t t = 0; t < admission::kTriggerCount; ++t) {
        auto trigger = static_cast<admission::Trigger>(t);
        if (auto n = st.changes[from][to][t]; n || level_change_known(from, to, trigger))
          emit(n, kLevelLabels[from], kLevelLabels[to], admission::to_string(trigger));
      }
}

// A controller's suppressed rises, every one the gate can hold back:
// emit(n, to, trigger) adds one sample.
template <class Emit>
void rises_suppressed(const admission::ControllerStats& st, Emit emit) {
  for (std::size_t to = 0; to < admission::kLevelCount; ++to)
    for (std::size_t t = 0; t < admission::kTriggerCount; ++t) {
      auto trigger = static_cast<admission::Trigger>(t);
      if (auto n = st.suppressed[to][t]; n || rise_suppressed_known(to, trigger))
        emit(n, kLevelLabels[to], admission::to_string(trigger));
    }
}

template <class Value>
void per_upstream(const Scrape& s, Samples& out, Value value) {
  const auto& ups = s.rt.config.upstreams;
  for (std::size_t u = 0; u < ups.size(); ++u) out.add(value(u), {{"upstream", ups[u].name}});
}

// Every move a route can make, under any generation of the routes (a counter
// that a reload leaves without a route keeps its series).
std::vector<bool> known_fallbacks(const Runtime& rt) {
  auto n = rt.config.upstreams.size();
  std::vector<bool> known(n * n, false);
  for (const auto& live : rt.generations)
    for (const auto& route : live->routes.routes())
      for (std::size_t to : route.alternatives) {
        // From the route's upstream, or from an alternative it already moved to.
        if (to != route.upstream) known[route.upstream * n + to] = true;
        for (std::size_t from : route.alternatives)
          if (from != to) known[from * n + to] = true;
      }
  return known;
}

using admission::Trigger;
using prom::MetricType;

// Every family /metrics serves, in the order it serves them.
const FamilySpec kFamilies[] = {
    {"sluice_admission_level", "The admission level: 0 normal .. 3 emergency.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       out.add(static_cast<int>(s.ticker.controller().level()));
     }},
    {"sluice_admission_level_changes_total", "Level changes, by from, to and trigger.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       level_changes(s.ticker.controller().stats(), [&](auto n, auto from, auto to, auto trigger) {
         out.add(n, {{"from", from}, {"to", to}, {"trigger", trigger}});
       });
     }},
    // Each upstream's level (what waits on it); a request meets the higher of
    // that and the process's.
    {"sluice_upstream_level", "An upstream's admission level: 0 normal .. 3 emergency.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u)
         out.add(static_cast<int>(s.ticker.upstream_controller(u).level()),
                 {{"upstream", ups[u].name}});
     }},
    {"sluice_upstream_level_changes_total",
     "Changes of an upstream's level, by upstream, from, to and trigger.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u)
         level_changes(s.ticker.upstream_controller(u).stats(), [&](auto n, auto from, auto to,
                                                                    auto trigger) {
           out.add(n,
                   {{"upstream", ups[u].name}, {"from", from}, {"to", to}, {"trigger", trigger}});
         });
     }},
    {"sluice_admission_rise_suppressed_total",
     "Streaks of evidence above the level that the rise gate ended before they raised it, by "
     "the level the rise would have entered and trigger.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       rises_suppressed(s.ticker.controller().stats(), [&](auto n, auto to, auto trigger) {
         out.add(n, {{"to", to}, {"trigger", trigger}});
       });
     }},
    {"sluice_upstream_rise_suppressed_total",
     "Streaks of evidence above an upstream's level that the rise gate ended before they raised "
     "it, by upstream, the level the rise would have entered and trigger.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u)
         rises_suppressed(
             s.ticker.upstream_controller(u).stats(), [&](auto n, auto to, auto trigger) {
               out.add(n, {{"upstream", ups[u].name}, {"to", to}, {"trigger", trigger}});
             });
     }},
    {"sluice_config_reloads_total", "Live reloads of the configuration, by result (ok, failed).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(s.ticker.reloads(true), {{"result", "ok"}});
       out.add(s.ticker.reloads(false), {{"result", "failed"}});
     }},
    {"sluice_admission_pinned", "1 while a pin holds the level.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) { out.add(s.ticker.controller().pin_state() ? 1 : 0); }},
    {"sluice_admission_decisions_total", "Admission decisions, by lane, outcome and reason.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (auto lane : admission::kLanes)
         for (std::size_t o = 0; o < kOutcomes; ++o)
           for (std::size_t r = 0; r < kReasons; ++r) {
             auto n = sum_workers(
                 s.rt, [&](Shard & sh) -> auto& {
                   return sh.lane[admission::index(lane)].decisions[o][r];
                 });
             // Every decision the core can make, at 0 until it happens: admitted has no
             // reason, a refusal always has one.
             if ((o == 0) != (r == 0)) continue;
             // No address is no address in observe mode too: never would_shed.
             if (static_cast<admission::Reason>(r) == admission::Reason::unresolved &&
                 static_cast<admission::Outcome>(o) == admission::Outcome::would_shed)
               continue;
             out.add(n, {{"lane", to_string(lane)},
                         {"outcome", admission::to_string(static_cast<admission::Outcome>(o))},
                         {"reason", admission::to_string(static_cast<admission::Reason>(r))}});
           }
     }},
    {"sluice_requests_total", "Requests answered, by lane and status code.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (auto lane : admission::kLanes)
         for (int code = 100; code < kStatusSlots; ++code) {
           auto n = sum_workers(
               s.rt, [&](Shard & sh) -> auto& {
                 return sh.lane[admission::index(lane)].requests[static_cast<std::size_t>(code)];
               });
           if (n != 0) out.add(n, {{"code", std::to_string(code)}, {"lane", to_string(lane)}});
         }
     }},
    {"sluice_request_duration_seconds",
     "Time from the first byte of a request to the end of its response, by lane.",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         return sum_histograms(
             s.rt, [&](Shard & sh) -> auto& { return sh.lane[l].duration; });
       });
     }},
    {"sluice_lane_in_flight", "Requests admitted and not yet answered, by lane.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.lane[l].in_flight; });
       });
     }},
    // The bulkheads: one per upstream, for every thread.
    {"sluice_upstream_capacity_estimate",
     "The measured concurrency the upstream serves now (K-hat).", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) { return s.views[u].estimate; });
     }},
    {"sluice_upstream_carrying_capacity",
     "The load at which the upstream last said too much (K; 0: never).", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) { return s.views[u].carrying; });
     }},
    {"sluice_upstream_paced_slots_total",
     "Slots opened later, in a gap between the releases to come (slot phases).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) { return s.views[u].paced; });
     }},
    {"sluice_upstream_exhausted_total",
     "Decreases of the capacity estimate, by upstream and what said too much.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u)
         for (auto why :
              {admission::Signal::refused, admission::Signal::timeout, admission::Signal::slow})
           out.add(sum_workers(
                       s.rt,
                       [&](Shard & sh) -> auto& {
                         return sh.upstream[u].exhausted[static_cast<std::size_t>(why)];
                       }),
                   {{"upstream", ups[u].name}, {"why", admission::to_string(why)}});
     }},
    {"sluice_lane_queue_depth", "Requests waiting for a bulkhead slot, by lane.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         double waiting = 0;
         for (const auto& v : s.views) waiting += v.lanes[l].waiting;
         return waiting;
       });
     }},
    {"sluice_lane_queue_wait_seconds",
     "Time an admitted or timed-out request waited for a bulkhead slot, by lane.",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         return sum_histograms(
             s.rt, [&](Shard & sh) -> auto& { return sh.lane[l].queue_wait; });
       });
     }},
    {"sluice_lane_starvation_total",
     "Times a lane below its floor, or hard-pinned requests, had work waiting longer than "
     "SLUICE_STARVED_AFTER.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.lane[l].starved; });
       });
     }},
    {"sluice_lane_delegated_total",
     "Requests seated at once on a live parent lease's lane (delegation).", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_lane(out, [&](std::size_t l) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.lane[l].delegated; });
       });
     }},
    // Closures, probes, budgets and fallbacks (seed 001 §8, §9).
    {"sluice_upstream_closed", "1 while the upstream is closed (a refusal no load change cures).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return s.rt.gates[u]->closed.load(std::memory_order_relaxed) ? 1 : 0;
       });
     }},
    {"sluice_upstream_closures_total", "Times the upstream was closed.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return s.rt.gates[u]->closures.load(std::memory_order_relaxed);
       });
     }},
    {"sluice_upstream_probes_total",
     "Probe requests to a closed upstream, by result (ok reopened it).", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u) {
         const auto& gate = *s.rt.gates[u];
         out.add(gate.probes_ok.load(std::memory_order_relaxed),
                 {{"upstream", ups[u].name}, {"result", "ok"}});
         out.add(gate.probes_failed.load(std::memory_order_relaxed),
                 {{"upstream", ups[u].name}, {"result", "failed"}});
       }
     }},
    {"sluice_upstream_budget_remaining",
     "The share of the upstream's quota left, from its RateLimit headers (1: no reading this "
     "window).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         const auto& reading = s.views[u].budget;
         return reading && s.now_us < reading->until ? reading->remaining : 1.0;
       });
     }},
    {"sluice_upstream_fallbacks_total",
     "Requests that moved off their route's upstream to an alternative, by from, to and why.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t from = 0; from < ups.size(); ++from)
         for (std::size_t to = 0; to < ups.size(); ++to)
           for (std::size_t why = 0; why < kFallbackWhys; ++why) {
             auto n = sum_workers(
                 s.rt, [&](Shard & sh) -> auto& { return sh.upstream[from].fallbacks[to][why]; });
             if (n != 0 || s.fallback_known[from * ups.size() + to])
               out.add(n, {{"from", ups[from].name},
                           {"to", ups[to].name},
                           {"why", to_string(static_cast<Fallback>(why))}});
           }
     }},
    {"sluice_heavy_leases",
     "Live heavy leases (a heavy request holds one for its whole response, an SSE stream "
     "included).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       double heavy = 0;
       for (const auto& v : s.views)
         heavy += v.lanes[admission::index(admission::Lane::heavy)].running;
       out.add(heavy);
     }},
    {"sluice_client_errors_total",
     "Requests answered before routing (malformed, too large, too slow, no route), by status "
     "code.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (int code = 100; code < kStatusSlots; ++code) {
         auto n = sum_workers(
             s.rt, [&](Shard & sh) -> auto& {
               return sh.client_errors[static_cast<std::size_t>(code)];
             });
         if (n != 0 || std::ranges::find(kClientErrorCodes, code) != kClientErrorCodes.end())
           out.add(n, {{"code", std::to_string(code)}});
       }
     }},
    {"sluice_event_loop_lag_seconds", "Lateness of each I/O thread's probe timer (all threads).",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       out.add(sum_histograms(
           s.rt, [](Shard & sh) -> auto& { return sh.lag; }));
     }},
    {"sluice_event_loop_stall_seconds",
     "How long each I/O thread's loop has been stalled right now, seen by the watchdog.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       for (std::size_t i = 0; i < s.rt.workers.size(); ++i)
         out.add(s.watchdog.stall_seconds(i), {{"thread", std::to_string(i)}});
     }},
    {"sluice_event_loop_stalls_total",
     "Stalls of at least 250ms seen by the watchdog while they lasted.", MetricType::Counter,
     [](const Scrape& s, Samples& out) { out.add(s.watchdog.stalls_total()); }},
    {"sluice_upstream_wait_seconds",
     "Time an admitted request waited for its upstream: for a bulkhead slot, then for a "
     "connection (pooled, new or queued).",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_histograms(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].wait; });
       });
     }},
    {"sluice_upstream_timeouts_total",
     "Upstream response timeouts (no response head, or a stalled body).", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].timeouts; });
       });
     }},
    {"sluice_upstream_connect_seconds", "Time of each upstream TCP connect that succeeded.",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_histograms(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].connect; });
       });
     }},
    {"sluice_upstream_tls_handshake_seconds",
     "Time of each TLS handshake to an https:// upstream that succeeded, after its connect.",
     MetricType::Histogram,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_histograms(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].tls_handshake; });
       });
     }},
    {"sluice_upstream_tls_handshakes_total",
     "TLS handshakes to https:// upstreams, by result: full, resumed, or why one failed (verify: "
     "the certificate or its name did not verify; protocol, no_shared_cipher, truncated, "
     "timeout, other). Each failure answered its request 502.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u) {
         if (!ups[u].tls) continue;
         for (std::size_t r = 0; r < kTlsResults; ++r) {
           if (static_cast<TlsResult>(r) == TlsResult::http_request) continue;
           out.add(sum_workers(
                       s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].tls_handshakes[r]; }),
                   {{"upstream", ups[u].name}, {"result", to_string(static_cast<TlsResult>(r))}});
         }
       }
     }},
    {"sluice_upstream_connect_failures_total", "Upstream connects refused or timed out.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].connect_failures; });
       });
     }},
    {"sluice_upstream_retries_total", "Idempotent requests replayed once on a fresh connection.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].retries; });
       });
     }},
    {"sluice_upstream_asked_again_total",
     "Requests the upstream refused (429, 503) that asked for a seat again, once, instead of "
     "passing the refusal on.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].asked_again; });
       });
     }},
    {"sluice_upstream_host_ejections_total",
     "Upstream hosts ejected from the choice for a backoff after a refused or timed-out connect "
     "(each I/O thread ejects on its own).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].host_ejections; });
       });
     }},
    {"sluice_upstream_addresses",
     "Addresses the upstream's hosts resolve to now, each a host of the balancing (0: none of "
     "its names resolves; its requests get 503 unresolved).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) { return s.rt.directory->hosts(u).size(); });
     }},
    {"sluice_upstream_host_healthy",
     "1 while a host (an address of the upstream) gets new requests: its active health checks "
     "pass, if it has any, and no I/O thread has it ejected after a refused connect; else 0.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u)
         for (const auto& h : s.rt.directory->host_states(u))
           out.add(h.healthy() ? 1 : 0, {{"upstream", ups[u].name}, {"host", h.address}});
     }},
    {"sluice_upstream_dns_lookups_total",
     "Lookups of the upstream's host names, by result (ok, failed); a failed one keeps the "
     "addresses the name had.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u) {
         const auto& c = s.rt.directory->counts(u);
         out.add(c.lookups_ok, {{"upstream", ups[u].name}, {"result", "ok"}});
         out.add(c.lookups_failed, {{"upstream", ups[u].name}, {"result", "failed"}});
       }
     }},
    {"sluice_upstream_health_checks_total",
     "Active health checks of the upstream's hosts (SLUICE_HEALTH_CHECKS), by result (passed, "
     "failed).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       const auto& ups = s.rt.config.upstreams;
       for (std::size_t u = 0; u < ups.size(); ++u) {
         if (!s.rt.config.health_checks.contains(ups[u].name)) continue;
         const auto& c = s.rt.directory->counts(u);
         out.add(c.checks_passed, {{"upstream", ups[u].name}, {"result", "passed"}});
         out.add(c.checks_failed, {{"upstream", ups[u].name}, {"result", "failed"}});
       }
     }},
    {"sluice_upstream_connections", "Open upstream connections.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].connections; });
       });
     }},
    {"sluice_upstream_waiting", "Requests queued for an upstream connection.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       per_upstream(s, out, [&](std::size_t u) {
         return sum_workers(
             s.rt, [&](Shard & sh) -> auto& { return sh.upstream[u].waiting; });
       });
     }},
    {"sluice_client_connections", "Open client connections.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.client_connections; }));
     }},
    {"sluice_h2_connections", "Open HTTP/2 client connections (h2 and h2c).", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.h2_connections; }));
     }},
    {"sluice_h2_streams",
     "Open HTTP/2 streams: requests under way on the HTTP/2 connections (over "
     "sluice_h2_connections: streams per connection).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.h2_streams; }));
     }},
    {"sluice_h2_streams_total", "HTTP/2 streams whose request head arrived.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.h2_streams_total; }));
     }},
    {"sluice_h2_limited_total",
     "HTTP/2 limits met, by reason: concurrent_streams (a stream over SLUICE_H2_MAX_STREAMS, "
     "refused), header_list (over SLUICE_MAX_HEADER_BYTES: 431), frame_budget (resets and cheap "
     "frames over SLUICE_H2_FRAME_BUDGET: GOAWAY), unread (output not read within "
     "SLUICE_SEND_TIMEOUT: closed), protocol (a frame nghttp2 rejected).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (std::size_t l = 0; l < kH2Limits; ++l)
         out.add(sum_workers(
                     s.rt, [&](Shard & sh) -> auto& { return sh.h2_limited[l]; }),
                 {{"reason", to_string(static_cast<H2Limit>(l))}});
     }},
    {"sluice_client_connections_refused_total",
     "Client connections closed at once because SLUICE_MAX_CONNECTIONS were open.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.connections_refused; }));
     }},
    {"sluice_ingest_budget_bytes",
     "SLUICE_INGEST_BUDGET: request body bytes allowed in flight (absent: no budget).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (s.rt.ingest) out.add(static_cast<double>(s.rt.ingest->view().budget));
     }},
    {"sluice_ingest_bytes",
     "Request body bytes in flight under SLUICE_INGEST_BUDGET (declared and not yet written "
     "upstream, chunked as read), by lane.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.ingest) return;
       auto v = s.rt.ingest->view();
       for (auto lane : admission::kLanes)
         out.add(static_cast<double>(v.in_flight[admission::index(lane)]),
                 {{"lane", admission::to_string(lane)}});
     }},
    {"sluice_ingest_waiting", "Requests waiting for room in SLUICE_INGEST_BUDGET, by lane.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.ingest) return;
       auto v = s.rt.ingest->view();
       for (auto lane : admission::kLanes)
         out.add(v.waiting[admission::index(lane)], {{"lane", admission::to_string(lane)}});
     }},
    {"sluice_ingest_drain_bytes_per_second",
     "Request body bytes written upstream per second under SLUICE_INGEST_BUDGET, as measured "
     "for the Retry-After of ingest_budget refusals (0: not measured yet).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (s.rt.ingest) out.add(s.rt.ingest->view().drain_bytes_per_s);
     }},
    {"sluice_emergency_connections_refused_total",
     "Client connections closed at once by the refuse_connections emergency action "
     "(SLUICE_EMERGENCY_CONNECTION_FLOOR were open).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.emergency_refused; }));
     }},
    {"sluice_emergency_action",
     "Emergency actions (SLUICE_EMERGENCY_ACTIONS): 1 while applied, by action.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       for (auto a : admission::kActions)
         out.add(admission::has(s.ticker.emergency_actions().active(), a) ? 1 : 0,
                 {{"action", admission::to_string(a)}});
     }},
    {"sluice_emergency_action_changes_total",
     "Emergency actions applied and undone, by action and change (applied, undone).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (auto a : admission::kActions) {
         out.add(s.ticker.action_changes(a, 0),
                 {{"action", admission::to_string(a)}, {"change", "applied"}});
         out.add(s.ticker.action_changes(a, 1),
                 {{"action", admission::to_string(a)}, {"change", "undone"}});
       }
     }},
    {"sluice_tls_handshakes_total",
     "TLS handshakes on the HTTPS listener, by result: full, resumed (a session ticket), or why "
     "one failed (http_request, protocol, no_shared_cipher, truncated, timeout, other).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (std::size_t r = 0; r < kTlsResults; ++r) {
         if (static_cast<TlsResult>(r) == TlsResult::verify) continue;  // no client certificates
         out.add(sum_workers(
                     s.rt, [&](Shard & sh) -> auto& { return sh.tls_handshakes[r]; }),
                 {{"result", to_string(static_cast<TlsResult>(r))}});
       }
     }},
    {"sluice_tls_sni_unknown_total",
     "Handshakes that asked for a name (SNI) no certificate holds; they got the default one.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.tls_sni_unknown; }));
     }},
    {"sluice_tls_renegotiations_total",
     "Renegotiations clients started on the HTTPS listener, each refused.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.tls_renegotiations; }));
     }},
    {"sluice_tls_connections_shed_total",
     "HTTPS connections closed as soon as accepted, before a handshake, by reason (level: the "
     "process at level 3).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
                   s.rt, [](Shard & sh) -> auto& { return sh.tls_shed; }),
               {{"reason", "level"}});
     }},
    {"sluice_tls_certificate_expiry_seconds",
     "Seconds until each served certificate's notAfter (negative once expired), by file and "
     "subject.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.server_tls) return;
       auto now = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
       for (const auto& c : s.rt.server_tls->certificates())
         out.add(static_cast<double>(c.not_after - now),
                 {{"file", c.file}, {"subject", c.subject}});
     }},
    {"sluice_tls_certificate_reloads_total",
     "Reloads of the HTTPS listener's certificates (a change of their files, or SIGHUP), by "
     "result (ok, failed: the ones in use stayed).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(s.ticker.certificate_reloads(true), {{"result", "ok"}});
       out.add(s.ticker.certificate_reloads(false), {{"result", "failed"}});
     }},
    {"sluice_client_timeouts_total",
     "Client connections cut at a deadline, by phase: header (SLUICE_HEADER_TIMEOUT), body "
     "(SLUICE_BODY_TIMEOUT), send (SLUICE_SEND_TIMEOUT), idle (SLUICE_IDLE_TIMEOUT).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (std::size_t t = 0; t < kClientTimeouts; ++t)
         out.add(sum_workers(
                     s.rt, [&](Shard & sh) -> auto& { return sh.client_timeouts[t]; }),
                 {{"phase", to_string(static_cast<ClientTimeout>(t))}});
     }},
    {"sluice_client_stalled_writes_total",
     "Responses whose write to the client was still pending after 250 ms: a slow reader; its "
     "bulkhead slot was given back then (heavy leases excepted).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.stalled_writes; }));
     }},
    {"sluice_sse_keepalives_total",
     "Keep-alive comment lines sent to SSE clients during the upstream's silence (routes with "
     "sse_keepalive).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.sse_keepalives; }));
     }},
    {"sluice_websocket_tunnels_total", "Upgraded connections tunnelled.", MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.websocket_tunnels; }));
     }},
    {"sluice_handler_exceptions_total",
     "Handlers on an I/O thread that threw; each was dropped, its thread went on (each is a "
     "line on stderr).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(sum_workers(
           s.rt, [](Shard & sh) -> auto& { return sh.handler_exceptions; }));
     }},
    {"sluice_tenants", "Tenants whose limits are tracked now (at most SLUICE_TENANT_TABLE).",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       out.add(static_cast<double>(s.rt.tenant_table->size()));
     }},
    {"sluice_tenant_evictions_total",
     "Tenants forgotten to make room in a full table (the least recently seen with nothing in "
     "flight).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(static_cast<double>(s.rt.tenant_table->evictions()));
     }},
    {"sluice_tenant_untracked_total",
     "Requests admitted without their tenant's limits: the table had no room that was not in "
     "flight.",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       out.add(static_cast<double>(s.rt.tenant_table->untracked()));
     }},
    {"sluice_tenant_limited_total",
     "Requests answered 429 tenant_limit (observe mode: would have been), by limit "
     "(concurrency, rate).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       for (std::size_t i = 0; i < 2; ++i)
         out.add(sum_workers(
                     s.rt, [&](Shard & sh) -> auto& { return sh.tenant_limited[i]; }),
                 {{"limit", i == 0 ? "concurrency" : "rate"}});
     }},
    {"sluice_redis_up",
     "1 while the last reconcile with Redis (SLUICE_REDIS_URL) was answered in time; 0: each "
     "tenant is held to its share of its rate. Absent without SLUICE_REDIS_URL.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (s.rt.redis) out.add(s.rt.redis->view().up ? 1 : 0);
     }},
    {"sluice_redis_instances", "Sluice instances seen in Redis in the last reconcile answered.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (s.rt.redis) out.add(s.rt.redis->view().instances);
     }},
    {"sluice_redis_reconciles_total",
     "Reconciles of the tenants' counts with Redis, by result (ok, failed: slow, down or "
     "refusing).",
     MetricType::Counter,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.redis) return;
       out.add(static_cast<double>(s.rt.redis->view().ok), {{"result", "ok"}});
       out.add(static_cast<double>(s.rt.redis->view().failed), {{"result", "failed"}});
     }},
    {"sluice_redis_round_trip_seconds",
     "The last reconcile answered: from its start to its "
     "last reply.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (s.rt.redis) out.add(s.rt.redis->view().round_trip_s);
     }},
    {"sluice_fleet_share",
     "Per upstream, the slots the fleet gave this instance in its last round "
     "(SLUICE_FLEET_CAPACITY). Absent without capacity sharing.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.redis) return;
       const auto& fleet = s.rt.redis->fleet();
       for (std::size_t u = 0; u < fleet.size(); ++u)
         out.add(fleet[u].last().slots, {{"upstream", s.rt.config.upstreams[u].name}});
     }},
    {"sluice_fleet_local",
     "Per upstream, 1 while this instance estimates it alone (no fleet answer for 3 "
     "intervals, or none yet); 0 while it holds the fleet's share.",
     MetricType::Gauge,
     [](const Scrape& s, Samples& out) {
       if (!s.rt.redis) return;
       const auto& fleet = s.rt.redis->fleet();
       for (std::size_t u = 0; u < fleet.size(); ++u)
         out.add(fleet[u].source() == sluice::admission::FleetMember::Source::local ? 1 : 0,
                 {{"upstream", s.rt.config.upstreams[u].name}});
     }},
    {"sluice_draining", "1 while the instance drains after SIGTERM.", MetricType::Gauge,
     [](const Scrape& s, Samples& out) { out.add(s.rt.draining.load() ? 1 : 0); }},
};

}  // namespace

std::string render_metrics(Runtime& rt, const Watchdog& watchdog, const Ticker& ticker) {
  Scrape scrape{
      rt, watchdog, ticker, rt.bulkhead_views(), rt.micros(Clock::now()), known_fallbacks(rt)};
  std::vector<prom::MetricFamily> out(std::size(kFamilies));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& spec = kFamilies[i];
    out[i].name = spec.name;
    out[i].help = spec.help;
    out[i].type = spec.type;
    Samples samples(out[i]);
    spec.read(scrape, samples);
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

std::string_view method_name(http::verb v) {
  auto name = http::to_string(v);
  return {name.data(), name.size()};
}

class AdminSession : public std::enable_shared_from_this<AdminSession> {
 public:
  AdminSession(tcp::socket s, Runtime& rt, const Watchdog& wd, Ticker& ticker)
      : sock_(std::move(s)), rt_(rt), wd_(wd), ticker_(ticker), timer_(sock_.get_executor()) {}

  void run() { read(); }

  // One admin route: its row of the table (admin.hpp) and the handler that answers it.
  struct Route {
    http::verb method = http::verb::get;
    std::string_view path;
    bool prefix = false;
    bool mutating = false;
    bool debug = false;
    void (AdminSession::*handle)(std::string_view target) = nullptr;
  };
  // The table, in the router's order.
  static std::span<const Route> routes();

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
        return write_error(
            http::status::request_header_fields_too_large, "header_too_large",
            "the head is larger than " + std::to_string(kAdminHeaderLimit) + " bytes");
      return write_error(http::status::bad_request, "bad_request",
                         "malformed request: " + ec.message());
    }
    req_ = parser_->release();
    handle();
    write();
  }

  // The route table decides, for every path alike: an unknown path is 404, a
  // known one with another method 405 with Allow, a mutating route without the
  // token 401 (before its handler sees anything); then the route's handler.
  void handle() {
    res_ = {};
    res_.version(11);
    res_.keep_alive(req_.keep_alive());
    res_.set(http::field::content_type, "text/plain; charset=utf-8");
    auto target = req_.target();
    auto path = target.substr(0, target.find('?'));
    // A HEAD is answered as its GET, without the body (write() drops it).
    auto method = req_.method() == http::verb::head ? http::verb::get : req_.method();
    const Route* route = nullptr;
    bool known = false;
    for (const auto& r : routes()) {
      if (!serves(r, path)) continue;
      known = true;
      if (r.method == method) {
        route = &r;
        break;
      }
    }
    if (!route) return known ? method_not_allowed(path) : not_found(path);
    if (route->mutating && !authorized()) return unauthorized();
    (this->*route->handle)(target);
  }

  bool serves(const Route& r, std::string_view path) const {
    if (r.debug && !rt_.config.debug_endpoints) return false;
    return r.prefix ? path.starts_with(r.path) : path == r.path;
  }

  // /admin/... answers in JSON, the rest in plain text.
  static bool json_path(std::string_view path) { return path.starts_with("/admin/"); }

  void not_found(std::string_view path) {
    if (json_path(path)) return reply(http::status::not_found, R"({"error":"not_found"})");
    res_.result(http::status::not_found);
    res_.body() = "not found\n";
  }

  void method_not_allowed(std::string_view path) {
    std::string allow;
    for (const auto& r : routes()) {
      if (!serves(r, path)) continue;
      if (!allow.empty()) allow += ", ";
      allow += method_name(r.method);
      if (r.method == http::verb::get) allow += ", HEAD";
    }
    res_.set(http::field::allow, allow);
    if (json_path(path))
      return reply(http::status::method_not_allowed, R"({"error":"method_not_allowed"})");
    res_.result(http::status::method_not_allowed);
    res_.body() = "method not allowed\n";
  }

  void get_metrics(std::string_view) {
    res_.result(http::status::ok);
    res_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res_.body() = render_metrics(rt_, wd_, ticker_);
  }

  void get_healthz(std::string_view) {
    res_.result(http::status::ok);
    res_.body() = "ok\n";
  }

  // The status page (proxy/status.html): it reads /admin/state from the browser.
  void get_status_page(std::string_view) {
    res_.result(http::status::ok);
    res_.set(http::field::content_type, kStatusPageContentType);
    res_.set(http::field::cache_control, "no-store");
    res_.set("Content-Security-Policy", kStatusPageCsp);
    res_.body() = status_page_html();  // a HEAD answer drops it in write()
  }

  // Never fails because Sluice is shedding: only a draining instance is unready.
  // Ready: not draining, and every upstream has an address (a name that does
  // not resolve leaves its requests nowhere to go). Shedding never fails it.
  void get_readyz(std::string_view) {
    std::string why;
    if (rt_.draining.load()) {
      why = "draining\n";
    } else {
      for (const auto& name : rt_.directory->unresolved())
        why += "upstream " + name + ": no address (its names do not resolve)\n";
    }
    res_.result(why.empty() ? http::status::ok : http::status::service_unavailable);
    res_.body() = why.empty() ? "ready\n" : why;
  }

  // The routes this instance serves, from the table the router applies.
  void get_routes(std::string_view) {
    using nlohmann::json;
    json rows = json::array();
    for (const auto& r : admin_routes()) {
      if (r.debug && !rt_.config.debug_endpoints) continue;
      rows.push_back({{"method", std::string(r.method)},
                      {"path", std::string(r.path)},
                      {"prefix", r.prefix},
                      {"mutating", r.mutating}});
    }
    reply(http::status::ok, json{{"routes", std::move(rows)}}.dump());
  }

  void get_state(std::string_view) { reply(http::status::ok, ticker_.state_json()); }

  // Whether the request may make a mutating call: the bearer token when one is
  // set, compared in constant time (admin_token.hpp).
  bool authorized() const {
    return admin_authorized(rt_.config.admin_token, req_[http::field::authorization]);
  }

  void unauthorized() {
    res_.set(http::field::www_authenticate, "Bearer");
    reply(
        http::status::unauthorized,
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

  static std::optional<std::string_view> query_value(std::string_view target,
                                                     std::string_view key) {
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
  // requests of lane L to upstream U would start now with certainty, by its
  // bulkhead now. Seats nothing.
  void get_plan(std::string_view target) {
    using nlohmann::json;
    auto lane = admission::lane_from_string(query_value(target, "lane").value_or(""));
    const auto& ups = rt_.config.upstreams;
    auto name = query_value(target, "upstream").value_or(ups.front().name);
    auto u = upstream_index(name);
    auto wanted = query_value(target, "wanted") ? query_number(target, "wanted").value_or(0) : 1;
    if (!lane || !u || wanted < 1 || wanted > 1'000'000)
      return reply(
          http::status::bad_request,
          json{{"error", "bad_request"},
               {"valid",
                "lane=bulk|standard|heavy&upstream=<a name in SLUICE_UPSTREAMS>&wanted=1..1000000"}}
              .dump());
    const auto& b = rt_.bulkhead(*u);
    int start = admission::plan(b.lanes(), b.census(rt_.micros(Clock::now())), *lane,
                                static_cast<int>(wanted));
    reply(http::status::ok, json{{"lane", std::string(admission::to_string(*lane))},
                                 {"upstream", std::string(name)},
                                 {"wanted", wanted},
                                 {"start", start}}
                                .dump());
  }

  void reply(http::status status, std::string body) {
    res_.result(status);
    res_.set(http::field::content_type, "application/json");
    res_.body() = std::move(body);
  }

  // POST /admin/debug/block?thread=N&ms=M: fault injection, the loop runs a
  // handler that blocks it, as a slow callback would in production.
  void post_debug_block(std::string_view target) {
    if (refuse_body()) return;
    auto thread = query_number(target, "thread").value_or(0);
    auto ms = query_number(target, "ms");
    if (!ms || *ms <= 0 || *ms > 60'000 || thread < 0 ||
        thread >= static_cast<long>(rt_.workers.size()))
      return reply(http::status::bad_request,
                   R"({"error":"bad_request","valid":"thread=0..threads-1&ms=1..60000"})");
    net::post(rt_.workers[static_cast<std::size_t>(thread)]->ioc(),
              [ms = *ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
    reply(http::status::accepted,
          "{\"blocked_thread\":" + std::to_string(thread) + ",\"ms\":" + std::to_string(*ms) + "}");
  }

  // DELETE /admin/pins removes the pin.
  // DELETE /admin/pins?upstream=NAME removes that upstream's pin.
  void delete_pin(std::string_view target) {
    if (refuse_body()) return;
    std::optional<std::size_t> upstream;
    if (auto name = query_value(target, "upstream")) {
      upstream = upstream_index(*name);
      if (!upstream) return bad_request("\"upstream\" is not a name in SLUICE_UPSTREAMS");
    }
    ticker_.unpin("admin@" + peer(), upstream);
    reply(http::status::ok, ticker_.state_json());
  }

  std::optional<std::size_t> upstream_index(std::string_view name) const {
    const auto& ups = rt_.config.upstreams;
    for (std::size_t u = 0; u < ups.size(); ++u)
      if (ups[u].name == name) return u;
    return std::nullopt;
  }

  // POST /admin/pins {"level":N,"ttl":"10m","reason":"...","who":"...","upstream":"NAME"}
  // pins the process's level, or with "upstream", that upstream's.
  void post_pin(std::string_view) {
    using nlohmann::json;
    std::string who = "admin@" + peer();
    // Every check names the field and what would be valid.
    static constexpr std::string_view kExample =
        R"(; e.g. {"level":2,"ttl":"10m","reason":"incident 42"})";
    json body = json::parse(req_.body(), nullptr, false);
    if (body.is_discarded() || !body.is_object())
      return bad_request("the body must be a JSON object" + std::string(kExample));
    for (auto& [k, v] : body.items())
      if (k != "level" && k != "ttl" && k != "reason" && k != "who" && k != "upstream")
        return bad_request("unknown field \"" + k.substr(0, 40) +
                           "\"; valid: level, ttl, reason, who, upstream");
    if (!body.contains("level") || !body["level"].is_number_integer())
      return bad_request("\"level\" is required, a whole number 0..3" + std::string(kExample));
    std::optional<admission::Millis> ttl;
    if (body.contains("ttl")) {
      if (!body["ttl"].is_string())
        return bad_request("\"ttl\" must be a duration string such as \"10m\"");
      try {
        ttl = config::parse_duration(body["ttl"].get<std::string>());
      } catch (const std::exception&) {
        return bad_request("\"ttl\" is not a duration; use e.g. 30s, 10m, 1h");
      }
      if (ttl->count() <= 0) return bad_request("\"ttl\" must be above 0");
    }
    for (const char* field : {"reason", "who", "upstream"})
      if (body.contains(field) && !body[field].is_string())
        return bad_request("\"" + std::string(field) + "\" must be a string");
    std::string reason = body.value("reason", std::string());
    if (reason.size() > 500) return bad_request("\"reason\" is longer than 500 bytes");
    if (body.contains("who")) {
      auto given = body["who"].get<std::string>();
      if (given.size() > 200) return bad_request("\"who\" is longer than 200 bytes");
      who = given + " (" + who + ")";
    }
    std::optional<std::size_t> upstream;
    if (body.contains("upstream")) {
      upstream = upstream_index(body["upstream"].get<std::string>());
      if (!upstream) return bad_request("\"upstream\" is not a name in SLUICE_UPSTREAMS");
    }
    auto result = ticker_.pin(body["level"].get<int>(), ttl, reason, who, upstream);
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
    sock_.async_read_some(buf_.prepare(16 * 1024),
                          [self = shared_from_this()](error_code ec, std::size_t n) {
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

std::span<const AdminSession::Route> AdminSession::routes() {
  using http::verb;
  static const Route kRoutes[] = {
      {.path = "/", .handle = &AdminSession::get_status_page},
      {.path = "/metrics", .handle = &AdminSession::get_metrics},
      {.path = "/healthz", .handle = &AdminSession::get_healthz},
      {.path = "/readyz", .handle = &AdminSession::get_readyz},
      {.path = "/admin/routes", .handle = &AdminSession::get_routes},
      {.path = "/admin/state", .handle = &AdminSession::get_state},
      {.path = "/admin/pins", .handle = &AdminSession::get_state},
      {.method = verb::post,
       .path = "/admin/pins",
       .mutating = true,
       .handle = &AdminSession::post_pin},
      {.method = verb::delete_,
       .path = "/admin/pins",
       .mutating = true,
       .handle = &AdminSession::delete_pin},
      {.path = "/admin/plan", .handle = &AdminSession::get_plan},
      {.method = verb::post,
       .path = "/admin/debug/block",
       .mutating = true,
       .debug = true,
       .handle = &AdminSession::post_debug_block},
  };
  return kRoutes;
}

void do_accept(tcp::acceptor& acceptor, Runtime& rt, const Watchdog& wd, Ticker& ticker) {
  acceptor.async_accept([&acceptor, &rt, &wd, &ticker](error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted) return;
    if (!ec) std::make_shared<AdminSession>(std::move(s), rt, wd, ticker)->run();
    do_accept(acceptor, rt, wd, ticker);
  });
}

}  // namespace

std::vector<AdminRouteRow> admin_routes() {
  std::vector<AdminRouteRow> rows;
  for (const auto& r : AdminSession::routes())
    rows.push_back({method_name(r.method), r.path, r.prefix, r.mutating, r.debug});
  return rows;
}

void start_admin(tcp::acceptor& acceptor, Runtime& rt, const Watchdog& watchdog, Ticker& ticker) {
  do_accept(acceptor, rt, watchdog, ticker);
}

}  // namespace sluice::proxy
