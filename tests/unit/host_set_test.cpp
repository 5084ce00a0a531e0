// The upstream pool's host choice on test time: power of two choices on
// requests in flight, ejection with backoff, the ejection epoch, a replay's
// avoided host.
#include "proxy/host_set.hpp"

#include <array>
#include <catch2/catch.hpp>

using sluice::admission::Rng;
using sluice::proxy::Clock;
using sluice::proxy::HostSet;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0 = Clock::time_point{} + 1h;  // test time, far from the clock's epoch

// Fails host h's connect once, begun now (with the host's current epoch).
bool fail(HostSet& hosts, std::size_t h, Clock::time_point at) {
  return hosts.connect_failed(h, hosts.epoch(h), at);
}

template <std::size_t N>
std::array<int, N> picks(const HostSet& hosts, Clock::time_point at, int n,
                         std::size_t avoid = HostSet::kNoHost) {
  Rng rng(7);
  std::array<int, N> count{};
  for (int i = 0; i < n; ++i) ++count.at(hosts.choose(at, rng, avoid));
  return count;
}

}  // namespace

TEST_CASE("of two hosts drawn, the one with fewer requests in flight is chosen",
          "[proxy][host_set]") {
  HostSet hosts(2, 1s, 30s);
  for (int i = 0; i < 3; ++i) hosts.bind(0);
  hosts.bind(1);
  CHECK(picks<2>(hosts, t0, 200) == std::array<int, 2>{0, 200});

  // Of three, the most loaded loses to either other, and the least loaded wins
  // whenever it is drawn (two pairs of three).
  HostSet three(3, 1s, 30s);
  for (int i = 0; i < 5; ++i) three.bind(1);
  for (int i = 0; i < 9; ++i) three.bind(2);
  auto count = picks<3>(three, t0, 3000);
  CHECK(count[2] == 0);
  CHECK(count[0] > 1800);
  CHECK(count[0] < 2200);
  CHECK(count[1] == 3000 - count[0]);
}

TEST_CASE("a tie on requests in flight goes to either host at random", "[proxy][host_set]") {
  HostSet hosts(2, 1s, 30s);
  hosts.bind(0);
  hosts.bind(1);
  auto count = picks<2>(hosts, t0, 2000);
  CHECK(count[0] > 850);
  CHECK(count[1] > 850);
}

TEST_CASE(
    "an ejected host is not chosen while another is eligible, and is again once its backoff ends",
    "[proxy][host_set]") {
  HostSet hosts(3, 1s, 30s);
  hosts.bind(1);  // the ejected host is the least loaded: only the ejection keeps it out
  hosts.bind(2);
  CHECK(fail(hosts, 0, t0));
  CHECK(hosts.ejected(0, t0 + 999ms));
  CHECK(picks<3>(hosts, t0 + 999ms, 500)[0] == 0);
  CHECK_FALSE(hosts.ejected(0, t0 + 1s));
  CHECK(picks<3>(hosts, t0 + 1s, 500)[0] > 250);
}

TEST_CASE("the ejection doubles per consecutive failure up to its cap, and a connect resets it",
          "[proxy][host_set]") {
  HostSet hosts(2, 1s, 5s);
  CHECK(hosts.backoff(1) == 1s);
  CHECK(hosts.backoff(2) == 2s);
  CHECK(hosts.backoff(3) == 4s);
  CHECK(hosts.backoff(4) == 5s);  // capped
  CHECK(hosts.backoff(40) == 5s);

  // Each failure, once the last ejection ended, ejects for the next backoff.
  auto at = t0;
  for (auto expected : {1s, 2s, 4s, 5s, 5s}) {
    REQUIRE(fail(hosts, 0, at));
    CHECK(hosts[0].ejected_until == at + expected);
    at = hosts[0].ejected_until;
  }
  CHECK(hosts[0].failures == 5);

  hosts.connected(0);
  CHECK(hosts[0].failures == 0);
  CHECK_FALSE(hosts.ejected(0, at));
  REQUIRE(fail(hosts, 0, at));
  CHECK(hosts[0].ejected_until == at + 1s);  // from the base again
}

TEST_CASE("a cap below the base ejects for the base", "[proxy][host_set]") {
  HostSet hosts(2, 2s, 1s);
  CHECK(hosts.backoff(1) == 2s);
  CHECK(hosts.backoff(3) == 2s);
}

TEST_CASE("with every host ejected, the one back soonest is chosen", "[proxy][host_set]") {
  HostSet hosts(3, 1s, 30s);
  fail(hosts, 0, t0);          // until t0 + 1s
  fail(hosts, 1, t0 - 900ms);  // until t0 + 100ms
  fail(hosts, 2, t0 - 1s);
  fail(hosts, 2, t0);  // until t0 + 2s
  REQUIRE(hosts.all_ejected(t0 + 50ms));
  CHECK(picks<3>(hosts, t0 + 50ms, 100) == std::array<int, 3>{0, 100, 0});
  CHECK_FALSE(hosts.all_ejected(t0 + 100ms));
}

TEST_CASE("connects begun before the latest ejection fail without counting again",
          "[proxy][host_set]") {
  HostSet hosts(2, 1s, 30s);
  // Three connects to host 0 under way at once, all begun before any failed.
  auto epoch = hosts.epoch(0);
  CHECK(hosts.connect_failed(0, epoch, t0));
  CHECK_FALSE(hosts.connect_failed(0, epoch, t0 + 10ms));
  CHECK_FALSE(hosts.connect_failed(0, epoch, t0 + 20ms));
  CHECK(hosts[0].failures == 1);
  CHECK(hosts[0].ejected_until == t0 + 1s);  // the first failure's ejection, not pushed out
  // A connect begun after that ejection counts: twice as long.
  CHECK(hosts.connect_failed(0, hosts.epoch(0), t0 + 1s));
  CHECK(hosts[0].failures == 2);
  CHECK(hosts[0].ejected_until == t0 + 3s);
}

TEST_CASE("a replay's failed host is left out while another is eligible", "[proxy][host_set]") {
  HostSet hosts(3, 1s, 30s);
  hosts.bind(1);
  hosts.bind(2);  // the avoided host is the least loaded: only `avoid` keeps it out
  CHECK(picks<3>(hosts, t0, 500, 0)[0] == 0);
  // The only eligible other host is taken; with none left, the avoided one.
  fail(hosts, 1, t0);
  CHECK(picks<3>(hosts, t0, 100, 0) == std::array<int, 3>{0, 0, 100});
  fail(hosts, 2, t0);
  CHECK(picks<3>(hosts, t0, 100, 0) == std::array<int, 3>{100, 0, 0});
}

TEST_CASE("with one host there is no choice: it is chosen ejected or avoided, drawing nothing",
          "[proxy][host_set]") {
  HostSet hosts(1, 1s, 30s);
  Rng rng(3), untouched(3);
  CHECK(hosts.choose(t0, rng) == 0);
  fail(hosts, 0, t0);
  CHECK(hosts.all_ejected(t0));
  CHECK(hosts.choose(t0, rng) == 0);
  CHECK(hosts.choose(t0, rng, 0) == 0);
  CHECK(rng.next() == untouched.next());
}

TEST_CASE("a host that went is out of the choice at once, and its slot is reused once unbound",
          "[proxy][host_set]") {
  HostSet hosts(3, 1s, 30s);
  hosts.bind(1);  // a request still on host 1
  hosts.remove(1);
  CHECK(hosts.present() == 2);
  auto count = picks<3>(hosts, t0, 300);
  CHECK(count[1] == 0);
  CHECK(count[0] + count[2] == 300);
  // A new host does not take a slot a request is still bound to ...
  CHECK(hosts.add(true) == 3);
  hosts.remove(3);
  CHECK(hosts.add(true) == 3);  // ... but takes a free one, in a new epoch
  hosts.unbind(1);
  const auto old_epoch = hosts.epoch(1);
  CHECK(hosts.add(true) == 1);
  CHECK(hosts.epoch(1) != old_epoch);
  CHECK_FALSE(
      hosts.connect_failed(1, old_epoch, t0));  // its last host's connect counts for nothing
  CHECK_FALSE(hosts.ejected(1, t0));
}

TEST_CASE(
    "a host whose checks fail is out of the choice, and with none passing the connect decides",
    "[proxy][host_set]") {
  HostSet hosts(3, 1s, 30s);
  hosts.set_healthy(0, false);
  auto count = picks<3>(hosts, t0, 300);
  CHECK(count[0] == 0);
  // Checks failing and ejections: the one the checks pass is tried first.
  REQUIRE(fail(hosts, 1, t0));
  REQUIRE(fail(hosts, 2, t0));
  REQUIRE(fail(hosts, 2, t0 + 1s));
  CHECK(picks<3>(hosts, t0 + 10ms, 10) == std::array<int, 3>{0, 10, 0});
  // Every present host failing its checks: the one back soonest, checks or not.
  hosts.set_healthy(1, false);
  hosts.set_healthy(2, false);
  CHECK(picks<3>(hosts, t0 + 10ms, 10) == std::array<int, 3>{10, 0, 0});
  // Passing again: back in the choice.
  hosts.set_healthy(0, true);
  hosts.set_healthy(1, true);
  hosts.set_healthy(2, true);
  count = picks<3>(hosts, t0 + 1h, 300);
  CHECK(count[0] > 0);
  CHECK(count[1] > 0);
  CHECK(count[2] > 0);
}

TEST_CASE("with no host present there is none to choose, and none is counted ejected",
          "[proxy][host_set]") {
  HostSet hosts(1, 1s, 30s);
  hosts.remove(0);
  Rng rng(1);
  CHECK(hosts.choose(t0, rng) == HostSet::kNoHost);
  CHECK(hosts.all_ejected(t0));
  HostSet none(0, 1s, 30s);
  CHECK(none.choose(t0, rng) == HostSet::kNoHost);
  CHECK(none.add(true) == 0);
  CHECK(none.choose(t0, rng) == 0);
  CHECK_FALSE(none.all_ejected(t0));
}
