#include "proxy/ticker.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "proxy/directory.hpp"
#include "proxy/redis_link.hpp"

namespace sluice::proxy {

using admission::Level;
using admission::Millis;
using Json = nlohmann::json;

namespace {

// An audit line's first fields: its time and what it records.
Json audit_head(std::string_view what) {
  Json j;
  auto secs = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  j["ts"] = ts;
  j["audit"] = what;
  return j;
}

}  // namespace

Ticker::Ticker(Runtime& rt, Watchdog& watchdog, net::io_context& ioc, int log_fd)
    : rt_(rt),
      timer_(ioc),
      start_(Clock::now()),
      audit_(log_fd >= 0 ? log_fd : STDERR_FILENO),
      reloader_(rt, audit_),
      controller_(rt.config.admission.controller),
      upstream_controllers_(rt.config.upstreams.size(),
                            admission::Controller(rt.config.admission.controller)),
      sampler_(rt, watchdog),
      pins_file_(rt.config.admission.pins_file),
      logged_upstreams_(rt.config.upstreams.size()) {
  last_sample_.upstreams.resize(rt.config.upstreams.size());  // read before the first tick
  const auto& path = rt.config.admission.tick_log;
  if (!path.empty()) {
    tick_log_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (tick_log_fd_ < 0) {
      int err = errno;
      throw config::ConfigError("SLUICE_TICK_LOG",
                                "cannot open " + path + ": " + std::strerror(err));
    }
  }
  publish();
}

Ticker::~Ticker() {
  if (tick_log_fd_ >= 0) ::close(tick_log_fd_);
}

Millis Ticker::now() const { return std::chrono::duration_cast<Millis>(Clock::now() - start_); }

void Ticker::start() {
  read_pins_file();
  next_ = Clock::now() + in_force().admission.tick;
  arm();
}

void Ticker::arm() {
  timer_.expires_at(next_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_tick();
  });
}

void Ticker::on_tick() {
  if (reloader_.files_changed()) reload("file changed");
  if (reloader_.certificates_changed()) reloader_.reload_certificates("file changed");
  reloader_.rotate_tickets_if_due(std::chrono::steady_clock::now());
  read_pins_file();
  auto t = now();
  last_sample_ = sampler_.sample(t, in_force().admission.tick);
  // Each controller steps on its own reading; a pin that expired in the step is audited.
  auto step = [&](admission::Controller& c, const admission::Reading& r,
                  std::optional<std::size_t> upstream) {
    auto before_pin = c.pin_state();
    if (logged_for(upstream).unpin) c.unpinned_at(r.t);
    auto decision = c.step(r);
    if (before_pin && !c.pin_state())
      audit("pin_expired", before_pin->level, c.level(), before_pin->who, before_pin->reason,
            std::nullopt, upstream);
    return decision;
  };
  const auto all = controllers();
  admission::prepare_restoration(actions_, all);
  auto decision = step(controller_, last_sample_.process, std::nullopt);
  std::vector<admission::Decision> decisions;
  decisions.reserve(upstream_controllers_.size());
  bool restoring = decision.restoring;
  for (std::size_t u = 0; u < upstream_controllers_.size(); ++u) {
    decisions.push_back(step(upstream_controllers_[u], last_sample_.upstreams[u], u));
    restoring = restoring || decisions.back().restoring;
  }
  const auto actions = act(t, restoring, all);
  publish();
  if (tick_log_fd_ >= 0) {
    // Replay applies a pin at this tick: give it what was left of its TTL
    // here, so it expires in the replay when it expired live.
    auto pin_of = [&](LoggedPin& l) -> const replay::PinRequest* {
      if (!l.pin) return nullptr;
      if (l.expires) l.pin->ttl = std::max(Millis{0}, *l.expires - t);
      return &*l.pin;
    };
    replay::TickLogExtras extras;
    extras.pin = pin_of(logged_);
    extras.unpin = logged_.unpin;
    std::vector<replay::UpstreamTick> ups;
    ups.reserve(decisions.size());
    for (std::size_t u = 0; u < decisions.size(); ++u)
      ups.push_back({rt_.config.upstreams[u].name, &last_sample_.upstreams[u], &decisions[u],
                     pin_of(logged_upstreams_[u]), logged_upstreams_[u].unpin});
    extras.upstreams = ups;
    if (in_force().admission.actions.enabled || actions.active || actions.step.undone)
      extras.actions = &actions;
    std::string line =
        replay::tick_log_line(last_sample_.process, &sampler_.arrivals(), decision, extras);
    line += '\n';
    if (::write(tick_log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      ++tick_log_errors_;
  }
  logged_ = {};
  for (auto& l : logged_upstreams_) l = {};
  // Ticks keep their cadence: a late tick does not shift the ones after it.
  next_ += in_force().admission.tick;
  auto current = Clock::now();
  if (next_ < current) next_ = current;
  arm();
}

std::vector<admission::Controller*> Ticker::controllers() {
  std::vector<admission::Controller*> all{&controller_};
  for (auto& c : upstream_controllers_) all.push_back(&c);
  return all;
}

replay::ActionsTick Ticker::act(Millis t, bool restoring,
                                std::span<admission::Controller* const> all) {
  const Level highest = admission::highest_level(all);  // the process's level or an upstream's
  const bool emergency = highest == Level::emergency;
  const auto& config = in_force().admission;
  replay::ActionsTick out{actions_.tick(config.actions, emergency, restoring, t), 0};
  out.active = actions_.active();
  rt_.published.connection_floor.store(static_cast<std::int64_t>(config.connection_floor),
                                       std::memory_order_relaxed);
  rt_.published.actions.store(out.active, std::memory_order_relaxed);
  for (auto a : admission::kActions) {
    const int change = admission::has(out.step.applied, a)  ? 0
                       : admission::has(out.step.undone, a) ? 1
                                                            : -1;
    if (change < 0) continue;
    ++action_changes_[static_cast<std::size_t>(a)][static_cast<std::size_t>(change)];
    Json j = audit_head("emergency_action");
    j["action"] = admission::to_string(a);
    j["change"] = change == 0 ? "applied" : "undone";
    if (change == 1)
      j["why"] = !admission::has(config.actions.enabled, a) ? "switched_off"
                 : out.step.restoration                     ? "restoration"
                                                            : "left_emergency";
    j["level"] = static_cast<int>(highest);
    j["active"] = admission::actions_text(out.active);
    audit_.write_line(j.dump());
    audit_.flush();
  }
  return out;
}

void Ticker::publish() {
  auto t = now();
  auto put = [&](PublishedLevel& p, const admission::Controller& c) {
    p.level.store(static_cast<std::uint8_t>(c.level()), std::memory_order_relaxed);
    for (auto lane : admission::kLanes) {
      auto wait = admission::level_wait(c, live().gate, lane, t);
      p.readmit_ms[admission::index(lane)].store(wait ? wait->count() : -1,
                                                 std::memory_order_relaxed);
    }
  };
  put(rt_.published.process, controller_);
  for (std::size_t u = 0; u < upstream_controllers_.size(); ++u)
    put(rt_.published.upstreams[u], upstream_controllers_[u]);
}

Ticker::PinResult Ticker::pin(int level, std::optional<Millis> ttl, std::string reason,
                              std::string who, std::optional<std::size_t> upstream) {
  if (level < 0 || level > 3) return {false, "level must be 0..3"};
  auto& c = controller_for(upstream);
  auto from = c.level();
  auto t = now();
  c.pin(static_cast<Level>(level), ttl, t, reason, who);
  audit("pin", from, c.level(), who, reason, ttl, upstream);
  auto& logged = logged_for(upstream);
  logged.pin = replay::PinRequest{static_cast<Level>(level), ttl, reason};
  logged.expires.reset();
  if (ttl) logged.expires = t + *ttl;
  logged.unpin = false;
  publish();
  return {true, {}};
}

void Ticker::unpin(std::string who, std::optional<std::size_t> upstream) {
  auto& c = controller_for(upstream);
  auto pin = c.pin_state();
  if (!pin) return;
  auto from = c.level();
  c.unpin(now(), who);
  audit("unpin", from, c.level(), who, pin->reason, std::nullopt, upstream);
  auto& logged = logged_for(upstream);
  logged.pin.reset();
  logged.unpin = true;
  publish();
}

void Ticker::audit(std::string_view what, Level from, Level to, const std::string& who,
                   const std::string& reason, std::optional<Millis> ttl,
                   std::optional<std::size_t> upstream) {
  Json j = audit_head(what);
  j["from"] = static_cast<int>(from);
  j["to"] = static_cast<int>(to);
  j["who"] = who;
  j["reason"] = reason;
  if (upstream) j["upstream"] = rt_.config.upstreams[*upstream].name;
  if (ttl) j["ttl_s"] = static_cast<double>(ttl->count()) / 1000.0;
  audit_.write_line(j.dump());
  audit_.flush();
}

void Ticker::read_pins_file() {
  auto read = pins_file_.read(std::chrono::system_clock::now());
  if (!read.changed) return;
  auto current = controller_.pin_state();
  bool ours = current && current->who == "pins-file";
  if (!read.pin) {
    if (ours) unpin("pins-file");
    return;
  }
  const auto& path = pins_file_.path();
  try {
    auto result = this->pin(read.pin->level, read.pin->ttl, read.pin->reason, "pins-file");
    if (!result.ok)
      std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(),
                   result.error.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(), e.what());
    if (ours) unpin("pins-file");
  }
}

bool Ticker::reload(std::string_view why) {
  if (!reloader_.reload(why)) return false;
  controller_.reconfigure(in_force().admission.controller);
  for (auto& c : upstream_controllers_) c.reconfigure(in_force().admission.controller);
  publish();
  return true;
}

namespace {

// Tenants: the key, the table, and the fleet's link (SLUICE_REDIS_URL).
// The fleet's capacity sharing (SLUICE_FLEET_CAPACITY), per upstream: its
// share, whose value it holds (fleet, or local while Redis is silent), the
// fleet's K̂, K, epoch and members. Null without it.
Json fleet_json(const Runtime& rt) {
  if (!rt.redis || rt.redis->fleet().empty()) return nullptr;
  const auto& v = rt.redis->view();
  Json j;
  j["instances"] = v.instances;
  j["round_trip_ms"] = v.round_trip_s * 1000.0;
  j["subscribed"] = v.subscribed;
  j["pushed"] = v.pushed;
  Json ups = Json::object();
  const auto& fleet = rt.redis->fleet();
  for (std::size_t u = 0; u < fleet.size(); ++u) {
    const auto& m = fleet[u];
    const auto& r = m.last();
    const bool local = m.source() == admission::FleetMember::Source::local;
    ups[rt.config.upstreams[u].name] = {{"source", local ? "local" : "fleet"},
                                        {"share", r.slots},
                                        {"khat", r.khat},
                                        {"k", r.carrying},
                                        {"epoch", r.epoch},
                                        {"members", r.members},
                                        {"others_in_flight", r.others}};
  }
  j["upstreams"] = ups;
  return j;
}

Json tenants_json(const Runtime& rt) {
  const auto& cfg = rt.config;
  const auto& table = *rt.tenant_table;
  Json j;
  j["key"] = cfg.tenants.key.str();
  j["tracked"] = table.size();
  j["capacity"] = table.capacity();
  j["evictions"] = table.evictions();
  j["untracked"] = table.untracked();
  if (!rt.redis) {
    j["redis"] = nullptr;
    return j;
  }
  const auto& v = rt.redis->view();
  Json r;
  r["url"] = cfg.redis.str();
  r["up"] = v.up;
  r["instances"] = v.instances;
  r["rounds"] = {{"ok", v.ok}, {"failed", v.failed}};
  r["tenants_last_round"] = v.tenants;
  r["round_trip_ms"] = v.round_trip_s * 1000.0;
  r["last_ok_s_ago"] = v.last_ok == Clock::time_point{}
                           ? Json(nullptr)
                           : Json(std::chrono::duration<double>(Clock::now() - v.last_ok).count());
  r["last_error"] = v.error.empty() ? Json(nullptr) : Json(v.error);
  j["redis"] = r;
  return j;
}

}  // namespace

std::string Ticker::state_json() const {
  Json j;
  auto t = now();
  // A controller's level, its last change, its pin, and the reading it last stepped on.
  auto level_of = [&](Json& into, const admission::Controller& c, const admission::Reading& r) {
    into["level"] = static_cast<int>(c.level());
    into["level_name"] = std::string(admission::to_string(c.level()));
    into["trigger"] = std::string(admission::to_string(c.trigger()));
    into["streak"] = c.streak();
    into["last_change_ms_ago"] = (t - c.last_change()).count();
    Json reading;
    reading["t_ms"] = r.t.count();
    reading["ok"] = r.ok;
    reading["lag_ms"] = r.lag_ms ? Json(*r.lag_ms) : Json(nullptr);
    reading["lag_fresh"] = r.lag_fresh;
    reading["upstream_wait_ms"] = r.upstream_wait_ms ? Json(*r.upstream_wait_ms) : Json(nullptr);
    reading["upstream_timeout"] = r.upstream_timeout;
    reading["stall_ms"] = r.stall_ms ? Json(*r.stall_ms) : Json(nullptr);
    into["reading"] = reading;
    if (auto& p = c.pin_state()) {
      Json pin;
      pin["level"] = static_cast<int>(p->level);
      pin["reason"] = p->reason;
      pin["who"] = p->who;
      pin["expires_in_s"] = p->expires_at
                                ? Json(static_cast<double>((*p->expires_at - t).count()) / 1000.0)
                                : Json(nullptr);
      into["pin"] = pin;
    } else {
      into["pin"] = nullptr;
    }
  };
  const auto& c = controller_;
  j["mode"] = std::string(admission::to_string(live().gate.mode()));
  // The process's level (its own loops); each upstream's is under upstreams.
  level_of(j, c, last_sample_.process);
  j["tick_ms"] = in_force().admission.tick.count();
  j["reloads"] = {{"ok", reloads(true)}, {"failed", reloads(false)}};
  j["tenants"] = tenants_json(rt_);
  j["fleet"] = fleet_json(rt_);
  if (rt_.ingest) {
    auto v = rt_.ingest->view();
    Json lanes = Json::object();
    for (auto lane : admission::kLanes) {
      auto l = admission::index(lane);
      lanes[std::string(admission::to_string(lane))] = {
          {"in_flight", v.in_flight[l]}, {"cap", v.cap[l]}, {"waiting", v.waiting[l]}};
    }
    j["ingest"] = {{"budget", v.budget},
                   {"in_flight", v.total},
                   {"drain_bytes_per_s", v.drain_bytes_per_s},
                   {"lanes", lanes}};
  } else {
    j["ingest"] = nullptr;
  }
  {
    // Seed 003's switch: what is enabled, since when a level has been at
    // emergency, what is applied now and since when.
    const auto& ac = in_force().admission;
    Json applied = Json::object();
    for (auto a : admission::kActions)
      if (auto at = actions_.applied_at(a))
        applied[std::string(admission::to_string(a))] =
            static_cast<double>((t - *at).count()) / 1000.0;
    auto since = actions_.emergency_since();
    j["emergency_actions"] = {
        {"enabled", admission::actions_text(ac.actions.enabled)},
        {"after_s", static_cast<double>(ac.actions.after.count()) / 1000.0},
        {"connection_floor", ac.connection_floor},
        {"emergency_for_s",
         since ? Json(static_cast<double>((t - *since).count()) / 1000.0) : Json(nullptr)},
        {"applied_for_s", applied}};
  }
  // The bulkheads (seed 001 §11): per upstream, then per lane x upstream.
  auto views = rt_.bulkhead_views();
  auto now_us = rt_.micros(Clock::now());
  auto age_s = [&](std::optional<admission::Micros> since) -> Json {
    if (!since) return nullptr;
    return static_cast<double>((now_us - *since).count()) / 1e6;
  };
  auto age_s_until = [&](admission::Micros until) -> Json {
    return static_cast<double>(std::max(admission::Micros{0}, until - now_us).count()) / 1e6;
  };
  Json lanes = Json::object();
  for (auto lane : admission::kLanes) {
    auto i = admission::index(lane);
    std::int64_t in_flight = 0;
    std::array<std::uint64_t, kOutcomes> outcomes{};
    for (auto& w : rt_.workers) {
      auto& ls = w->stats().lane[i];
      in_flight += ls.in_flight.load(std::memory_order_relaxed);
      for (std::size_t o = 0; o < kOutcomes; ++o)
        for (auto& r : ls.decisions[o]) outcomes[o] += r.load(std::memory_order_relaxed);
    }
    int waiting = 0;
    for (const auto& v : views) waiting += v.lanes[i].waiting;
    Json l;
    l["in_flight"] = in_flight;
    l["waiting"] = waiting;
    l["admitted"] = outcomes[0];
    l["shed"] = outcomes[1];
    l["would_shed"] = outcomes[2];
    l["factor"] = live().gate.factors()[i][static_cast<std::size_t>(c.level())];
    auto readmit = rt_.published.process.readmit_ms[i].load(std::memory_order_relaxed);
    l["readmit_in_s"] = readmit >= 0 ? Json(static_cast<double>(readmit) / 1000.0) : Json(nullptr);
    l["floor"] = live().lanes.floors[i];
    l["weight"] = live().lanes.weights[i];
    l["queue_window_s"] = static_cast<double>(live().lanes.queue_window[i].count()) / 1e6;
    lanes[std::string(admission::to_string(lane))] = l;
  }
  j["lanes"] = lanes;
  Json upstreams = Json::array();
  Json starving = Json::array();
  Json closed_upstreams = Json::array();
  for (std::size_t u = 0; u < rt_.config.upstreams.size(); ++u) {
    std::int64_t conns = 0, waiting = 0;
    for (auto& w : rt_.workers) {
      conns += w->stats().upstream[u].connections.load(std::memory_order_relaxed);
      waiting += w->stats().upstream[u].waiting.load(std::memory_order_relaxed);
    }
    const auto& v = views[u];
    const auto& name = rt_.config.upstreams[u].name;
    auto gate = rt_.gates[u]->view();
    if (gate.closed)  // a closed upstream is the top item of starving
      closed_upstreams.push_back(
          {{"upstream", name},
           {"closed", true},
           {"closed_for_s", gate.until ? age_s_until(*gate.until) : Json(nullptr)}});
    Json per_lane = Json::object();
    for (auto lane : admission::kLanes) {
      const auto& lv = v.lanes[admission::index(lane)];
      per_lane[std::string(admission::to_string(lane))] = {
          {"running", lv.running},
          {"waiting", lv.waiting},
          {"guaranteed", lv.guaranteed},
          {"borrowed", lv.borrowed},
          {"delegated", lv.delegated},
          {"oldest_waiting_s", age_s(lv.oldest_waiting_since)},
          {"starving", lv.starving},
          {"overload_remembered",
           {{"lasted_s", static_cast<double>(lv.remembered_overload.count()) / 1e6},
            {"clients", lv.remembered_clients}}}};
      if (lv.starving)
        starving.push_back({{"lane", std::string(admission::to_string(lane))},
                            {"upstream", name},
                            {"waiting", lv.waiting},
                            {"waiting_for_s", age_s(lv.waiting_since)},
                            {"pinned", lv.pinned_starving}});
    }
    // Hosts: every address of the upstream's names; in flight summed over the
    // threads, ejected when any thread has it out of its choice.
    const auto& dir = *rt_.directory;
    Json hosts = Json::array();
    for (const auto& h : dir.host_states(u)) {
      Json host = {{"address", h.address},   {"name", h.name},
                   {"healthy", h.healthy()}, {"in_flight", h.in_flight},
                   {"ejected", h.ejected},   {"ejected_for_s", h.ejected_for_s},
                   {"failures", h.failures}};
      if (h.checked)
        host["health_check"] = {{"passing", h.checks_pass},
                                {"streak", h.streak},
                                {"last", h.last_check},
                                {"passed", h.checks_passed},
                                {"failed", h.checks_failed}};
      hosts.push_back(std::move(host));
    }
    Json names = Json::array();
    for (const auto& n : dir.names(u, Clock::now())) {
      if (n.literal) continue;
      names.push_back({{"host", n.host},
                       {"addresses", n.addresses},
                       {"resolved", n.error.empty()},
                       {"error", n.error.empty() ? Json(nullptr) : Json(n.error)},
                       {"ttl_s", n.ttl_s},
                       {"next_lookup_in_s", n.next_lookup_in_s},
                       {"lookups_ok", n.lookups_ok},
                       {"lookups_failed", n.lookups_failed}});
    }
    Json entry = {
        {"name", name},
        {"hosts", hosts},
        {"names", names},
        {"unresolved", hosts.empty()},
        {"connections", conns},
        {"waiting_for_connection", waiting},
        {"capacity", v.estimate},
        {"carrying_capacity", v.carrying},
        {"slow_start", v.slow_start},
        {"exhausted", v.exhausted_at.has_value()},
        {"exhausted_ago_s", age_s(v.exhausted_at)},
        {"why", v.exhausted_at ? Json(std::string(admission::to_string(v.why))) : Json(nullptr)},
        {"slots", v.slots},
        {"free", v.free},
        {"running", v.running},
        {"waiting", v.waiting},
        {"successes", v.successes},
        {"failures", v.failures},
        {"mean_latency_ms", static_cast<double>(v.mean_latency.count()) / 1e3},
        {"refused_come_back_to",
         {{"quiet_per_s", v.quiet_per_s},
          {"served_per_s", v.served_per_s},
          {"stream_seats", v.stream_seats},
          {"spare_per_s", v.spare_per_s},
          {"request_hold_ms", static_cast<double>(v.request_hold.count()) / 1e3},
          {"stream_hold_ms", static_cast<double>(v.stream_hold.count()) / 1e3}}},
        {"lanes", per_lane},
        {"closed", gate.closed},
        {"closed_for_s", gate.until ? age_s_until(*gate.until) : Json(nullptr)},
        {"last_probe_ago_s", age_s(gate.last_probe)},
        {"next_probe_in_s", gate.closed ? age_s_until(gate.next_probe) : Json(nullptr)},
        {"budget_remaining",
         v.budget && now_us < v.budget->until ? Json(v.budget->remaining) : Json(nullptr)},
        {"budget_reset_in_s",
         v.budget && now_us < v.budget->until ? age_s_until(v.budget->until) : Json(nullptr)}};
    level_of(entry, upstream_controllers_[u], last_sample_.upstreams[u]);
    upstreams.push_back(std::move(entry));
  }
  j["upstreams"] = upstreams;
  int heavy = 0;
  std::optional<admission::Micros> youngest;
  for (const auto& v : views) {
    const auto& lv = v.lanes[admission::index(admission::Lane::heavy)];
    heavy += lv.running;
    if (lv.youngest_seat_since && (!youngest || *lv.youngest_seat_since > *youngest))
      youngest = lv.youngest_seat_since;
  }
  j["heavy_leases"] = {{"count", heavy},
                       {"youngest_age_s", age_s(youngest)},
                       {"cap", rt_.heavy_cap ? Json(rt_.heavy_cap->cap()) : Json(nullptr)}};
  // Client connections, and the HTTP/2 ones' streams (the status page's streams per connection).
  std::int64_t connections = 0, h2_connections = 0, h2_streams = 0;
  for (const auto& w : rt_.workers) {
    connections += w->stats().client_connections.load(std::memory_order_relaxed);
    h2_connections += w->stats().h2_connections.load(std::memory_order_relaxed);
    h2_streams += w->stats().h2_streams.load(std::memory_order_relaxed);
  }
  j["clients"] = {{"connections", connections},
                  {"h2_connections", h2_connections},
                  {"h2_streams", h2_streams},
                  {"h2_streams_per_connection",
                   h2_connections > 0
                       ? Json(static_cast<double>(h2_streams) / static_cast<double>(h2_connections))
                       : Json(nullptr)}};
  for (auto& entry : starving) closed_upstreams.push_back(entry);
  j["starving"] = closed_upstreams;
  j["config"] = Json::parse(config::to_json(running()));
  return j.dump(2);
}

config::Config Ticker::running() const {
  // What the process started with, and for what a reload can change, what each
  // part holds now: the workers' generation, the controller, the gates.
  config::Config c = rt_.config;
  const Live& l = live();
  c.routes = l.routes;
  c.admission.mode = l.gate.mode();
  c.admission.factors = l.gate.factors();
  c.admission.retry = l.retry;
  c.admission.lanes = l.lanes;
  c.admission.close_statuses = l.close_statuses;
  c.admission.controller = controller_.config();
  c.admission.closure = rt_.gates.front()->policy();  // every gate gets the same
  // The tick is the ticker's own; the profile only names the timings above.
  c.admission.tick = in_force().admission.tick;
  c.admission.profile = in_force().admission.profile;
  // The emergency actions' switch and floor: read at each tick.
  c.admission.actions = in_force().admission.actions;
  c.admission.connection_floor = in_force().admission.connection_floor;
  return c;
}

}  // namespace sluice::proxy
