// The admin listener's tables: its routes (which calls need the token) and the
// label sets /metrics exports at 0 from the start.
#include "proxy/admin.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <initializer_list>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using sluice::admission::Controller;
using sluice::admission::ControllerConfig;
using sluice::admission::kLevelCount;
using sluice::admission::kTriggerCount;
using sluice::admission::Level;
using sluice::admission::Millis;
using sluice::admission::Reading;
using sluice::admission::Trigger;
using sluice::proxy::admin_routes;
using sluice::proxy::level_change_known;
using sluice::proxy::rise_suppressed_known;

TEST_CASE("an admin route that is not a GET is mutating, so the router asks it for the token",
          "[proxy][admin]") {
  for (const auto& r : admin_routes()) {
    INFO(r.method << " " << r.path);
    if (r.method != "GET") CHECK(r.mutating);
  }
}

TEST_CASE("the admin route table has each method and path once, and the known mutating calls",
          "[proxy][admin]") {
  std::set<std::pair<std::string, std::string>> seen;
  std::set<std::pair<std::string, std::string>> mutating;
  for (const auto& r : admin_routes()) {
    INFO(r.method << " " << r.path);
    CHECK(seen.emplace(r.method, r.path).second);
    CHECK(r.path.starts_with("/"));
    if (r.mutating) mutating.emplace(r.method, r.path);
  }
  CHECK(mutating == std::set<std::pair<std::string, std::string>>{{"POST", "/admin/pins"},
                                                                  {"DELETE", "/admin/pins"},
                                                                  {"POST", "/admin/debug/block"}});
}

TEST_CASE(
    "every level change and suppressed rise the controller makes has its series from the start",
    "[proxy][admin][metrics]") {
  // Random readings in calm and pressure spells, failed reads, pins and unpins,
  // under both profiles: whatever the controller counts must be a label set
  // /metrics already exported at 0.
  for (auto [config, tick] : {std::pair{ControllerConfig::fast(), Millis(1000)},
                              std::pair{ControllerConfig::sentinel(), Millis(60'000)}}) {
    Controller c(config);
    std::mt19937 rng(42);
    auto chance = [&](double p) { return std::uniform_real_distribution<>(0, 1)(rng) < p; };
    auto pick = [&](std::initializer_list<double> values) {
      return *(values.begin() +
               std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng));
    };
    bool pressure = false;
    Millis now{0};
    for (int i = 0; i < 50'000; ++i) {
      now += tick;
      if (chance(0.03)) pressure = !pressure;
      if (chance(0.005)) {
        auto level = static_cast<Level>(std::uniform_int_distribution<int>(0, 3)(rng));
        c.pin(level,
              chance(0.5) ? std::optional<Millis>(tick * static_cast<int>(pick({1, 5, 30})))
                          : std::nullopt,
              now, "test", "tester");
      }
      if (chance(0.005)) c.unpin(now, "tester");
      Reading r;
      r.t = now;
      r.ok = !chance(pressure ? 0.05 : 0.01);
      r.lag_ms = pressure ? pick({150, 210, 260, 700, 1200}) : pick({2, 20, 100});
      r.lag_fresh = !chance(0.1);
      if (chance(0.8)) r.upstream_wait_ms = pressure ? pick({100, 160, 210, 700}) : pick({1, 50});
      r.upstream_timeout = pressure && chance(0.05);
      if (chance(0.02)) r.stall_ms = pick({300, 1500});
      c.step(r);
    }
    const auto& st = c.stats();
    std::set<Trigger> changed_by;
    for (std::size_t from = 0; from < kLevelCount; ++from)
      for (std::size_t to = 0; to < kLevelCount; ++to)
        for (std::size_t t = 0; t < kTriggerCount; ++t)
          if (st.changes[from][to][t]) {
            INFO("change " << from << " -> " << to << " by " << to_string(static_cast<Trigger>(t)));
            CHECK(level_change_known(from, to, static_cast<Trigger>(t)));
            changed_by.insert(static_cast<Trigger>(t));
          }
    std::set<Trigger> suppressed_by;
    for (std::size_t to = 0; to < kLevelCount; ++to)
      for (std::size_t t = 0; t < kTriggerCount; ++t)
        if (st.suppressed[to][t]) {
          INFO("suppressed rise to " << to << " by " << to_string(static_cast<Trigger>(t)));
          CHECK(rise_suppressed_known(to, static_cast<Trigger>(t)));
          suppressed_by.insert(static_cast<Trigger>(t));
        }
    // The walk reached every way the level moves, or it proves little.
    CHECK(changed_by == std::set<Trigger>{Trigger::lag, Trigger::upstream_wait,
                                          Trigger::upstream_timeout, Trigger::stall, Trigger::pin,
                                          Trigger::signal_loss, Trigger::decay});
    CHECK(suppressed_by.size() >= 2);
  }
}
