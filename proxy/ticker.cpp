#include "proxy/ticker.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace sluice::proxy {

using admission::Level;
using admission::Millis;
using Json = nlohmann::json;

namespace {
// p95 of the samples: the value at rank ceil(0.95 n).
double p95(std::vector<std::uint32_t>& v) {
  auto rank = (v.size() * 95 + 99) / 100;
  auto k = rank == 0 ? 0 : rank - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}
}  // namespace

Ticker::Ticker(Runtime& rt, Watchdog& watchdog, net::io_context& ioc, int log_fd)
    : rt_(rt),
      watchdog_(watchdog),
      timer_(ioc),
      start_(Clock::now()),
      controller_(rt.config.admission.controller),
      live_(rt.generations.back().get()),
      current_(rt.config),
      audit_(log_fd >= 0 ? log_fd : STDERR_FILENO) {
  config_file_key_ = file_state(current_.config_file).key;
  routes_file_key_ = file_state(current_.routes_file).key;
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

Millis Ticker::now() const {
  return std::chrono::duration_cast<Millis>(Clock::now() - start_);
}

void Ticker::start() {
  read_pins_file();
  next_ = Clock::now() + current_.admission.tick;
  arm();
}

void Ticker::arm() {
  timer_.expires_at(next_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_tick();
  });
}

admission::Reading Ticker::sample(Millis t) {
  admission::Reading r;
  r.t = t;
  const auto tick = current_.admission.tick;
  auto now = Clock::now();

  // Lag: the largest probe lateness of the tick that just ended, from the
  // loops that took a sample in it. None took one: the last value, marked stale.
  auto epoch = rt_.tick_epoch.fetch_add(1, std::memory_order_relaxed) & 0xFFFF;
  std::optional<double> lag;
  for (auto& w : rt_.workers) {
    auto packed = w->lag_epoch_max.load(std::memory_order_relaxed);
    if (Worker::lag_epoch(packed) != epoch) continue;
    double ms = static_cast<double>(Worker::lag_us(packed)) / 1000.0;
    lag = std::max(lag.value_or(0.0), ms);
  }
  if (lag) {
    last_lag_ms_ = *lag;
    have_lag_ = true;
    r.lag_ms = *lag;
  } else if (have_lag_) {
    r.lag_ms = last_lag_ms_;
    r.lag_fresh = false;
  }

  // Upstream wait: p95 per upstream over the last 1.5 ticks (seed 000: a wait
  // is read on at most two ticks, fewer than the rise gate needs), the worst upstream.
  auto since = to_ns(now) - std::chrono::duration_cast<std::chrono::nanoseconds>(tick).count() * 3 / 2;
  std::vector<std::vector<std::uint32_t>> waits(rt_.config.upstreams.size());
  for (auto& w : rt_.workers)
    w->waits.for_each_since(since, [&](std::uint16_t u, std::uint32_t us) {
      if (u < waits.size()) waits[u].push_back(us);
    });
  for (auto& v : waits)
    if (!v.empty()) r.upstream_wait_ms = std::max(r.upstream_wait_ms.value_or(0.0), p95(v) / 1000.0);
  // A request still queued has waited at least this long already: evidence now,
  // not only once a connection frees up (with a slow upstream, grants come in
  // bursts and a tick can pass with none).
  for (auto& w : rt_.workers)
    for (auto& u : w->stats().upstream) {
      auto since = u.oldest_waiting_since_ns.load(std::memory_order_relaxed);
      if (since == 0) continue;
      double ms = static_cast<double>(to_ns(now) - since) / 1e6;
      r.upstream_wait_ms = std::max(r.upstream_wait_ms.value_or(0.0), ms);
    }
  // The same for requests queued for a bulkhead slot (as of each thread's last heartbeat).
  for (auto& w : rt_.workers)
    for (const auto& v : w->views())
      for (const auto& lane : v.lanes)
        if (lane.oldest_waiting_since) {
          double ms = static_cast<double>((rt_.micros(now) - *lane.oldest_waiting_since).count()) / 1e3;
          r.upstream_wait_ms = std::max(r.upstream_wait_ms.value_or(0.0), ms);
        }

  // Upstream timeouts since the last tick.
  std::uint64_t timeouts = 0;
  for (auto& w : rt_.workers)
    for (auto& u : w->stats().upstream) timeouts += u.timeouts.load(std::memory_order_relaxed);
  r.upstream_timeout = timeouts > last_timeouts_;
  last_timeouts_ = timeouts;

  // A stall seen by the watchdog since the last tick, or still going on.
  auto stall_ns = watchdog_.take_max_stall_ns();
  for (std::size_t i = 0; i < rt_.workers.size(); ++i)
    stall_ns = std::max(stall_ns, static_cast<std::int64_t>(watchdog_.stall_seconds(i) * 1e9));
  if (stall_ns > 0) r.stall_ms = static_cast<double>(stall_ns) / 1e6;

  // The watchdog itself has not looked for a while: its stall reading cannot be trusted.
  auto watchdog_age = to_ns(now) - watchdog_.heartbeat_ns();
  auto interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(rt_.config.lag_probe_interval).count();
  r.ok = watchdog_age < std::max<std::int64_t>(10 * interval_ns, 500'000'000);

  // Arrivals per lane in this tick, for the tick log (replay applies the gate to them).
  for (auto lane : admission::kLanes) {
    std::uint64_t n = 0;
    for (auto& w : rt_.workers)
      for (auto& outcome : w->stats().lane[admission::index(lane)].decisions)
        for (auto& c : outcome) n += c.load(std::memory_order_relaxed);
    arrivals_[admission::index(lane)] = n - last_arrivals_[admission::index(lane)];
    last_arrivals_[admission::index(lane)] = n;
  }
  return r;
}

void Ticker::on_tick() {
  watch_config_files();
  read_pins_file();
  auto t = now();
  auto reading = sample(t);
  last_reading_ = reading;
  auto before_pin = controller_.pin_state();
  auto decision = controller_.step(reading);
  if (before_pin && !controller_.pin_state())  // the pin expired in this step
    audit("pin_expired", before_pin->level, controller_.level(), before_pin->who, before_pin->reason,
          std::nullopt);
  publish();
  if (tick_log_fd_ >= 0) {
    replay::TickLogExtras extras;
    if (logged_pin_ && logged_pin_expires_) {
      // Replay applies the pin at this tick: give it what was left of its TTL
      // here, so it expires in the replay when it expired live.
      logged_pin_->ttl = std::max(Millis{0}, *logged_pin_expires_ - t);
    }
    extras.pin = logged_pin_ ? &*logged_pin_ : nullptr;
    extras.unpin = logged_unpin_;
    std::string line = replay::tick_log_line(reading, &arrivals_, decision, extras);
    line += '\n';
    if (::write(tick_log_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      ++tick_log_errors_;
  }
  logged_pin_.reset();
  logged_unpin_ = false;
  // Ticks keep their cadence: a late tick does not shift the ones after it.
  next_ += current_.admission.tick;
  auto current = Clock::now();
  if (next_ < current) next_ = current;
  arm();
}

void Ticker::publish() {
  auto t = now();
  rt_.published.level.store(static_cast<std::uint8_t>(controller_.level()),
                            std::memory_order_relaxed);
  for (auto lane : admission::kLanes) {
    auto wait = admission::level_wait(controller_, live_->gate, lane, t);
    rt_.published.readmit_ms[admission::index(lane)].store(wait ? wait->count() : -1,
                                                           std::memory_order_relaxed);
  }
}

Ticker::PinResult Ticker::pin(int level, std::optional<Millis> ttl, std::string reason,
                              std::string who) {
  if (level < 0 || level > 3) return {false, "level must be 0..3"};
  auto from = controller_.level();
  auto t = now();
  controller_.pin(static_cast<Level>(level), ttl, t, reason, who);
  audit("pin", from, controller_.level(), who, reason, ttl);
  logged_pin_ = replay::PinRequest{static_cast<Level>(level), ttl, reason};
  logged_pin_expires_.reset();
  if (ttl) logged_pin_expires_ = t + *ttl;
  logged_unpin_ = false;
  publish();
  return {true, {}};
}

void Ticker::unpin(std::string who) {
  auto pin = controller_.pin_state();
  if (!pin) return;
  auto from = controller_.level();
  controller_.unpin(now(), who);
  audit("unpin", from, controller_.level(), who, pin->reason, std::nullopt);
  logged_pin_.reset();
  logged_unpin_ = true;
  publish();
}

void Ticker::audit(std::string_view what, Level from, Level to, const std::string& who,
                   const std::string& reason, std::optional<Millis> ttl) {
  Json j;
  auto wall = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(wall);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  j["ts"] = ts;
  j["audit"] = what;
  j["from"] = static_cast<int>(from);
  j["to"] = static_cast<int>(to);
  j["who"] = who;
  j["reason"] = reason;
  if (ttl) j["ttl_s"] = static_cast<double>(ttl->count()) / 1000.0;
  audit_.write_line(j.dump());
  audit_.flush();
}

void Ticker::read_pins_file() {
  const auto& path = rt_.config.admission.pins_file;
  if (path.empty()) return;
  auto file = file_state(path);
  if (file.key == pins_file_key_) return;  // unchanged (a missing file is reported once)
  pins_file_key_ = file.key;
  Json pin = Json::object();
  if (file.changed) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      auto body = text.str();
      pin = body.find_first_not_of(" \t\r\n") == std::string::npos ? Json::object() : Json::parse(body);
      if (!pin.is_object()) throw std::invalid_argument("not a JSON object");
    } catch (const std::exception& e) {
      // An unreadable pin acts as absent (seed 003), loudly.
      std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(), e.what());
      pin = Json::object();
    }
  } else {
    std::fprintf(stderr, "sluice: pins file %s: cannot read it; acting as no pin\n", path.c_str());
  }

  auto current = controller_.pin_state();
  bool ours = current && current->who == "pins-file";
  if (!pin.contains("level")) {
    if (ours) unpin("pins-file");
    return;
  }
  try {
    int level = pin.at("level").get<int>();
    std::optional<Millis> ttl;
    if (pin.contains("ttl")) {
      // The TTL runs from the file's change, so a restart does not extend it.
      auto total = config::parse_duration(pin.at("ttl").get<std::string>());
      auto left = total - std::chrono::duration_cast<Millis>(std::chrono::system_clock::now() -
                                                             *file.changed);
      if (left <= Millis{0}) {
        if (ours) unpin("pins-file");
        return;
      }
      ttl = left;
    }
    std::string reason = pin.value("reason", std::string("pins file"));
    auto result = this->pin(level, ttl, reason, "pins-file");
    if (!result.ok)
      std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(),
                   result.error.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(), e.what());
    if (ours) unpin("pins-file");
  }
}

Ticker::FileState Ticker::file_state(const std::string& path) {
  if (path.empty()) return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {"missing", std::nullopt};
  return {std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
              std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec),
          std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                std::chrono::nanoseconds(st.st_mtim.tv_nsec))};
}

void Ticker::watch_config_files() {
  auto config_key = file_state(current_.config_file).key;
  auto routes_key = file_state(current_.routes_file).key;
  if (config_key == config_file_key_ && routes_key == routes_file_key_) return;
  config_file_key_ = config_key;
  routes_file_key_ = routes_key;
  reload("file changed");
}

bool Ticker::reload(std::string_view why) {
  config::Config next;
  Json audit_line;
  audit_line["audit"] = "reload";
  audit_line["why"] = why;
  try {
    next = config::load(config::sluice_environment(environ));
  } catch (const std::exception& e) {
    ++reloads_[0];
    std::fprintf(stderr, "sluice: reload refused, the running configuration stays: %s\n", e.what());
    audit_line["ok"] = false;
    audit_line["error"] = e.what();
    audit_.write_line(audit_line.dump());
    audit_.flush();
    return false;
  }
  // Compare what each configuration shows: the live parts change now, the
  // rest waits for a restart (listeners, threads, pools, limits).
  static constexpr std::string_view kLive[] = {
      "routes", "admission_mode", "admission_profile", "tick", "admission_lag_ms",
      "admission_upstream_wait_ms", "admission_rise_ticks", "admission_emergency_ms",
      "admission_hold", "admission_exit_ratio", "admission_spacing", "admission_emergency_dwell",
      "admission_timeout_pin", "lane_factors", "retry_after", "lane_floors", "lane_weights",
      "queue_window", "starved_after", "budget_reserve", "close_statuses", "close_for",
      "probe_every"};
  auto before = Json::parse(config::to_json(current_));
  auto after = Json::parse(config::to_json(next));
  Json changed = Json::array(), needs_restart = Json::array();
  for (auto& [key, value] : after.items()) {
    if (before.contains(key) && before[key] == value) continue;
    bool live = std::find(std::begin(kLive), std::end(kLive), key) != std::end(kLive);
    (live ? changed : needs_restart).push_back(key);
  }
  // The secrets show only as "(set)": a changed one is noticed by value, reported by name.
  if (next.admin_token != current_.admin_token && !next.admin_token.empty() &&
      !current_.admin_token.empty())
    needs_restart.push_back("admin_token");
  if (next.admission.lease_key != current_.admission.lease_key &&
      !next.admission.lease_key.empty() && !current_.admission.lease_key.empty())
    needs_restart.push_back("lease_key");
  for (auto& key : needs_restart)
    std::fprintf(stderr, "sluice: reload: %s changed; it takes effect on restart\n",
                 key.get<std::string>().c_str());
  // Routes name upstreams by position: a changed upstream list needs a restart.
  if (after["upstreams"] != before["upstreams"]) {
    ++reloads_[0];
    std::fprintf(stderr, "sluice: reload refused: SLUICE_UPSTREAMS changed; restart to change upstreams\n");
    audit_line["ok"] = false;
    audit_line["error"] = "SLUICE_UPSTREAMS changed; restart to change upstreams";
    audit_.write_line(audit_line.dump());
    audit_.flush();
    return false;
  }
  rt_.generations.push_back(std::make_unique<Live>(make_live(next)));
  live_ = rt_.generations.back().get();
  for (auto& w : rt_.workers)
    net::post(w->ioc(), [w = w.get(), live = live_] { w->set_live(live); });
  controller_.reconfigure(next.admission.controller);
  for (auto& gate : rt_.gates) gate->set_policy(next.admission.closure);
  // Kept until the next reload: what later reloads compare against. Listeners,
  // pools and limits keep the values they started with.
  current_ = std::move(next);
  publish();
  ++reloads_[1];
  audit_line["ok"] = true;
  audit_line["changed"] = changed;
  audit_line["needs_restart"] = needs_restart;
  audit_.write_line(audit_line.dump());
  audit_.flush();
  std::fprintf(stderr, "sluice: reloaded (%s): %s\n", std::string(why).c_str(), changed.dump().c_str());
  return true;
}

std::string Ticker::state_json() const {
  Json j;
  auto t = now();
  const auto& c = controller_;
  j["mode"] = std::string(admission::to_string(live_->gate.mode()));
  j["level"] = static_cast<int>(c.level());
  j["level_name"] = std::string(admission::to_string(c.level()));
  j["trigger"] = std::string(admission::to_string(c.trigger()));
  j["streak"] = c.streak();
  j["last_change_ms_ago"] = (t - c.last_change()).count();
  j["tick_ms"] = current_.admission.tick.count();
  j["reloads"] = {{"ok", reloads_[1]}, {"failed", reloads_[0]}};
  {
    // The last tick's reading: what the level was decided on.
    const auto& r = last_reading_;
    Json reading;
    reading["t_ms"] = r.t.count();
    reading["ok"] = r.ok;
    reading["lag_ms"] = r.lag_ms ? Json(*r.lag_ms) : Json(nullptr);
    reading["lag_fresh"] = r.lag_fresh;
    reading["upstream_wait_ms"] = r.upstream_wait_ms ? Json(*r.upstream_wait_ms) : Json(nullptr);
    reading["upstream_timeout"] = r.upstream_timeout;
    reading["stall_ms"] = r.stall_ms ? Json(*r.stall_ms) : Json(nullptr);
    j["reading"] = reading;
  }
  if (auto& p = c.pin_state()) {
    Json pin;
    pin["level"] = static_cast<int>(p->level);
    pin["reason"] = p->reason;
    pin["who"] = p->who;
    pin["expires_in_s"] = p->expires_at ? Json(static_cast<double>((*p->expires_at - t).count()) / 1000.0)
                                        : Json(nullptr);
    j["pin"] = pin;
  } else {
    j["pin"] = nullptr;
  }
  // The bulkheads (seed 001 §11): per upstream, then per lane x upstream.
  auto views = rt_.bulkhead_views();
  auto now_us = rt_.micros(Clock::now());
  auto age_s = [&](std::optional<admission::Micros> t) -> Json {
    if (!t) return nullptr;
    return static_cast<double>((now_us - *t).count()) / 1e6;
  };
  auto age_s_until = [&](admission::Micros t) -> Json {
    return static_cast<double>(std::max(admission::Micros{0}, t - now_us).count()) / 1e6;
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
    l["factor"] = live_->gate.factors()[i][static_cast<std::size_t>(c.level())];
    auto readmit = rt_.published.readmit_ms[i].load(std::memory_order_relaxed);
    l["readmit_in_s"] = readmit >= 0 ? Json(static_cast<double>(readmit) / 1000.0) : Json(nullptr);
    l["floor"] = live_->lanes.floors[i];
    l["weight"] = live_->lanes.weights[i];
    l["queue_window_s"] = static_cast<double>(live_->lanes.queue_window[i].count()) / 1e6;
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
      closed_upstreams.push_back({{"upstream", name}, {"closed", true},
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
          {"starving", lv.starving}};
      if (lv.starving)
        starving.push_back({{"lane", std::string(admission::to_string(lane))},
                            {"upstream", name},
                            {"waiting", lv.waiting},
                            {"waiting_for_s", age_s(lv.waiting_since)},
                            {"pinned", lv.pinned_starving}});
    }
    // Hosts (several per upstream): in flight summed over the threads, ejected
    // when any thread has it out of its choice.
    Json hosts = Json::array();
    for (auto& w : rt_.workers) {
      auto hv = w->host_views();
      if (u >= hv.size()) continue;
      for (std::size_t h = 0; h < hv[u].size(); ++h) {
        const auto& x = hv[u][h];
        if (hosts.size() <= h)
          hosts.push_back({{"address", x.address}, {"in_flight", 0}, {"ejected", false},
                           {"ejected_for_s", 0.0}, {"failures", 0}});
        auto& j = hosts[h];
        j["in_flight"] = j["in_flight"].get<int>() + x.in_flight;
        j["ejected"] = j["ejected"].get<bool>() || x.ejected;
        j["ejected_for_s"] = std::max(j["ejected_for_s"].get<double>(), x.ejected_for_s);
        j["failures"] = std::max(j["failures"].get<std::uint32_t>(), x.failures);
      }
    }
    upstreams.push_back({{"name", name},
                         {"hosts", hosts},
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
                         {"threads", v.shards},
                         {"lanes", per_lane},
                         {"closed", gate.closed},
                         {"closed_for_s", gate.until ? age_s_until(*gate.until) : Json(nullptr)},
                         {"last_probe_ago_s", age_s(gate.last_probe)},
                         {"next_probe_in_s", gate.closed ? age_s_until(gate.next_probe) : Json(nullptr)},
                         {"budget_remaining", v.budget && now_us < v.budget->until
                                                  ? Json(v.budget->remaining) : Json(nullptr)},
                         {"budget_reset_in_s", v.budget && now_us < v.budget->until
                                                   ? age_s_until(v.budget->until) : Json(nullptr)}});
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
  for (auto& entry : starving) closed_upstreams.push_back(entry);
  j["starving"] = closed_upstreams;
  return j.dump(2);
}

}  // namespace sluice::proxy
