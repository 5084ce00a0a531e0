#include "replay/trace.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <deque>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <utility>

namespace sluice::replay {

using admission::Decision;
using admission::Lane;
using admission::Level;
using admission::Millis;
using admission::Reading;
using Json = nlohmann::json;

namespace {

constexpr std::string_view kInputKeys =
    "t, lag_ms, lag_fresh, upstream_wait_ms, upstream_timeout, stall_ms, ok, requests, pin, unpin, "
    "upstreams";
constexpr std::string_view kUpstreamKeys = "upstream_wait_ms, upstream_timeout, ok, pin, unpin";

// The decision's fields, written by the tick log and the replay: ignored on input.
bool is_output_key(std::string_view key) {
  for (std::string_view k :
       {"level", "changed", "from", "to", "trigger", "suppressed", "admitted", "shed", "restoring",
        "actions", "actions_applied", "actions_undone", "restoration"})
    if (k == key) return true;
  return false;
}

[[noreturn]] void fail(const std::string& message) { throw TraceError(message); }

std::string in_quotes(std::string_view key) { return "\"" + std::string(key) + "\""; }

std::string shown(const Json& value) {
  std::string s = value.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// A measured value: a finite number >= 0; null means not measured.
std::optional<double> measurement(std::string_view key, const Json& value) {
  if (value.is_null()) return std::nullopt;
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
    fail(in_quotes(key) + ": expected a number of milliseconds >= 0, got " + shown(value));
  return value.get<double>();
}

bool boolean(std::string_view key, const Json& value) {
  if (!value.is_boolean()) fail(in_quotes(key) + ": expected true or false, got " + shown(value));
  return value.get<bool>();
}

std::uint64_t count(std::string_view key, const Json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  fail(in_quotes(key) + ": expected an integer >= 0, got " + shown(value));
}

Requests parse_requests(const Json& value) {
  if (!value.is_object())
    fail("\"requests\": expected an object like {\"bulk\":N,\"standard\":N,\"heavy\":N}, got " +
         shown(value));
  Requests out{};
  for (const auto& [key, n] : value.items()) {
    auto lane = admission::lane_from_string(key);
    if (!lane)
      fail("\"requests\": " + in_quotes(key) + " is not a lane; valid: bulk, standard, heavy");
    out[admission::index(*lane)] = count("requests." + key, n);
  }
  return out;
}

PinRequest parse_pin(const Json& value) {
  if (!value.is_object())
    fail("\"pin\": expected an object like {\"level\":2,\"ttl\":\"60s\"}, got " + shown(value));
  PinRequest pin;
  bool has_level = false;
  for (const auto& [key, v] : value.items()) {
    if (key == "level") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 3)
        fail("\"pin.level\": expected 0, 1, 2 or 3, got " + shown(v));
      pin.level = static_cast<Level>(v.get<std::int64_t>());
      has_level = true;
    } else if (key == "ttl") {
      if (!v.is_string()) fail("\"pin.ttl\": expected a duration like \"60s\", got " + shown(v));
      // 0 is valid: the tick log writes the TTL left at the tick, and a pin set and
      // expired between two ticks is replayed as set and expired at that tick.
      try {
        pin.ttl = parse_duration(v.get<std::string>());
      } catch (const TraceError& e) {
        fail(std::string("\"pin.ttl\": ") + e.what());
      }
    } else if (key == "reason") {
      if (!v.is_string()) fail("\"pin.reason\": expected a string, got " + shown(v));
      pin.reason = v.get<std::string>();
    } else {
      fail("\"pin\": unknown key " + in_quotes(key) + "; valid: level, ttl, reason");
    }
  }
  if (!has_level) fail("\"pin\": \"level\" is required");
  return pin;
}

// The keys a line and an upstream's part of it share: the wait, the timeout,
// ok, pin and unpin. False when `key` is none of them.
bool shared_key(const std::string& key, const Json& v, Reading& r, std::optional<PinRequest>& pin,
                bool& unpin) {
  if (key == "upstream_wait_ms")
    r.upstream_wait_ms = measurement(key, v);
  else if (key == "upstream_timeout")
    r.upstream_timeout = boolean(key, v);
  else if (key == "ok")
    r.ok = boolean(key, v);
  else if (key == "pin")
    pin = parse_pin(v);
  else if (key == "unpin")
    unpin = boolean(key, v);
  else
    return false;
  return true;
}

std::vector<UpstreamTrace> parse_upstreams(const Json& value, Millis t) {
  if (!value.is_object())
    fail("\"upstreams\": expected an object of upstream names, got " + shown(value));
  std::vector<UpstreamTrace> out;
  for (const auto& [name, u] : value.items()) {
    const std::string where = "\"upstreams\": " + in_quotes(name);
    if (!u.is_object()) fail(where + ": expected an object, got " + shown(u));
    UpstreamTrace ut;
    ut.name = name;
    ut.reading.t = t;
    for (const auto& [key, v] : u.items()) {
      try {
        if (!shared_key(key, v, ut.reading, ut.pin, ut.unpin) && !is_output_key(key))
          fail("unknown key " + in_quotes(key) + "; valid: " + std::string(kUpstreamKeys));
      } catch (const TraceError& e) {
        fail(where + ": " + e.what());
      }
    }
    out.push_back(std::move(ut));
  }
  return out;
}

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, ec == std::errc{} ? end : buf);
}

void append_lanes(std::string& out, std::string_view key, const Requests& r) {
  out += ",\"";
  out += key;
  out += "\":{";
  for (Lane lane : admission::kLanes) {
    if (lane != Lane::bulk) out += ',';
    out += '"';
    out += admission::to_string(lane);
    out += "\":";
    out += std::to_string(r[admission::index(lane)]);
  }
  out += '}';
}

// ,"level":..,"changed":..,"from":..,"to":..,"trigger":..,"suppressed":..
void append_decision(std::string& out, const Decision& d) {
  auto level = [](Level l) { return std::to_string(static_cast<int>(l)); };
  out += ",\"level\":" + level(d.level);
  out += d.changed ? ",\"changed\":true" : ",\"changed\":false";
  out += ",\"from\":" + level(d.from);
  out += ",\"to\":" + level(d.to);
  out += ",\"trigger\":\"";
  out += admission::to_string(d.trigger);
  out += '"';
  if (d.suppressed) {
    out += ",\"suppressed\":{\"to\":" + level(d.suppressed->to) + ",\"trigger\":\"";
    out += admission::to_string(d.suppressed->trigger);
    out += "\"}";
  } else {
    out += ",\"suppressed\":null";
  }
  if (d.restoring) out += ",\"restoring\":true";
}

// ,"NAME":["short_timeouts",...]
void append_action_set(std::string& out, std::string_view name, admission::ActionSet set) {
  out += ",\"";
  out += name;
  out += "\":[";
  bool first = true;
  for (auto a : admission::kActions) {
    if (!admission::has(set, a)) continue;
    if (!std::exchange(first, false)) out += ',';
    out += '"';
    out += admission::to_string(a);
    out += '"';
  }
  out += ']';
}

// ,"actions":[..] and what the tick changed: ,"actions_applied":[..],"actions_undone":[..]
void append_actions(std::string& out, const ActionsTick& a) {
  append_action_set(out, "actions", a.active);
  if (a.step.applied) append_action_set(out, "actions_applied", a.step.applied);
  if (a.step.undone) append_action_set(out, "actions_undone", a.step.undone);
  if (a.step.restoration) out += ",\"restoration\":true";
}

std::string format_duration(Millis ms);

// ,"upstream_wait_ms":..,"upstream_timeout":true: what waits on an upstream, when measured.
void append_wait(std::string& out, const Reading& r) {
  if (r.upstream_wait_ms) {
    out += ",\"upstream_wait_ms\":";
    append_number(out, *r.upstream_wait_ms);
  }
  if (r.upstream_timeout) out += ",\"upstream_timeout\":true";
}

// ,"unpin":true and ,"pin":{...} when set.
void append_pin(std::string& out, const PinRequest* pin, bool unpin) {
  if (unpin) out += ",\"unpin\":true";
  if (!pin) return;
  out += ",\"pin\":{\"level\":" + std::to_string(static_cast<int>(pin->level));
  if (pin->ttl) out += ",\"ttl\":\"" + format_duration(*pin->ttl) + "\"";
  if (!pin->reason.empty()) out += ",\"reason\":" + Json(pin->reason).dump();
  out += '}';
}

std::string format_duration(Millis ms) {
  auto n = ms.count();
  if (n % 3'600'000 == 0 && n != 0) return std::to_string(n / 3'600'000) + "h";
  if (n % 60'000 == 0 && n != 0) return std::to_string(n / 60'000) + "m";
  if (n % 1000 == 0 && n != 0) return std::to_string(n / 1000) + "s";
  return std::to_string(n) + "ms";
}

// One report per line: the pin's change (made before the tick) folded into the tick's.
Decision merge(const std::optional<Decision>& before, Decision tick) {
  if (!before) return tick;
  if (before->changed) {
    if (!tick.changed) {
      tick.to = before->to;
      tick.trigger = before->trigger;
    }
    tick.changed = true;
    tick.from = before->from;
  } else if (!tick.changed && tick.trigger == admission::Trigger::none) {
    tick.trigger = before->trigger;
  }
  return tick;
}

// One controller's tick: a pin or unpin recorded on the line happened before
// that tick's reading.
Decision replay_tick(admission::Controller& c, const std::optional<PinRequest>& pin, bool unpin,
                     const Reading& reading) {
  std::optional<Decision> before;
  if (unpin) before = c.unpin(reading.t, "replay");
  if (pin) {
    Decision p = c.pin(pin->level, pin->ttl, reading.t, pin->reason, "replay");
    before = before ? merge(before, p) : p;
  }
  return merge(before, c.step(reading));
}

// ,"level_changes":N,"rise_suppressed":N,"max_level":N
void append_counts(std::string& out, const admission::Controller& c, Level max_level) {
  std::uint64_t changes = 0, suppressed = 0;
  const auto& stats = c.stats();
  for (const auto& from : stats.changes)
    for (const auto& to : from)
      for (auto n : to) changes += n;
  for (const auto& to : stats.suppressed)
    for (auto n : to) suppressed += n;
  out += ",\"level_changes\":" + std::to_string(changes) +
         ",\"rise_suppressed\":" + std::to_string(suppressed) +
         ",\"max_level\":" + std::to_string(static_cast<int>(max_level));
}

}  // namespace

Millis parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view unit = text.substr(digits);
  std::int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, n);
  if (digits == 0 || ec != std::errc{} || ptr != text.data() + digits)
    fail(in_quotes(text) + " is not a duration; use an integer and ms, s, m or h, e.g. 60s");
  std::int64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else
    fail(in_quotes(text) + " has no unit; use ms, s, m or h, e.g. 60s");
  if (n > INT64_MAX / scale) fail(in_quotes(text) + " is too long");
  return Millis{n * scale};
}

TraceLine parse_trace_line(std::string_view line, std::optional<Millis> previous_t) {
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("not valid JSON; each line is one JSON object");
  if (!j.is_object()) fail("expected a JSON object, got " + shown(j));
  TraceLine out;
  Reading& r = out.reading;
  bool has_t = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "t") {
      if (!v.is_number_integer() ||
          (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
        fail("\"t\": expected an integer of milliseconds >= 0, got " + shown(v));
      r.t = Millis{v.get<std::int64_t>()};
      has_t = true;
    } else if (key == "lag_ms") {
      r.lag_ms = measurement(key, v);
    } else if (key == "lag_fresh") {
      r.lag_fresh = boolean(key, v);
    } else if (key == "stall_ms") {
      r.stall_ms = measurement(key, v);
    } else if (key == "requests") {
      out.requests = parse_requests(v);
    } else if (key == "upstreams") {
      continue;  // read once t is known
    } else if (!shared_key(key, v, r, out.pin, out.unpin) && !is_output_key(key)) {
      fail("unknown key " + in_quotes(key) + "; valid: " + std::string(kInputKeys));
    }
  }
  if (!has_t) fail("\"t\" is required (ms from the start of the trace)");
  if (previous_t && r.t < *previous_t)
    fail("\"t\": " + std::to_string(r.t.count()) + " goes back from " +
         std::to_string(previous_t->count()));
  if (auto u = j.find("upstreams"); u != j.end()) out.upstreams = parse_upstreams(*u, r.t);
  return out;
}

std::string tick_log_line(const Reading& reading, const Requests* requests,
                          const Decision& decision, const TickLogExtras& extras) {
  std::string out = "{\"t\":" + std::to_string(reading.t.count());
  if (!reading.ok) out += ",\"ok\":false";
  if (reading.lag_ms) {
    out += ",\"lag_ms\":";
    append_number(out, *reading.lag_ms);
    out += reading.lag_fresh ? ",\"lag_fresh\":true" : ",\"lag_fresh\":false";
  }
  append_wait(out, reading);
  if (reading.stall_ms) {
    out += ",\"stall_ms\":";
    append_number(out, *reading.stall_ms);
  }
  if (requests) append_lanes(out, "requests", *requests);
  append_pin(out, extras.pin, extras.unpin);
  append_decision(out, decision);
  if (extras.admitted) append_lanes(out, "admitted", *extras.admitted);
  if (extras.shed) append_lanes(out, "shed", *extras.shed);
  if (!extras.upstreams.empty()) {
    out += ",\"upstreams\":{";
    bool first = true;
    for (const auto& u : extras.upstreams) {
      if (!std::exchange(first, false)) out += ',';
      std::string fields;
      if (!u.reading->ok) fields += ",\"ok\":false";
      append_wait(fields, *u.reading);
      append_pin(fields, u.pin, u.unpin);
      append_decision(fields, *u.decision);
      out += Json(std::string(u.name)).dump() + ":{" + fields.substr(1) +
             '}';  // without its leading comma
    }
    out += '}';
  }
  if (extras.actions) append_actions(out, *extras.actions);
  out += '}';
  return out;
}

int run_replay(std::istream& in, std::ostream& out, std::ostream& err,
               const ReplayOptions& options) {
  admission::Controller controller(options.controller);
  admission::Gate gate(options.mode, options.factors);
  admission::Rng rng(options.seed);
  Requests total_admitted{}, total_shed{};
  std::uint64_t ticks = 0;
  Level max_level = Level::normal;
  std::optional<Millis> previous_t;
  // Each upstream's controller, in the order the trace first names them.
  struct UpstreamReplay {
    std::string name;
    admission::Controller controller;
    Level max_level = Level::normal;
  };
  // A deque: the restoration tick holds pointers to every upstream's controller.
  std::deque<UpstreamReplay> upstreams;
  admission::EmergencyActions actions;
  std::uint64_t actions_applied = 0, restorations = 0;

  std::string line;
  for (std::size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t'; }))
      continue;
    TraceLine tl;
    try {
      tl = parse_trace_line(line, previous_t);
    } catch (const TraceError& e) {
      err << "sluice: replay: line " << line_no << ": " << e.what() << "\n";
      return 2;
    }
    previous_t = tl.reading.t;
    const Millis t = tl.reading.t;

    // Every upstream the line names has its controller before any steps: the
    // restoration tick looks at all of them.
    std::vector<UpstreamReplay*> named;
    named.reserve(tl.upstreams.size());
    for (const auto& ut : tl.upstreams) {
      auto it = std::find_if(upstreams.begin(), upstreams.end(),
                             [&](const UpstreamReplay& u) { return u.name == ut.name; });
      if (it == upstreams.end())
        it = upstreams.insert(upstreams.end(),
                              UpstreamReplay{ut.name, admission::Controller(options.controller)});
      named.push_back(&*it);
    }
    std::vector<admission::Controller*> all{&controller};
    for (auto& u : upstreams) all.push_back(&u.controller);
    admission::prepare_restoration(actions, all);

    Decision d = replay_tick(controller, tl.pin, tl.unpin, tl.reading);
    ++ticks;
    max_level = std::max(max_level, d.level);
    std::vector<Decision> uds;
    uds.reserve(named.size());
    for (std::size_t i = 0; i < named.size(); ++i) {
      const auto& ut = tl.upstreams[i];
      uds.push_back(replay_tick(named[i]->controller, ut.pin, ut.unpin, ut.reading));
      named[i]->max_level = std::max(named[i]->max_level, uds.back().level);
    }
    const bool emergency = admission::highest_level(all) == Level::emergency;
    bool restoring = d.restoring;
    for (const auto& ud : uds) restoring = restoring || ud.restoring;
    ActionsTick at{actions.tick(options.actions, emergency, restoring, t), 0};
    at.active = actions.active();
    actions_applied += static_cast<std::uint64_t>(std::popcount(at.step.applied));
    restorations += at.step.restoration ? 1 : 0;

    std::string row = "{\"t\":" + std::to_string(t.count());
    append_decision(row, d);
    if (tl.requests) {
      Requests admitted{}, shed{};
      for (Lane lane : admission::kLanes) {
        auto i = admission::index(lane);
        for (std::uint64_t n = 0; n < (*tl.requests)[i]; ++n) {
          auto g = gate.admit(lane, d.level, rng);
          ++(g.outcome == admission::Outcome::admitted ? admitted : shed)[i];
        }
        total_admitted[i] += admitted[i];
        total_shed[i] += shed[i];
      }
      append_lanes(row, "admitted", admitted);
      append_lanes(row, "shed", shed);
    }
    if (!named.empty()) {
      row += ",\"upstreams\":{";
      for (std::size_t i = 0; i < named.size(); ++i) {
        if (i > 0) row += ',';
        std::string decision;
        append_decision(decision, uds[i]);
        row += Json(named[i]->name).dump() + ":{" + decision.substr(1) +
               '}';  // without its leading comma
      }
      row += '}';
    }
    if (options.actions.enabled || at.active || at.step.undone) append_actions(row, at);
    row += "}\n";
    out << row;
  }

  if (in.bad()) {
    err << "sluice: replay: reading the trace failed\n";
    return 2;
  }
  std::string summary = "{\"summary\":{\"ticks\":" + std::to_string(ticks);
  append_counts(summary, controller, max_level);
  append_lanes(summary, "shed", total_shed);
  append_lanes(summary, "admitted", total_admitted);
  if (options.actions.enabled)
    summary += ",\"actions_applied\":" + std::to_string(actions_applied) +
               ",\"restorations\":" + std::to_string(restorations);
  if (!upstreams.empty()) {
    summary += ",\"upstreams\":{";
    for (std::size_t i = 0; i < upstreams.size(); ++i) {
      if (i > 0) summary += ',';
      summary += Json(upstreams[i].name).dump() + ":{";
      std::string counts;
      append_counts(counts, upstreams[i].controller, upstreams[i].max_level);
      summary += counts.substr(1) + '}';  // without its leading comma
    }
    summary += '}';
  }
  summary += "}}\n";
  out << summary;
  out.flush();
  return 0;
}

}  // namespace sluice::replay
