#pragma once
// The overload bench (bench/overload/run.sh) on a virtual clock: its upstream
// shapes, its open-loop load and client timeout, and the systems it puts in
// front of the upstream as admission policies, Sluice's being the real
// admission core called as the proxy calls it. Time is virtual, in seconds.
//
// The upstream (sluice-upstream --capacity C --service-ms S --over-capacity SHAPE):
//   C slots. A request holds one for S plus an exponential jitter of mean `jitter`, and
//   its response head comes at the end; an SSE stream holds one for its whole
//   life, its head after stream_head.
//   429    a request that arrives with C in flight is answered 429 after
//          refuse_after, holding no slot.
//   queue  it waits, first come first served, for a slot and is served whatever
//          became of its client (the upstream does not know).
//   halve  the 429 shape with C/2 slots from halve_from to halve_to (those in
//          flight finish on the slots they hold).
//   ps     processor sharing: nothing refused, nothing queued; every request in
//          flight advances at min(1, C / n) of its pace (n in flight), so its
//          latency grows with the concurrency past C.
//   lognormal  the queue shape with log-normal service times (mean S, sigma).
// A request's own service time (Request::service, 0: S) is a route's: an
// upstream with a fast and a slow route serves each at its own pace.
// The load (bench/overload/loadgen.cpp), open loop: at load x, streams at
//   stream_rate per second of stream_life each (heavy lane) and requests at
//   R(x) = (x C - stream_rate stream_life) / S per second, standard_share of them
//   standard, the rest bulk; each class at constant gaps, its first one gap
//   after 0, except at a Poisson load ("0.9p"); drawn as the generator draws
//   them (make_arrivals()). Arrivals end at warmup +
//   duration. A request without its response head `timeout` after its arrival
//   is a client timeout: the client leaves, and whatever holds its request in
//   the proxy or the upstream ends as it would have. No retries.
// Hops: proxy to upstream, upstream to proxy and proxy to client take `hop` each.
//
// The systems (policies), each one proxy thread:
//   sluice      one admission::Bulkhead through admission::place(), timed_out() and
//               a Lease, as proxy/session.cpp drives them: a request is seated and
//               forwarded, queued until its wait's deadline (patience() in
//               overload.cpp: the one place it comes from), or refused with a 503;
//               the worker's heartbeat (heartbeat, 50 ms) ends the waits past their
//               deadline, then ticks the bulkhead; a response head is classified when
//               it arrives, and the seat goes back with that signal when the exchange
//               ends (a stream's at its end); an upstream's 429 asks again, once
//               (admission::ask_again), as the proxy does for body-less GETs. The proxy does not
//               watch a queued client: a request whose client left still waits out its deadline,
//               and is forwarded if seated before it.
//   limit_conn  nginx `limit_conn` C: at most C exchanges at once, 503 at once above.
//   haproxy     `maxconn C`, `timeout queue`: at most C at the upstream, the rest in a
//               FIFO queue for up to haproxy_queue (500 ms), then 503.
//   none        nginx without limits: every request is forwarded.
//
// Measured, per shape, system and load (the bench's figures), over a window
// (warmup to warmup + duration; halve: the whole run and each phase):
//   goodput     the slot time the 2xx within the timeout used, of the requests
//               that arrived in the window, per second of it, in requests of S:
//               a bulk or standard request one, a stream its life over S (as the
//               bench counts it: a stream served is capacity used)
//   latency     p50 / p99 per lane of those 2xx, from arrival
//   refused     503 (the proxy) and 429 (the upstream, passed on) at the client,
//               timeouts, per lane, of the requests that arrived in the window
//   streams     share of streams whose 2xx head came in time
//   429 share   upstream 429s / requests that reached the upstream in the window
//   K̂           sluice's estimate, time-weighted mean, min and max in the window,
//               and its decreases there
//   capacity    the yardstick: what `none` achieves on the 429 shape at 3x (the
//               bench's `direct` run)
// Each row is the mean over `runs` runs; run i of every row sees the arrivals
// sluice_loadgen --seed (seed + i) sends, so --seed 1 --runs 1 replays the
// bench's own arrivals (its SEED is 1), and the rows differ by their system only.
//
// Threading: none. The same options give the same bytes.
#include <array>
#include <cstdint>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "admission/lane.hpp"
#include "sim/model.hpp"
#include "sim/policy.hpp"

namespace sluice::sim::overload {

using admission::Lane;

enum class Shape : std::uint8_t { too_many, queue, halve, ps, lognormal };
inline constexpr std::array<Shape, 3> kShapes{Shape::too_many, Shape::queue, Shape::halve};
inline constexpr std::array<Shape, 5> kAllShapes{Shape::too_many, Shape::queue, Shape::ps,
                                                 Shape::halve, Shape::lognormal};
std::string_view to_string(Shape shape);  // "429", "queue", "halve", "ps", "lognormal"
std::optional<Shape> shape_from_string(std::string_view s);

struct UpstreamParams {
  int capacity = 8;                       // C
  double service = 0.05;                  // S, s
  double jitter = 0.0003;                 // s: the mean of an exponential added to every service
  double refuse_after = 0.0005;           // s: the 429's delay
  double stream_head = 0.001;             // s: a stream's head after it took its slot
  double halve_from = 10, halve_to = 20;  // s: the halve shape's C/2 phase
  double sigma = 0.8;                     // the lognormal shape's log-normal sigma
};

// What the upstream says about one request.
struct UpstreamEvent {
  std::uint64_t id = 0;
  double at = 0;
  bool head = false;  // its response head, with `status`
  bool end = false;   // its exchange ended (a stream's after its head; any other's with it)
  int status = 200;
};

class Upstream {
 public:
  Upstream(Shape shape, const UpstreamParams& p, std::uint64_t seed);
  enum class Arrival : std::uint8_t { started, queued, refused };
  // Request `id` reaches the upstream at `now` (never earlier than the last
  // event); a stream (life > 0) holds its slot for `life` s.
  // `service` (0: S) is the request's own service time, its route's.
  Arrival arrive(std::uint64_t id, double life, double now, double service = 0);
  // When the next event is due (kNever: none).
  double next_event() const;
  // The next event, in time order (ties: in the order they were scheduled).
  UpstreamEvent pop();
  int capacity(double t) const;                                                // slots at time t
  int in_flight() const { return in_flight_ + static_cast<int>(ps_.size()); }  // in its slots
  std::size_t waiting() const { return queue_.size() - queue_head_; }
  // Requests at it now: in its slots, in its queue, or being answered 429
  // (sluice-upstream's max_offered counts the same).
  int offered() const { return in_flight() + static_cast<int>(waiting()) + refusing_; }

 private:
  struct Due {
    double at;
    std::uint64_t seq;
    std::uint64_t id;
    bool head, end, frees;
    int status;
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct Waiting {
    std::uint64_t id;
    double life, service;
  };
  // A processor-sharing request: the work it has left, at pace 1.
  struct Sharing {
    std::uint64_t id;
    double left;
    bool stream;
  };
  void start(std::uint64_t id, double life, double now, double service);
  // The ps shape: brings every sharing request's work left to `now`.
  void share_until(double now);
  double pace() const;  // of each sharing request now
  void schedule(double at, std::uint64_t id, bool head, bool end, bool frees, int status);

  Shape shape_;
  UpstreamParams p_;
  Rng rng_;
  int in_flight_ = 0;
  int refusing_ = 0;
  std::vector<Waiting> queue_;  // FIFO from queue_head_
  std::size_t queue_head_ = 0;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  std::uint64_t seq_ = 0;
  std::vector<Sharing> ps_;  // the ps shape's requests in flight
  double ps_at_ = 0;         // their work left is as of then
};

// One load of the bench: x times the upstream's slots, Poisson or constant gaps.
struct Load {
  double x = 1;
  bool poisson = false;
  bool bursts = false;        // on/off: twice the rate for a burst, nothing for as long
  std::string label() const;  // "2", "0.9p", "3b"
};
std::optional<Load> load_from_string(std::string_view s);

struct LoadParams {
  double stream_rate = 0.25;  // streams per second
  double stream_life = 2;     // s
  double standard_share = 0.2;
  double timeout = 1;  // s: the client's, for a response head
  double warmup = 2, duration = 6;
  double halve_run = 30;  // s: the halve shape's run, measured whole and per phase
};

// One request of a run.
struct Request {
  double at = 0;
  Lane lane = Lane::bulk;  // heavy: a stream
  double service = 0;      // its route's service time (0: the upstream's S); a stream's life
  std::uint16_t route = 0;
};

// The arrivals `sluice_loadgen --seed seed` sends at `load` until `until`, in
// time order: its generator and draws, its clock's nanoseconds.
std::vector<Request> make_arrivals(const Load& load, const UpstreamParams& up, const LoadParams& lp,
                                   double until, std::uint64_t seed);

// fifo: haproxy with a queue as long as the client's timeout (the best a
// policy told C can do for latency without refusing: the matrix's bound).
// short_queue: haproxy with a queue of S (the best a policy told C can do
// for goodput while what it serves waits no longer than S in its queue).
enum class System : std::uint8_t { sluice, limit_conn, haproxy, none, fifo, short_queue };
inline constexpr std::array<System, 4> kSystems{System::sluice, System::limit_conn, System::haproxy,
                                                System::none};
std::string_view to_string(System system);
std::optional<System> system_from_string(std::string_view s);

struct Options {
  std::vector<Shape> shapes{kShapes.begin(), kShapes.end()};
  std::vector<Load> loads{{0.9, true}, {1, false}, {2, false}, {3, false}};
  std::vector<System> systems{kSystems.begin(), kSystems.end()};
  int runs = 10;
  std::uint64_t seed = 1;
  UpstreamParams upstream;
  LoadParams load;
  double hop = 0.0001;         // s
  double haproxy_queue = 0.5;  // s: HAProxy's `timeout queue`
  SluiceSettings sluice;       // lanes, estimate, Retry-After bands, heartbeat
};

// A measured window of a run.
struct Window {
  double from = 0, to = 0;
  std::string label;  // "" for the bench's one window
};
std::vector<Window> windows(Shape shape, const LoadParams& lp);

struct LaneCounts {
  int sent = 0, ok = 0, refused = 0, timeouts = 0, late = 0;
  std::vector<double> latency;  // s, of the 2xx within the timeout
};

// What one run measured in one window.
struct Measured {
  std::array<LaneCounts, admission::kLaneCount> lanes;
  int upstream_requests = 0, upstream_refused = 0;  // reached it in the window; its 429s
  int max_offered = 0;                              // at the upstream at once, the whole run
  std::optional<double> khat_mean, khat_min, khat_max;
  int decreases = 0;           // of the estimate, in the window
  double seconds = 0;          // the window's length
  double stream_requests = 0;  // a stream's slot time, in requests of S
  double goodput() const;      // requests of S per second
  // s: the slot time the 2xx answered in the window used (each its route's S;
  // a stream its life), whenever they arrived.
  double ok_work = 0;
  // Refusals of requests that arrived kSettled or more into the window, and
  // those of them answered later than kRefusedAtOnce after their arrival.
  int refused_settled = 0, refused_late = 0;
  // Each 2xx's latency over its own service time (a stream's: over S).
  std::vector<double> normalized;
};
inline constexpr double kSettled = 1.0;          // s
inline constexpr double kRefusedAtOnce = 0.010;  // s

// One run: `measured` per window, in the order of windows(). Its arrivals are
// sluice_loadgen's with `seed`; the upstream's and the system's draws derive from it.
std::vector<Measured> run_once(Shape shape, System system, const Load& load, const Options& o,
                               std::uint64_t seed);

struct Row {
  Shape shape = Shape::too_many;
  System system = System::sluice;
  Load load;
  Window window;
  int runs = 0;
  double goodput = 0;                                                 // requests/s, mean over runs
  std::array<std::optional<double>, admission::kLaneCount> p50, p99;  // s: means of runs'
  std::array<double, admission::kLaneCount> sent{}, refused{}, timeouts{};  // means per run
  std::array<double, admission::kLaneCount> ok{};
  double upstream_share = 0;  // upstream 429s / reached it, pooled over runs
  int max_offered = 0;        // the most at the upstream at once (Upstream::offered()), any run
  std::optional<double> khat_mean, khat_min, khat_max;  // means over runs
  double decreases = 0;                                 // of K̂ per run, mean
};

// One run of the given arrivals, measured over `ws`.
std::vector<Measured> run_requests(Shape shape, System system, std::vector<Request> reqs,
                                   std::vector<Window> ws, const Options& o, std::uint64_t seed);

// One row per window of the shape.
std::vector<Row> run_rows(Shape shape, System system, const Load& load, const Options& o);

struct Report {
  Options options;
  double capacity = 0;  // what `none` achieves on the 429 shape at 3x: the measured capacity
  std::vector<Row> rows;
};
Report simulate(const Options& o);
std::string format_markdown(const Report& r);

}  // namespace sluice::sim::overload
