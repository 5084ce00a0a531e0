#pragma once
// The ticker: once per SLUICE_TICK, on the admin thread, it looks for changed
// configuration files (the reloader) and a changed pins file, turns the
// proxy's probes into readings (the sampler), steps the admission controllers
// (the process's, on its loops' lag and stalls; one per upstream, on what
// waits on it), publishes their levels and per-lane re-admission times for
// the request path to load, writes the tick log, and applies pins (admin API
// and pins file; a pin may name an upstream), each in the audit log.
//
// Threading: everything here runs on the admin thread, the controller's only
// owner. The I/O threads only load Runtime::published.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <span>
#include <string>

#include "admission/controller.hpp"
#include "proxy/admin.hpp"
#include "proxy/pins_file.hpp"
#include "proxy/reloader.hpp"
#include "proxy/runtime.hpp"
#include "proxy/sampler.hpp"
#include "replay/trace.hpp"

namespace sluice::proxy {

class Ticker {
 public:
  Ticker(Runtime& rt, Watchdog& watchdog, net::io_context& ioc, int log_fd);
  ~Ticker();
  void start();

  struct PinResult {
    bool ok;
    std::string error;  // when !ok
  };
  // upstream: that upstream's level; none: the process's.
  PinResult pin(int level, std::optional<admission::Millis> ttl, std::string reason,
                std::string who, std::optional<std::size_t> upstream = std::nullopt);
  void unpin(std::string who, std::optional<std::size_t> upstream = std::nullopt);

  // Live reload (proxy/reloader.hpp), then the controller's new thresholds and
  // timings; false when the new configuration was refused.
  bool reload(std::string_view why);
  std::uint64_t reloads(bool ok) const { return reloader_.reloads(ok); }
  // The HTTPS listener's certificates, loaded again (SIGHUP; a change of their
  // files is looked for every tick).
  bool reload_certificates(std::string_view why) { return reloader_.reload_certificates(why); }
  std::uint64_t certificate_reloads(bool ok) const { return reloader_.certificate_reloads(ok); }

  // /admin/state; its "config" is the configuration running (as check-config shows one).
  std::string state_json() const;
  // The configuration the process runs with, read from the parts that use it.
  config::Config running() const;
  const admission::Controller& controller() const { return controller_; }
  const admission::Controller& upstream_controller(std::size_t u) const {
    return upstream_controllers_[u];
  }
  std::uint64_t tick_log_errors() const { return tick_log_errors_; }
  const admission::EmergencyActions& emergency_actions() const { return actions_; }
  // Emergency actions applied (change 0) and undone (1) since start.
  std::uint64_t action_changes(admission::Action a, int change) const {
    return action_changes_[static_cast<std::size_t>(a)][static_cast<std::size_t>(change)];
  }

 private:
  void arm();
  void on_tick();
  void publish();
  // The emergency actions' tick, after the controllers stepped: published,
  // counted and audited.
  replay::ActionsTick act(admission::Millis t, bool restoring,
                          std::span<admission::Controller* const> all);
  std::vector<admission::Controller*> controllers();
  void audit(std::string_view what, admission::Level from, admission::Level to,
             const std::string& who, const std::string& reason,
             std::optional<admission::Millis> ttl, std::optional<std::size_t> upstream);
  admission::Controller& controller_for(std::optional<std::size_t> upstream) {
    return upstream ? upstream_controllers_[*upstream] : controller_;
  }
  // Pins set or removed since the last tick, for the tick log (replay applies them at t).
  struct LoggedPin {
    std::optional<replay::PinRequest> pin;
    std::optional<admission::Millis> expires;
    bool unpin = false;
  };
  LoggedPin& logged_for(std::optional<std::size_t> upstream) {
    return upstream ? logged_upstreams_[*upstream] : logged_;
  }
  void read_pins_file();
  const Live& live() const { return reloader_.live(); }                  // the current generation
  const config::Config& in_force() const { return reloader_.config(); }  // the configuration
  admission::Millis now() const;

  Runtime& rt_;
  net::steady_timer timer_;
  Clock::time_point start_;
  Clock::time_point next_;
  AccessLog audit_;
  Reloader reloader_;                                        // writes to audit_
  admission::Controller controller_;                         // the process's
  std::vector<admission::Controller> upstream_controllers_;  // by upstream
  Sampler sampler_;
  PinsFile pins_file_;
  int tick_log_fd_ = -1;
  std::uint64_t tick_log_errors_ = 0;
  Sample last_sample_;  // shown by /admin/state
  LoggedPin logged_;
  admission::EmergencyActions actions_;
  std::array<std::array<std::uint64_t, 2>, admission::kActionCount> action_changes_{};
  std::vector<LoggedPin> logged_upstreams_;
};

}  // namespace sluice::proxy
