// The simulated overload bench (sim/overload.hpp): its upstream shapes' rules,
// and the obvious properties of the systems in front of them.
#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "sim/overload.hpp"

using namespace sluice::sim::overload;
using sluice::admission::index;
using sluice::admission::Lane;

namespace {

UpstreamParams exact() {
  UpstreamParams p;
  p.jitter = 0;  // services of exactly S
  return p;
}

Options quick(int runs = 2) {
  Options o;
  o.runs = runs;
  return o;
}

}  // namespace

TEST_CASE("overload sim: the 429 shape answers 429 at once above C in flight, holding no slot",
          "[sim][overload]") {
  Upstream up(Shape::too_many, exact(), 1);
  for (std::uint64_t id = 0; id < 8; ++id)
    CHECK(up.arrive(id, 0, 0.0) == Upstream::Arrival::started);
  CHECK(up.arrive(8, 0, 0.001) == Upstream::Arrival::refused);
  CHECK(up.in_flight() == 8);
  CHECK(up.waiting() == 0);
  CHECK(up.offered() == 9);
  UpstreamEvent e = up.pop();
  CHECK(e.id == 8);
  CHECK(e.status == 429);
  CHECK(e.head);
  CHECK(e.end);
  CHECK(e.at == Approx(0.0015));
  CHECK(up.in_flight() == 8);
  CHECK(up.offered() == 8);
  // The eight served take S each; a slot is free again after the first.
  for (int i = 0; i < 8; ++i) {
    e = up.pop();
    CHECK(e.status == 200);
    CHECK(e.at == Approx(0.05));
  }
  CHECK(up.arrive(9, 0, 0.051) == Upstream::Arrival::started);
}

TEST_CASE(
    "overload sim: the queue shape serves its waiters first come first served, whatever became "
    "of their clients",
    "[sim][overload]") {
  UpstreamParams p = exact();
  p.capacity = 2;
  Upstream up(Shape::queue, p, 1);
  for (std::uint64_t id = 0; id < 5; ++id) {
    auto a = up.arrive(id, 0, 0.001 * static_cast<double>(id));
    CHECK(a == (id < 2 ? Upstream::Arrival::started : Upstream::Arrival::queued));
  }
  CHECK(up.waiting() == 3);
  CHECK(up.offered() == 5);
  std::vector<std::uint64_t> order;
  std::vector<double> at;
  while (up.next_event() < sluice::sim::kNever) {
    UpstreamEvent e = up.pop();
    CHECK(e.status == 200);
    order.push_back(e.id);
    at.push_back(e.at);
  }
  CHECK(order == std::vector<std::uint64_t>{0, 1, 2, 3, 4});
  // Each waiter takes the slot its predecessor frees: 4 waits for 0's and then 2's.
  CHECK(at[2] == Approx(0.1));
  CHECK(at[3] == Approx(0.101));
  CHECK(at[4] == Approx(0.15));

  // Through no gating at 2x, the queue outgrows the client timeout: the upstream
  // spends its slots on requests whose clients have left, and almost none is in time.
  auto r = run_rows(Shape::queue, System::none, {2, false}, quick()).at(0);
  CHECK(r.upstream_share == 0);
  CHECK(r.max_offered > 100);  // its queue
  CHECK(r.goodput < 0.05 * 160);
  CHECK(r.timeouts[index(Lane::standard)] > 0.9 * r.sent[index(Lane::standard)]);
}

TEST_CASE("overload sim: the halve shape has C/2 slots from 10 s to 20 s", "[sim][overload]") {
  Upstream up(Shape::halve, exact(), 1);
  CHECK(up.capacity(9.999) == 8);
  CHECK(up.capacity(10.0) == 4);
  CHECK(up.capacity(19.999) == 4);
  CHECK(up.capacity(20.0) == 8);
  Upstream too_many(Shape::too_many, exact(), 1);
  CHECK(too_many.capacity(15) == 8);

  // Four in flight: a fifth is served before 10 s, refused in the C/2 phase.
  Upstream a(Shape::halve, exact(), 1);
  for (std::uint64_t id = 0; id < 4; ++id) a.arrive(id, 0, 9.9);
  CHECK(a.arrive(4, 0, 9.91) == Upstream::Arrival::started);
  Upstream b(Shape::halve, exact(), 1);
  for (std::uint64_t id = 0; id < 4; ++id) b.arrive(id, 0, 10.0);
  CHECK(b.arrive(4, 0, 10.01) == Upstream::Arrival::refused);
  Upstream c(Shape::halve, exact(), 1);
  for (std::uint64_t id = 0; id < 4; ++id) c.arrive(id, 0, 20.0);
  CHECK(c.arrive(4, 0, 20.01) == Upstream::Arrival::started);
}

TEST_CASE("overload sim: a stream holds its slot for its whole life, its head at once",
          "[sim][overload]") {
  Upstream up(Shape::too_many, exact(), 1);
  up.arrive(0, 2.0, 0.0);
  UpstreamEvent head = up.pop();
  CHECK(head.head);
  CHECK_FALSE(head.end);
  CHECK(head.at == Approx(0.001));
  CHECK(up.in_flight() == 1);
  UpstreamEvent end = up.pop();
  CHECK(end.end);
  CHECK(end.at == Approx(2.0));
  CHECK(up.in_flight() == 0);
}

TEST_CASE("overload sim: the load is the bench's, constant gaps from one gap after 0",
          "[sim][overload]") {
  LoadParams lp;
  auto reqs = make_arrivals({3, false}, exact(), lp, 8, 1);
  int bulk = 0, standard = 0, heavy = 0;
  for (const auto& r : reqs) {
    if (r.lane == Lane::bulk) ++bulk;
    if (r.lane == Lane::standard) ++standard;
    if (r.lane == Lane::heavy) ++heavy;
  }
  // R(3) = (3 x 8 - 0.25 x 2) / 0.05 = 470/s: 376 bulk and 94 standard per second.
  // Gaps truncated to nanoseconds: the last one lands just before 8 s.
  CHECK(bulk == 376 * 8);
  CHECK(standard == 94 * 8);
  CHECK(heavy == 1);  // one stream, at 4 s
  CHECK(reqs.front().at == Approx(1.0 / 376));
}

TEST_CASE(
    "overload sim: a Poisson load's arrivals are the ones sluice_loadgen sends with that seed",
    "[sim][overload]") {
  // bench/overload/run.sh's 0.9p run (SEED=1) counted 608 bulk, 156 standard and
  // 1 stream sent in its window (loadgen.tsv); the same mt19937_64 and
  // exponential_distribution draws, in the generator's order, give the same.
  auto reqs = make_arrivals({0.9, true}, exact(), LoadParams{}, 8, 1);
  int n[3] = {0, 0, 0};
  for (const auto& r : reqs)
    if (r.at >= 2 && r.at < 8) ++n[index(r.lane)];
  CHECK(n[index(Lane::bulk)] == 608);
  CHECK(n[index(Lane::standard)] == 156);
  CHECK(n[index(Lane::heavy)] == 1);
  CHECK(std::is_sorted(reqs.begin(), reqs.end(),
                       [](const Request& a, const Request& b) { return a.at < b.at; }));
}

TEST_CASE("overload sim: limit_conn never has more than C in flight at the upstream",
          "[sim][overload]") {
  for (Shape shape : {Shape::too_many, Shape::queue}) {
    auto r = run_rows(shape, System::limit_conn, {3, false}, quick()).at(0);
    CHECK(r.max_offered == 8);
    CHECK(r.upstream_share == 0);
    CHECK(r.timeouts[index(Lane::standard)] == 0);
  }
}

TEST_CASE("overload sim: haproxy queues up to its timeout and keeps C in flight",
          "[sim][overload]") {
  auto r = run_rows(Shape::queue, System::haproxy, {3, false}, quick()).at(0);
  CHECK(r.max_offered == 8);
  CHECK(r.timeouts[index(Lane::bulk)] == 0);
  CHECK(*r.p99[index(Lane::standard)] < 0.5 + 0.05 + 0.005);
  CHECK(*r.p50[index(Lane::standard)] > 0.4);  // the queue is full at 3x
  CHECK(r.goodput > 0.95 * 160);
}

TEST_CASE("overload sim: no gating on the 429 shape at 3x serves about C/S", "[sim][overload]") {
  auto r = run_rows(Shape::too_many, System::none, {3, false}, quick()).at(0);
  CHECK(r.goodput > 0.95 * 160);
  CHECK(r.goodput <= 160);
  CHECK(r.upstream_share > 0.5);
}

TEST_CASE("overload sim: goodput counts a stream served as the slot time it held",
          "[sim][overload]") {
  // At 0.5x nothing waits and everything is served: the goodput is the load offered,
  // 0.5 C slots, of which the streams hold 0.25/s x 2 s = 0.5 slot (10 requests of S a
  // second). Counted as requests alone, it would be 70/s, not 80. A window of 40 s holds
  // ten streams, not the one of the bench's 6 s.
  Options o = quick();
  o.load.duration = 40;
  auto r = run_rows(Shape::too_many, System::none, {0.5, false}, o).at(0);
  CHECK(r.ok[index(Lane::heavy)] == r.sent[index(Lane::heavy)]);
  CHECK(r.ok[index(Lane::heavy)] > 0);
  CHECK(r.goodput == Approx(0.5 * 160).epsilon(0.03));
}

TEST_CASE("overload sim: sluice's estimate is reported, and no other system has one",
          "[sim][overload]") {
  auto s = run_rows(Shape::too_many, System::sluice, {2, false}, quick()).at(0);
  REQUIRE(s.khat_mean);
  CHECK(*s.khat_min <= *s.khat_mean);
  CHECK(*s.khat_mean <= *s.khat_max);
  CHECK(*s.khat_min >= 1);
  auto n = run_rows(Shape::too_many, System::none, {2, false}, quick()).at(0);
  CHECK_FALSE(n.khat_mean);
}

TEST_CASE("overload sim: the same options print the same bytes", "[sim][overload]") {
  Options o = quick(1);
  o.shapes = {Shape::too_many};
  o.loads = {{0.9, true}};
  CHECK(format_markdown(simulate(o)) == format_markdown(simulate(o)));
  Options other = o;
  other.seed = 2;
  CHECK(format_markdown(simulate(o)) != format_markdown(simulate(other)));
}

TEST_CASE(
    "overload sim: in a standing overload sluice refuses what it cannot seat in time at once, and "
    "what it seats waits little",
    "[sim][overload]") {
  // In the C/2 phase at 3x the standard lane's queue is never empty.
  Options o = quick();
  auto rows = run_rows(Shape::halve, System::sluice, {3, false}, o);
  const Row& half = rows.at(2);
  REQUIRE(half.window.from == 10);
  const double window = 0.5, service = o.upstream.service;
  // Seated within about a service time (the queue target), never near the window.
  CHECK(*half.p99[index(Lane::standard)] <= 3 * service);
  CHECK(*half.p99[index(Lane::standard)] < window);
  CHECK(half.refused[index(Lane::standard)] > 0);
}