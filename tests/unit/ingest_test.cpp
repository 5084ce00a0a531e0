// The ingest byte budget on a fake clock: bytes in flight per lane and in
// total, the lane's queue, the drain rate and the wait it tells.
#include "admission/ingest.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

using namespace std::chrono_literals;
using namespace sluice::admission;
using Micros = std::chrono::microseconds;

namespace {

struct Upload : IngestWaiter {
  Upload(Lane lane, std::uint64_t bytes) {
    ingest_lane = lane;
    ingest_bytes = bytes;
  }
  int granted = 0;
  void on_granted() override { ++granted; }
};

constexpr std::uint64_t kMiB = 1024 * 1024;
// 10 MiB; bulk and heavy may hold 4 MiB each, standard all of it.
IngestBudget budget() { return IngestBudget(10 * kMiB, {0.4, 1.0, 0.4}); }

}  // namespace

TEST_CASE("a body that fits is held at once, one that does not waits in its lane's queue",
          "[admission][ingest]") {
  auto b = budget();
  Upload a(Lane::heavy, 3 * kMiB), c(Lane::heavy, 2 * kMiB), s(Lane::standard, 1 * kMiB);
  CHECK(b.reserve(a, 0us));
  CHECK_FALSE(b.reserve(c, 1ms));  // 3 + 2 MiB is over heavy's share of 4 MiB
  CHECK(c.ingest_queued);
  CHECK(b.reserve(s, 2ms));  // standard has room of its own
  auto v = b.view();
  CHECK(v.in_flight[index(Lane::heavy)] == 3 * kMiB);
  CHECK(v.total == 4 * kMiB);
  CHECK(v.waiting[index(Lane::heavy)] == 1);
  // The first upload is written upstream: the waiting one is seated.
  b.release(Lane::heavy, 1 * kMiB, 100ms);
  CHECK(c.granted == 1);
  CHECK_FALSE(c.ingest_queued);
  CHECK(b.view().in_flight[index(Lane::heavy)] == 4 * kMiB);
}

TEST_CASE("the total holds under the budget whatever the lanes' shares", "[admission][ingest]") {
  IngestBudget b(10 * kMiB, {1.0, 1.0, 1.0});
  std::vector<Upload> ups;
  ups.reserve(8);
  for (int i = 0; i < 8; ++i) ups.emplace_back(i % 2 ? Lane::bulk : Lane::heavy, 3 * kMiB);
  int held = 0;
  for (auto& u : ups) held += b.reserve(u, 0us) ? 1 : 0;
  CHECK(held == 3);
  CHECK(b.view().total == 9 * kMiB);
  // Oldest first: a smaller body of a lane with requests waiting waits behind them.
  Upload small(Lane::bulk, 1);
  CHECK_FALSE(b.reserve(small, 1ms));
  // Each release seats the longest waiting head that fits, never passing the budget.
  for (int i = 0; i < 3; ++i) {
    b.release(Lane::heavy, 3 * kMiB, Micros{(i + 1) * 100'000});
    CHECK(b.view().total <= 10 * kMiB);
  }
}

TEST_CASE("a body larger than its lane's share goes alone in its lane", "[admission][ingest]") {
  auto b = budget();
  Upload big(Lane::bulk, 6 * kMiB), other(Lane::bulk, 1 * kMiB), after(Lane::bulk, 6 * kMiB);
  CHECK(b.reserve(big, 0us));  // nothing of bulk in flight: it goes, though over 4 MiB
  CHECK_FALSE(b.reserve(other, 1ms));
  b.release(Lane::bulk, 6 * kMiB, std::nullopt);
  CHECK(other.granted == 1);
  CHECK_FALSE(b.reserve(after, 2ms));  // bulk holds 1 MiB: the next big one waits
}

TEST_CASE("a waiting request that leaves is out of the queue, and one granted meanwhile says so",
          "[admission][ingest]") {
  auto b = budget();
  Upload a(Lane::heavy, 4 * kMiB), w(Lane::heavy, 1 * kMiB), x(Lane::heavy, 1 * kMiB);
  REQUIRE(b.reserve(a, 0us));
  REQUIRE_FALSE(b.reserve(w, 1ms));
  REQUIRE_FALSE(b.reserve(x, 2ms));
  CHECK(b.cancel(w));
  b.release(Lane::heavy, 1 * kMiB, 3ms);
  CHECK(w.granted == 0);
  CHECK(x.granted == 1);
  CHECK_FALSE(b.cancel(x));  // granted: its bytes are held
  CHECK(b.view().in_flight[index(Lane::heavy)] == 4 * kMiB);
}

TEST_CASE("the wait told is the bytes ahead over the drain rate measured", "[admission][ingest]") {
  auto b = budget();
  Upload a(Lane::heavy, 4 * kMiB);
  REQUIRE(b.reserve(a, 0us));
  CHECK_FALSE(b.wait_for(Lane::heavy, 2 * kMiB));  // no rate measured yet
  // 1 MiB written upstream every 250 ms: 4 MiB/s (the first write opens the window).
  for (int i = 0; i < 4; ++i) b.release(Lane::heavy, kMiB, Micros{i * 250'000});
  // Bytes given back without being written (a refusal) do not count as drained.
  Upload d(Lane::heavy, 4 * kMiB);
  REQUIRE(b.reserve(d, 1s));
  const double rate = b.view().drain_bytes_per_s;
  CHECK(rate == Approx(4.0 * kMiB).epsilon(0.01));
  // 2 MiB more in heavy: 2 MiB over its share must drain first: half a second.
  auto wait = b.wait_for(Lane::heavy, 2 * kMiB);
  REQUIRE(wait);
  CHECK(std::chrono::duration<double>(*wait).count() == Approx(0.5).epsilon(0.01));
  b.release(Lane::heavy, 4 * kMiB, std::nullopt);
  CHECK(b.view().drain_bytes_per_s == rate);
}

TEST_CASE("a waiting body that leaves lets a smaller one behind it go, if it fits",
          "[admission][ingest]") {
  auto b = budget();
  Upload a(Lane::heavy, 3 * kMiB), big(Lane::heavy, 2 * kMiB), small(Lane::heavy, 1 * kMiB);
  REQUIRE(b.reserve(a, 0us));
  REQUIRE_FALSE(b.reserve(big, 1ms));
  REQUIRE_FALSE(b.reserve(small, 2ms));  // it fits, but waits behind the older one
  CHECK(b.cancel(big));
  CHECK(small.granted == 1);
  CHECK(b.view().in_flight[index(Lane::heavy)] == 4 * kMiB);
}
