#pragma once
// The ticker: once per SLUICE_TICK, on the admin thread, it turns the proxy's
// probes into one reading (the sampler), steps the admission controller,
// publishes the level and the per-lane re-admission times for the request path
// to load, writes the tick log, and applies pins (admin API and pins file).
//
// Threading: everything here runs on the admin thread, the controller's only
// owner. The I/O threads only load Runtime::published.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <string>

#include "admission/controller.hpp"
#include "proxy/admin.hpp"
#include "proxy/runtime.hpp"
#include "replay/trace.hpp"

namespace sluice::proxy {

class Ticker {
 public:
  Ticker(Runtime& rt, Watchdog& watchdog, net::io_context& ioc, int log_fd);
  ~Ticker();
  void start();

  // One reading from the probes (advances the lag epoch; call once per tick).
  admission::Reading sample(admission::Millis t);

  struct PinResult {
    bool ok;
    std::string error;  // when !ok
  };
  PinResult pin(int level, std::optional<admission::Millis> ttl, std::string reason,
                std::string who);
  void unpin(std::string who);

  // Live reload (SIGHUP, or a change of SLUICE_CONFIG_FILE / SLUICE_ROUTES_FILE):
  // re-reads the configuration; an invalid one is refused and the old one stays.
  // Routes, the controller's thresholds and timings, the mode, factors and bands
  // change; the level, the pin and every connection carry on.
  bool reload(std::string_view why);
  std::uint64_t reloads(bool ok) const { return reloads_[ok ? 1 : 0]; }

  std::string state_json() const;
  const admission::Controller& controller() const { return controller_; }
  std::uint64_t tick_log_errors() const { return tick_log_errors_; }

 private:
  void arm();
  void on_tick();
  void publish();
  void audit(std::string_view what, admission::Level from, admission::Level to,
             const std::string& who, const std::string& reason,
             std::optional<admission::Millis> ttl);
  void read_pins_file();
  void watch_config_files();
  // What identifies a version of a file (inode, size, mtime; "missing"), and
  // when it last changed.
  struct FileState {
    std::string key;
    std::optional<std::chrono::system_clock::time_point> changed;
  };
  static FileState file_state(const std::string& path);
  admission::Millis now() const;

  Runtime& rt_;
  Watchdog& watchdog_;
  net::steady_timer timer_;
  Clock::time_point start_;
  Clock::time_point next_;
  admission::Controller controller_;
  const Live* live_;                 // the current generation
  config::Config current_;           // the configuration in force (reloads compare to it)
  std::array<std::uint64_t, 2> reloads_{};  // [failed, ok]
  std::string config_file_key_, routes_file_key_;
  AccessLog audit_;
  int tick_log_fd_ = -1;
  std::uint64_t tick_log_errors_ = 0;
  admission::Reading last_reading_{};  // shown by /admin/state
  // sampler state
  double last_lag_ms_ = 0;
  bool have_lag_ = false;
  std::uint64_t last_timeouts_ = 0;
  std::array<std::uint64_t, admission::kLaneCount> last_arrivals_{};
  replay::Requests arrivals_{};  // in the last tick
  // Pins set or removed since the last tick, for the tick log (replay applies them at t).
  std::optional<replay::PinRequest> logged_pin_;
  std::optional<admission::Millis> logged_pin_expires_;
  bool logged_unpin_ = false;
  // pins file state
  std::string pins_file_key_;  // mtime/size/inode of the version applied
};

}  // namespace sluice::proxy
