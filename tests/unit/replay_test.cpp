// The tick trace and `sluice replay`: parsing, the tick-log writer, the output's
// shape, determinism, and seed 000's case (e) answered offline.
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "replay/trace.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::admission::ControllerConfig;
using sluice::admission::Decision;
using sluice::admission::Level;
using sluice::admission::Millis;
using sluice::admission::Mode;
using sluice::admission::Reading;
using sluice::admission::Trigger;
using sluice::replay::parse_duration;
using sluice::replay::parse_trace_line;
using sluice::replay::PinRequest;
using sluice::replay::ReplayOptions;
using sluice::replay::Requests;
using sluice::replay::run_replay;
using sluice::replay::tick_log_line;
using sluice::replay::TickLogExtras;
using sluice::replay::TraceError;
using sluice::replay::TraceLine;

namespace {

struct Run {
  int code = 0;
  std::string out;
  std::string err;
  std::vector<json> ticks;  // every line but the summary
  json summary;
};

Run replay(const std::string& trace, ReplayOptions options = {}) {
  std::istringstream in(trace);
  std::ostringstream out, err;
  Run r;
  r.code = run_replay(in, out, err, options);
  r.out = out.str();
  r.err = err.str();
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    if (j.contains("summary"))
      r.summary = j["summary"];
    else
      r.ticks.push_back(j);
  }
  return r;
}

std::string parse_error(std::string_view line, std::optional<Millis> previous = std::nullopt) {
  try {
    parse_trace_line(line, previous);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

// Seed 000's incident, synthesised: ten idle minutes at one tick a second with
// isolated blips. A 300 ms lag sample is read fresh once and repeated stale on
// the next tick (the monitor and the ticker are not aligned); a ~210 ms slow
// pool wait is read on two ticks (the 1.5-tick window). Traffic is steady.
std::string incident_trace() {
  std::string trace;
  for (int i = 1; i <= 600; ++i) {
    json line = {{"t", i * 1000}};
    double lag = 8 + (i * 7) % 23;  // 8..30 ms at idle
    double wait = 3 + (i * 5) % 9;  // 3..11 ms at idle
    bool fresh = true;
    if (i % 60 == 10) lag = 300;
    if (i % 60 == 11) {
      lag = 300;
      fresh = false;
    }
    if (i % 60 == 40 || i % 60 == 41) wait = 210 + (i % 3);
    line["lag_ms"] = lag;
    if (!fresh) line["lag_fresh"] = false;
    line["upstream_wait_ms"] = wait;
    line["requests"] = {{"bulk", 2}, {"standard", 10}, {"heavy", 1}};
    trace += line.dump() + "\n";
  }
  return trace;
}

}  // namespace

// ---------------------------------------------------------------------------
// Parsing

TEST_CASE("a trace line parses every input field", "[replay][trace]") {
  TraceLine l = parse_trace_line(
      R"({"t":5000,"lag_ms":12.5,"lag_fresh":false,"upstream_wait_ms":40,"upstream_timeout":true,)"
      R"("stall_ms":300,"ok":true,"requests":{"bulk":3,"heavy":1},"pin":{"level":2,"ttl":"10m",)"
      R"("reason":"incident"},"unpin":true})",
      std::nullopt);
  const Reading& r = l.reading;
  CHECK(r.t == 5000ms);
  CHECK(r.lag_ms == 12.5);
  CHECK_FALSE(r.lag_fresh);
  CHECK(r.upstream_wait_ms == 40);
  CHECK(r.upstream_timeout);
  CHECK(r.stall_ms == 300);
  CHECK(r.ok);
  REQUIRE(l.requests);
  CHECK(*l.requests == Requests{3, 0, 1});
  REQUIRE(l.pin);
  CHECK(l.pin->level == Level::critical);
  CHECK(l.pin->ttl == 10min);
  CHECK(l.pin->reason == "incident");
  CHECK(l.unpin);
}

TEST_CASE("absent fields are not measured, lag_fresh and ok default to true", "[replay][trace]") {
  TraceLine l = parse_trace_line(R"({"t":0})", std::nullopt);
  CHECK_FALSE(l.reading.lag_ms);
  CHECK(l.reading.lag_fresh);
  CHECK_FALSE(l.reading.upstream_wait_ms);
  CHECK_FALSE(l.reading.upstream_timeout);
  CHECK_FALSE(l.reading.stall_ms);
  CHECK(l.reading.ok);
  CHECK_FALSE(l.requests);
  CHECK_FALSE(l.pin);
  CHECK_FALSE(l.unpin);
  CHECK_FALSE(parse_trace_line(R"({"t":0,"lag_ms":null})", std::nullopt).reading.lag_ms);
  CHECK_FALSE(parse_trace_line(R"({"t":0,"pin":{"level":3}})", std::nullopt).pin->ttl);
}

TEST_CASE("the decision fields a tick log writes are read and ignored", "[replay][trace]") {
  TraceLine l = parse_trace_line(
      R"({"t":1000,"lag_ms":5,"level":2,"changed":true,"from":0,"to":2,"trigger":"lag",)"
      R"("suppressed":{"to":2,"trigger":"lag"},"admitted":{"bulk":1},"shed":{"bulk":2}})",
      std::nullopt);
  CHECK(l.reading.lag_ms == 5);
}

TEST_CASE("an unknown key is an error naming the key", "[replay][trace]") {
  std::string e = parse_error(R"({"t":0,"lagms":5})");
  CHECK_THAT(e, Catch::Contains("unknown key \"lagms\""));
  CHECK_THAT(e, Catch::Contains("lag_ms"));  // the valid keys
  CHECK_THAT(parse_error(R"({"t":0,"pin":{"level":1,"tll":"5s"}})"),
             Catch::Contains("unknown key \"tll\""));
  CHECK_THAT(parse_error(R"({"t":0,"requests":{"bulky":1}})"),
             Catch::Contains("\"bulky\" is not a lane"));
}

TEST_CASE("t is required and must not go backwards", "[replay][trace]") {
  CHECK_THAT(parse_error(R"({"lag_ms":5})"), Catch::Contains("\"t\" is required"));
  CHECK_THAT(parse_error(R"({"t":900})", 1000ms), Catch::Contains("goes back"));
  CHECK(parse_error(R"({"t":1000})", 1000ms).empty());  // the same time is allowed
  CHECK_THAT(parse_error(R"({"t":-1})"), Catch::Contains("\"t\""));
  CHECK_THAT(parse_error(R"({"t":1.5})"), Catch::Contains("\"t\""));
}

TEST_CASE("a wrongly typed value is an error naming its field", "[replay][trace]") {
  CHECK_THAT(parse_error(R"({"t":0,"lag_ms":"5"})"), Catch::Contains("\"lag_ms\""));
  CHECK_THAT(parse_error(R"({"t":0,"upstream_wait_ms":-3})"),
             Catch::Contains("\"upstream_wait_ms\""));
  CHECK_THAT(parse_error(R"({"t":0,"ok":"yes"})"), Catch::Contains("\"ok\""));
  CHECK_THAT(parse_error(R"({"t":0,"requests":{"bulk":-1}})"), Catch::Contains("requests.bulk"));
  CHECK_THAT(parse_error(R"({"t":0,"pin":{"level":4}})"), Catch::Contains("pin.level"));
  CHECK_THAT(parse_error(R"({"t":0,"pin":{"ttl":"5s"}})"),
             Catch::Contains("\"level\" is required"));
  CHECK_THAT(parse_error(R"({"t":0,"pin":{"level":1,"ttl":"60"}})"), Catch::Contains("pin.ttl"));
  CHECK_THAT(parse_error(R"({"t":0,"pin":{"level":1,"ttl":"-5s"}})"), Catch::Contains("pin.ttl"));
  CHECK_THAT(parse_error(R"({"t":0,)"), Catch::Contains("not valid JSON"));
  CHECK_THAT(parse_error(R"([1,2])"), Catch::Contains("JSON object"));
}

TEST_CASE("durations take SPEC's units", "[replay][trace]") {
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("60s") == 60s);
  CHECK(parse_duration("2m") == 2min);
  CHECK(parse_duration("1h") == 1h);
  CHECK_THROWS_AS(parse_duration("5"), TraceError);
  CHECK_THROWS_AS(parse_duration("1.5s"), TraceError);
  CHECK_THROWS_AS(parse_duration("s"), TraceError);
  CHECK_THROWS_AS(parse_duration("5d"), TraceError);
}

TEST_CASE("a tick-log line reads back to the same reading, requests and pin", "[replay][trace]") {
  Reading r;
  r.t = 61'000ms;
  r.lag_ms = 212.25;
  r.lag_fresh = false;
  r.upstream_wait_ms = 0.1;
  r.upstream_timeout = true;
  r.stall_ms = 1500;
  Requests q{4, 50, 2};
  Decision d;
  d.t = r.t;
  d.level = Level::critical;
  d.changed = true;
  d.from = Level::constrained;
  d.to = Level::critical;
  d.trigger = Trigger::lag;
  PinRequest pin{Level::emergency, 90s, "db \"failover\""};
  Requests admitted{1, 50, 1}, shed{3, 0, 1};
  std::string line = tick_log_line(r, &q, d, TickLogExtras{&pin, false, &admitted, &shed});

  json j = json::parse(line);
  CHECK(j["level"] == 2);
  CHECK(j["changed"] == true);
  CHECK(j["from"] == 1);
  CHECK(j["to"] == 2);
  CHECK(j["trigger"] == "lag");
  CHECK(j["suppressed"].is_null());
  CHECK(j["shed"]["bulk"] == 3);
  CHECK(j["pin"]["ttl"] == "90s");

  TraceLine back = parse_trace_line(line, std::nullopt);
  CHECK(back.reading.t == r.t);
  CHECK(back.reading.lag_ms == r.lag_ms);
  CHECK(back.reading.lag_fresh == r.lag_fresh);
  CHECK(back.reading.upstream_wait_ms == r.upstream_wait_ms);
  CHECK(back.reading.upstream_timeout == r.upstream_timeout);
  CHECK(back.reading.stall_ms == r.stall_ms);
  CHECK(back.reading.ok);
  CHECK(back.requests == q);
  REQUIRE(back.pin);
  CHECK(back.pin->level == Level::emergency);
  CHECK(back.pin->ttl == 90s);
  CHECK(back.pin->reason == "db \"failover\"");

  Reading failed;
  failed.t = 1ms;
  failed.ok = false;
  Decision none;
  std::string minimal = tick_log_line(failed, nullptr, none);
  CHECK(minimal ==
        R"({"t":1,"ok":false,"level":0,"changed":false,"from":0,"to":0,"trigger":"none",)"
        R"("suppressed":null})");
  CHECK_FALSE(parse_trace_line(minimal, std::nullopt).reading.ok);
}

// ---------------------------------------------------------------------------
// Replay

TEST_CASE("replay prints one line per tick with SPEC's fields, then a summary", "[replay]") {
  Run r = replay(
      "{\"t\":1000,\"lag_ms\":300}\n"
      "\n"  // blank lines are skipped
      "{\"t\":2000,\"lag_ms\":5,\"requests\":{\"bulk\":4,\"standard\":2,\"heavy\":0}}\r\n");
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  REQUIRE(r.ticks.size() == 2);
  CHECK(r.out.substr(0, r.out.find('\n')) ==
        R"({"t":1000,"level":0,"changed":false,"from":0,"to":0,"trigger":"none",)"
        R"("suppressed":null})");
  const json& second = r.ticks[1];
  CHECK(second["t"] == 2000);
  // The blip's streak ends here without its rise: reported on this tick, counted once.
  CHECK(second["suppressed"] == json{{"to", 2}, {"trigger", "lag"}});
  CHECK(second["admitted"] == json{{"bulk", 4}, {"standard", 2}, {"heavy", 0}});
  CHECK(second["shed"] == json{{"bulk", 0}, {"standard", 0}, {"heavy", 0}});
  CHECK(r.summary["ticks"] == 2);
  CHECK(r.summary["level_changes"] == 0);
  CHECK(r.summary["rise_suppressed"] == 1);
  CHECK(r.summary["max_level"] == 0);
  CHECK(r.summary["shed"] == json{{"bulk", 0}, {"standard", 0}, {"heavy", 0}});
  CHECK(r.summary["admitted"] == json{{"bulk", 4}, {"standard", 2}, {"heavy", 0}});
}

TEST_CASE("a bad line stops replay with its line number and exit code 2", "[replay]") {
  Run r = replay("{\"t\":1000}\n{\"t\":2000,\"lagms\":3}\n{\"t\":3000}\n");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("sluice: replay: line 2: unknown key \"lagms\""));
  CHECK(r.out.find("summary") == std::string::npos);

  Run back = replay("{\"t\":1000}\n\n{\"t\":500}\n");
  CHECK(back.code == 2);
  CHECK_THAT(back.err, Catch::StartsWith("sluice: replay: line 3: \"t\": 500 goes back"));
}

TEST_CASE("replay is deterministic: the same trace and options give the same bytes", "[replay]") {
  std::string trace;
  for (int i = 1; i <= 300; ++i) {
    json line = {{"t", i * 1000},
                 {"lag_ms", (i / 20) % 2 ? 300 : 10},
                 {"requests", {{"bulk", 7}, {"standard", 13}, {"heavy", 5}}}};
    trace += line.dump() + "\n";
  }
  Run a = replay(trace);
  Run b = replay(trace);
  REQUIRE(a.code == 0);
  CHECK(a.out == b.out);
  CHECK(a.summary["max_level"] == 2);
  ReplayOptions other;
  other.seed = 2;
  Run c = replay(trace, other);
  CHECK(c.out != a.out);  // the coin flips for heavy at level 2 are drawn from the seed
  CHECK(c.summary["level_changes"] == a.summary["level_changes"]);
}

TEST_CASE("observe mode reports its would-be refusals as shed, off mode refuses nothing",
          "[replay]") {
  std::string trace =
      "{\"t\":1000,\"stall_ms\":1500,\"requests\":{\"bulk\":10,\"standard\":0,\"heavy\":0}}\n";
  ReplayOptions o;
  o.mode = Mode::observe;
  CHECK(replay(trace, o).summary["shed"]["bulk"] == 10);
  o.mode = Mode::enforce;
  CHECK(replay(trace, o).summary["shed"]["bulk"] == 10);
  o.mode = Mode::off;
  Run off = replay(trace, o);
  CHECK(off.summary["shed"]["bulk"] == 0);
  CHECK(off.summary["admitted"]["bulk"] == 10);
  CHECK(off.summary["max_level"] == 3);  // the controller still decides
}

TEST_CASE("a pin in the trace applies before its tick's reading and reports the change",
          "[replay]") {
  Run r = replay(
      "{\"t\":1000,\"lag_ms\":5}\n"
      "{\"t\":2000,\"lag_ms\":5,\"pin\":{\"level\":3,\"ttl\":\"5s\"}}\n"
      "{\"t\":3000,\"lag_ms\":5,\"requests\":{\"bulk\":3}}\n"
      "{\"t\":7000,\"lag_ms\":5}\n"
      "{\"t\":8000,\"lag_ms\":5,\"pin\":{\"level\":1}}\n"
      "{\"t\":9000,\"lag_ms\":5,\"unpin\":true}\n");
  REQUIRE(r.code == 0);
  REQUIRE(r.ticks.size() == 6);
  CHECK(r.ticks[1]["changed"] == true);
  CHECK(r.ticks[1]["from"] == 0);
  CHECK(r.ticks[1]["to"] == 3);
  CHECK(r.ticks[1]["trigger"] == "pin");
  CHECK(r.ticks[2]["shed"]["bulk"] == 3);
  CHECK(r.ticks[3]["trigger"] == "unpin");  // expired at 7 s
  CHECK(r.ticks[3]["level"] == 3);
  CHECK(r.ticks[4]["to"] == 1);
  CHECK(r.ticks[5]["trigger"] == "unpin");
  CHECK(r.ticks[5]["changed"] == false);
  CHECK(r.summary["level_changes"] == 2);
  CHECK(r.summary["max_level"] == 3);
}

TEST_CASE("a pin that expired before its tick is replayed as set and expired at that tick",
          "[replay]") {
  // The tick log writes the TTL a pin had left at the tick: 0 when it ran out in between.
  Run r = replay(
      "{\"t\":1000,\"lag_ms\":5}\n"
      "{\"t\":2000,\"lag_ms\":5,\"pin\":{\"level\":2,\"ttl\":\"0ms\"}}\n"
      "{\"t\":3000,\"lag_ms\":5}\n");
  REQUIRE(r.code == 0);
  CHECK(r.ticks[1]["changed"] == true);
  CHECK(r.ticks[1]["to"] == 2);
  CHECK(r.ticks[1]["trigger"] == "pin");
  CHECK(r.ticks[2]["trigger"] == "none");  // already expired: automatic decisions from 2
  CHECK(r.ticks[2]["level"] == 2);
}

TEST_CASE("every rule shows through replay", "[replay]") {
  // A scripted incident in the fast profile; each line names the rule it shows.
  Run r = replay(
      "{\"t\":1000,\"lag_ms\":300}\n"                      // 0: rise held back by the gate
      "{\"t\":2000,\"lag_ms\":300,\"lag_fresh\":false}\n"  // 1: stale repeat holds the streak
      "{\"t\":3000,\"lag_ms\":220}\n"                      // 2
      "{\"t\":4000,\"upstream_wait_ms\":210}\n"            // 3: enters 1, the streak's lowest
      "{\"t\":5000,\"stall_ms\":1200}\n"                   // 4: the stall path
      "{\"t\":20000,\"lag_ms\":5}\n"                       // 5: one step down after the hold
      "{\"t\":21000,\"ok\":false}\n"                       // 6: one failed read holds
      "{\"t\":22000,\"ok\":false}\n"                       // 7: the second releases to 0
      "{\"t\":23000,\"upstream_timeout\":true}\n"          // 8: a timeout is evidence for 2
      "{\"t\":24000}\n"                                    // 9
      "{\"t\":25000}\n"                                    // 10: ... for three ticks
      "{\"t\":26000,\"pin\":{\"level\":0}}\n");            // 11: a pin, at once
  REQUIRE(r.code == 0);
  auto trig = [&](int i) { return r.ticks[i]["trigger"].get<std::string>(); };
  CHECK(r.ticks[0]["level"] == 0);
  CHECK(r.ticks[1]["level"] == 0);
  CHECK(r.ticks[3]["to"] == 1);
  CHECK(trig(3) == "lag");
  CHECK(r.ticks[4]["to"] == 3);
  CHECK(trig(4) == "stall");
  CHECK(r.ticks[5]["to"] == 2);
  CHECK(trig(5) == "decay");
  CHECK(r.ticks[6]["level"] == 2);
  CHECK(r.ticks[7]["to"] == 0);
  CHECK(trig(7) == "signal_loss");
  CHECK(r.ticks[10]["to"] == 2);
  CHECK(trig(10) == "upstream_timeout");
  CHECK(r.ticks[11]["to"] == 0);
  CHECK(trig(11) == "pin");
  CHECK(r.summary["level_changes"] == 6);
  // Both streaks rose (0..3 by lag, 8..10 by timeout): none was suppressed.
  for (const auto& tick : r.ticks) CHECK(tick["suppressed"].is_null());
  CHECK(r.summary["rise_suppressed"] == 0);
}

TEST_CASE(
    "(e) on the issue's trace the old configuration rises and would shed bulk, the new "
    "defaults stay at 0 with 0 would_shed",
    "[replay][seed000]") {
  const std::string trace = incident_trace();

  ReplayOptions old_config;
  old_config.mode = Mode::observe;  // both regions ran observe: the counters are the question
  old_config.controller.lag_ms = {100, 250, 600};
  old_config.controller.upstream_wait_ms = {75, 200, 600};
  old_config.controller.rise_ticks = 2;
  old_config.controller.hold[0] = 15s;
  Run before = replay(trace, old_config);
  REQUIRE(before.code == 0);
  CHECK(before.summary["max_level"] == 2);
  CHECK(before.summary["level_changes"].get<int>() >= 2);
  CHECK(before.summary["shed"]["bulk"].get<int>() >= 16);

  ReplayOptions new_config;
  new_config.mode = Mode::observe;
  Run after = replay(trace, new_config);
  REQUIRE(after.code == 0);
  CHECK(after.summary["max_level"] == 0);
  CHECK(after.summary["level_changes"] == 0);
  CHECK(after.summary["shed"] == json{{"bulk", 0}, {"standard", 0}, {"heavy", 0}});
  // Ten lag blips (one fresh tick each) and ten slow waits (two ticks each): twenty
  // streaks the gate ended, each counted once.
  CHECK(after.summary["rise_suppressed"] == 20);
}

TEST_CASE("an upstream's part of a line is its own reading, pin and unpin", "[replay][trace]") {
  auto tl = parse_trace_line(
      R"({"t":900,"lag_ms":3,"upstreams":{"api":{"upstream_wait_ms":250,"upstream_timeout":true,)"
      R"("pin":{"level":2,"ttl":"1m"},"level":0,"changed":false},"spare":{"ok":false,"unpin":true}}})",
      std::nullopt);
  REQUIRE(tl.upstreams.size() == 2);
  const auto& api = tl.upstreams[0].name == "api" ? tl.upstreams[0] : tl.upstreams[1];
  const auto& spare = tl.upstreams[0].name == "api" ? tl.upstreams[1] : tl.upstreams[0];
  CHECK(api.reading.t == 900ms);
  REQUIRE(api.reading.upstream_wait_ms);
  CHECK(*api.reading.upstream_wait_ms == 250);
  CHECK(api.reading.upstream_timeout);
  CHECK_FALSE(api.reading.lag_ms);  // the loops' lag is the process's, at the top
  REQUIRE(api.pin);
  CHECK(api.pin->level == Level::critical);
  CHECK_FALSE(spare.reading.ok);
  CHECK(spare.unpin);
  CHECK_FALSE(tl.reading.upstream_wait_ms);
  CHECK_THROWS_WITH(parse_trace_line(R"({"t":1,"upstreams":{"api":{"lag_ms":3}}})", std::nullopt),
                    Catch::Contains("\"upstreams\": \"api\": unknown key \"lag_ms\""));
  CHECK_THROWS_WITH(parse_trace_line(R"({"t":1,"upstreams":[1]})", std::nullopt),
                    Catch::Contains("\"upstreams\": expected an object"));
}

TEST_CASE("each upstream replays on a controller of its own, which does not move the process level",
          "[replay]") {
  // Three ticks of an upstream wait above level 1's line on "api", calm on
  // "spare", calm loops: api rises to 1, spare and the process stay at 0.
  std::string trace;
  for (int t = 1; t <= 4; ++t)
    trace += R"({"t":)" + std::to_string(t * 1000) +
             R"(,"lag_ms":1,"upstreams":{"api":{"upstream_wait_ms":170},"spare":{}}})"
             "\n";
  auto r = replay(trace);
  REQUIRE(r.code == 0);
  REQUIRE(r.ticks.size() == 4);
  CHECK(r.ticks[2]["upstreams"]["api"]["level"] == 1);
  CHECK(r.ticks[2]["upstreams"]["api"]["changed"] == true);
  CHECK(r.ticks[2]["upstreams"]["api"]["trigger"] == "upstream_wait");
  CHECK(r.ticks[3]["upstreams"]["spare"]["level"] == 0);
  CHECK(r.ticks[3]["level"] == 0);
  CHECK(r.summary["max_level"] == 0);
  CHECK(r.summary["upstreams"]["api"]["max_level"] == 1);
  CHECK(r.summary["upstreams"]["api"]["level_changes"] == 1);
  CHECK(r.summary["upstreams"]["spare"]["max_level"] == 0);
  // The same readings in today's format (no upstreams): one controller, as before.
  std::string old;
  for (int t = 1; t <= 4; ++t)
    old += R"({"t":)" + std::to_string(t * 1000) +
           R"(,"lag_ms":1,"upstream_wait_ms":170})"
           "\n";
  auto o = replay(old);
  CHECK(o.ticks[2]["level"] == 1);
  CHECK_FALSE(o.ticks[2].contains("upstreams"));
  CHECK_FALSE(o.summary.contains("upstreams"));
}

TEST_CASE("a tick-log line writes each upstream's reading and decision, and reads back",
          "[replay][trace]") {
  Reading process;
  process.t = 5000ms;
  process.lag_ms = 2.0;
  Reading api;
  api.t = 5000ms;
  api.upstream_wait_ms = 300.0;
  api.upstream_timeout = true;
  Decision d, ud;
  ud.level = Level::constrained;
  ud.to = Level::constrained;
  ud.changed = true;
  PinRequest pin{Level::critical, 60s, "incident"};
  sluice::replay::UpstreamTick ups[] = {{"api", &api, &ud, &pin, false}};
  TickLogExtras extras;
  extras.upstreams = ups;
  auto line = tick_log_line(process, nullptr, d, extras);
  auto j = json::parse(line);
  CHECK(j["upstreams"]["api"]["level"] == 1);
  CHECK(j["upstreams"]["api"]["upstream_wait_ms"] == 300.0);
  auto back = parse_trace_line(line, std::nullopt);
  REQUIRE(back.upstreams.size() == 1);
  CHECK(back.upstreams[0].name == "api");
  CHECK(*back.upstreams[0].reading.upstream_wait_ms == 300.0);
  CHECK(back.upstreams[0].reading.upstream_timeout);
  REQUIRE(back.upstreams[0].pin);
  CHECK(back.upstreams[0].pin->ttl == 60s);
  CHECK(*back.reading.lag_ms == 2.0);
}
