#pragma once
// Configuration: every SLUICE_ variable parsed and validated at start-up (and
// again on a reload) into plain structs. Nothing downstream reads the environment.
// One table (variables()) feeds parsing, check-config, --help, docs/configuration.md
// and which variables a reload changes at once.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/controller.hpp"
#include "admission/emergency_actions.hpp"
#include "admission/gate.hpp"
#include "admission/resilience.hpp"
#include "hosts/schedule.hpp"
#include "routes/routes.hpp"
#include "tenants/key.hpp"
#include "tenants/limits.hpp"
#include "tls/tls.hpp"

namespace sluice::config {

using Duration = std::chrono::milliseconds;

struct Endpoint {
  std::string host;  // IPv4/IPv6 literal or a name (an upstream's: resolved again within its TTL)
  std::uint16_t port = 0;
  std::string str() const;   // "host:port" ("[::1]:port" for IPv6)
  bool is_loopback() const;  // 127.0.0.0/8, ::1, localhost
  bool operator==(const Endpoint&) const = default;
};

struct Upstream {
  std::string name;
  std::vector<Endpoint> hosts;  // at least one
  bool tls = false;             // https:// (every host of the upstream alike)
  bool operator==(const Upstream&) const = default;
};

enum class AccessLog { stdout_, stderr_, off, file };

// The HTTPS listener (SLUICE_TLS_*): on when certificates are given.
struct Tls {
  std::vector<std::string> cert_files, key_files;  // SLUICE_TLS_CERT, SLUICE_TLS_KEY
  std::vector<tls::Pair> pairs;  // from them, in order: the first is the default; the others by SNI
  Endpoint listen{"0.0.0.0", 8443};
  tls::Protocol protocol;  // SLUICE_TLS_CIPHERS, SLUICE_TLS_CIPHERSUITES, SLUICE_TLS_MIN_VERSION
  Duration handshake_timeout{10'000};
  Duration ticket_rotate{3'600'000};
  bool on() const { return !pairs.empty(); }
};

// How Sluice speaks to https:// upstreams.
struct UpstreamTls {
  std::string ca_file;  // SLUICE_UPSTREAM_CA; empty: the system's CA store
  tls::Pair client;     // SLUICE_UPSTREAM_CLIENT_CERT / _KEY (mTLS); empty: none
};

// The admission variables (SPEC's table), also all that `sluice replay` needs.
struct Admission {
  admission::Mode mode = admission::Mode::enforce;
  std::string profile = "fast";  // fast | sentinel: the timing defaults
  Duration tick{1000};
  admission::ControllerConfig controller = admission::ControllerConfig::fast();
  admission::LaneFactors factors = admission::default_lane_factors();
  admission::RetryBands retry = admission::default_retry_bands();
  admission::LanePolicy lanes;         // floors, weights, queue_window, reserve, starved_after
  admission::EstimatePolicy estimate;  // seed, growth_interval, slow_factor (max: set by the proxy)
  // Upstream statuses that close the upstream (each 400..599, never 429 or 503),
  // ascending, each once; empty: none.
  std::vector<int> close_statuses;
  admission::ClosurePolicy closure;                // close_for, probe_every
  std::optional<std::size_t> heavy_max_in_flight;  // unset: none
  bool delegation = true;
  std::string lease_key;  // 32 hex digits (16 bytes); empty: generated at start
  std::string pins_file;  // empty: unset
  std::string tick_log;   // empty: unset
  // SLUICE_EMERGENCY_ACTIONS, SLUICE_EMERGENCY_ACTIONS_AFTER (seed 003's switch).
  admission::ActionsConfig actions;
  // SLUICE_INGEST_BUDGET: request body bytes in flight (unset: no budget),
  // and per lane the fraction of it the lane may hold (SLUICE_INGEST_SHARES).
  std::optional<std::uint64_t> ingest_budget;
  std::array<double, admission::kLaneCount> ingest_shares{0.4, 1.0, 0.4};
  // SLUICE_EMERGENCY_CONNECTION_FLOOR: refuse_connections closes new client
  // connections only while this many are open.
  std::size_t connection_floor = 1000;
};

// Tenants (SLUICE_TENANT_*): who a request belongs to, fairness between them
// inside each lane, and their optional limits.
struct Tenants {
  tenants::Key key;            // SLUICE_TENANT_KEY; a route's tenant_key replaces it
  std::string jwt_key;         // SLUICE_TENANT_JWT_KEY: HS256 secret; empty: claims read unverified
  tenants::Limits limits;      // SLUICE_TENANT_CONCURRENCY, SLUICE_TENANT_RATE
  std::size_t table = 65'536;  // SLUICE_TENANT_TABLE: tenants tracked at most
  // SLUICE_TENANT_WEIGHTS: a tenant's requests per turn of its lane's round
  // robin (1 unless listed), by the hash of its key, ascending.
  std::vector<std::pair<tenants::Id, double>> weights;
  double weight(tenants::Id id) const;
};

// SLUICE_REDIS_URL: redis://[[user]:password@]host[:port][/db], where the
// fleet's tenant counts are reconciled every SLUICE_REDIS_INTERVAL.
struct Redis {
  Endpoint at;  // empty host: unset
  std::string user, password;
  int db = 0;
  bool on() const { return !at.host.empty(); }
  std::string str() const;  // the URL, the password shown as (set)
  bool operator==(const Redis&) const = default;
};

struct Config {
  Admission admission;
  Tenants tenants;
  Redis redis;
  Duration redis_interval{100};
  bool fleet_capacity = true;  // SLUICE_FLEET_CAPACITY: with redis, the fleet shares capacity

  // listeners
  Endpoint listen{"0.0.0.0", 8080};  // SLUICE_LISTEN=off: an empty host, no plain listener
  Tls tls;
  bool plain_listener() const { return !listen.host.empty(); }
  Endpoint admin_listen{"127.0.0.1", 9901};
  std::string admin_token;  // empty: unset
  int threads = 1;          // default: number of cores

  // upstreams and routes
  std::vector<Upstream> upstreams;  // at least one; order as given
  routes::Table routes;             // default table when neither variable is set
  UpstreamTls upstream_tls;
  std::size_t upstream_max_connections = 512;  // per upstream, split across threads
  Duration upstream_idle_timeout{30'000};      // idle pooled connection closed after
  // A host that refuses connections is left out of the balancing for base,
  // doubling at each new refusal up to max (SLUICE_HOST_EJECT).
  std::chrono::milliseconds host_eject_base{1000}, host_eject_max{30000};
  // Host names: asked of SLUICE_RESOLVER (unset: the system's resolver) and
  // asked again within their TTL, held to SLUICE_DNS_MIN_TTL..SLUICE_DNS_MAX_TTL.
  std::optional<Endpoint> resolver;
  hosts::TtlBounds dns_ttl;
  // SLUICE_HEALTH_CHECKS: the upstreams whose hosts are checked, by name.
  std::map<std::string, hosts::HealthCheck> health_checks;

  // limits and timeouts
  std::size_t max_header_bytes = std::size_t{16} * 1024;  // 431 above
  std::uint64_t max_body_bytes = 64ull * 1024 * 1024;     // 413 above
  std::size_t max_connections = 20'000;                   // client connections
  std::size_t client_send_buffer =
      std::size_t{256} * 1024;         // SO_SNDBUF of client sockets; 0: the kernel's
  bool forwarded_for_replace = false;  // SLUICE_FORWARDED_FOR=replace: Sluice is the edge
  Duration header_timeout{10'000};     // whole request head must arrive within (408)
  Duration idle_timeout{60'000};       // keep-alive idle between requests
  Duration body_timeout{30'000};       // between two reads of a request body
  Duration send_timeout{30'000};       // a write to the client must progress within
  Duration connect_timeout{2'000};     // upstream connect (502 on failure)
  Duration response_timeout{30'000};   // upstream response head (504)
  Duration sse_idle_timeout{300'000};  // between two reads of an SSE stream

  // HTTP/2 for clients (proxy/h2.cpp); upstreams stay HTTP/1.1
  bool h2 = true;                      // SLUICE_H2: h2 by ALPN on the TLS listener
  bool h2c = false;                    // SLUICE_H2C: h2c (prior knowledge) on the plain one
  std::uint32_t h2_max_streams = 128;  // SETTINGS_MAX_CONCURRENT_STREAMS
  std::uint32_t h2_window =
      256 * 1024;  // each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE)
  std::uint32_t h2_frame_budget = 200;  // resets and other cheap frames per second per connection

  // measurement
  Duration lag_probe_interval{50};  // event-loop lag probe period per I/O thread

  // drain on SIGTERM
  Duration drain_delay{5'000};     // keep accepting after /readyz turns 503
  Duration drain_timeout{30'000};  // then let in-flight requests finish up to this

  // fault injection on the admin listener (POST /admin/debug/...), off by default
  bool debug_endpoints = false;

  std::string config_file;  // SLUICE_CONFIG_FILE, empty: unset
  std::string routes_file;  // SLUICE_ROUTES_FILE, empty: unset

  // access log
  AccessLog access_log = AccessLog::stdout_;
  std::string access_log_path;  // when access_log == file
};

// Thrown while loading: what() is "SLUICE_X: <what is wrong and what would be valid>".
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string variable, const std::string& message);
  const std::string& variable() const { return variable_; }

 private:
  std::string variable_;
};

// What a reload (SIGHUP, or a change of SLUICE_CONFIG_FILE or SLUICE_ROUTES_FILE) does
// with a variable's new value: puts it in force at once, or leaves it for the next start.
// No zero: every variable says which.
enum class Reload { live = 1, restart };

struct Variable {
  std::string_view name;           // "SLUICE_LISTEN"
  std::string_view default_value;  // as shown to users
  std::string_view meaning;        // one sentence
  Reload reload;
  std::string_view key;  // check-config's JSON key; empty: not shown on its own
  bool secret = false;   // check-config shows only whether it is set, never the value
};

// The single table of variables, in documentation order. Each row also says how
// the variable is read and shown (config.cpp): load, to_json, help_text,
// reference_markdown and reload all walk it.
std::span<const Variable> variables();

using Env = std::map<std::string, std::string, std::less<>>;

// The SLUICE_ entries of an environ-style array.
Env sluice_environment(char** envp);

// Parses and validates. Unknown SLUICE_ names are refused. When SLUICE_CONFIG_FILE
// is set, its SLUICE_X=value lines are laid over env first. Throws ConfigError.
Config load(const Env& env);

// env with SLUICE_CONFIG_FILE's lines laid over it (env itself when unset).
Env with_config_file(const Env& env);

// Only the admission variables (for `sluice replay` and `sluice simulate`):
// SLUICE_UPSTREAMS is not required and the other variables are not read, but
// unknown SLUICE_ names are still refused. Throws ConfigError.
Admission load_admission(const Env& env);

// Effective configuration as pretty JSON (check-config); the admin token and the
// lease key are redacted.
std::string to_json(const Config& config);

// A reload of `next` over the configuration `running`: what is in force then
// (each live variable from next, every other as it was) and the check-config
// keys of the variables that differ, in table order.
struct Reloaded {
  Config config;
  std::vector<std::string_view> live;     // changed, and in force now
  std::vector<std::string_view> restart;  // changed, kept until a restart
};
Reloaded reload(const Config& running, const Config& next);

// `sluice --help` text: usage plus the variable table.
std::string help_text();

// docs/configuration.md, generated from variables().
std::string reference_markdown();

// The table as JSON (`sluice config-reference --json`): per variable its name,
// default, reload (live or restart), check-config key (null: none) and secret.
std::string reference_json();

// Value parsers, exposed for tests. Throw std::invalid_argument with a message.
Duration parse_duration(std::string_view text);    // "250ms", "5s", "2m", "1h"; "0" allowed
std::uint64_t parse_bytes(std::string_view text);  // "16384", "16KiB", "64MiB", "1GiB"
Endpoint parse_endpoint(std::string_view text);    // "host:port", "[::1]:port"
std::vector<Upstream> parse_upstreams(std::string_view text);

}  // namespace sluice::config
