// End-to-end tests of sluice-upstream's --capacity-schedule: the capacity in force changes at
// given times after the first request, for both over-capacity shapes. Real binary, loopback.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using sluice::test::Conn;
using sluice::test::eventually;
using sluice::test::format_request;
using sluice::test::request;
using sluice::test::Upstream;
using sluice::test::upstream_stats;

namespace {

const std::string kBin = SLUICE_UPSTREAM_BIN;

// The usage error sluice-upstream exits 2 with for these arguments.
std::string usage_error(std::vector<std::string> args) {
  args.insert(args.begin(), kBin);
  sluice::test::Process bad(std::move(args));
  const auto code = bad.wait_exit(5s);
  REQUIRE(code == 2);
  return bad.err();
}

}  // namespace

TEST_CASE("stats reports the capacity in force only when one is set", "[e2e][upstream]") {
  Upstream unlimited(kBin);
  CHECK_FALSE(upstream_stats(unlimited).contains("capacity"));
  CHECK_FALSE(upstream_stats(unlimited).contains("schedule_ms"));

  Upstream fixed(kBin, {"--capacity", "3"});
  CHECK(upstream_stats(fixed)["capacity"] == 3);
  CHECK_FALSE(upstream_stats(fixed).contains("schedule_ms"));
}

TEST_CASE("a capacity schedule's clock starts with the first request, not with the process",
          "[e2e][upstream]") {
  Upstream up(kBin, {"--capacity", "4", "--capacity-schedule", "0.3:2"});
  auto s = upstream_stats(up);
  CHECK(s["capacity"] == 4);
  CHECK(s["schedule_ms"].is_null());
  std::this_thread::sleep_for(500ms);  // past 0.3 s of the process, before any request
  s = upstream_stats(up);
  CHECK(s["capacity"] == 4);
  CHECK(s["schedule_ms"].is_null());

  CHECK(request(up.port, "GET", "/").status == 200);
  s = upstream_stats(up);
  CHECK(s["capacity"] == 4);
  CHECK(s["schedule_ms"].get<std::int64_t>() >= 0);
  CHECK(s["schedule_ms"].get<std::int64_t>() < 300);
  // The change applies at its time, with no request in between.
  CHECK(eventually([&] { return upstream_stats(up)["capacity"] == 2; }, 5s));
  CHECK(upstream_stats(up)["schedule_ms"].get<std::int64_t>() >= 300);
}

TEST_CASE("with the 429 shape, the scheduled capacity decides who is refused at each moment",
          "[e2e][upstream]") {
  // 2 slots, 1 from 1 s after the first request, 2 again from 2 s.
  Upstream up(kBin, {"--capacity", "2", "--capacity-schedule", "1:1,2:2"});
  CHECK(request(up.port, "GET", "/").status == 200);  // starts the clock
  auto holder = Conn::open(up.port);
  REQUIRE(holder.send(format_request("GET", "/slow?ms=4000", up.port)));
  REQUIRE(eventually([&] { return upstream_stats(up)["in_flight"] == 1; }, 5s));
  CHECK(request(up.port, "GET", "/").status == 200);  // the second of 2 slots

  REQUIRE(eventually([&] { return upstream_stats(up)["capacity"] == 1; }, 5s));
  const auto refused = request(up.port, "GET", "/");
  CHECK(refused.status == 429);  // the holder fills the one slot
  CHECK(refused.header("Retry-After") == "1");

  REQUIRE(eventually([&] { return upstream_stats(up)["capacity"] == 2; }, 5s));
  CHECK(upstream_stats(up)["in_flight"] == 1);  // the holder is still in service
  CHECK(request(up.port, "GET", "/").status == 200);
  CHECK(upstream_stats(up)["rejected"] == 1);

  const auto held = holder.read_response(10s);
  REQUIRE(held);
  CHECK(held->status == 200);
}

TEST_CASE(
    "with the queue shape, a drop lets requests in service finish and starts new ones only below "
    "the new capacity; a rise starts waiters at once",
    "[e2e][upstream]") {
  // 2 slots, 1 from 0.5 s after the first request, 2 again from 4 s.
  Upstream up(kBin, {"--capacity", "2", "--over-capacity", "queue", "--threads", "2",
                     "--capacity-schedule", "0.5:1,4:2"});
  auto first = Conn::open(up.port);
  REQUIRE(first.send(format_request("GET", "/slow?ms=1500", up.port)));  // starts the clock
  auto second = Conn::open(up.port);
  REQUIRE(second.send(format_request("GET", "/slow?ms=2500", up.port)));
  REQUIRE(eventually([&] { return upstream_stats(up)["in_flight"] == 2; }, 5s));

  REQUIRE(eventually([&] { return upstream_stats(up)["capacity"] == 1; }, 5s));
  CHECK(upstream_stats(up)["in_flight"] == 2);  // both stay in service
  auto waiter = Conn::open(up.port);
  REQUIRE(waiter.send(format_request("GET", "/", up.port)));
  REQUIRE(eventually([&] { return upstream_stats(up)["waiting"] == 1; }, 5s));

  // The first finishes: one in flight is the new capacity, so the waiter still waits.
  const auto a = first.read_response(10s);
  REQUIRE(a);
  CHECK(a->status == 200);
  CHECK(eventually(
      [&] {
        const auto s = upstream_stats(up);
        return s["in_flight"] == 1 && s["waiting"] == 1;
      },
      5s));
  // The second finishes: the waiter starts.
  const auto c = waiter.read_response(10s);
  REQUIRE(c);
  CHECK(c->status == 200);
  const auto b = second.read_response(1s);
  REQUIRE(b);
  CHECK(b->status == 200);

  // At capacity 1 a holder fills the slot and another request waits ...
  auto holder = Conn::open(up.port);
  REQUIRE(holder.send(format_request("GET", "/slow?ms=5000", up.port)));
  REQUIRE(eventually([&] { return upstream_stats(up)["in_flight"] == 1; }, 5s));
  auto late = Conn::open(up.port);
  REQUIRE(late.send(format_request("GET", "/", up.port)));
  REQUIRE(eventually([&] { return upstream_stats(up)["waiting"] == 1; }, 5s));
  CHECK(upstream_stats(up)["capacity"] == 1);
  // ... until the capacity rises, long before the holder gives its slot back.
  const auto d = late.read_response(10s);
  REQUIRE(d);
  CHECK(d->status == 200);
  const auto s = upstream_stats(up);
  CHECK(s["capacity"] == 2);
  CHECK(s["in_flight"] == 1);
  CHECK(s["waiting"] == 0);
  CHECK(s["rejected"] == 0);
  CHECK(s["max_in_flight"] == 2);
}

TEST_CASE("capacity-schedule takes increasing T:C pairs after --capacity, nothing else",
          "[e2e][upstream]") {
  CHECK_THAT(usage_error({"--capacity-schedule", "10:4"}),
             Catch::Contains("--capacity-schedule needs --capacity C"));
  for (const auto* bad : {"10", "10:", ":4", "x:4", "0:4", "-1:4", "10:0", "10:four", "10:4,",
                          "10:4,10:8", "20:4,10:8", "10:4;20:8", "0.0001:4"}) {
    INFO(bad);
    const auto err = usage_error({"--capacity", "8", "--capacity-schedule", bad});
    CHECK_THAT(err, Catch::StartsWith("sluice-upstream: --capacity-schedule: "));
    CHECK_THAT(err, Catch::Contains(std::string("in '") + bad + "'"));
    CHECK_THAT(err, Catch::Contains("usage: sluice-upstream"));
  }
  CHECK_THAT(usage_error({"--capacity", "8", "--capacity-schedule", "20:4,10:8"}),
             Catch::Contains("the times do not increase at '10:8'"));
  CHECK_THAT(usage_error({"--capacity", "8", "--capacity-schedule", "10:0"}),
             Catch::Contains("'0' is not a capacity of at least 1"));

  Upstream good(kBin, {"--capacity", "8", "--capacity-schedule", "10:4,20.5:8"});
  CHECK(upstream_stats(good)["capacity"] == 8);
}
