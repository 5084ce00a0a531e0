#include "admission/bulkhead.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

namespace sluice::admission {

namespace {

constexpr double kHighFree = 0.3;  // seed 001: certain while this fraction is free
constexpr int kHoldSamples = 16;   // holds seen before pacing trusts their mean
// A twentieth of the delay target: a client's turnaround on the same host or
// the next, well under the service time it would otherwise wait.
Micros anticipation_of(const Estimate& e) {
  return std::clamp(e.delay_target() / 20, Micros{500}, Micros{5'000});
}

// Ties between lanes go to the heavier weight, then in this order.
constexpr std::array<Lane, kLaneCount> kTieOrder{Lane::standard, Lane::heavy, Lane::bulk};

int tie_rank(Lane lane) {
  for (std::size_t i = 0; i < kTieOrder.size(); ++i)
    if (kTieOrder[i] == lane) return static_cast<int>(i);
  return 0;
}

// True when lane a goes before lane b at equal borrowed-per-weight.
bool before(const LanePolicy& p, Lane a, Lane b) {
  double wa = p.weights[index(a)], wb = p.weights[index(b)];
  if (wa != wb) return wa > wb;
  return tie_rank(a) < tie_rank(b);
}

// What lane l would hold borrowed with one more slot, per weight: with the
// slot counted, a lane of weight 4 borrows four for each one of a lane of
// weight 1 (deficit round robin); counted without it, one borrowed slot of the
// heavier lane ranked it behind a lighter lane with none, and on a bulkhead
// of a few slots the lanes took turns, whatever their weights.
double borrowed_per_weight(const LanePolicy& p, const Census& c, const Seats& g, std::size_t l) {
  return (std::max(0, c.running[l] - g[l]) + 1) / p.weights[l];
}

}  // namespace

std::string_view to_string(Hold hold) {
  switch (hold) {
    case Hold::none:
      return "none";
    case Hold::full:
      return "full";
    case Hold::reserved:
      return "reserved";
    case Hold::budget:
      return "budget";
    case Hold::fair_share:
      return "fair_share";
    case Hold::chance:
      return "chance";
    case Hold::heavy_cap:
      return "heavy_cap";
    case Hold::behind:
      return "behind";
  }
  return "none";
}

// ---------------------------------------------------------------- lane rules

int Census::slots() const {
  return std::max(fleet ? 0 : 1, static_cast<int>(std::floor(estimate + 1e-9)));
}

Seats guaranteed(const LanePolicy& p, const Census& c, std::optional<Lane> asking) {
  const int s = c.slots();
  Seats g{};
  std::array<double, kLaneCount> rest{};
  std::array<bool, kLaneCount> work{};
  double total = 0;
  int given = 0;
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    bool ask = asking && index(*asking) == l;
    work[l] = c.running[l] > 0 || c.waiting[l] > 0 || ask;
    if (!work[l]) continue;
    double q = p.floors[l] * s;
    g[l] = static_cast<int>(std::floor(q + 1e-9));
    rest[l] = q - g[l];
    total += q;
    given += g[l];
  }
  // Largest remainder: the seats the floors add up to, to the largest fractions.
  for (int left = static_cast<int>(std::floor(total + 1e-9)) - given; left > 0; --left) {
    std::optional<std::size_t> best;
    for (Lane lane : kTieOrder) {
      auto l = index(lane);
      if (work[l] && rest[l] > 1e-9 && (!best || rest[l] > rest[*best] + 1e-12)) best = l;
    }
    if (!best) break;
    ++g[*best];
    rest[*best] = 0;
  }
  for (std::size_t l = 0; l < kLaneCount; ++l) {
    bool waits = c.waiting[l] > 0 || (asking && index(*asking) == l);
    if (waits && p.floors[l] > 0 && g[l] == 0) g[l] = 1;
  }
  return g;
}

double marginal_probability(const LanePolicy& p, const Census& c, Lane lane) {
  if (c.estimate <= 0) return 0.0;
  double phi = 1.0 - c.total_running() / c.estimate;
  if (phi >= kHighFree) return 1.0;
  if (phi <= 0) return 0.0;
  double x = phi / kHighFree;
  double s = x * x * (3.0 - 2.0 * x);
  double heaviest = *std::max_element(p.weights.begin(), p.weights.end());
  double e = std::clamp(heaviest / p.weights[index(lane)], 1.0, 4.0);
  return std::pow(s, e);
}

Hold decide(const LanePolicy& p, const Census& c, Lane lane, double u) {
  const auto l = index(lane);
  const int free = c.slots() - c.total_running();
  const Seats g = guaranteed(p, c, lane);
  // 1: within the floor.
  if (c.running[l] < g[l]) return free > 0 || !c.measured ? Hold::none : Hold::full;
  if (free <= 0) return Hold::full;
  // 2: slots owed to lanes below their floors that have requests waiting.
  int owed = 0;
  for (std::size_t m = 0; m < kLaneCount; ++m)
    if (m != l && c.waiting[m] > 0) owed += std::max(0, g[m] - c.running[m]);
  if (free <= owed) return Hold::reserved;
  // 2b: the upstream's quota is down to this lane's reserve.
  if (!c.may_borrow[l]) return Hold::budget;
  // 3: the borrowed part goes to the waiting lane with the least borrowed per weight.
  double mine = borrowed_per_weight(p, c, g, l);
  for (Lane other : kLanes) {
    auto m = index(other);
    // A lane below its floor is not competing for the borrowed part: rule 2 keeps its slots.
    if (m == l || c.waiting[m] == 0 || c.running[m] < g[m]) continue;
    double theirs = borrowed_per_weight(p, c, g, m);
    if (theirs < mine || (theirs == mine && before(p, other, lane))) return Hold::fair_share;
  }
  // 4: the marginal admission, where another lane has work too: a lane alone
  // takes a free slot (a slot left free waits for the next release).
  bool others = false;
  for (std::size_t m = 0; m < kLaneCount; ++m)
    others = others || (m != l && c.running[m] + c.waiting[m] > 0);
  if (!others) return Hold::none;
  return u < marginal_probability(p, c, lane) ? Hold::none : Hold::chance;
}

int plan(const LanePolicy& p, Census c, Lane lane, int wanted) {
  const auto l = index(lane);
  if (c.waiting[l] > 0) return 0;  // newcomers queue behind
  const double certain = std::nextafter(1.0, 0.0);
  int n = 0;
  while (n < wanted && decide(p, c, lane, certain) == Hold::none) {
    ++c.running[l];
    ++n;
  }
  return n;
}

Millis lease_retry_after(Micros window_waited, std::optional<Micros> youngest_age) {
  Micros m = std::max(window_waited, youngest_age.value_or(Micros{0}));
  return std::chrono::ceil<Millis>(m);
}

// ---------------------------------------------------------------- Bulkhead

void Bulkhead::List::push_back(Seat& s) {
  s.prev = tail;
  s.next = nullptr;
  (tail ? tail->next : head) = &s;
  tail = &s;
}

void Bulkhead::List::erase(Seat& s) {
  (s.prev ? s.prev->next : head) = s.next;
  (s.next ? s.next->prev : tail) = s.prev;
  s.prev = s.next = nullptr;
}

Bulkhead::Bulkhead(const LanePolicy& lanes, const Estimate& estimate, LeaseCap* heavy_cap)
    : lanes_(lanes), estimate_(estimate), heavy_cap_(heavy_cap), unmeasured_(!estimate.measured()) {
  note_slow_lines();
}

void Bulkhead::note_slow_lines() {
  for (std::size_t r = 0; r < Estimate::kRoutes; ++r)
    slow_above_us_[r].store(estimate_.slow_above_us(static_cast<std::uint16_t>(r)),
                            std::memory_order_relaxed);
}

bool budget_allows_borrowing(const std::optional<BudgetReading>& reading, double reserve,
                             Micros now) {
  if (!reading || now >= reading->until) return true;  // no reading this window: no guard
  return reading->remaining > reserve;
}

Micros Bulkhead::mean_latency() const {
  return successes_
             ? Micros(static_cast<std::int64_t>(latency_sum_us_ / static_cast<double>(successes_)))
             : Micros{0};
}

Census Bulkhead::census(std::optional<Micros> now) const {
  Lock lock(mutex_);
  return census_locked(now);
}

int Bulkhead::running() const {
  Lock lock(mutex_);
  return running_locked();
}

bool Bulkhead::would_seat(Lane lane, Micros now) const {
  Lock lock(mutex_);
  return decide(lanes_, census_locked(now), lane, 0.0) == Hold::none;
}

void Bulkhead::note_head(const Seat& s, Signal signal, Micros ttfb, Micros now) {
  if (signal != Signal::clean && signal != Signal::slow) return;
  Lock lock(mutex_);
  if (!s.seated) return;
  const int before = estimate_.slots();
  estimate_.on_head(signal, s.seq, s.load, s.route, ttfb, s.own_delay, waiting_locked() > 0, now);
  slow_above_us_[s.route % Estimate::kRoutes].store(estimate_.slow_above_us(s.route),
                                                    std::memory_order_relaxed);
  unmeasured_.store(!estimate_.measured(), std::memory_order_relaxed);
  if (estimate_.slots() > before) {
    pace(before, now);
    serve(now);
  }
}

Micros Bulkhead::line_wait_locked(int ahead) const {
  // Seats turn over at slots / the mean hold a second.
  if (seat_hold_us_ <= 0) return Micros{0};
  const double per_s = census_locked(std::nullopt).slots() * 1e6 / seat_hold_us_;
  // A fleet's member without a slot: its turn comes at a round; the request
  // waits for it (its patience), and so is the demand its next report shows.
  if (per_s <= 0) return Micros{0};
  return Micros(static_cast<std::int64_t>((ahead + 1) * 1e6 / per_s));
}

Micros Bulkhead::lane_wait_locked(const Seat& s) const {
  // Ahead of it: the waiters of its lane (none when its tenant holds fewer of
  // the lane's slots than every tenant waiting: it goes first; its own
  // waiters' turns when it has some), and of the
  // lanes of a weight no lighter (fair share seats them first while they
  // borrow less per weight).
  int ahead = 0;
  for (Lane other : kLanes) {
    if (other == s.lane) {
      // Its tenant's turn comes once in every turn of the tenants waiting,
      // after its own waiters; it leads: next.
      const FairQueue& q = queue_[index(other)];
      const int own = q.waiting_of(s.tenant);
      if (own > 0)
        ahead += std::min(waiting_[index(other)], own * q.active_flows());
      else if (!q.leads(s))
        ahead += waiting_[index(other)];
    } else if (lanes_.weights[index(other)] >= lanes_.weights[index(s.lane)]) {
      ahead += waiting_[index(other)];
    }
  }
  return line_wait_locked(ahead);
}

Micros Bulkhead::patience_locked(Lane lane) const {
  // A burst finds a seat within kBurstWaits answer times in any lane: the
  // standing-line rule, not a short window, keeps a queue from standing.
  const Micros burst = std::min(kLongestBurst, kBurstWaits * estimate_.baseline());
  return std::max({lanes_.queue_window[index(lane)], estimate_.delay_target(), burst});
}

Micros Bulkhead::queue_target_locked() const {
  return std::max(kLeastTarget, std::chrono::duration_cast<Micros>(
                                    estimate_.baseline() * estimate_.policy().queue_target));
}

Micros Bulkhead::interval_locked() const {
  return std::clamp(std::chrono::duration_cast<Micros>(estimate_.baseline() * kIntervalAnswers),
                    kLeastInterval, kLongestInterval);
}

Micros Bulkhead::queue_target() const {
  Lock lock(mutex_);
  return queue_target_locked();
}

Micros Bulkhead::standing_interval() const {
  Lock lock(mutex_);
  return interval_locked();
}

bool Bulkhead::standing_locked(Micros now) const {
  if (estimate_.policy().queue_target <= 0) return false;  // the rule is off
  const Micros interval = interval_locked();
  if (standing_seen_ && now - *standing_seen_ < interval) return true;
  return line_above_since_ && now - *line_above_since_ >= interval;
}

bool Bulkhead::standing(Micros now) const {
  Lock lock(mutex_);
  return standing_locked(now);
}

void Bulkhead::note_line(Micros now) {
  const int waiting = waiting_locked();
  const Micros target = queue_target_locked();
  if (waiting == 0 || line_wait_locked(waiting - 1) <= target) {
    line_above_since_.reset();
    return;
  }
  if (!line_above_since_) line_above_since_ = now;
  if (!standing_locked(now) || estimate_.growing()) return;
  standing_seen_ = now;
  // A standing line: what has waited past the target leaves it, oldest
  // first (CoDel drops at the head), so that what is seated waits little.
  // Per flow, as fq_codel keeps its state: a request alone in its tenant's
  // flow is no line of its own (a tenant beside a flood keeps its turn).
  for (Lane lane : kLanes) {
    for (Seat* old = queue_[index(lane)].oldest(); old != nullptr;) {
      Seat* younger = old->next;
      if (now - old->since <= target) break;
      if (old->flow_prev != nullptr || old->flow_next != nullptr) {
        unqueue(*old);
        old->hold = Hold::full;
        old->on_dropped();
      }
      old = younger;
    }
  }
}

Micros Bulkhead::line_wait() const {
  Lock lock(mutex_);
  return line_wait_locked(waiting_locked());
}

Micros Bulkhead::allowed_wait(Lane lane, Micros now) const {
  Lock lock(mutex_);
  return allowed_wait_locked(lane, now);
}

Micros Bulkhead::allowed_wait_locked(Lane lane, Micros now) const {
  const Micros patience = patience_locked(lane);
  return standing_locked(now) ? std::min(patience, queue_target_locked()) : patience;
}

bool Bulkhead::pool_bound() const {
  Lock lock(mutex_);
  return estimate_.pool_bound();
}

bool Bulkhead::waits_on(const Seat& s) const {
  Lock lock(mutex_);
  if (!s.queued || !estimate_.growing()) return false;
  const Seat* head = queue_[index(s.lane)].next();
  Hold h = head == &s || !head ? s.hold : head->hold;
  return h != Hold::heavy_cap && h != Hold::budget;
}

Micros Bulkhead::patience(Lane lane) const {
  Lock lock(mutex_);
  return patience_locked(lane);
}

void Bulkhead::note_budget(const BudgetReading& b) {
  Lock lock(mutex_);
  budget_ = b;
}

std::optional<BudgetReading> Bulkhead::budget() const {
  Lock lock(mutex_);
  return budget_;
}

Candidate Bulkhead::known() const {
  Lock lock(mutex_);
  return {successes_, failures_, mean_latency()};
}

Signal Bulkhead::classify(int status, std::uint16_t route, Micros ttfb, Micros own_delay) const {
  return classify_head(status, ttfb, own_delay,
                       slow_above_us_[route % Estimate::kRoutes].load(std::memory_order_relaxed));
}

Estimate Bulkhead::estimate() const {
  Lock lock(mutex_);
  return estimate_;
}

LanePolicy Bulkhead::lanes() const {
  Lock lock(mutex_);
  return lanes_;
}

void Bulkhead::set_lanes(const LanePolicy& lanes) {
  Lock lock(mutex_);
  lanes_ = lanes;
}

void Bulkhead::set_fleet(std::optional<FleetLimit> limit, Micros now) {
  Lock lock(mutex_);
  fleet_ = limit;
  serve(now);
}

void Bulkhead::sync(double khat, double carrying, bool new_epoch, Micros now) {
  Lock lock(mutex_);
  estimate_.sync(khat, carrying, new_epoch, now);
  unmeasured_.store(!estimate_.measured(), std::memory_order_relaxed);
  serve(now);
}

int Bulkhead::take_unmet() {
  Lock lock(mutex_);
  return std::exchange(unmet_, 0);
}

void Bulkhead::set_growth_scale(double scale) {
  Lock lock(mutex_);
  estimate_.set_growth_scale(scale);
}

Census Bulkhead::census_locked(std::optional<Micros> now) const {
  Census c;
  if (now)
    for (std::size_t l = 0; l < kLaneCount; ++l)
      c.may_borrow[l] = budget_allows_borrowing(budget_, lanes_.reserve[l], *now);
  c.estimate = std::max(1.0, estimate_.value() - paced_n_);  // paced slots are not open yet
  c.measured = estimate_.measured();
  if (fleet_) {  // its share, a hard limit; a decrease here cuts it at once, in proportion
    c.fleet = c.measured = true;
    int slots = fleet_->slots;
    if (fleet_->khat > 0 && estimate_.value() < fleet_->khat)
      slots = static_cast<int>(std::floor(slots * estimate_.value() / fleet_->khat + 1e-9));
    c.estimate = std::max(0, slots - paced_n_);
  }
  c.running = running_;
  c.waiting = waiting_;
  return c;
}

bool Bulkhead::ask(Seat& s, Micros now, Rng& rng, Hold* hold, bool may_queue, bool* queued) {
  Lock lock(mutex_);
  if (queued) *queued = false;
  s.queued = s.seated = s.delegated = false;
  expire_locked(now);
  if (take_kept(s, now)) {
    s.hold = Hold::none;
    if (hold) *hold = Hold::none;
    return true;
  }
  const auto l = index(s.lane);
  // A newcomer queues behind its lane's waiting requests and draws rule 4's
  // chance; one asking again (s.front) is the oldest of its lane: no draw.
  Hold h =
      waiting_[l] > 0 && !s.front ? Hold::behind : try_seat(s, now, s.front ? 0.0 : rng.uniform());
  s.hold = h;
  if (hold) *hold = h;
  if (h == Hold::none) return true;
  ++unmet_;
  // Demand the estimate grows for: the upstream's load at K̂ (a fleet's, for a member).
  if (h != Hold::heavy_cap && (!fleet_ || running_locked() + fleet_->others >= estimate_.slots()))
    estimate_.demand();
  // Every other hold waits (for patience()); the quota reading holds until its
  // window ends, and waiting would not change it. Refused early: a newcomer
  // whose wait in line would pass what it may wait (allowed_wait), on an
  // estimate that no longer grows.
  note_line(now);
  bool waits = may_queue && h != Hold::budget;
  if (waits && !s.front && h != Hold::heavy_cap && !estimate_.growing()) {
    const Micros wait = lane_wait_locked(s);
    if (standing_locked(now) && wait > queue_target_locked()) standing_seen_ = now;  // it stands
    if (wait > allowed_wait_locked(s.lane, now)) waits = false;
  }
  if (queued) *queued = waits;
  if (waits) {
    s.queued = true;
    s.since = now;
    queue_[l].push(s, s.front);
    if (waiting_[l]++ == 0) waiting_since_[l] = now;
    if (s.pinned && pinned_waiting_[l]++ == 0) pinned_since_[l] = now;
  }
  return false;
}

void Bulkhead::seat_delegated(Seat& s, Micros now) {
  Lock lock(mutex_);
  s.queued = false;
  s.delegated = true;
  ++delegated_[index(s.lane)];
  seat(s, now);
}

void Bulkhead::seat_outside(Seat& s, Micros now) {
  Lock lock(mutex_);
  seat(s, now);
}

Hold Bulkhead::try_seat(Seat& s, Micros now, double u) {
  Hold h = decide(lanes_, census_locked(now), s.lane, u);
  // A paced slot opens at once for a request of a lane ahead of bulk: it
  // waits for a release otherwise, and a standard request's wait is its
  // latency. It opens at the request's own time, a phase of its own.
  if (h == Hold::full && s.lane != Lane::bulk && paced_n_ > 0) {
    auto first = std::min_element(paced_.begin(), paced_.begin() + paced_n_);
    const Micros at = *first;
    *first = paced_[static_cast<std::size_t>(--paced_n_)];
    h = decide(lanes_, census_locked(now), s.lane, u);
    if (h != Hold::none) paced_[static_cast<std::size_t>(paced_n_++)] = at;  // not for it
  }
  if (h == Hold::none && s.lane == Lane::heavy && heavy_cap_ && !s.capped) {
    if (heavy_cap_->try_take())
      s.capped = true;
    else
      h = Hold::heavy_cap;
  }
  if (h == Hold::none) seat(s, now);
  s.hold = h;
  return h;
}

void Bulkhead::seat(Seat& s, Micros now) {
  const auto l = index(s.lane);
  if (s.queued) unqueue(s);
  queue_[l].held(s, +1);
  s.seated = true;
  s.seq = estimate_.next_seq();
  s.load =
      running_locked() - kept() + (fleet_ ? fleet_->others_held : 0);  // kept slots carry nothing
  s.own_delay = Micros{0};
  s.since = now;
  ++running_[l];
  live_[l].push_back(s);
}

bool Bulkhead::release(Seat& s, Signal signal, Micros ttfb, Micros now, bool keep_cap) {
  Lock lock(mutex_);
  if (!s.seated) return false;
  const bool delegated = s.delegated;
  unseat(s, keep_cap);
  expire_locked(now);
  if (signal == Signal::clean || signal == Signal::slow) {
    ++successes_;
    latency_sum_us_ += static_cast<double>(ttfb.count());
  } else if (signal != Signal::none) {
    ++failures_;
  }
  if (signal == Signal::clean) {
    const auto held = static_cast<double>((now - s.since).count());
    seat_hold_us_ = seat_hold_us_ <= 0 ? held : seat_hold_us_ + (held - seat_hold_us_) / 16;
    if (s.lane != Lane::heavy)
      note_hold(now - s.since);
    else  // the first whole, then a mean of the last eight or so
      stream_hold_us_ += (static_cast<double>((now - s.since).count()) - stream_hold_us_) /
                         (stream_hold_us_ > 0 ? 8 : 1);
  }
  // A refusal answers the load the request arrived into; slowness and timeouts
  // build up over its life, so they answer the larger of that and the load at its end.
  int load = s.load;
  if (signal == Signal::slow || signal == Signal::timeout)
    load = std::max(load, running_locked() - kept() + (fleet_ ? fleet_->others_held : 0));
  bool decreased = estimate_.observe(signal, s.seq, load, now);
  if (s.lane != Lane::heavy) {
    // A slot freed in a cluster of releases opens later, in a gap (re-phasing).
    const bool clustered = hold_us_ > 0 && static_cast<double>((now - last_release_).count()) <
                                               kClustered * hold_us_ / estimate_.slots();
    last_release_ = now;
    if (!decreased && !delegated && !keep_cap && may_pace())
      open_later(clustered ? paced_open(now, kRephaseReach) : spread_open(now));
  }
  unmeasured_.store(!estimate_.measured(), std::memory_order_relaxed);
  if (waiting_[index(s.lane)] > 0 && signal == Signal::clean && !decreased && !delegated &&
      !keep_cap)
    keep(s, now);
  serve(now);
  return decreased;
}

Micros Bulkhead::anticipation() const {
  Lock lock(mutex_);
  return anticipation_of(estimate_);
}

void Bulkhead::keep(const Seat& s, Micros now) {
  const auto l = index(s.lane);
  if (s.lane == Lane::heavy || kept_n_[l] == kMaxKept || !queue_[l].leads(s)) return;
  if (running_locked() >= census_locked(std::nullopt).slots()) return;  // none free
  const Micros until = now + anticipation_of(estimate_);
  kept_[l][static_cast<std::size_t>(kept_n_[l]++)] = {s.tenant, until};
  queue_[l].held(s, +1);
  ++running_[l];
  if (waker_) waker_->wake_at(until);
}

bool Bulkhead::take_kept(Seat& s, Micros now) {
  const auto l = index(s.lane);
  auto& kept = kept_[l];
  for (int i = 0; i < kept_n_[l]; ++i) {
    if (kept[static_cast<std::size_t>(i)].tenant != s.tenant) continue;
    kept[static_cast<std::size_t>(i)] = kept[static_cast<std::size_t>(--kept_n_[l])];
    queue_[l].held(s, -1);
    --running_[l];
    seat(s, now);
    return true;
  }
  return false;
}

void Bulkhead::expire_locked(Micros now) {
  if (paced_n_ == 0 && kept() == 0) return;
  bool freed = false;
  for (int i = 0; i < paced_n_;) {
    if (paced_[static_cast<std::size_t>(i)] > now) {
      ++i;
      continue;
    }
    paced_[static_cast<std::size_t>(i)] = paced_[static_cast<std::size_t>(--paced_n_)];
    freed = true;
  }
  for (Lane lane : kLanes) {
    const auto l = index(lane);
    auto& kept = kept_[l];
    for (int i = 0; i < kept_n_[l];) {
      auto& k = kept[static_cast<std::size_t>(i)];
      if (k.until > now) {
        ++i;
        continue;
      }
      queue_[l].held(k.tenant, -1);
      --running_[l];
      k = kept[static_cast<std::size_t>(--kept_n_[l])];
      freed = true;
    }
  }
  if (freed) serve(now);
}

std::optional<Micros> Bulkhead::expire(Micros now) {
  Lock lock(mutex_);
  expire_locked(now);
  std::optional<Micros> next;
  for (int i = 0; i < paced_n_; ++i) {
    const Micros at = paced_[static_cast<std::size_t>(i)];
    next = next ? std::min(*next, at) : at;
  }
  for (Lane lane : kLanes)
    for (int i = 0; i < kept_n_[index(lane)]; ++i) {
      const Micros until = kept_[index(lane)][static_cast<std::size_t>(i)].until;
      next = next ? std::min(*next, until) : until;
    }
  return next;
}

void Bulkhead::unseat(Seat& s, bool keep_cap) {
  const auto l = index(s.lane);
  live_[l].erase(s);
  queue_[l].held(s, -1);
  --running_[l];
  if (s.delegated) --delegated_[l];
  if (s.capped && !keep_cap) {
    heavy_cap_->give_back();
    s.capped = false;
  }
  s.seated = s.delegated = false;
}

void Bulkhead::abandon(Seat& s) {
  Lock lock(mutex_);
  if (s.seated)
    unseat(s, false);
  else
    cancel_locked(s);
}

Hold Bulkhead::cancel(Seat& s, Micros now) {
  Lock lock(mutex_);
  Hold h = s.hold;
  if (h == Hold::behind && s.queued) {
    // The heads are asked once more, as a release would (those before it may
    // have left): held by what holds its lane's head, itself if it is there.
    serve(now);
    if (s.seated) return Hold::none;
    if (!s.queued) return s.hold;  // dropped from a standing line meanwhile
    const Seat* head = queue_[index(s.lane)].next();
    h = head == &s || !head ? s.hold : head->hold;
  }
  cancel_locked(s);
  return h;
}

void Bulkhead::cancel_locked(Seat& s) {
  if (s.queued) unqueue(s);
  if (s.capped && !s.seated && heavy_cap_) {
    heavy_cap_->give_back();
    s.capped = false;
  }
}

void Bulkhead::unqueue(Seat& s) {
  const auto l = index(s.lane);
  queue_[l].erase(s);
  if (--waiting_[l] == 0) waiting_since_[l].reset();
  if (s.pinned && --pinned_waiting_[l] == 0) pinned_since_[l].reset();
  s.queued = false;
}

void Bulkhead::note_hold(Micros held) {
  const auto us = static_cast<double>(held.count());
  ++holds_;
  if (hold_us_ <= 0) {
    hold_us_ = us;
    return;
  }
  // Past the first holds (the mean's start), a hold counts at most
  // kHoldOutlier x the steady line away from the mean: one cluster of long
  // holds (a stall of the upstream or of the host, every slot held through
  // it) is not holds that vary, and pacing goes on re-phasing the cluster it
  // made; holds that vary for good still cross the line.
  const double reach = holds_ <= static_cast<std::uint64_t>(kHoldSamples)
                           ? std::numeric_limits<double>::infinity()
                           : kHoldOutlier * kSteadyHold * hold_us_;
  const double d = std::clamp(us - hold_us_, -reach, reach);
  hold_dev_us_ += (std::abs(d) - hold_dev_us_) / 16;
  hold_us_ += d / 16;
}

void Bulkhead::pace(int before, Micros now) {
  for (int n = estimate_.slots() - before; n > 0; --n)
    if (!may_pace() || !open_later(paced_open(now, 1.0))) return;
}

// Nobody waiting: a newcomer takes the slot when it comes, at its own time.
// A fleet's member paces nothing: its share moves with the fleet's rounds, and
// the phases of a few slots of many are not the upstream's.
bool Bulkhead::may_pace() const { return !fleet_ && paced_n_ < kMaxPaced && waiting_locked() > 0; }

bool Bulkhead::open_later(std::optional<Micros> at) {
  if (!at) return false;
  paced_[static_cast<std::size_t>(paced_n_++)] = *at;
  ++paced_total_;
  if (waker_) waker_->wake_at(*at);
  return true;
}

// The phase in [0, hold) of each release to come, the live bulk and standard
// seats' (start + the mean hold) and the paced slots' (their opening);
// a stream's seat turns over too rarely to count. How many; none (0) while
// holds vary by more than kSteadyHold (phases then scatter by themselves),
// before kHoldSamples holds have shown how much they vary, or past
// kMaxPhases.
std::size_t Bulkhead::phases(Micros now, Phases& phase) const {
  const double hold = hold_us_;
  if (holds_ < static_cast<std::uint64_t>(kHoldSamples) || hold_dev_us_ > kSteadyHold * hold)
    return 0;
  std::size_t n = 0;
  auto add = [&](Micros release) {
    double d = static_cast<double>((release - now).count());
    phase[n++] = d <= 0 ? 0.0 : std::fmod(d, hold);
  };
  for (Lane lane : {Lane::bulk, Lane::standard})
    for (const Seat* s = live_[index(lane)].head; s; s = s->next) {
      if (n == kMaxPhases) return 0;
      add(s->since + Micros(static_cast<std::int64_t>(hold)));
    }
  for (int i = 0; i < paced_n_; ++i) add(paced_[static_cast<std::size_t>(i)]);
  return n;
}

// The widest gap between the phases on the circle of one hold whose middle is
// within reach x hold: its middle, when it is wider than kPaceSpread times the
// even gap.
std::optional<Micros> Bulkhead::paced_open(Micros now, double reach) const {
  Phases phase;
  const std::size_t n = phases(now, phase);
  if (n == 0) return std::nullopt;
  std::sort(phase.begin(), phase.begin() + static_cast<std::ptrdiff_t>(n));
  const double hold = hold_us_;
  double widest = phase[0] + hold - phase[n - 1];  // across the end of the circle
  double middle = std::fmod(phase[n - 1] + widest / 2, hold);
  if (middle > reach * hold) widest = 0;
  for (std::size_t i = 1; i < n; ++i) {
    const double gap = phase[i] - phase[i - 1];
    if (gap > widest && phase[i - 1] + gap / 2 <= reach * hold) {
      widest = gap;
      middle = phase[i - 1] + gap / 2;
    }
  }
  if (widest <= kPaceSpread * hold / static_cast<double>(n + 1)) return std::nullopt;
  return now + Micros(static_cast<std::int64_t>(middle));
}

// The slot a release frees would turn over at phase 0 (= hold) of the circle:
// its neighbours are the last phase (the seat made last, `before` ago) and the
// first (the next release, `after` from now). Nearer the one before, it opens
// at the middle between them: a standard request that finds every slot held
// waits for the next release, and uneven gaps (a stream's seat that left a
// hole among the phases, a probe's slot come and gone, holds that differ by a
// little) make that wait as long as the widest. A phase moves only later (a
// release cannot come earlier), by at most half of a gap: each slot that
// turns over halves its side's difference, and the phases settle even.
std::optional<Micros> Bulkhead::spread_open(Micros now) const {
  Phases phase;
  const std::size_t n = phases(now, phase);
  if (n == 0) return std::nullopt;
  const auto [first, last] = std::minmax_element(phase.begin(), phase.begin() + n);
  const double after = *first;
  const double before = hold_us_ - *last;
  const double shift = (after - before) / 2;
  if (shift <= kSpreadMin * hold_us_ / static_cast<double>(n + 1)) return std::nullopt;
  return now + Micros(static_cast<std::int64_t>(shift));
}

// Offers free slots to the heads of the queues, least borrowed per weight
// first (a lane below its floor has borrowed nothing; rule 2 keeps its slots
// from borrowers anyway); stops when no head is seated.
void Bulkhead::serve(Micros now) {
  serve_waiting(now);
  note_line(now);
}

void Bulkhead::serve_waiting(Micros now) {
  while (waiting_locked() > 0) {
    Census c = census_locked(std::nullopt);
    Seats g = guaranteed(lanes_, c);
    std::array<Lane, kLaneCount> order{};
    std::size_t n = 0;
    for (Lane lane : kLanes)
      if (waiting_[index(lane)] > 0) order[n++] = lane;
    auto first = [&](Lane a, Lane b) {
      double ka = borrowed_per_weight(lanes_, c, g, index(a));
      double kb = borrowed_per_weight(lanes_, c, g, index(b));
      return ka != kb ? ka < kb : before(lanes_, a, b);
    };
    for (std::size_t i = 1; i < n; ++i)  // at most three: insertion sort
      for (std::size_t j = i; j > 0 && first(order[j], order[j - 1]); --j)
        std::swap(order[j], order[j - 1]);
    bool seated = false;
    for (std::size_t i = 0; i < n && !seated; ++i) {
      // A waiting head draws no chance (rule 4 is for newcomers): it has
      // waited, and a slot it leaves stays empty until the next release.
      Seat& head = *queue_[index(order[i])].next();
      if (try_seat(head, now, 0.0) == Hold::none) {
        head.on_seated();
        seated = true;
      }
    }
    if (!seated) return;
  }
}

bool Bulkhead::starving(Lane lane, const Seats& g, Micros now) const {
  auto l = index(lane);
  bool pinned = pinned_since_[l] && now - *pinned_since_[l] >= lanes_.starved_after;
  return pinned || (waiting_[l] > 0 && running_[l] < g[l] && waiting_since_[l] &&
                    now - *waiting_since_[l] >= lanes_.starved_after);
}

std::array<bool, kLaneCount> Bulkhead::tick(Micros now) {
  Lock lock(mutex_);
  expire_locked(now);
  const int before = estimate_.slots();
  // A probe past K opens at once: on an upstream that refuses above K, what
  // it learns (and K̂ back at K) would wait for its slot to open.
  if (estimate_.maybe_grow(now) && !estimate_.probing()) pace(before, now);
  serve(now);
  // Clean releases a second, over a window of at least kRateWindow (every
  // thread ticks: two ticks a moment apart count next to nothing): while
  // requests waited at both its ends, what the upstream serves (full), as if
  // the seats the streams hold served requests too (the streams end); while
  // none did at either, the load outside an overload (quiet), and the seats
  // the streams hold then (streams). A window where a wait began or ended is
  // neither: a momentary wait outside an overload is no measure of what the
  // upstream serves in one.
  const auto dt = static_cast<double>((now - rate_seen_).count());
  if (dt >= static_cast<double>(kRateWindow.count())) {
    const bool waited = waiting_locked() > 0;
    if (waited == window_waited_) {
      double rate = static_cast<double>(holds_ - rate_holds_) * 1e6 / dt;
      const int streams = running_[index(Lane::heavy)];
      const int seated = running_locked();
      if (waited) rate *= static_cast<double>(seated) / std::max(1, seated - streams);
      double& mean = waited ? rates_.full : rates_.quiet;
      const double tau = static_cast<double>((waited ? kFullTau : kQuietTau).count());
      mean += (rate - mean) * (waited && !full_seen_ ? 1.0 : dt / (tau + dt));  // the first whole
      full_seen_ = full_seen_ || waited;
      if (!waited) rates_.streams += (streams - rates_.streams) * dt / (tau + dt);
    }
    window_waited_ = waited;
    rate_seen_ = now;
    rate_holds_ = holds_;
  }
  std::array<bool, kLaneCount> became{};
  Seats g = guaranteed(lanes_, census_locked(std::nullopt));
  for (Lane lane : kLanes) {
    auto l = index(lane);
    bool st = starving(lane, g, now);
    became[l] = st && !was_starving_[l];
    was_starving_[l] = st;
  }
  return became;
}

Micros Bulkhead::refusal_wait(Lane lane, Micros now) {
  Lock lock(mutex_);
  const auto l = index(lane);
  if (!refusing(lane, now)) {
    const Memory m = memory_locked(lane, now);
    episodes_[l] = m.lasted;
    remembered_[l] = m.clients;
    refusing_since_[l] = now;
    refusals_[l] = 0;
    refused_age_us_[l] = 0;
    if (lane == Lane::bulk) {
      others_reach_ = Micros{0};
      for (Lane other : {Lane::standard, Lane::heavy})
        others_reach_ = std::max(others_reach_, line_[index(other)] - now);
    }
  }
  refused_at_[l] = now;
  ++refusals_[l];
  refused_age_us_[l] += static_cast<double>((now - *refusing_since_[l]).count());
  // Every client refused comes back once, each in its turn on what the
  // upstream serves beyond the load beside them: after the overload (as long
  // as it has lasted, and the queues ahead; or as long as the earlier ones
  // lasted, queues and all: a request waiting now is seated or refused within
  // its patience, and those refused come back in turns of their own), behind
  // the last one told (spare_locked()); the line at most kLongestLine ahead.
  const double spare = spare_locked();
  const auto turn = Micros(static_cast<std::int64_t>(1e6 / spare));
  const Micros overload =
      std::max(now - *refusing_since_[l] + waiting_locked() * turn, episodes_[l]);
  // A stream come back holds its seat for its life: its turn is that of as
  // many requests as would hold the seat as long (before a lease's hold was
  // measured, a request's).
  const double holds = lane == Lane::heavy && hold_us_ > 0 && stream_hold_us_ > hold_us_
                           ? stream_hold_us_ / hold_us_
                           : 1.0;
  const auto own_turn = Micros(static_cast<std::int64_t>(1e6 * holds / spare));
  line_[l] = std::min(std::max(line_[l], now + overload) + own_turn, now + kLongestLine);
  // Bulk borrows what the other lanes leave (rule 4): their refused, told
  // less, come back ahead of those of bulk still to come back, and how far
  // past the start of bulk's episode their lines reach joins what it lasted
  // (above), for the next one like it (told only bulk's own overload, bulk's
  // first refused came back among them).
  const auto bulk = index(Lane::bulk);
  if (lane != Lane::bulk) {
    if (line_[bulk] > now) line_[bulk] += turn;
    if (refusing(Lane::bulk, now))
      others_reach_ = std::max(others_reach_, line_[l] - *refusing_since_[bulk]);
  }
  return line_[l] - now;
}

// The last episode ended: what it lasted joins the memory, weighed by the
// clients it refused (what a client refused met). The older ones' weight
// halves for each as many clients as it holds: an episode as big halves it,
// a blip of a client or two hardly moves it (halved per episode, the blips of
// clients refused again between two overloads erased the first). What it
// lasted: the span its refusals would cover were they even, twice their mean
// age, at most its span: a sparse tail of refusals after the overload
// (clients refused in it, come back early) hardly lengthens it. Bulk's
// lasted, for its clients, at least until the other lanes' clients refused in
// it were due back (their lines' end): they come back first.
Bulkhead::Memory Bulkhead::memory_locked(Lane lane, Micros now) const {
  const auto l = index(lane);
  if (!refusing_since_[l] || refusals_[l] == 0 || refusing(lane, now))
    return {episodes_[l], remembered_[l]};
  const double n = static_cast<double>(refusals_[l]);
  double lasted = std::min(static_cast<double>((refused_at_[l] - *refusing_since_[l]).count()),
                           2 * refused_age_us_[l] / n);
  if (lane == Lane::bulk) lasted = std::max(lasted, static_cast<double>(others_reach_.count()));
  const double w = remembered_[l];
  const double older = w > 0 ? w * std::exp2(-n / w) : 0.0;
  return {Micros(static_cast<std::int64_t>(
              (static_cast<double>(episodes_[l].count()) * older + lasted * n) / (older + n))),
          older + n};
}

// What the upstream serves a second beyond the load beside the clients come
// back. What it serves: as measured while requests waited (before that, the
// slots at the baseline), never under kLeastSpare of the slots at the
// baseline (a stalled upstream would make every turn endless); the load
// beside them: the requests and the streams outside an overload.
double Bulkhead::spare_locked() const {
  const double serves =
      std::max(full_seen_ ? rates_.full : at_baseline(), at_baseline() * kLeastSpare);
  const double unstreamed =
      1 - std::min(1.0, rates_.streams / std::max(1, estimate_.slots()));  // the streams' share
  return std::max(serves * unstreamed - rates_.quiet, serves * kLeastSpare);
}

bool Bulkhead::refusing(Lane lane, Micros now) const {
  const auto l = index(lane);
  return refusing_since_[l] && now - refused_at_[l] <= kRefusalGap;
}

double Bulkhead::at_baseline() const {
  // With no answer yet there is no baseline: a microsecond, a turn of next to nothing.
  return estimate_.slots() * 1e6 / std::max(1.0, static_cast<double>(estimate_.baseline().count()));
}

Bulkhead::Rates Bulkhead::rates() const {
  Lock lock(mutex_);
  return rates_;
}

std::optional<Micros> Bulkhead::youngest(Lane lane) const {
  Lock lock(mutex_);
  return youngest_locked(lane);
}

std::optional<Micros> Bulkhead::oldest_waiting(Lane lane) const {
  Lock lock(mutex_);
  return oldest_waiting_locked(lane);
}

std::optional<Micros> Bulkhead::youngest_locked(Lane lane) const {
  const Seat* s = live_[index(lane)].tail;
  return s ? std::optional<Micros>(s->since) : std::nullopt;
}

std::optional<Micros> Bulkhead::oldest_waiting_locked(Lane lane) const {
  const Seat* s = queue_[index(lane)].oldest();
  return s ? std::optional<Micros>(s->since) : std::nullopt;
}

BulkheadView Bulkhead::view(Micros now) const {
  Lock lock(mutex_);
  BulkheadView v;
  Census c = census_locked(std::nullopt);
  Seats g = guaranteed(lanes_, c);
  v.estimate = estimate_.value();
  v.carrying = estimate_.carrying();
  v.slow_start = estimate_.slow_start();
  v.exhausted_at = estimate_.exhausted_at();
  v.why = estimate_.why();
  v.slots = c.slots();
  v.running = c.total_running();
  v.waiting = waiting_locked();
  v.free = std::max(0, v.slots - v.running);
  v.successes = successes_;
  v.failures = failures_;
  v.decreases = estimate_.decreases();
  v.paced = paced_total_;
  v.mean_latency = mean_latency();
  v.quiet_per_s = rates_.quiet;
  v.served_per_s = full_seen_ ? rates_.full : 0;
  v.stream_seats = rates_.streams;
  v.spare_per_s = spare_locked();
  v.request_hold = Micros(static_cast<std::int64_t>(hold_us_));
  v.stream_hold = Micros(static_cast<std::int64_t>(stream_hold_us_));
  if (budget_ && now < budget_->until) v.budget = budget_;
  for (Lane lane : kLanes) {
    auto l = index(lane);
    auto& lv = v.lanes[l];
    lv.running = running_[l];
    lv.waiting = waiting_[l];
    lv.guaranteed = g[l];
    lv.borrowed = std::max(0, running_[l] - g[l]);
    lv.delegated = delegated_[l];
    lv.oldest_waiting_since = oldest_waiting_locked(lane);
    lv.youngest_seat_since = youngest_locked(lane);
    lv.waiting_since = waiting_since_[l];
    lv.starving = starving(lane, g, now);
    lv.pinned_starving = pinned_since_[l] && now - *pinned_since_[l] >= lanes_.starved_after;
    const Memory m = memory_locked(lane, now);
    lv.remembered_overload = m.lasted;
    lv.remembered_clients = m.clients;
  }
  return v;
}

}  // namespace sluice::admission
