#include "proxy/reloader.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "proxy/file_state.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

using Json = nlohmann::json;

Reloader::Reloader(Runtime& rt, AccessLog& audit)
    : rt_(rt), audit_(audit), live_(rt.generations.back().get()), current_(rt.config) {
  config_file_key_ = file_state(current_.config_file).key;
  routes_file_key_ = file_state(current_.routes_file).key;
}

bool Reloader::files_changed() {
  auto config_key = file_state(current_.config_file).key;
  auto routes_key = file_state(current_.routes_file).key;
  if (config_key == config_file_key_ && routes_key == routes_file_key_) return false;
  config_file_key_ = config_key;
  routes_file_key_ = routes_key;
  return true;
}

bool Reloader::reload(std::string_view why) {
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
  for (auto& gate : rt_.gates) gate->set_policy(next.admission.closure);
  // Kept until the next reload: what later reloads compare against. Listeners,
  // pools and limits keep the values they started with.
  current_ = std::move(next);
  ++reloads_[1];
  audit_line["ok"] = true;
  audit_line["changed"] = changed;
  audit_line["needs_restart"] = needs_restart;
  audit_.write_line(audit_line.dump());
  audit_.flush();
  std::fprintf(stderr, "sluice: reloaded (%s): %s\n", std::string(why).c_str(), changed.dump().c_str());
  return true;
}

}  // namespace sluice::proxy
