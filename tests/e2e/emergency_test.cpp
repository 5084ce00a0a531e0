// Seed 003's emergency actions through the real binary (2 threads, two
// upstreams, a fresh instance): a pinned emergency with the switch on applies
// each action in turn, one per tick; taking the pin away undoes them in a tick
// of their own before emergency steps down; the tick log replays to the same.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Conn;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::vector<json> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json_lines(text.str());
}

// The actions a tick-log or replay line applied, undid, or holds after it.
std::vector<std::string> field(const json& line, const char* key) {
  std::vector<std::string> out;
  if (line.contains(key))
    for (const auto& a : line[key]) out.push_back(a.get<std::string>());
  return out;
}

}  // namespace

TEST_CASE(
    "a pinned emergency applies the emergency actions one per tick, and taking the pin "
    "away undoes them a tick before emergency steps down",
    "[e2e][emergency_actions]") {
  Upstream api(kUpstream), search(kUpstream);
  auto tick_log = std::filesystem::temp_directory_path() /
                  ("sluice-emergency-ticks-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(tick_log);
  const std::map<std::string, std::string> actions{
      {"SLUICE_EMERGENCY_ACTIONS", "refuse_connections,short_timeouts,no_keepalive"},
      {"SLUICE_EMERGENCY_ACTIONS_AFTER", "300ms"},
      {"SLUICE_ADMISSION_HOLD", "1s,1s,1s"},
      {"SLUICE_LANE_FACTORS", "standard=1,1,1,1"}};
  auto env = actions;
  env.insert({{"SLUICE_THREADS", "2"},
              {"SLUICE_TICK", "100ms"},
              {"SLUICE_TICK_LOG", tick_log.string()},
              {"SLUICE_EMERGENCY_CONNECTION_FLOOR", "2"},
              {"SLUICE_HEADER_TIMEOUT", "20s"}});
  Sluice s(kSluice, sluice::test::two_upstreams(api, search, env));
  auto action = [&](const char* name) {
    return s.metric(std::string(R"(sluice_emergency_action{action=")") + name + "\"}");
  };

  // Before: keep-alive, and connections above the floor are accepted.
  auto before = request(s.port, "GET", "/search/a");
  CHECK(before.status == 200);
  CHECK(before.keep_alive);
  CHECK(action("short_timeouts") == 0);

  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3,"reason":"test"})").status ==
          200);
  REQUIRE(eventually([&] { return action("refuse_connections") == 1; }, 10s));
  CHECK(action("short_timeouts") == 1);
  CHECK(action("no_keepalive") == 1);

  // Each action in turn, one per tick, mildest first whatever the order listed.
  std::vector<std::pair<std::string, std::string>> audited;
  for (const auto& l : s.log_lines())
    if (l.value("audit", "") == "emergency_action")
      audited.emplace_back(l["action"].get<std::string>(), l["change"].get<std::string>());
  CHECK(audited ==
        std::vector<std::pair<std::string, std::string>>{{"short_timeouts", "applied"},
                                                         {"no_keepalive", "applied"},
                                                         {"refuse_connections", "applied"}});
  {
    auto ticks = read_lines(tick_log);
    std::vector<std::size_t> at;
    std::vector<std::string> applied;
    for (std::size_t i = 0; i < ticks.size(); ++i)
      for (const auto& a : field(ticks[i], "actions_applied")) {
        at.push_back(i);
        applied.push_back(a);
      }
    REQUIRE(applied ==
            std::vector<std::string>{"short_timeouts", "no_keepalive", "refuse_connections"});
    CHECK(at[1] == at[0] + 1);
    CHECK(at[2] == at[1] + 1);
    CHECK(ticks[at[0]]["level"] == 3);
  }

  // no_keepalive: the answer says Connection: close, and the connection ends.
  {
    auto c = Conn::open(s.port);
    REQUIRE(c.send(sluice::test::format_request("GET", "/search/b", s.port, {}, "")));
    auto r = c.read_response();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->header("Connection") == "close");
    CHECK(c.closed_by_peer(5s));
  }
  // refuse_connections: two connections are open (the floor); a third is
  // closed at once, before any request is read. The one above counts until
  // its session has ended, which may be after its client saw the close.
  REQUIRE(eventually([&] { return s.metric("sluice_client_connections") == 0; }, 5s));
  auto idle1 = Conn::open(s.port);
  auto idle2 = Conn::open(s.port);
  REQUIRE(eventually([&] { return s.metric("sluice_client_connections") >= 2; }, 5s));
  {
    auto third = Conn::open(s.port);
    CHECK(third.closed_by_peer(5s));
    CHECK(s.metric("sluice_emergency_connections_refused_total") >= 1);
  }
  // short_timeouts: a connection that sends nothing is closed after a tenth
  // of SLUICE_HEADER_TIMEOUT (2 s), well before the 20 s.
  CHECK(idle1.closed_by_peer(15s));

  // The pin taken away: emergency decays after its hold (1 s); every action is
  // undone in the tick before the step down.
  REQUIRE(request(s.admin, "DELETE", "/admin/pins").status == 200);
  REQUIRE(eventually([&] { return s.metric("sluice_admission_level") < 3; }, 15s));
  CHECK(action("short_timeouts") == 0);
  CHECK(action("no_keepalive") == 0);
  CHECK(action("refuse_connections") == 0);
  auto ticks = read_lines(tick_log);
  std::size_t restored = ticks.size(), stepped = ticks.size();
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    if (ticks[i].value("restoration", false) && restored == ticks.size()) restored = i;
    if (ticks[i]["changed"] == true && ticks[i]["from"] == 3 && stepped == ticks.size())
      stepped = i;
  }
  REQUIRE(restored < ticks.size());
  REQUIRE(stepped < ticks.size());
  CHECK(stepped == restored + 1);
  CHECK(ticks[restored]["level"] == 3);
  CHECK(ticks[restored].value("restoring", false));
  CHECK(field(ticks[restored], "actions_undone") ==
        std::vector<std::string>{"short_timeouts", "no_keepalive", "refuse_connections"});
  CHECK(ticks[stepped]["to"] == 2);
  CHECK(ticks[stepped]["trigger"] == "decay");

  // Restored: keep-alive again, connections above the floor accepted.
  auto after = request(s.port, "GET", "/a");
  CHECK(after.status == 200);
  CHECK(after.keep_alive);
  auto more = Conn::open(s.port);
  auto again = Conn::open(s.port);
  REQUIRE(again.send(sluice::test::format_request("GET", "/search/c", s.port, {}, "")));
  auto r = again.read_response();
  REQUIRE(r);
  CHECK(r->status == 200);

  // The replay of the tick log with the same switch shows the same actions
  // at the same ticks: a copy of the log as it is now (Sluice still ticks).
  auto snapshot = tick_log;
  snapshot += ".snapshot";
  {
    std::ifstream in(tick_log);
    std::stringstream text;
    text << in.rdbuf();
    auto whole = text.str();
    whole.resize(whole.rfind('\n') + 1);  // whole lines only: a tick may be writing one
    std::ofstream(snapshot) << whole;
  }
  ticks = read_lines(snapshot);
  auto replay_env = actions;
  sluice::test::Process p({kSluice, "replay", snapshot.string()}, replay_env);
  REQUIRE(p.wait_exit(10s) == 0);
  std::filesystem::remove(snapshot);
  auto replayed = json_lines(p.out());
  REQUIRE(replayed.size() == ticks.size() + 1);  // and the summary
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    INFO("tick " << i << ": " << ticks[i].dump() << " replayed " << replayed[i].dump());
    CHECK(field(replayed[i], "actions_applied") == field(ticks[i], "actions_applied"));
    CHECK(field(replayed[i], "actions_undone") == field(ticks[i], "actions_undone"));
    CHECK(replayed[i]["level"] == ticks[i]["level"]);
  }
  CHECK(replayed.back()["summary"]["actions_applied"] == 3);
  CHECK(replayed.back()["summary"]["restorations"] == 1);
  std::filesystem::remove(tick_log);
}
