#include "sim/matrix.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "sim/simulate.hpp"

namespace sluice::sim::matrix {

namespace ov = sluice::sim::overload;
using admission::Lane;

namespace {

constexpr std::array<ov::Shape, 5> kShapeAxis = ov::kAllShapes;
constexpr std::array<int, 4> kCapacityAxis{1, 2, 8, 64};
constexpr std::array<double, 3> kServiceAxis{0.005, 0.05, 0.5};
constexpr std::array<Mix, 5> kMixAxis{Mix::standard, Mix::bulk, Mix::heavy, Mix::mixed,
                                      Mix::routes};
constexpr std::array<Arrivals, 3> kArrivalsAxis{Arrivals::uniform, Arrivals::poisson,
                                                Arrivals::bursts};
constexpr std::array<double, 6> kLoadAxis{0.5, 0.9, 1, 2, 3, 10};

constexpr double kStreamLife = 20;   // x S
constexpr double kFastRoute = 0.05;  // x S: the routes mix's fast route
constexpr double kWarmRoute = 0.25;  // x S: the warm-up's route
constexpr std::uint16_t kWarmRouteId = 2;
constexpr double kHaproxyQueue = 0.5;  // s
constexpr int kMaxArrivals = 40'000;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string_view to_string(Mix m) {
  switch (m) {
    case Mix::standard:
      return "standard";
    case Mix::bulk:
      return "bulk";
    case Mix::heavy:
      return "heavy";
    case Mix::mixed:
      return "mixed";
    case Mix::routes:
      return "routes";
  }
  return "";
}

std::string_view to_string(Arrivals a) {
  switch (a) {
    case Arrivals::uniform:
      return "uniform";
    case Arrivals::poisson:
      return "poisson";
    case Arrivals::bursts:
      return "bursts";
  }
  return "";
}

// One class of requests of a cell: a lane, a route and its service time, and
// its share of the arrivals.
struct Class {
  Lane lane;
  std::uint16_t route;
  double service;  // s: a request's; a stream's life
  double rate;     // per second at the cell's load
};

std::vector<Class> classes(const Cell& c) {
  const double s = c.service, cap = c.capacity, x = c.load;
  const double life = kStreamLife * s;
  switch (c.mix) {
    case Mix::standard:
      return {{Lane::standard, 0, s, x * cap / s}};
    case Mix::bulk:
      return {{Lane::bulk, 0, s, x * cap / s}};
    case Mix::heavy:
      return {{Lane::heavy, 0, life, x * cap / life}};
    case Mix::mixed: {
      const double streams = cap / 8;  // slots the streams hold, on a route of their own
      const double rest = std::max(0.0, x * cap - streams) / s;
      return {{Lane::heavy, 3, life, streams / life},
              {Lane::standard, 0, s, 0.2 * rest},
              {Lane::bulk, 0, s, 0.8 * rest}};
    }
    case Mix::routes: {
      const double each = x * cap / (s + kFastRoute * s);  // half the requests on each route
      return {{Lane::standard, 0, s, each}, {Lane::standard, 1, kFastRoute * s, each}};
    }
  }
  return {};
}

// Arrivals of `cs` from `from` to `to`, in time order.
void arrivals(const std::vector<Class>& cs, Arrivals how, double from, double to, double period,
              Rng& rng, std::vector<ov::Request>& out) {
  double total = 0;
  for (const Class& c : cs) total += c.rate;
  if (!(total > 0)) return;
  std::vector<double> credit(cs.size(), 0.0);
  double t = from;
  for (;;) {
    double gap = 1.0 / total;
    if (how == Arrivals::poisson) gap = exponential(rng, 1.0 / total);
    if (how == Arrivals::bursts) gap /= 2;  // twice the rate while on
    t += gap;
    if (how == Arrivals::bursts) {
      // Off for the second half of each period of 2 x `period`.
      const double k = std::floor((t - from) / (2 * period));
      if (t - from - k * 2 * period >= period) t = from + (k + 1) * 2 * period;
    }
    if (t >= to) return;
    // The class: each in proportion to its rate, spread evenly (the one
    // furthest behind its share goes next).
    std::size_t pick = 0;
    for (std::size_t i = 0; i < cs.size(); ++i) {
      credit[i] += cs[i].rate / total;
      if (credit[i] > credit[pick]) pick = i;
    }
    credit[pick] -= 1;
    out.push_back({t, cs[pick].lane, cs[pick].service, cs[pick].route});
  }
}

// The capacity over [from, to), in slot-seconds.
double slot_time(const Cell& c, const ov::UpstreamParams& up, double from, double to) {
  if (c.shape != ov::Shape::halve) return c.capacity * (to - from);
  const double half = std::max(1, c.capacity / 2);
  const double a = std::max(from, up.halve_from), b = std::min(to, up.halve_to);
  const double halved = std::max(0.0, b - a);
  return c.capacity * (to - from - halved) + half * halved;
}

struct Plan {
  std::vector<ov::Request> reqs;
  ov::Window window;
  ov::Options o;
};

Plan plan(const Cell& c, const Options& opt, std::uint64_t seed) {
  Plan p;
  const double s = c.service;
  p.o.sluice = opt.sluice;
  p.o.upstream.capacity = c.capacity;
  p.o.upstream.service = s;
  p.o.upstream.jitter = std::min(0.0003, s / 20);
  p.o.upstream.stream_head = std::min(0.001, s / 5);
  p.o.load.timeout = std::max(1.0, 4 * s);
  p.o.haproxy_queue = kHaproxyQueue;
  auto cs = classes(c);
  double rate1 = 0;  // requests a second at 1x
  for (const Class& k : cs) rate1 += k.rate / c.load;
  double length = std::max({2.0, 40 * s, 2000 / rate1});
  length = std::max(20 * s, std::min(length, kMaxArrivals / (rate1 * c.load)));
  Rng rng(mix(seed, 11));
  double start = 0;
  if (c.warm) {
    start = std::max(2.0, 20 * s);
    std::vector<Class> warm{
        {Lane::standard, kWarmRouteId, kWarmRoute * s, 0.5 * c.capacity / (kWarmRoute * s)}};
    arrivals(warm, Arrivals::poisson, 0, start, 1, rng, p.reqs);
    p.window = {start + 2 * s, start + 2 * s + length, ""};
  } else {
    p.window = {10 * s, 10 * s + length, ""};
  }
  arrivals(cs, c.arrivals, start, p.window.to, std::max(0.25, 5 * s), rng, p.reqs);
  // The halving shape: C/2 for the middle third of the window.
  p.o.upstream.halve_from = p.window.from + length / 3;
  p.o.upstream.halve_to = p.window.from + 2 * length / 3;
  return p;
}

Outcome outcome(const Cell& c, const Plan& p, const ov::Measured& m) {
  Outcome o;
  int sent = 0, refused = 0, timeouts = 0;
  for (std::size_t l = 0; l < admission::kLaneCount; ++l) {
    const auto& lane = m.lanes[l];
    sent += lane.sent;
    refused += lane.refused;
    timeouts += lane.timeouts + lane.late;
  }
  const double slots = slot_time(c, p.o.upstream, p.window.from, p.window.to);
  o.goodput = slots > 0 ? 100 * m.ok_work / slots : 0;
  o.refused = sent ? 100.0 * refused / sent : 0;
  o.timeouts = sent ? 100.0 * timeouts / sent : 0;
  o.upstream_429 = m.upstream_requests ? 100.0 * m.upstream_refused / m.upstream_requests : 0;
  o.p99 = m.normalized.empty() ? 0 : percentile(m.normalized, 0.99);
  o.refusals_settled = m.refused_settled;
  o.khat = m.khat_mean.value_or(0);
  o.late_refusals = m.refused_settled ? 100.0 * m.refused_late / m.refused_settled : 0;
  return o;
}

}  // namespace

void judge(Judged& j) {
  const Cell& c = j.cell;
  const Outcome& s = j.sluice;
  auto miss = [&](std::string what) { j.misses.push_back(std::move(what)); };
  const double p99_bound =
      std::max(2.0, c.load <= 0.9 ? j.fifo.p99 : (c.load > 1 ? 1.05 * j.limit_conn.p99 : 0));
  if (c.load >= 1) {
    // In overload, a peer counts only where it also meets the latency goal.
    auto counts = [&](const Outcome& x) { return c.load <= 1 || x.p99 <= p99_bound; };
    double best = std::max(j.limit_conn.goodput, j.short_queue.goodput);
    if (counts(j.haproxy)) best = std::max(best, j.haproxy.goodput);
    if (counts(j.fifo)) best = std::max(best, j.fifo.goodput);
    const double want = best >= 98 ? std::max(97.0, best - 1) : best - 1;
    if (s.goodput < want)
      miss("goodput " + fmt("%.1f", s.goodput) + " % < " + fmt("%.1f", want) + " %");
  }
  if (s.upstream_429 >= 2) miss("429s " + fmt("%.2f", s.upstream_429) + " % >= 2 %");
  if (c.load <= 0.9 && c.arrivals != Arrivals::bursts) {
    const double want = std::max(0.5, j.fifo.refused + j.fifo.timeouts);
    if (s.refused + s.timeouts > want)
      miss("refused " + fmt("%.2f", s.refused + s.timeouts) + " % > " + fmt("%.2f", want) + " %");
  }
  if (s.p99 > 0 && (c.arrivals != Arrivals::bursts || c.load > 1) && s.p99 > p99_bound)
    miss("p99 " + fmt("%.2f", s.p99) + " S > " + fmt("%.2f", p99_bound) + " S");
  if (c.load > 1 && s.refusals_settled >= 20 && s.late_refusals > 1)
    miss("refused late " + fmt("%.1f", s.late_refusals) + " % of " +
         std::to_string(s.refusals_settled));
}

std::string Cell::label() const {
  return std::string(ov::to_string(shape)) + " C" + std::to_string(capacity) + " S" +
         fmt("%g", service * 1e3) + "ms " + std::string(to_string(mix)) + " " +
         std::string(to_string(arrivals)) + " " + fmt("%g", load) + "x " + (warm ? "warm" : "cold");
}

std::vector<Cell> sample(int n, std::uint64_t seed) {
  // Each axis cycles through its values in an order of its own, reshuffled
  // every cycle: any run of cells covers each axis as evenly as it can.
  Rng rng(mix(seed, 5));
  auto order = [&](std::size_t size) {
    std::vector<std::size_t> out;
    out.reserve(static_cast<std::size_t>(n) + size);
    while (out.size() < static_cast<std::size_t>(n)) {
      std::vector<std::size_t> cycle(size);
      for (std::size_t i = 0; i < size; ++i) cycle[i] = i;
      for (std::size_t i = size; i > 1; --i)
        std::swap(cycle[i - 1], cycle[static_cast<std::size_t>(rng.uniform() * i)]);
      out.insert(out.end(), cycle.begin(), cycle.end());
    }
    return out;
  };
  auto shapes = order(kShapeAxis.size()), caps = order(kCapacityAxis.size()),
       services = order(kServiceAxis.size()), mixes = order(kMixAxis.size()),
       arrivals_ = order(kArrivalsAxis.size()), loads = order(kLoadAxis.size()), starts = order(2);
  std::vector<Cell> out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
    out.push_back({kShapeAxis[shapes[i]], kCapacityAxis[caps[i]], kServiceAxis[services[i]],
                   kMixAxis[mixes[i]], kArrivalsAxis[arrivals_[i]], kLoadAxis[loads[i]],
                   starts[i] == 1});
  return out;
}

Judged run_cell(const Cell& cell, const Options& o, std::uint64_t seed) {
  Judged j;
  j.cell = cell;
  Plan p = plan(cell, o, seed);
  auto one = [&](ov::System system) {
    auto m = ov::run_requests(cell.shape, system, p.reqs, {p.window}, p.o, seed);
    return outcome(cell, p, m.at(0));
  };
  j.sluice = one(ov::System::sluice);
  j.limit_conn = one(ov::System::limit_conn);
  j.haproxy = one(ov::System::haproxy);
  j.fifo = one(ov::System::fifo);
  j.short_queue = one(ov::System::short_queue);
  judge(j);
  return j;
}

std::vector<Judged> run(const Options& o) {
  auto cells = sample(o.cells, o.seed);
  if (!o.only.empty())
    std::erase_if(cells,
                  [&](const Cell& c) { return c.label().find(o.only) == std::string::npos; });
  std::vector<Judged> out(cells.size());
  std::atomic<std::size_t> next{0};
  int jobs =
      o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto work = [&] {
    for (std::size_t i; (i = next++) < cells.size();)
      out[i] = run_cell(cells[i], o, mix(o.seed, i));
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < jobs; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return out;
}

std::string format_markdown(const Options& o, const std::vector<Judged>& cells) {
  std::string out;
  int missed = 0;
  std::map<std::string, int> by_goal;
  for (const Judged& j : cells) {
    if (!j.misses.empty()) ++missed;
    for (const auto& m : j.misses) ++by_goal[m.substr(0, m.find(' '))];
  }
  out += "Workload matrix: " + std::to_string(cells.size()) + " cells (seed " +
         std::to_string(o.seed) + "), " + std::to_string(cells.size() - missed) +
         " meet every goal, " + std::to_string(missed) + " miss one or more";
  for (const auto& [goal, n] : by_goal) out += "; " + goal + " " + std::to_string(n);
  out += "\n";
  // Misses per value of each axis.
  auto tally = [&](const std::string& name, auto key) {
    std::map<std::string, std::pair<int, int>> t;
    for (const Judged& j : cells) {
      auto& e = t[key(j.cell)];
      ++e.first;
      if (!j.misses.empty()) ++e.second;
    }
    out += name + ":";
    for (const auto& [k, v] : t)
      out += " " + k + " " + std::to_string(v.second) + "/" + std::to_string(v.first);
    out += "\n";
  };
  tally("shape", [](const Cell& c) { return std::string(ov::to_string(c.shape)); });
  tally("C", [](const Cell& c) { return std::to_string(c.capacity); });
  tally("S", [](const Cell& c) { return fmt("%gms", c.service * 1e3); });
  tally("mix", [](const Cell& c) { return std::string(to_string(c.mix)); });
  tally("arrivals", [](const Cell& c) { return std::string(to_string(c.arrivals)); });
  tally("load", [](const Cell& c) { return fmt("%gx", c.load); });
  tally("start", [](const Cell& c) { return std::string(c.warm ? "warm" : "cold"); });
  if (missed == 0) return out;
  out += "\n| cell | misses | sluice goodput / refused / p99 | limit_conn | haproxy | fifo |\n";
  out += "|---|---|---|---|---|---|\n";
  auto trio = [](const Outcome& x) {
    std::string t = fmt("%.1f %%", x.goodput) + " / " + fmt("%.1f %%", x.refused + x.timeouts) +
                    " / " + fmt("%.2f", x.p99);
    if (x.khat > 0) t += " (K̂ " + fmt("%.1f", x.khat) + ")";
    return t;
  };
  for (const Judged& j : cells) {
    if (j.misses.empty()) continue;
    std::string m;
    for (const auto& s : j.misses) m += (m.empty() ? "" : "; ") + s;
    out += "| " + j.cell.label() + " | " + m + " | " + trio(j.sluice) + " | " + trio(j.limit_conn) +
           " | " + trio(j.haproxy) + " | " + trio(j.fifo) + " |\n";
  }
  out +=
      "\ngoodput: slot time of the 2xx over C's; refused: 503, 429 and timeouts at the client, "
      "of the requests that arrived in the window; p99: of the successes' latency over their own "
      "route's S.\n";
  return out;
}

}  // namespace sluice::sim::matrix
