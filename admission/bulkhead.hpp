#pragma once
// Bulkheads: how many requests of each lane may be in flight to one upstream.
// Seeds 001 (lane admission) and 004 (heavy leases). A "round" there is a
// request here, a "model pool" an upstream, a "provider refusal" its answer.
//
// The estimate K̂, per bulkhead: admission/estimate.hpp (one state machine).
//
// Lanes, in one bulkhead, for a request of lane l (slots S = floor(K̂), free F = S - running):
//   guaranteed   floor_l x S for the lanes that have work (running, waiting or
//                asking), by largest remainder; a lane with work and a non-zero
//                floor gets at least one.
//   1 floor      running_l < guaranteed_l: admitted while F > 0; on a bulkhead
//                never measured exhausted, admitted even when full.
//   2 reserved   a borrower is refused while the free slots are owed to other
//                lanes below their floors that have requests waiting (reclaim at
//                request boundaries: nothing in flight is cut).
//   2b budget    a borrower is refused while the upstream's quota reading is at
//                or below the lane's reserve (admission/resilience.hpp).
//   3 fair share the borrowed part goes to the waiting lane with the least
//                borrowed per weight, the slot asked for counted ((borrowed +
//                1) / weight: weight 4 borrows four for each one of weight 1;
//                ties: the heavier weight, then standard, heavy, bulk); other
//                borrowers yield to it.
//   4 chance     where another lane has work: admitted with p = s(φ/0.3)^e,
//                φ = 1 - running/K̂, s the smoothstep, e = clamp(max weight /
//                weight_l, 1, 4): certain while 30 % is free, 0 at K̂, flatter
//                for lighter lanes. A newcomer draws; a waiting head does not
//                (a slot left to chance stays empty until the next release).
//   Oldest first: a newcomer queues behind the waiting requests of its lane;
//   between tenants, a release seats the waiting tenant that holds the fewest
//   slots of the lane (max-min fairness on slots: fair_queue.hpp).
//   Anticipation: a tenant that releases a slot with no request of its own
//   waiting, while tenants holding more wait (FairQueue::leads), keeps the
//   slot for anticipation() (a twentieth of the delay target, 0.5..5 ms): a
//   client that sends its next request as its answer arrives finds its slot
//   and does not wait behind a flood for the next release. Unclaimed, the slot
//   goes to the waiters when it ends (the Waker's timer, or the next call).
//   A kept slot counts as running; never in the heavy lane (its cap), never
//   after a "too much", and at most kMaxKept per lane.
//   Pacing: while holds are steady (their mean deviation within kSteadyHold
//   of the mean hold: a slot's phase, when it turns over, then lasts; each
//   hold counted at most kHoldOutlier x that line from the mean, so that one
//   stall that held every slot at once does not stop the re-phasing of the
//   cluster it leaves), a
//   slot opens in the widest gap between the releases the live bulk and
//   standard seats will make (each seat's start + the mean hold), when that
//   gap is wider than kPaceSpread even gaps (hold / slots): a slot the
//   estimate's growth adds while requests wait (seats made at once, at the
//   answers that grew slow start or at a tick, would release together every
//   hold after; not a probe past K, which opens at once to learn at once),
//   and a slot freed within kClustered even gaps of the last
//   release (re-phasing: a loop busy with a cluster of answers reads them
//   later, so a cluster's hold is longer and it sweeps up the phases it
//   meets), within kRephaseReach of a hold. Any other slot a release frees
//   opens at the middle between its neighbours on that circle (the last seat
//   made and the next release) when that is more than kSpreadMin even gaps
//   later (spreading: a stream's seat or a probe's slot come and gone leaves
//   a hole among the phases, and a standard request's wait is the gap it
//   lands in); a phase moves only later. A request that finds every slot
//   held waits for the next release: through a gap of most of a hold when
//   every slot turns over at once. At most kMaxPaced slots wait to open; a
//   paced slot is not in the census until it opens, but for a request of a
//   lane ahead of bulk that finds every slot held: the paced slot that would
//   open first opens for it at once (its wait is its latency, and the slot
//   takes the request's own phase).
//   A request that is not admitted (but for the budget guard, refused at
//   once) waits for patience(): its lane's queue window, and at least a
//   burst's wait (kBurstWaits typical answer times) and the delay target,
//   re-asking on every release and every tick, oldest first in its lane
//   (between tenants, the one holding the fewest slots first); then
//   queue_timeout. Refused on arrival instead: a newcomer whose wait in line
//   (line_wait) would pass that, or, while the line stands (its wait above
//   the queue target for an interval), the target; and a standing line drops
//   what waited past the target (Seat::on_dropped). Never while the estimate
//   still grows.
//   Idle lanes lend everything: a lone flood may fill the bulkhead.
// Starvation: a lane below its floor whose queue has not been empty for
// starved_after, and (seed 001 §8) hard-pinned requests that have been waiting
// that long, floor or not: a pin waits for its upstream rather than fall back.
// Delegated requests (a live lease's token) are seated at once on the parent's
// lane, counted as running, never refused.
//
// Threading: one Bulkhead per upstream serves every I/O thread of the process.
// Each public member takes the bulkhead's own mutex for a few hundred
// instructions (no allocation, no call out but one): Seat::on_seated() runs
// under it, on whichever thread released the slot, and must not call back in
// (the proxy posts to the seat's own thread). A Seat's flags change under the
// lock; its owner reads them only while no other thread may seat it (it is not
// queued) or after on_seated() handed it over. Time comes in as Micros since
// an epoch the caller picks; nothing is scheduled.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>

#include "admission/estimate.hpp"
#include "admission/fair_queue.hpp"
#include "admission/gate.hpp"
#include "admission/lane.hpp"

namespace sluice::admission {

struct LanePolicy {
  std::array<double, kLaneCount> floors{0.1, 0.5, 0.2};  // fractions of K̂
  std::array<double, kLaneCount> weights{1.0, 4.0, 2.0};
  std::array<Micros, kLaneCount> queue_window{Micros{0}, Micros{500'000}, Micros{2'000'000}};
  // Budget reserve: a lane borrows nothing more on an upstream whose quota
  // reading has fallen to this fraction (SLUICE_BUDGET_RESERVE).
  std::array<double, kLaneCount> reserve{0.30, 0.05, 0.15};
  Micros starved_after{5'000'000};
};

// What the lane rules look at: counts, no identities.
struct Census {
  double estimate = 1.0;  // K̂
  bool measured = false;  // K is known (exhausted at least once)
  std::array<int, kLaneCount> running{};
  std::array<int, kLaneCount> waiting{};
  std::array<bool, kLaneCount> may_borrow{true, true, true};  // the budget guard
  bool fleet = false;  // the estimate is this instance's share of a fleet's: it may be 0
  int slots() const;
  int total_running() const { return running[0] + running[1] + running[2]; }
};

using Seats = std::array<int, kLaneCount>;

// Why a request was not seated (none: it was).
enum class Hold : std::uint8_t {
  none,
  full,
  reserved,
  budget,
  fair_share,
  chance,
  heavy_cap,
  behind
};
std::string_view to_string(Hold hold);

// Guaranteed slots per lane; `asking` counts as having work.
Seats guaranteed(const LanePolicy& p, const Census& c, std::optional<Lane> asking = {});
// The probability of a marginal admission of `lane`.
double marginal_probability(const LanePolicy& p, const Census& c, Lane lane);
// Rules 1-4 for one request of `lane` (oldest-first is the caller's); u in [0,1) is the draw.
Hold decide(const LanePolicy& p, const Census& c, Lane lane, double u);
// How many of `wanted` requests of `lane` would be seated now with certainty
// (rules 1-3 and p == 1), seating nothing.
int plan(const LanePolicy& p, Census c, Lane lane, int wanted);

// The absolute cap on heavy leases (SLUICE_HEAVY_MAX_IN_FLIGHT), shared by
// every bulkhead of the process; the proxy implements it with an atomic.
class LeaseCap {
 public:
  virtual ~LeaseCap() = default;
  virtual bool try_take() = 0;
  virtual void give_back() = 0;
};

// Wakes the bulkhead when a kept slot's anticipation ends (expire()); the
// proxy arms a timer on the calling thread. Called under the bulkhead's lock:
// it must not call back in.
class Waker {
 public:
  virtual ~Waker() = default;
  virtual void wake_at(Micros when) = 0;
};

// A request holding or waiting for a slot. The owner keeps it alive while it is
// queued or seated; a seat is given back exactly once by release().
struct Seat {
  Lane lane = Lane::standard;
  bool seated = false;
  bool queued = false;
  bool delegated = false;
  bool pinned = false;  // its route is hard-pinned to this upstream
  // Its route (its index in the routes table): its answers' times are judged
  // against that route's own baseline (Estimate).
  std::uint16_t route = 0;
  bool capped = false;  // holds one unit of the heavy cap
  // Asks as the oldest of its lane: it was seated before and its upstream
  // refused it (placement's ask_again): no chance draw, and when not seated it
  // queues at the front of its lane, not behind the requests that came later.
  bool front = false;
  // Its tenant (0: none, the shared tenant) and weight: its lane's queue is
  // shared between tenants by the slots they hold (admission/fair_queue.hpp).
  std::uint64_t tenant = 0;
  double weight = 1.0;
  std::uint64_t seq = 0;
  int load = 0;     // running requests when it was seated
  Micros since{0};  // queued or seated at
  // How late the proxy's own event loop ran when its answer's head was read:
  // that much of the answer's latency is the proxy's, not the upstream's.
  Micros own_delay{0};
  Hold hold = Hold::none;  // why the last ask did not seat it (a refusal's reason)
  Seat* prev = nullptr;    // in its lane's queue (arrival order), or its lane's live list
  Seat* next = nullptr;
  Seat* flow_prev = nullptr;  // in its tenant's flow of its lane's queue
  Seat* flow_next = nullptr;
  virtual ~Seat() = default;
  // A queued request got its slot (called from release() or tick()).
  virtual void on_seated() {}
  // A queued request was taken out of a standing line (it had waited past
  // the queue target): its owner refuses it as at the end of its window.
  virtual void on_dropped() {}
};

// What Thompson sampling knows of an upstream (admission/resilience.hpp).
struct Candidate {
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;
  Micros mean_latency{0};  // 0: not measured
};

struct BudgetReading {
  double remaining = 1.0;  // fraction of the quota left, 0..1
  Micros until{0};         // the window it belongs to ends then
};
// A reading whose window has ended stops nobody.
bool budget_allows_borrowing(const std::optional<BudgetReading>& reading, double reserve,
                             Micros now);

struct LaneView {
  int running = 0, waiting = 0, guaranteed = 0, borrowed = 0, delegated = 0;
  std::optional<Micros> oldest_waiting_since;
  std::optional<Micros> youngest_seat_since;
  std::optional<Micros> waiting_since;  // the queue has not been empty since
  bool starving = false;
  bool pinned_starving = false;  // hard-pinned requests have waited that long, floor or not
  // The overload the lane's next episode of refusals is told at least
  // (Bulkhead::refusal_wait): what its earlier episodes lasted, and the
  // clients they weigh (an episode over folded in; one going on, not yet).
  Micros remembered_overload{0};
  double remembered_clients = 0;
};

struct BulkheadView {
  double estimate = 0, carrying = 0;
  bool slow_start = true;
  std::optional<Micros> exhausted_at;
  Signal why = Signal::none;
  int slots = 0, running = 0, waiting = 0, free = 0;
  std::uint64_t successes = 0, failures = 0, decreases = 0;
  std::uint64_t paced = 0;  // slots opened later, in a gap between releases
  Micros mean_latency{0};
  // What a refusal's turn is counted on (Bulkhead::refusal_wait): the
  // releases a second outside an overload (quiet) and while requests wait
  // (served; 0: not yet), the seats the streams hold outside an overload,
  // the spare a second beyond that load, and the mean hold of a request's
  // seat and of a heavy lease's (0: not yet).
  double quiet_per_s = 0, served_per_s = 0, stream_seats = 0, spare_per_s = 0;
  Micros request_hold{0}, stream_hold{0};
  std::optional<BudgetReading> budget;
  std::array<LaneView, kLaneCount> lanes{};
};

// This instance's part of a fleet's capacity (admission/fleet.hpp).
struct FleetLimit {
  int slots = 0;   // it may hold
  int others = 0;  // the other instances' requests in flight, as last reported
  // What the others may run (their slots, or more while they still run on
  // slots given up): the load a signal met is counted with it, as an
  // overloaded fleet runs every slot it holds (in flight as last reported
  // lags a growing fleet by a round).
  int others_held = 0;
  double khat = 0;  // the fleet's K̂ they come from: the replica below it, fewer in proportion
};

class Bulkhead {
 public:
  Bulkhead(const LanePolicy& lanes, const Estimate& estimate, LeaseCap* heavy_cap = nullptr);
  Bulkhead(const Bulkhead&) = delete;
  Bulkhead& operator=(const Bulkhead&) = delete;

  // A new request of s.lane. Seated: true. Otherwise queued (when may_queue,
  // and not held by the budget guard), or refused; `hold` says why, `queued`
  // whether it waits (read it there: once queued, another thread may seat it at once).
  bool ask(Seat& s, Micros now, Rng& rng, Hold* hold = nullptr, bool may_queue = true,
           bool* queued = nullptr);
  // How long a request of `lane` that is not seated may wait: its lane's
  // queue window, and at least the delay target and a burst's wait
  // (kBurstWaits typical answer times, up to kLongestBurst).
  Micros patience(Lane lane) const;
  // A request carrying a live lease's token: seated at once, never refused.
  void seat_delegated(Seat& s, Micros now);
  // Seated outside the lane rules: a closed upstream's probe, a request that
  // stays where its connect failed, observe mode's would-be refusal.
  void seat_outside(Seat& s, Micros now);
  // Would rules 1-3 seat a request of `lane` now (the chance draw aside)?
  bool would_seat(Lane lane, Micros now) const;
  // The upstream's latest quota reading (RateLimit-* headers).
  void note_budget(const BudgetReading& b);
  std::optional<BudgetReading> budget() const;
  // What Thompson sampling knows of this upstream.
  Candidate known() const;
  // The request ended; `signal` is what it said (none: nothing learnt). Serves waiters.
  // True when the signal decreased the estimate (a new burst of too much).
  // keep_cap: the request moves to another bulkhead and keeps its heavy-cap unit.
  bool release(Seat& s, Signal signal, Micros ttfb, Micros now, bool keep_cap = false);
  // Takes a queued request out (its window ended or its client left), and
  // gives back a heavy-cap unit an unseated request still holds; a request
  // another thread seated just before keeps its seat (s.seated tells).
  // Returns why it was not seated: its last ask's hold, or for one that was
  // behind others of its lane, what holds its lane's head once the heads are
  // asked again (as a release would: it may be seated then, Hold::none).
  Hold cancel(Seat& s, Micros now);
  // Gives back whatever s holds, learning nothing and seating no waiter (the
  // next release or tick serves them): a lease dropped without its outcome.
  void abandon(Seat& s);
  // Growth and a re-ask of the waiters. Returns lanes that became starving.
  std::array<bool, kLaneCount> tick(Micros now);
  // Kept slots whose anticipation has ended go to the waiters. Returns when
  // the next kept slot's ends (none: none kept).
  std::optional<Micros> expire(Micros now);
  // Set once, before any request (null: kept and paced slots end at the next call).
  void set_waker(Waker* waker) { waker_ = waker; }
  // How long a released slot is kept for its tenant (anticipation).
  Micros anticipation() const;
  static constexpr int kMaxKept = 4;  // per lane
  static constexpr int kMaxPaced = 8;
  static constexpr double kPaceSpread = 1.5;     // x the even gap
  static constexpr double kClustered = 0.5;      // x the even gap
  static constexpr double kRephaseReach = 0.75;  // x the hold
  static constexpr double kSpreadMin = 0.2;      // x the even gap: a smaller shift is noise
  static constexpr double kSteadyHold = 0.1;
  static constexpr double kHoldOutlier = 1.5;  // x kSteadyHold x the hold: a hold's most weight
  static constexpr int kMaxPhases = 256;       // live seats looked at; more: no pacing
  // Classifies a response head of `route` for release(), without the lock:
  // by its route's slow line as of the last head (own_delay as
  // Estimate::classify's).
  Signal classify(int status, std::uint16_t route, Micros ttfb, Micros own_delay = Micros{0}) const;
  // Seated request s's response head came with `signal` after `ttfb` (its
  // route and lateness are s's): the estimate learns its time (its route's
  // baseline, the queue window, slow start's growth), and waiters are served
  // when the estimate grew.
  void note_head(const Seat& s, Signal signal, Micros ttfb, Micros now);
  // A queued request whose wait ended: true when it waits on because only the
  // estimate holds it and the estimate is still growing (Estimate::growing:
  // not the heavy cap, not the budget, not the connection pool's share).
  bool waits_on(const Seat& s) const;
  // Estimate::pool_bound(): a wait for a seat now is a wait for a connection,
  // upstream wait for the level. Below the pool's share the bulkhead holds
  // requests for the capacity it measured (or is still growing toward) and
  // bounds that wait itself (patience, then its own refusal): not pressure.
  bool pool_bound() const;
  // Never measured exhausted (no lock): an estimate that is a start, not a limit.
  bool unmeasured() const { return unmeasured_.load(std::memory_order_relaxed); }
  // Refuse early: the wait a request of `lane` asking now would have in line,
  // the requests waiting ahead of it and itself at the rate seats turn over
  // (the slots over the mean hold of a seat); and the most it may be told to
  // wait: its patience, or while a standing line holds (its wait above the
  // queue target for a whole interval, CoDel's rule; it stands until an
  // interval passes in which no newcomer met a line past the target), the
  // target. A request
  // whose wait would pass that is refused on arrival, not at the end of its
  // window; an estimate still growing refuses nobody so.
  Micros line_wait() const;
  Micros allowed_wait(Lane lane, Micros now) const;
  // What a queue is for (bursts, not a standing line): the typical answer
  // time (EstimatePolicy::queue_target of them), at least kLeastTarget; a
  // line whose wait stays above it for the interval stands.
  Micros queue_target() const;
  Micros standing_interval() const;
  bool standing(Micros now) const;
  static constexpr Micros kLeastTarget{1'000};
  static constexpr int kBurstWaits = 10;  // a burst's wait, in typical answer times
  static constexpr Micros kLongestBurst{1'000'000};
  static constexpr Micros kLeastInterval{100'000};
  // The standing line's interval: 40 typical answer times, within 100 ms..2 s.
  static constexpr double kIntervalAnswers = 40;
  static constexpr Micros kLongestInterval{2'000'000};

  // A fleet's member: it holds at most `limit.slots`, and its estimate (a
  // replica of the fleet's) measures against the fleet's load (its own and
  // limit.others); none: the estimate alone. Waiters are served at once.
  void set_fleet(std::optional<FleetLimit> limit, Micros now);
  // The fleet's value wins (Estimate::sync); then a scale of the growth
  // steps (a member estimating alone grows 1 / members as fast).
  void sync(double khat, double carrying, bool new_epoch, Micros now);
  void set_growth_scale(double scale);
  // Requests that found no slot since the last call (a fleet's member reports
  // them as demand: one refused at once waits nowhere, yet wants a slot).
  int take_unmet();

  // With `now`, the budget guard is filled in too.
  Census census(std::optional<Micros> now = {}) const;
  int running() const;
  BulkheadView view(Micros now) const;
  Estimate estimate() const;  // a copy
  LanePolicy lanes() const;
  void set_lanes(const LanePolicy& lanes);
  // A refusal of `lane` at `now` (noted: it extends the lane's refusals): the
  // wait it derives, its place in the lane's line of clients refused, each
  // coming back once (told one time, they would come back together). Each
  // takes a turn of 1 / spare, the spare being what the upstream serves a
  // second while requests wait (rates().full; before it was measured, the
  // slots at the baseline; never under kLeastSpare of them), less the share
  // of it the streams hold outside an overload (rates().streams of the
  // slots), beyond the load outside an overload (rates().quiet), at least
  // kLeastSpare of it: they come back beside that load, not into an empty
  // upstream. The line ends at most kLongestLine ahead: no band tells more.
  // The line starts after the overload: the larger of how long the lane's
  // refusals have gone on without a gap of kRefusalGap, then the requests
  // waiting (an overload that has lasted T is told T and the queues ahead),
  // and how long its earlier episodes lasted, queues and all (their mean,
  // each weighed by the clients it refused, the older ones' weight halved for
  // each as many clients as it holds that a later one refused: a blip of a
  // refusal or two hardly moves it; each one's length twice its
  // refusals' mean age, at most its span: a sparse tail hardly lengthens it).
  // Bulk, which borrows what the other lanes leave, has their refused ahead
  // of it too: each a turn at the end of its line, and, remembered, at its
  // start: a bulk episode lasted at least until the other lanes' clients
  // refused in it were due back (their lines' end). A heavy client's turn is
  // the seat time a lease of its lane holds (the heavy leases' mean hold, in
  // requests' holds): come back, a stream holds its seat for its life.
  Micros refusal_wait(Lane lane, Micros now);
  static constexpr Micros kRefusalGap{2'000'000};
  static constexpr double kLeastSpare = 0.1;
  static constexpr Micros kLongestLine{600'000'000};
  // The clean releases of bulk and standard seats a second, averaged at each
  // tick that ends a window of at least kRateWindow: while no request waited
  // at either of its ends, over kQuietTau (quiet: the load the upstream
  // carries outside an overload), and while some did at both, over kFullTau
  // (full: what it serves, as if the heavy seats served requests too, for
  // the streams of an overload end; its first sample taken whole, to be known
  // within the overload); a window where a wait began or ended, neither.
  // streams: the heavy seats held while no request waits, over kQuietTau
  // (what the streams outside an overload hold).
  static constexpr Micros kQuietTau{5'000'000};
  static constexpr Micros kFullTau{1'000'000};
  static constexpr Micros kRateWindow{200'000};
  struct Rates {
    double quiet = 0, full = 0, streams = 0;
  };
  Rates rates() const;
  // The youngest live seat of `lane` (seed 004: when capacity last turned over).
  std::optional<Micros> youngest(Lane lane) const;
  std::optional<Micros> oldest_waiting(Lane lane) const;

 private:
  struct List {
    Seat* head = nullptr;
    Seat* tail = nullptr;
    void push_back(Seat& s);
    void erase(Seat& s);
  };
  using Lock = std::lock_guard<std::mutex>;
  // Below: the caller holds mutex_.
  Census census_locked(std::optional<Micros> now) const;
  void note_slow_lines();
  Micros line_wait_locked(int ahead) const;  // behind `ahead` waiters
  Micros allowed_wait_locked(Lane lane, Micros now) const;
  Micros lane_wait_locked(const Seat& s) const;  // a newcomer's
  Micros patience_locked(Lane lane) const;
  Micros queue_target_locked() const;
  Micros interval_locked() const;
  bool standing_locked(Micros now) const;
  void note_line(Micros now);                    // the line's wait now, for the standing rule
  Hold try_seat(Seat& s, Micros now, double u);  // u: rule 4's draw
  void seat(Seat& s, Micros now);
  void unseat(Seat& s, bool keep_cap);
  void cancel_locked(Seat& s);
  void serve(Micros now);  // seats the waiters that may be seated, then notes the line
  void serve_waiting(Micros now);
  void keep(const Seat& s, Micros now);  // anticipation, after s released its slot
  bool take_kept(Seat& s, Micros now);   // s's tenant's kept slot, if any
  void expire_locked(Micros now);
  void note_hold(Micros held);  // a bulk or standard seat's, released clean
  // The estimate may have grown from `before` slots: the new ones are paced.
  void pace(int before, Micros now);
  bool may_pace() const;                      // room, and a waiter
  bool open_later(std::optional<Micros> at);  // paced to open at `at`; false: it opens now
  std::optional<Micros> paced_open(Micros now, double reach) const;  // none: open now
  // A slot freed nearer the last phase than the next: between them (none: now).
  std::optional<Micros> spread_open(Micros now) const;
  using Phases = std::array<double, kMaxPhases + kMaxPaced>;
  std::size_t phases(Micros now, Phases& phase) const;  // how many; 0: none to go by
  int kept() const { return kept_n_[0] + kept_n_[1] + kept_n_[2]; }
  bool starving(Lane lane, const Seats& g, Micros now) const;
  void unqueue(Seat& s);
  std::optional<Micros> youngest_locked(Lane lane) const;
  std::optional<Micros> oldest_waiting_locked(Lane lane) const;
  Micros mean_latency() const;
  // The lane's episode of refusals goes on at `now` (no gap of kRefusalGap).
  bool refusing(Lane lane, Micros now) const;
  // What the lane's episodes of refusals lasted and the clients they weigh,
  // its last episode folded in once it has ended at `now` (refusal_wait keeps
  // that when the next begins).
  struct Memory {
    Micros lasted{0};
    double clients = 0;
  };
  Memory memory_locked(Lane lane, Micros now) const;
  double at_baseline() const;   // what the slots serve a second at the baseline
  double spare_locked() const;  // what the clients refused come back to a second
  int waiting_locked() const { return waiting_[0] + waiting_[1] + waiting_[2]; }
  int running_locked() const { return running_[0] + running_[1] + running_[2]; }

  mutable std::mutex mutex_;
  LanePolicy lanes_;
  Estimate estimate_;
  LeaseCap* heavy_cap_;
  Waker* waker_ = nullptr;
  struct Kept {
    std::uint64_t tenant = 0;
    Micros until{0};
  };
  std::array<std::array<Kept, kMaxKept>, kLaneCount> kept_{};
  std::array<int, kLaneCount> kept_n_{};
  std::array<Micros, kMaxPaced> paced_{};  // when each paced slot opens
  int paced_n_ = 0;
  std::uint64_t paced_total_ = 0;
  double hold_us_ = 0;         // mean time a bulk or standard request holds its seat
  double hold_dev_us_ = 0;     // its mean deviation: phases last only while it is small
  double stream_hold_us_ = 0;  // mean time a heavy lease (a stream) holds its seat, clean
  double seat_hold_us_ = 0;    // mean time any seat is held, clean: the line's pace
  std::optional<Micros> line_above_since_;  // the line's wait above the target since
  std::optional<Micros> standing_seen_;     // standing: a newcomer last met a line past the target
  std::uint64_t holds_ = 0;                 // holds measured
  Micros last_release_{0};                  // of a bulk or standard seat
  std::array<int, kLaneCount> running_{};
  std::array<int, kLaneCount> waiting_{};
  std::array<int, kLaneCount> delegated_{};
  std::array<FairQueue, kLaneCount> queue_{};  // oldest first within a tenant, max-min between
  std::array<List, kLaneCount> live_{};        // seated, in seating order
  std::array<std::optional<Micros>, kLaneCount> waiting_since_{};
  std::array<int, kLaneCount> pinned_waiting_{};
  std::array<std::optional<Micros>, kLaneCount> pinned_since_{};
  std::array<bool, kLaneCount> was_starving_{};
  std::array<std::optional<Micros>, kLaneCount> refusing_since_{};
  std::array<Micros, kLaneCount> refused_at_{};
  std::array<Micros, kLaneCount> episodes_{};        // what the lane's episodes of refusals lasted
  std::array<double, kLaneCount> remembered_{};      // the refusals they weigh
  std::array<std::int64_t, kLaneCount> refusals_{};  // in the lane's current episode
  std::array<double, kLaneCount> refused_age_us_{};  // the sum of their ages in it
  std::array<Micros, kLaneCount> line_{};            // when the last client the lane refused is due
  Micros others_reach_{0};  // the other lanes' lines' end, past the start of bulk's episode
  Rates rates_;             // see rates()
  bool full_seen_ = false;
  bool window_waited_ = false;  // requests waited at the start of the rates' window
  Micros rate_seen_{0};
  std::uint64_t rate_holds_ = 0;
  std::uint64_t successes_ = 0, failures_ = 0;
  double latency_sum_us_ = 0;
  std::optional<BudgetReading> budget_;
  std::optional<FleetLimit> fleet_;
  int unmet_ = 0;  // asks that found no slot, since take_unmet()
  // Each route's slow line (Estimate::classify's), for classify() without the lock.
  std::array<std::atomic<double>, Estimate::kRoutes> slow_above_us_;
  std::atomic<bool> unmeasured_;  // !estimate_.measured(), for note_head() and unmeasured()
};

// Seed 004's Retry-After, before clamping to the lane's band: the larger of the
// queue window the request exhausted and the age of the youngest live lease
// (absent: no lease is live).
Millis lease_retry_after(Micros window_waited, std::optional<Micros> youngest_age);

}  // namespace sluice::admission
