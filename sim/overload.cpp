#include "sim/overload.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "admission/placement.hpp"
#include "sim/simulate.hpp"

namespace sluice::sim::overload {

namespace adm = sluice::admission;

std::string_view to_string(Shape shape) {
  switch (shape) {
    case Shape::too_many:
      return "429";
    case Shape::queue:
      return "queue";
    case Shape::halve:
      return "halve";
    case Shape::ps:
      return "ps";
    case Shape::lognormal:
      return "lognormal";
  }
  return "429";
}

std::optional<Shape> shape_from_string(std::string_view s) {
  for (auto k : kAllShapes)
    if (to_string(k) == s) return k;
  return std::nullopt;
}

std::string_view to_string(System system) {
  switch (system) {
    case System::sluice:
      return "sluice";
    case System::limit_conn:
      return "limit_conn";
    case System::haproxy:
      return "haproxy";
    case System::none:
      return "none";
    case System::fifo:
      return "fifo";
    case System::short_queue:
      return "short_queue";
  }
  return "sluice";
}

std::optional<System> system_from_string(std::string_view s) {
  for (auto k : kSystems)
    if (to_string(k) == s) return k;
  if (s == "fifo") return System::fifo;
  return std::nullopt;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------- the upstream

Upstream::Upstream(Shape shape, const UpstreamParams& p, std::uint64_t seed)
    : shape_(shape), p_(p), rng_(seed) {}

int Upstream::capacity(double t) const {
  if (shape_ == Shape::halve && t >= p_.halve_from && t < p_.halve_to)
    return std::max(1, p_.capacity / 2);
  return p_.capacity;
}

Upstream::Arrival Upstream::arrive(std::uint64_t id, double life, double now, double service) {
  if (service <= 0) service = p_.service;
  if (shape_ == Shape::ps) {
    share_until(now);
    // A stream shares as any request does: its life is its work.
    if (life > 0) schedule(now + p_.stream_head, id, true, false, false, 200);
    ps_.push_back({id, life > 0 ? life : service, life > 0});
    return Arrival::started;
  }
  if (in_flight_ < capacity(now)) {
    start(id, life, now, service);
    return Arrival::started;
  }
  if (shape_ == Shape::queue || shape_ == Shape::lognormal) {
    queue_.push_back({id, life, service});
    return Arrival::queued;
  }
  ++refusing_;
  schedule(now + p_.refuse_after, id, true, true, false, 429);
  return Arrival::refused;
}

void Upstream::start(std::uint64_t id, double life, double now, double service) {
  ++in_flight_;
  if (life > 0) {
    schedule(now + p_.stream_head, id, true, false, false, 200);
    schedule(now + life, id, false, true, true, 200);
    return;
  }
  if (shape_ == Shape::lognormal) {
    // Mean `service`: exp(sigma z - sigma^2 / 2) has mean 1.
    const double z = normal(rng_);
    service *= std::exp(p_.sigma * z - p_.sigma * p_.sigma / 2);
  }
  schedule(now + service + exponential(rng_, p_.jitter), id, true, true, true, 200);
}

double Upstream::pace() const {
  const double n = static_cast<double>(ps_.size() + static_cast<std::size_t>(in_flight_));
  return n <= p_.capacity ? 1.0 : p_.capacity / n;
}

void Upstream::share_until(double now) {
  if (!ps_.empty() && now > ps_at_) {
    const double done = (now - ps_at_) * pace();
    for (Sharing& r : ps_) r.left -= done;
  }
  ps_at_ = std::max(ps_at_, now);
}

void Upstream::schedule(double at, std::uint64_t id, bool head, bool end, bool frees, int status) {
  due_.push({at, seq_++, id, head, end, frees, status});
}

double Upstream::next_event() const {
  double next = due_.empty() ? kNever : due_.top().at;
  if (!ps_.empty()) {
    double least = kNever;
    for (const Sharing& r : ps_) least = std::min(least, r.left);
    next = std::min(next, ps_at_ + std::max(0.0, least) / pace());
  }
  return next;
}

UpstreamEvent Upstream::pop() {
  const double at = next_event();
  if (!ps_.empty() && (due_.empty() || at < due_.top().at)) {
    share_until(at);
    auto least = std::min_element(
        ps_.begin(), ps_.end(), [](const Sharing& a, const Sharing& b) { return a.left < b.left; });
    const std::uint64_t id = least->id;
    const bool stream = least->stream;
    *least = ps_.back();
    ps_.pop_back();
    return {id, at, !stream, true, 200};  // a stream's head came at its start
  }
  share_until(at);
  Due d = due_.top();
  due_.pop();
  if (d.status == 429) --refusing_;
  if (d.frees) {
    --in_flight_;
    // The queue shape hands the slot to its oldest waiter.
    if (queue_head_ < queue_.size() && in_flight_ < capacity(d.at)) {
      Waiting w = queue_[queue_head_++];
      start(w.id, w.life, d.at, w.service);
    }
  }
  return {d.id, d.at, d.head, d.end, d.status};
}

// ---------------------------------------------------------------- the load

std::string Load::label() const {
  std::string s = fmt("%g", x);
  return poisson ? s + "p" : bursts ? s + "b" : s;
}

std::optional<Load> load_from_string(std::string_view s) {
  Load l;
  if (!s.empty() && (s.back() == 'p' || s.back() == 'b')) {
    (s.back() == 'p' ? l.poisson : l.bursts) = true;
    s.remove_suffix(1);
  }
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789.") != std::string_view::npos ||
      std::count(s.begin(), s.end(), '.') > 1 || s.front() == '.' || s.back() == '.')
    return std::nullopt;
  l.x = std::stod(std::string(s));
  if (!(l.x > 0) || l.x > 100) return std::nullopt;
  return l;
}

std::vector<Request> make_arrivals(const Load& load, const UpstreamParams& up, const LoadParams& lp,
                                   double until, std::uint64_t seed) {
  const double requests =
      std::max(0.0, (load.x * up.capacity - lp.stream_rate * lp.stream_life) / up.service);
  struct Class {
    Lane lane;
    double rate;
    std::int64_t next = 0;  // ns
  };
  std::vector<Class> classes;  // in the order run.sh gives them to the generator
  for (auto [lane, rate] : {std::pair{Lane::bulk, (1 - lp.standard_share) * requests},
                            std::pair{Lane::standard, lp.standard_share * requests},
                            std::pair{Lane::heavy, lp.stream_rate}})
    if (rate > 0) classes.push_back({lane, rate});
  // As sluice_loadgen: one mt19937_64 for every class, a class's next gap drawn
  // when its last arrival fires, each step cast to the steady clock's nanoseconds.
  std::mt19937_64 rng(seed);
  auto gap = [&](double rate) {
    double g = load.poisson ? std::exponential_distribution<double>(rate)(rng) : 1.0 / rate;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(g))
        .count();
  };
  const auto end =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(until))
          .count();
  std::vector<std::size_t> live;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    classes[c].next = gap(classes[c].rate);
    if (classes[c].next < end) live.push_back(c);
  }
  // Timers due at the same nanosecond fire in no order the generator chooses
  // (at 2x a standard arrival falls on every fourth bulk one): a draw of its own.
  Rng ties(mix(seed, 7));
  std::vector<Request> out;
  while (!live.empty()) {
    std::size_t at = 0;  // the class whose timer fires first
    int tied = 1;
    for (std::size_t i = 1; i < live.size(); ++i) {
      auto next = classes[live[i]].next, best = classes[live[at]].next;
      if (next < best) {
        at = i;
        tied = 1;
      } else if (next == best && ties.uniform() * ++tied < 1) {
        at = i;  // each of the tied classes alike (reservoir sampling)
      }
    }
    Class& c = classes[live[at]];
    // Routes as the bench's: /bulk, /sse, / (route_key's: GET on routes 0, 1, 2).
    const std::uint16_t route = c.lane == Lane::bulk ? 0 : c.lane == Lane::heavy ? 4 : 8;
    out.push_back({static_cast<double>(c.next) / 1e9, c.lane, 0, route});
    c.next += gap(c.rate);
    if (c.next >= end) live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
  }
  return out;
}

std::vector<Window> windows(Shape shape, const LoadParams& lp) {
  if (shape != Shape::halve) return {{lp.warmup, lp.warmup + lp.duration, ""}};
  UpstreamParams up;
  std::vector<Window> w{{0, lp.halve_run, fmt("0-%g s", lp.halve_run)}};
  w.push_back({0, up.halve_from, fmt("0-%g s", up.halve_from)});
  w.push_back({up.halve_from, up.halve_to,
               fmt("%g-", up.halve_from) + fmt("%g s", up.halve_to) + " (C/2)"});
  w.push_back({up.halve_to, lp.halve_run, fmt("%g-", up.halve_to) + fmt("%g s", lp.halve_run)});
  return w;
}

double Measured::goodput() const {
  if (!(seconds > 0)) return 0;
  return (lanes[adm::index(Lane::bulk)].ok + lanes[adm::index(Lane::standard)].ok +
          lanes[adm::index(Lane::heavy)].ok * stream_requests) /
         seconds;
}

// ---------------------------------------------------------------- the systems

namespace {

enum class Admit : std::uint8_t { forward, wait, refuse };

// The way back into the run for requests a system let wait.
class Driver {
 public:
  virtual ~Driver() = default;
  virtual void forward(std::size_t id, double now) = 0;
  virtual void refuse(std::size_t id, double now) = 0;
};

// What sits in front of the upstream.
class Proxy {
 public:
  virtual ~Proxy() = default;
  virtual Admit arrive(std::size_t id, const Request& r, double now) = 0;
  // The upstream's response head reached the proxy, `ttfb` after the request was sent.
  // True when the proxy keeps the request (it asked again): the head goes no further.
  virtual bool head(std::size_t, int /*status*/, double /*ttfb*/, double /*now*/) { return false; }
  // The exchange is over (a stream's at its end, any other's at its head).
  virtual void ended(std::size_t id, double now) = 0;
  virtual double next_timer() const { return kNever; }
  virtual void on_timer(double) {}
  virtual bool holds_waiters() const = 0;
  virtual std::optional<double> estimate() const { return std::nullopt; }
};

// The proxy's view of its one upstream (proxy/exchange.cpp's WorkerUpstreams,
// with no closure configured: the gate always admits).
class OneUpstream final : public adm::Upstreams {
 public:
  explicit OneUpstream(adm::Bulkhead& b) : b_(b) {}
  adm::Bulkhead& bulkhead(std::size_t) override { return b_; }
  adm::Verdict ask_gate(std::size_t, adm::Micros) override { return adm::Verdict::admit; }
  bool closed(std::size_t) const override { return false; }
  void probe_ended(std::size_t, bool) override {}
  adm::Micros reopen_hint(std::size_t, adm::Micros) override { return adm::Micros{0}; }
  std::optional<adm::Micros> youngest(Lane lane, std::size_t) override { return b_.youngest(lane); }

 private:
  adm::Bulkhead& b_;
};

class SluiceProxy final : public Proxy, adm::Waker {
 public:
  SluiceProxy(const SluiceSettings& s, std::size_t requests, Driver& driver, std::uint64_t seed)
      : s_(s),
        driver_(driver),
        rng_(seed),
        bulkhead_(s.lanes, adm::Estimate(s.estimate)),
        ups_(bulkhead_),
        ex_(requests),
        next_tick_(s.phase + s.heartbeat) {
    for (std::size_t i = 0; i < ex_.size(); ++i) {
      ex_[i].seat.owner = this;
      ex_[i].seat.id = i;
    }
    bulkhead_.set_waker(this);
  }

  // The worker's timer for kept and paced slots (Worker::wake_bulkheads_at).
  void wake_at(adm::Micros when) override {
    wake_ = std::min(wake_, std::chrono::duration<double>(when).count());
  }

  Admit arrive(std::size_t id, const Request& r, double now) override {
    Exchange& x = ex_[id];
    x.lane = r.lane;
    x.seat.route = r.route;
    return apply(id, adm::place(ask(x), x.seat, ups_, micros(now), rng_), now);
  }

  // As on_response_head(): the signal is taken when the head arrives, and a
  // refusal asks again, once (the bench's requests are body-less GETs).
  bool head(std::size_t id, int status, double ttfb, double now) override {
    Exchange& x = ex_[id];
    x.ttfb = ttfb;
    if (!x.lease.seated()) return false;
    x.signal = bulkhead_.classify(status, x.seat.route, micros(ttfb));
    bulkhead_.note_head(x.seat, x.signal, micros(ttfb), micros(now));
    if (x.signal != adm::Signal::refused || x.asked_again) return false;
    x.asked_again = true;
    auto p =
        adm::ask_again(ask(x), x.seat, x.lease, x.signal, micros(ttfb), ups_, micros(now), rng_);
    x.signal = adm::Signal::none;
    go(id, apply(id, std::move(p), now), now);
    carry_on(now);
    return true;
  }

  // As complete_lease(), when the exchange is logged.
  void ended(std::size_t id, double now) override {
    Exchange& x = ex_[id];
    x.lease.complete(x.signal, micros(x.ttfb), micros(now));
    carry_on(now);
  }

  double next_timer() const override { return std::min(next_tick_, wake_); }

  // Worker::on_heartbeat: the deadlines that passed, then the bulkhead's tick;
  // or the kept and paced slots' timer.
  void on_timer(double now) override {
    if (wake_ <= now && wake_ < next_tick_) {
      wake_ = kNever;
      if (auto at = bulkhead_.expire(micros(now))) wake_at(*at);
      carry_on(now);
      return;
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < waiting_.size(); ++i) {
      std::size_t id = waiting_[i];
      Exchange& x = ex_[id];
      if (!x.queued) continue;
      if (x.deadline > now) {
        waiting_[kept++] = id;
        continue;
      }
      auto p = adm::timed_out(ask(x, now - x.queued_at), x.seat, x.lease, ups_, micros(now));
      if (p.how == adm::Placed::queued) {  // an unmeasured estimate: it waits on
        x.lease = std::move(p.lease);
        x.deadline = now + std::chrono::duration<double>(p.wait_for).count();
        waiting_[kept++] = id;
        continue;
      }
      leave_queue(x);
      go(id, apply(id, std::move(p), now), now);
    }
    waiting_.resize(kept);
    bulkhead_.tick(micros(now));
    next_tick_ = now + s_.heartbeat;
    carry_on(now);
  }

  bool holds_waiters() const override { return queued_ > 0; }
  std::optional<double> estimate() const override { return bulkhead_.estimate().value(); }

 private:
  struct SimSeat final : adm::Seat {
    SluiceProxy* owner = nullptr;
    std::size_t id = 0;
    // The proxy posts to the session's thread; the run does the same at once (carry_on).
    void on_seated() override { owner->seated_.push_back(id); }
    void on_dropped() override { owner->dropped_.push_back(id); }
  };
  struct Exchange {
    SimSeat seat;
    adm::Lease lease;
    Lane lane = Lane::bulk;
    adm::Signal signal = adm::Signal::none;
    double ttfb = 0, queued_at = 0, deadline = 0;
    bool queued = false;
    bool asked_again = false;
  };

  // The proxy's ask(): one upstream, no alternatives, enforce; `waited` in its queue.
  static adm::Ask ask(const Exchange& x, double waited = 0) {
    adm::Ask a;
    a.lane = x.lane;
    a.upstream = 0;
    a.mode = adm::Mode::enforce;
    a.waited = micros(waited);
    return a;
  }

  // As the proxy's apply(): on now, wait until the deadline, or a 503 with its Retry-After.
  Admit apply(std::size_t id, adm::Placement p, double now) {
    Exchange& x = ex_[id];
    x.lease = std::move(p.lease);
    switch (p.how) {
      case adm::Placed::seated:
      case adm::Placed::stayed:
      case adm::Placed::observed:
        return Admit::forward;
      case adm::Placed::queued:
        x.queued = true;
        ++queued_;
        x.queued_at = now;
        x.deadline = now + std::chrono::duration<double>(p.wait_for).count();
        waiting_.push_back(id);
        return Admit::wait;
      case adm::Placed::refused:
        // Its draw, as the proxy's refuse() makes it (the run sends no retry).
        adm::retry_after_seconds(p.retry_after, s_.retry[adm::index(x.lane)], rng_);
        return Admit::refuse;
    }
    return Admit::refuse;
  }

  // What the proxy does with a placement it applied: on to the upstream, a
  // 503, or nothing yet (it waits; carry_on() sends it when it is seated).
  void go(std::size_t id, Admit admit, double now) {
    if (admit == Admit::forward)
      driver_.forward(id, now);
    else if (admit == Admit::refuse)
      driver_.refuse(id, now);
  }

  void leave_queue(Exchange& x) {
    x.queued = false;
    --queued_;
  }

  // The posted on_seated(): a request still waiting whose lease is seated goes
  // on; the posted on_dropped(): one still waiting, unseated, is refused.
  void carry_on(double now) {
    for (std::size_t i = 0; i < dropped_.size(); ++i) {
      const std::size_t id = dropped_[i];
      Exchange& x = ex_[id];
      if (!x.queued || x.lease.seated()) continue;
      auto p = adm::timed_out(ask(x, now - x.queued_at), x.seat, x.lease, ups_, micros(now));
      if (p.how == adm::Placed::queued) continue;  // waits on (an unmeasured estimate)
      leave_queue(x);
      go(id, apply(id, std::move(p), now), now);
    }
    dropped_.clear();
    for (std::size_t i = 0; i < seated_.size(); ++i) {
      Exchange& x = ex_[seated_[i]];
      if (!x.queued || !x.lease.seated()) continue;
      leave_queue(x);
      driver_.forward(seated_[i], now);
    }
    seated_.clear();
  }

  SluiceSettings s_;
  Driver& driver_;
  Rng rng_;
  adm::Bulkhead bulkhead_;
  OneUpstream ups_;
  std::vector<Exchange> ex_;          // by request; never resized (seats are linked)
  std::vector<std::size_t> waiting_;  // queued, in order
  std::vector<std::size_t> seated_;   // seated while queued, to carry on
  std::vector<std::size_t> dropped_;  // dropped from a standing line, to refuse
  int queued_ = 0;
  double next_tick_ = 0;
  double wake_ = kNever;
};

class LimitConn final : public Proxy {
 public:
  explicit LimitConn(int limit) : limit_(limit) {}
  Admit arrive(std::size_t, const Request&, double) override {
    if (running_ >= limit_) return Admit::refuse;
    ++running_;
    return Admit::forward;
  }
  void ended(std::size_t, double) override { --running_; }
  bool holds_waiters() const override { return false; }

 private:
  int limit_;
  int running_ = 0;
};

class Haproxy final : public Proxy {
 public:
  Haproxy(int limit, double queue_timeout, Driver& driver)
      : limit_(limit), timeout_(queue_timeout), driver_(driver) {}
  Admit arrive(std::size_t id, const Request&, double now) override {
    if (running_ < limit_ && head_ == queue_.size()) {
      ++running_;
      return Admit::forward;
    }
    queue_.push_back({id, now + timeout_});
    return Admit::wait;
  }
  void ended(std::size_t, double now) override {
    --running_;
    while (running_ < limit_ && head_ < queue_.size()) {
      ++running_;
      driver_.forward(queue_[head_++].id, now);
    }
  }
  double next_timer() const override {
    return head_ < queue_.size() ? queue_[head_].deadline : kNever;
  }
  void on_timer(double now) override {
    while (head_ < queue_.size() && queue_[head_].deadline <= now)
      driver_.refuse(queue_[head_++].id, now);
  }
  bool holds_waiters() const override { return head_ < queue_.size(); }

 private:
  struct Queued {
    std::size_t id;
    double deadline;
  };
  int limit_;
  double timeout_;
  Driver& driver_;
  int running_ = 0;
  std::vector<Queued> queue_;  // FIFO from head_; one timeout, so deadlines in order
  std::size_t head_ = 0;
};

class NoLimit final : public Proxy {
 public:
  Admit arrive(std::size_t, const Request&, double) override { return Admit::forward; }
  void ended(std::size_t, double) override {}
  bool holds_waiters() const override { return false; }
};

// ---------------------------------------------------------------- one run

enum class Outcome : std::uint8_t { pending, ok, late, refused, timeout };

class Run final : public Driver {
 public:
  Run(Shape shape, System system, const Load& load, const Options& o, std::uint64_t seed)
      : Run(shape, system,
            make_arrivals(
                load, o.upstream, o.load,
                shape == Shape::halve ? o.load.halve_run : o.load.warmup + o.load.duration, seed),
            windows(shape, o.load), o, seed) {}

  Run(Shape shape, System system, std::vector<Request> reqs, std::vector<Window> ws,
      const Options& o, std::uint64_t seed)
      : o_(o),
        up_(shape, o.upstream, mix(seed, 1)),
        reqs_(std::move(reqs)),
        windows_(std::move(ws)) {
    state_.resize(reqs_.size());
    switch (system) {
      case System::sluice:
        proxy_ = std::make_unique<SluiceProxy>(o.sluice, reqs_.size(), *this, mix(seed, 2));
        break;
      case System::limit_conn:
        proxy_ = std::make_unique<LimitConn>(o.upstream.capacity);
        break;
      case System::haproxy:
        proxy_ = std::make_unique<Haproxy>(o.upstream.capacity, o.haproxy_queue, *this);
        break;
      case System::none:
        proxy_ = std::make_unique<NoLimit>();
        break;
      case System::fifo:
        proxy_ = std::make_unique<Haproxy>(o.upstream.capacity, o.load.timeout, *this);
        break;
      case System::short_queue:
        proxy_ = std::make_unique<Haproxy>(o.upstream.capacity, o.upstream.service, *this);
        break;
    }
    for (std::size_t i = 0; i < reqs_.size(); ++i) push(reqs_[i].at, Ev::arrive, i);
  }

  std::vector<Measured> go() {
    record_estimate(0);
    for (;;) {
      double tm = events_.empty() ? kNever : events_.top().at;
      double tu = up_.next_event();
      if (tm == kNever && tu == kNever && !proxy_->holds_waiters()) break;
      double tt = proxy_->next_timer();
      if (tu <= tm && tu <= tt) {
        on_upstream(up_.pop());
        record_estimate(tu);
      } else if (tm <= tt) {
        Event e = events_.top();
        events_.pop();
        on_event(e);
        record_estimate(e.at);
      } else {
        proxy_->on_timer(tt);
        record_estimate(tt);
      }
    }
    return measure();
  }

  void forward(std::size_t id, double now) override {
    state_[id].sent = now;
    push(now + o_.hop, Ev::at_upstream, id);
  }
  void refuse(std::size_t id, double now) override { push(now + o_.hop, Ev::client, id, 503); }

 private:
  enum class Ev : std::uint8_t { arrive, at_upstream, proxy_head, proxy_end, client, timeout };
  struct Event {
    double at;
    std::uint64_t seq;
    Ev kind;
    std::size_t id;
    int status;
    bool end;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct State {
    double sent = 0, reached = -1, done = 0;
    int reaches = 0, refusals = 0;  // at the upstream (a request that asked again: twice)
    Outcome outcome = Outcome::pending;
  };

  void push(double at, Ev kind, std::size_t id, int status = 0, bool end = false) {
    events_.push({at, seq_++, kind, id, status, end});
  }

  bool stream(std::size_t id) const { return reqs_[id].lane == Lane::heavy; }
  double life(std::size_t id) const {
    return reqs_[id].service > 0 ? reqs_[id].service : o_.load.stream_life;
  }
  // The slot time a request's 2xx used: its route's service time, a stream's life.
  double work(std::size_t id) const {
    if (stream(id)) return life(id);
    return reqs_[id].service > 0 ? reqs_[id].service : o_.upstream.service;
  }

  void on_upstream(const UpstreamEvent& e) {
    if (e.head)
      push(e.at + o_.hop, Ev::proxy_head, e.id, e.status, e.end);
    else if (e.end)
      push(e.at + o_.hop, Ev::proxy_end, e.id);
  }

  void on_event(const Event& e) {
    State& s = state_[e.id];
    switch (e.kind) {
      case Ev::arrive:
        push(e.at + o_.load.timeout, Ev::timeout, e.id);
        switch (proxy_->arrive(e.id, reqs_[e.id], e.at)) {
          case Admit::forward:
            forward(e.id, e.at);
            break;
          case Admit::refuse:
            refuse(e.id, e.at);
            break;
          case Admit::wait:
            break;
        }
        return;
      case Ev::at_upstream:
        if (s.reaches++ == 0) s.reached = e.at;
        if (up_.arrive(e.id, stream(e.id) ? life(e.id) : 0, e.at, reqs_[e.id].service) ==
            Upstream::Arrival::refused)
          ++s.refusals;
        max_offered_ = std::max(max_offered_, up_.offered());
        return;
      case Ev::proxy_head:
        if (proxy_->head(e.id, e.status, e.at - s.sent, e.at)) return;  // it asked again
        push(e.at + o_.hop, Ev::client, e.id, e.status);
        if (e.end) proxy_->ended(e.id, e.at);
        return;
      case Ev::proxy_end:
        proxy_->ended(e.id, e.at);
        return;
      case Ev::client:
        if (s.outcome != Outcome::pending) return;  // its client left
        s.done = e.at;
        if (e.status / 100 == 2)
          s.outcome = e.at - reqs_[e.id].at <= o_.load.timeout ? Outcome::ok : Outcome::late;
        else
          s.outcome = Outcome::refused;
        return;
      case Ev::timeout:
        if (s.outcome == Outcome::pending) s.outcome = Outcome::timeout;
        return;
    }
  }

  void record_estimate(double t) {
    auto k = proxy_->estimate();
    if (!k) return;
    if (estimates_.empty() || estimates_.back().second != *k) estimates_.emplace_back(t, *k);
  }

  std::vector<Measured> measure() const {
    std::vector<Measured> out;
    for (const Window& w : windows_) {
      Measured m;
      m.seconds = w.to - w.from;
      m.stream_requests = o_.load.stream_life / o_.upstream.service;
      m.max_offered = max_offered_;
      for (std::size_t i = 0; i < reqs_.size(); ++i) {
        const State& s = state_[i];
        if (s.outcome == Outcome::ok && s.done >= w.from && s.done < w.to) m.ok_work += work(i);
        if (s.reached >= w.from && s.reached < w.to) {
          m.upstream_requests += s.reaches;
          m.upstream_refused += s.refusals;
        }
        if (reqs_[i].at < w.from || reqs_[i].at >= w.to) continue;
        LaneCounts& l = m.lanes[adm::index(reqs_[i].lane)];
        ++l.sent;
        switch (s.outcome) {
          case Outcome::ok:
            ++l.ok;
            l.latency.push_back(s.done - reqs_[i].at);
            m.normalized.push_back((s.done - reqs_[i].at) /
                                   (stream(i) ? o_.upstream.service : work(i)));
            break;
          case Outcome::late:
            ++l.late;
            break;
          case Outcome::refused:
            ++l.refused;
            if (reqs_[i].at >= w.from + kSettled) {
              ++m.refused_settled;
              if (s.done - reqs_[i].at > kRefusedAtOnce) ++m.refused_late;
            }
            break;
          case Outcome::timeout:
          case Outcome::pending:
            ++l.timeouts;
            break;
        }
      }
      estimate_in(w, m);
      out.push_back(std::move(m));
    }
    return out;
  }

  // The estimate's time-weighted mean, min and max over the window.
  void estimate_in(const Window& w, Measured& m) const {
    if (estimates_.empty()) return;
    double area = 0, lo = kNever, hi = -kNever;
    for (std::size_t i = 0; i < estimates_.size(); ++i) {
      double from = std::max(w.from, estimates_[i].first);
      double to = std::min(w.to, i + 1 < estimates_.size() ? estimates_[i + 1].first : kNever);
      if (to <= from) continue;
      area += (to - from) * estimates_[i].second;
      lo = std::min(lo, estimates_[i].second);
      hi = std::max(hi, estimates_[i].second);
    }
    m.khat_mean = area / (w.to - w.from);
    m.khat_min = lo;
    m.khat_max = hi;
    // Growth only raises it: every fall in the window is a decrease.
    for (std::size_t i = 1; i < estimates_.size(); ++i)
      if (estimates_[i].first >= w.from && estimates_[i].first < w.to &&
          estimates_[i].second < estimates_[i - 1].second)
        ++m.decreases;
  }

  const Options& o_;
  Upstream up_;
  std::vector<Request> reqs_;
  std::vector<State> state_;
  std::unique_ptr<Proxy> proxy_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  std::vector<Window> windows_;
  std::vector<std::pair<double, double>> estimates_;  // (from, K̂)
  int max_offered_ = 0;
};

}  // namespace

std::vector<Measured> run_once(Shape shape, System system, const Load& load, const Options& o,
                               std::uint64_t seed) {
  return Run(shape, system, load, o, seed).go();
}

std::vector<Measured> run_requests(Shape shape, System system, std::vector<Request> reqs,
                                   std::vector<Window> ws, const Options& o, std::uint64_t seed) {
  return Run(shape, system, std::move(reqs), std::move(ws), o, seed).go();
}

// ---------------------------------------------------------------- rows

std::vector<Row> run_rows(Shape shape, System system, const Load& load, const Options& o) {
  auto ws = windows(shape, o.load);
  std::vector<std::vector<Measured>> runs;
  runs.reserve(static_cast<std::size_t>(std::max(0, o.runs)));
  for (int i = 0; i < o.runs; ++i)
    runs.push_back(run_once(shape, system, load, o, o.seed + static_cast<std::uint64_t>(i)));
  std::vector<Row> rows;
  for (std::size_t w = 0; w < ws.size(); ++w) {
    Row r;
    r.shape = shape;
    r.system = system;
    r.load = load;
    r.window = ws[w];
    r.runs = o.runs;
    const double n = std::max(1, o.runs);
    std::array<std::vector<double>, adm::kLaneCount> p50, p99;
    double reached = 0, refused = 0;
    std::vector<double> kmean, kmin, kmax, cuts;
    for (const auto& run : runs) {
      const Measured& m = run[w];
      r.goodput += m.goodput() / n;
      for (std::size_t l = 0; l < adm::kLaneCount; ++l) {
        const LaneCounts& c = m.lanes[l];
        r.sent[l] += c.sent / n;
        r.ok[l] += c.ok / n;
        r.refused[l] += c.refused / n;
        r.timeouts[l] += c.timeouts / n;
        if (c.latency.empty()) continue;
        p50[l].push_back(percentile(c.latency, 0.5));
        p99[l].push_back(percentile(c.latency, 0.99));
      }
      reached += m.upstream_requests;
      refused += m.upstream_refused;
      r.max_offered = std::max(r.max_offered, m.max_offered);
      if (m.khat_mean) {
        kmean.push_back(*m.khat_mean);
        kmin.push_back(*m.khat_min);
        kmax.push_back(*m.khat_max);
        cuts.push_back(m.decreases);
      }
    }
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s / static_cast<double>(v.size());
    };
    for (std::size_t l = 0; l < adm::kLaneCount; ++l) {
      if (!p50[l].empty()) r.p50[l] = mean(p50[l]);
      if (!p99[l].empty()) r.p99[l] = mean(p99[l]);
    }
    r.upstream_share = reached > 0 ? refused / reached : 0;
    if (!kmean.empty()) {
      r.khat_mean = mean(kmean);
      r.khat_min = mean(kmin);
      r.khat_max = mean(kmax);
      r.decreases = mean(cuts);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

Report simulate(const Options& o) {
  Report rep;
  rep.options = o;
  const Load top{3, false};
  rep.capacity = run_rows(Shape::too_many, System::none, top, o).at(0).goodput;
  for (Shape shape : o.shapes)
    for (System system : o.systems)
      for (const Load& load : o.loads)
        for (Row& r : run_rows(shape, system, load, o)) rep.rows.push_back(std::move(r));
  return rep;
}

// ---------------------------------------------------------------- printing

namespace {

std::string ms_pair(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b) return "- / -";
  return fmt("%.1f", *a * 1e3) + " / " + fmt("%.1f", *b * 1e3);
}

std::string share(double part, double whole) {
  return whole > 0 ? fmt("%.1f", 100 * part / whole) : "-";
}

std::string shape_title(Shape shape) {
  switch (shape) {
    case Shape::too_many:
      return "Upstream that answers 429 above C";
    case Shape::queue:
      return "Upstream that queues above C";
    case Shape::halve:
      return "Upstream that answers 429 above C, C/2 from 10 s to 20 s";
    case Shape::ps:
      return "Upstream that shares C between the requests in flight";
    case Shape::lognormal:
      return "Upstream that queues above C, log-normal service times";
  }
  return "";
}

}  // namespace

std::string format_markdown(const Report& rep) {
  const Options& o = rep.options;
  const double cs = o.upstream.capacity / o.upstream.service;
  const auto b = adm::index(Lane::bulk), st = adm::index(Lane::standard),
             h = adm::index(Lane::heavy);
  std::string out;
  out += "Simulated overload bench: C = " + std::to_string(o.upstream.capacity) +
         ", S = " + fmt("%g", o.upstream.service * 1e3) + " ms (C/S = " + fmt("%g", cs) +
         " requests/s), jitter " + fmt("%g", o.upstream.jitter * 1e3) + " ms, hop " +
         fmt("%g", o.hop * 1e3) + " ms; client timeout " + fmt("%g", o.load.timeout) + " s; " +
         fmt("%g", o.load.duration) + " s measured after " + fmt("%g", o.load.warmup) + " s; " +
         std::to_string(o.runs) + " runs per row, seed " + std::to_string(o.seed) + "\n";
  out += "Measured capacity (none, 429 shape, 3x): " + fmt("%.1f", rep.capacity) + " requests/s (" +
         fmt("%.1f", 100 * rep.capacity / cs) + " % of C/S)\n";
  for (Shape shape : o.shapes) {
    out += "\n#### " + shape_title(shape) + "\n\n";
    out +=
        "| system | load | goodput / C/S | / capacity | standard p50 / p99 ms "
        "| bulk p50 / p99 ms | standard refused / timeout % | bulk refused / timeout % "
        "| refused, all lanes % | streams 2xx % | upstream 429 % | max at upstream "
        "| K̂ mean (min-max) |\n";
    out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const Row& r : rep.rows) {
      if (r.shape != shape) continue;
      std::string load = r.load.poisson ? fmt("%g", r.load.x) + " Poisson" : fmt("%g", r.load.x);
      if (!r.window.label.empty()) load += ", " + r.window.label;
      const double all = r.sent[b] + r.sent[st] + r.sent[h];
      std::string k = "-";
      if (r.khat_mean) {
        k = fmt("%.2f", *r.khat_mean);
        k += " (";
        k += fmt("%.2f", *r.khat_min);
        k += '-';
        k += fmt("%.2f", *r.khat_max);
        k += "), ";
        k += fmt("%.1f", r.decreases);
        k += " decreases";
      }
      auto slash = [](std::string left, const std::string& right) {
        return (left += " / ") += right;
      };
      const std::string cells[] = {
          std::string(to_string(r.system)),
          load,
          fmt("%.1f %%", 100 * r.goodput / cs),
          rep.capacity > 0 ? fmt("%.1f %%", 100 * r.goodput / rep.capacity) : "-",
          ms_pair(r.p50[st], r.p99[st]),
          ms_pair(r.p50[b], r.p99[b]),
          slash(share(r.refused[st], r.sent[st]), share(r.timeouts[st], r.sent[st])),
          slash(share(r.refused[b], r.sent[b]), share(r.timeouts[b], r.sent[b])),
          share(r.refused[b] + r.refused[st] + r.refused[h], all),
          share(r.ok[h], r.sent[h]),
          fmt("%.2f", 100 * r.upstream_share),
          std::to_string(r.max_offered),
          k};
      for (const auto& cell : cells) {
        out += "| ";
        out += cell;
        out += ' ';
      }
      out += "|\n";
    }
  }
  out +=
      "\ngoodput: the slot time of the 2xx within the client timeout, of the requests that "
      "arrived in the window, per second in requests of S (a stream: its life over S), over C/S "
      "and over the measured capacity; latency from arrival, "
      "each run's p50 / p99 averaged; refused: 503 and 429 at the client (all lanes: streams "
      "too, as the bench's 0.9x target counts them); streams 2xx: streams "
      "whose head came in time; upstream 429 %: of the requests that reached it in the window; "
      "max at upstream: the most at the upstream at once in any run (in its slots, its queue or "
      "being answered 429); K̂: sluice's estimate, "
      "time-weighted over the window, and its decreases in the window, averaged over the runs.\n";
  return out;
}

}  // namespace sluice::sim::overload
