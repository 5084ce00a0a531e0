#pragma once
// The workload matrix (`sluice simulate --matrix`): the admission core against
// every kind of upstream, capacity, service time, lane mix, arrival pattern and
// load, cold and warm, beside the policies told the capacity, each cell judged
// on its own goals. Time is virtual; the upstream and the policies are
// sim/overload.hpp's.
//
// The axes (every value of every axis is in any sample of 30 cells or more):
//   shape     429 above C; a FIFO queue above C; processor sharing (latency
//             grows with concurrency past C); 429 with C/2 for a third of the
//             window; a FIFO queue with log-normal service times (sigma 0.8)
//   C         1, 2, 8, 64 slots
//   S         5, 50, 500 ms
//   mix       standard (every request standard); bulk; heavy (streams of 20 S
//             each); mixed (streams holding an eighth of C, the rest 20 %
//             standard, 80 % bulk); routes (every request standard, half on a
//             route of S, half on a route of S / 20: one upstream, two service
//             times)
//   arrivals  uniform (constant gaps); Poisson; bursts (twice the rate for
//             max(250 ms, 5 S), then nothing for as long)
//   load      0.5, 0.9, 1, 2, 3, 10 x the capacity (in slot time)
//   start     cold (the window starts 10 S after the first request); warm (the
//             cell's load begins after max(2 s, 20 S) of Poisson load at 0.5x on
//             another route of S / 4, and the window 2 S later)
// The window lasts max(2 s, 40 S, 2,000 requests at 1x), cut to 40,000 arrivals
// at the cell's load but never under 20 S; a client leaves after max(1 s, 4 S).
//
// The systems: sluice (configured from the environment, as `serve`), and told
// C: limit_conn, haproxy (`timeout queue 500ms`), fifo (a queue as long as the
// client's patience: no refusal, the bound on latency without refusing),
// short_queue (a queue of S: the bound on goodput for what waits at most S).
//
// The goals (issue "admission that holds on any workload"), per cell:
//   goodput   load >= 1: the slot time the 2xx used, per second of the window,
//             of C (the time-weighted C of the halving shape) at least the best
//             peer's less 1 point, and at least 97 % where a peer reaches 98 %;
//             in overload (load > 1) the peers that meet the p99 goal there
//             (short_queue and limit_conn always count: on/off bursts longer
//             than 2 S cannot be served whole within 2 S)
//   429s      the upstream's own 429s under 2 % of what sluice forwards
//   refused   load <= 0.9, Poisson or uniform: at most 0.5 % refused (or no
//             more than fifo's)
//   p99       p99 of the successes' latency over their own route's S: at most
//             2, or its bound: at load <= 0.9 (no refusal) fifo's p99, in
//             overload limit_conn's (nothing queues in front of a slot) plus 5 %
//   at once   load > 1: refusals of requests that arrived 1 s or more into the
//             window answered within 10 ms, 99 % of them
// A cell that meets each goal or its bound is met; the table lists the others.
//
// Threading: cells run on `jobs` threads, each cell alone on one; the report
// is the same for any number of jobs.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/overload.hpp"

namespace sluice::sim::matrix {

enum class Mix : std::uint8_t { standard, bulk, heavy, mixed, routes };
enum class Arrivals : std::uint8_t { uniform, poisson, bursts };

struct Cell {
  overload::Shape shape = overload::Shape::queue;
  int capacity = 8;
  double service = 0.05;  // s
  Mix mix = Mix::standard;
  Arrivals arrivals = Arrivals::uniform;
  double load = 1;
  bool warm = false;
  std::string label() const;  // "queue C8 S50ms standard poisson 3x warm"
};

// What one system did in one cell.
struct Outcome {
  double goodput = 0;  // % of C
  double refused = 0;  // % of the requests that arrived in the window (503 and 429)
  double timeouts = 0;
  double upstream_429 = 0;   // % of what reached the upstream
  double p99 = 0;            // of latency / own S, the successes (0: none)
  double late_refusals = 0;  // % of the settled refusals answered after 10 ms
  int refusals_settled = 0;
  double khat = 0;  // sluice's estimate, time-weighted over the window (0: none)
};

struct Judged {
  Cell cell;
  Outcome sluice, limit_conn, haproxy, fifo, short_queue;
  std::vector<std::string> misses;  // "goodput 91.2 % < 99.0 %", ...
};

struct Options {
  int cells = 600;
  std::uint64_t seed = 1;
  int jobs = 0;      // 0: the hardware's threads
  std::string only;  // run only the sampled cells whose label contains it
  SluiceSettings sluice;
};

// `n` cells drawn from the axes by `seed`, every value of every axis in
// turn (each axis's values repeated in an order of its own).
std::vector<Cell> sample(int n, std::uint64_t seed);
Judged run_cell(const Cell& cell, const Options& o, std::uint64_t seed);
// Fills j.misses from its outcomes: each goal, or its bound, unmet.
void judge(Judged& j);
std::vector<Judged> run(const Options& o);
std::string format_markdown(const Options& o, const std::vector<Judged>& cells);

}  // namespace sluice::sim::matrix
