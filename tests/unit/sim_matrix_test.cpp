// The workload matrix (sim/matrix.hpp): its sample, its determinism, its judge.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "sim/matrix.hpp"

using namespace sluice::sim::matrix;
namespace ov = sluice::sim::overload;

TEST_CASE("matrix: any sample of 30 cells or more holds every value of every axis",
          "[sim][matrix]") {
  const auto cells = sample(30, 7);
  REQUIRE(cells.size() == 30);
  std::set<int> shapes, caps, mixes, arrivals, starts;
  std::set<double> services, loads;
  for (const Cell& c : cells) {
    shapes.insert(static_cast<int>(c.shape));
    caps.insert(c.capacity);
    services.insert(c.service);
    mixes.insert(static_cast<int>(c.mix));
    arrivals.insert(static_cast<int>(c.arrivals));
    loads.insert(c.load);
    starts.insert(c.warm ? 1 : 0);
  }
  CHECK(shapes.size() == 5);
  CHECK(caps.size() == 4);
  CHECK(services.size() == 3);
  CHECK(mixes.size() == 5);
  CHECK(arrivals.size() == 3);
  CHECK(loads.size() == 6);
  CHECK(starts.size() == 2);
  // The same seed, the same cells; another, others.
  const auto again = sample(30, 7), other = sample(30, 8);
  bool same = true, differ = false;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    same = same && cells[i].label() == again[i].label();
    differ = differ || cells[i].label() != other[i].label();
  }
  CHECK(same);
  CHECK(differ);
}

TEST_CASE("matrix: a cell's run is the same for the same seed", "[sim][matrix]") {
  Cell c;
  c.shape = ov::Shape::queue;
  c.capacity = 8;
  c.service = 0.005;
  c.mix = Mix::routes;
  c.arrivals = Arrivals::poisson;
  c.load = 2;
  const Options o;
  const Judged a = run_cell(c, o, 3), b = run_cell(c, o, 3);
  CHECK(a.sluice.goodput == b.sluice.goodput);
  CHECK(a.sluice.p99 == b.sluice.p99);
  CHECK(a.haproxy.goodput == b.haproxy.goodput);
  CHECK(a.misses == b.misses);
  // The peers told C serve the capacity at 2x.
  CHECK(a.haproxy.goodput > 80);  // told C, it keeps the slots busy (less the hops)
}

TEST_CASE("matrix: each goal is judged against its bound", "[sim][matrix]") {
  Judged j;
  j.cell.load = 3;
  j.cell.arrivals = Arrivals::uniform;
  j.limit_conn = {95, 66, 0, 0, 1.05, 0, 0, 0};
  j.short_queue = {99.5, 66, 0, 0, 1.9, 0, 0, 0};
  j.haproxy = {99.8, 66, 0, 0, 11, 0, 0, 0};  // p99 11 S: it does not count in overload
  j.fifo = {10, 90, 0, 0, 20, 0, 0, 0};
  j.sluice = {99, 66, 0, 0.5, 1.8, 0, 0, 0};
  judge(j);
  CHECK(j.misses.empty());  // within a point of short_queue's 99.5
  j.sluice.goodput = 98;
  j.sluice.upstream_429 = 3;
  j.sluice.p99 = 2.5;
  j.sluice.refusals_settled = 100;
  j.sluice.late_refusals = 5;
  judge(j);
  REQUIRE(j.misses.size() == 4);
  CHECK(j.misses[0].rfind("goodput", 0) == 0);
  CHECK(j.misses[1].rfind("429s", 0) == 0);
  CHECK(j.misses[2].rfind("p99", 0) == 0);
  CHECK(j.misses[3].rfind("refused late", 0) == 0);
  // At 0.9x with Poisson arrivals: refusals against 0.5 %, p99 against fifo's.
  Judged low;
  low.cell.load = 0.9;
  low.cell.arrivals = Arrivals::poisson;
  low.fifo = {90, 0, 0, 0, 4, 0, 0, 0};
  low.sluice = {89, 1, 0, 0, 3.5, 0, 0, 0};
  judge(low);
  REQUIRE(low.misses.size() == 1);
  CHECK(low.misses[0].rfind("refused", 0) == 0);
}
