#pragma once
// Live reload (SIGHUP, or a change of SLUICE_CONFIG_FILE / SLUICE_ROUTES_FILE,
// looked for once per tick): re-reads the configuration; an invalid one is
// refused and the old one stays. The variables the table marks live come into
// force (config::reload): routes, the mode, factors, bands and lanes (a new
// Live generation, posted to every worker) and the closure policy here; the
// ticker gives its controller the new thresholds and timings. The level, the
// pin and every connection carry on; every other variable keeps the value it
// started with (a change to it is reported as needing a restart).
//
// The certificates of the HTTPS listener reload on their own (a change of
// their files, or SIGHUP), apart from the variables.
//
// Threading: the admin thread only (the ticker's).
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::proxy {

struct Live;
struct Runtime;
class AccessLog;

class Reloader {
 public:
  // Reload outcomes go to `audit` as JSON lines.
  Reloader(Runtime& rt, AccessLog& audit);
  const config::Config& config() const { return current_; }  // the configuration in force
  const Live& live() const { return *live_; }                // the current generation
  // True when the config file or the routes file changed since the last look.
  bool files_changed();
  // True when the new configuration is in force. The files as this reload
  // read them are remembered, so only a later change of either (the routes
  // file a reload newly names included) is a change: one reload per change.
  bool reload(std::string_view why);
  std::uint64_t reloads(bool ok) const { return reloads_[ok ? 1 : 0]; }

  // The HTTPS listener's certificate and key files (SLUICE_TLS_CERT, _KEY):
  // true when one changed since the last look.
  bool certificates_changed();
  // Loads them again: new handshakes use them (each worker is posted them),
  // open connections keep theirs. A file that does not load is refused with a
  // log line and an audit line, the certificates in use staying. No HTTPS: true.
  bool reload_certificates(std::string_view why);
  std::uint64_t certificate_reloads(bool ok) const { return cert_reloads_[ok ? 1 : 0]; }
  // Every SLUICE_TLS_TICKET_ROTATE: the certificates' contexts built again, with
  // them a new session ticket key (a ticket lives at most one period).
  void rotate_tickets_if_due(std::chrono::steady_clock::time_point now);

 private:
  bool reload_files(std::string_view why);
  Runtime& rt_;
  AccessLog& audit_;
  const Live* live_;
  config::Config current_;  // in force: live variables as last reloaded, others as started
  std::array<std::uint64_t, 2> reloads_{};  // [failed, ok]
  std::string config_file_key_, routes_file_key_;
  std::string certificates_key();
  std::shared_ptr<const tls::ServerContexts> build_certificates();  // throws tls::Error
  void publish_certificates(std::shared_ptr<const tls::ServerContexts> next);
  std::string certificates_key_;
  std::chrono::steady_clock::time_point certificates_built_{};
  std::array<std::uint64_t, 2> cert_reloads_{};  // [failed, ok]
};

}  // namespace sluice::proxy
