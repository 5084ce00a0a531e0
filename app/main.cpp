// sluice: the command line. Loads the configuration (exit 2 on any invalid
// value, before anything is bound) and runs the chosen command.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "proxy/serve.hpp"
#include "replay/trace.hpp"
#include "sim/matrix.hpp"
#include "sim/overload.hpp"
#include "sim/simulate.hpp"

extern char** environ;

namespace {

constexpr std::string_view kVersion = SLUICE_VERSION;  // CMake's project version

int config_error(const std::exception& e) {
  std::fprintf(stderr, "sluice: config: %s\n", e.what());
  return 2;
}

// Exits 0 when the local instance answers GET /healthz with 200: a health
// check for images without a shell or curl.
int healthcheck(const sluice::config::Config& cfg) {
  std::string host = cfg.admin_listen.host;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::" || host == "[::]") host = "::1";
  if (host == "localhost") host = "127.0.0.1";
  bool v6 = host.find(':') != std::string::npos;
  int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc = -1;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(cfg.admin_listen.port);
    if (inet_pton(AF_INET6, host.c_str(), &a.sin6_addr) == 1)
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(cfg.admin_listen.port);
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1)
      rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    std::fprintf(stderr, "sluice: healthcheck: cannot connect to %s\n",
                 cfg.admin_listen.str().c_str());
    ::close(fd);
    return 1;
  }
  std::string req = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return 1;
  }
  char buf[64] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  bool ok = n >= 12 && std::string_view(buf, 12) == "HTTP/1.1 200";
  if (!ok) std::fprintf(stderr, "sluice: healthcheck: /healthz did not answer 200\n");
  return ok ? 0 : 1;
}

// `sluice replay [FILE|-]`: the admission controller offline over a tick trace,
// configured from the environment like `serve` (only the admission variables).
int replay(int argc, char** argv) {
  if (argc > 3) {
    std::fprintf(stderr, "sluice: replay: one trace at most; usage: sluice replay [FILE|-]\n");
    return 2;
  }
  sluice::replay::ReplayOptions options;
  try {
    auto a = sluice::config::load_admission(sluice::config::sluice_environment(environ));
    options.controller = a.controller;
    options.mode = a.mode;
    options.factors = a.factors;
    options.retry = a.retry;
    options.actions = a.actions;
  } catch (const std::exception& e) {
    return config_error(e);
  }
  std::ios::sync_with_stdio(false);  // a day of ticks is 86,400 lines
  std::string path = argc > 2 ? argv[2] : "-";
  if (path == "-") return sluice::replay::run_replay(std::cin, std::cout, std::cerr, options);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::fprintf(stderr, "sluice: replay: cannot read %s: it is a directory\n", path.c_str());
    return 2;
  }
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "sluice: replay: cannot read %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return 2;
  }
  return sluice::replay::run_replay(file, std::cout, std::cerr, options);
}

// The simulators' command lines: a usage error, a count, comma-separated items.
int simulate_usage_error(const std::string& what, const char* usage) {
  std::fprintf(stderr, "sluice: simulate: %s; %s\n", what.c_str(), usage);
  return 2;
}

// A whole number from 0 to max.
std::optional<std::uint64_t> parse_count(const std::string& v, std::uint64_t max) {
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
    return {};
  auto n = std::stoull(v);
  return n <= max ? std::optional(n) : std::nullopt;
}

// The comma-separated items of v (an empty one names nothing: its parser refuses it).
std::vector<std::string> comma_items(const std::string& v) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= v.size();) {
    std::size_t comma = v.find(',', at);
    if (comma == std::string::npos) comma = v.size();
    out.push_back(v.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// Sluice's side of a simulation, configured from the environment like `serve`
// (only the admission variables); a bad variable: config_error's exit code.
std::optional<int> configure_sluice(sluice::sim::SluiceSettings& s) {
  try {
    auto a = sluice::config::load_admission(sluice::config::sluice_environment(environ));
    s.lanes = a.lanes;
    s.estimate = sluice::sim::one_thread_estimate(a.estimate);
    s.retry = a.retry;
  } catch (const std::exception& e) {
    return config_error(e);
  }
  return std::nullopt;
}

// `sluice simulate --overload [--shape S,S,...|all] [--loads L,L,...]
// [--policies P,P,...] [--runs N] [--seed S] [--jitter-us J]`: the overload
// bench (bench/overload/run.sh) on a virtual clock (sim/overload.hpp), Sluice's
// admission configured from the environment like `serve`.
int simulate_overload(int argc, char** argv) {
  namespace ov = sluice::sim::overload;
  constexpr const char* kUsage =
      "usage: sluice simulate --overload [--shape 429,queue,halve|all] [--loads 0.9p,1,2,3] "
      "[--policies sluice,limit_conn,haproxy,none] [--runs N] [--seed S] [--jitter-us J]";
  ov::Options o;
  auto fail = [&](const std::string& what) { return simulate_usage_error(what, kUsage); };
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--overload") continue;
    if (arg != "--shape" && arg != "--loads" && arg != "--policies" && arg != "--runs" &&
        arg != "--seed" && arg != "--jitter-us")
      return fail("unknown argument \"" + arg + "\" with --overload");
    if (i + 1 >= argc) return fail(arg + " needs a value");
    std::string v = argv[++i];
    if (arg == "--shape") {
      o.shapes.clear();
      if (v == "all") o.shapes.assign(ov::kShapes.begin(), ov::kShapes.end());
      for (const auto& item : v == "all" ? std::vector<std::string>{} : comma_items(v)) {
        auto s = ov::shape_from_string(item);
        if (!s) return fail("no shape \"" + item + "\"");
        o.shapes.push_back(*s);
      }
    } else if (arg == "--loads") {
      o.loads.clear();
      for (const auto& item : comma_items(v)) {
        auto l = ov::load_from_string(item);
        if (!l)
          return fail("no load \"" + item + "\" (a multiple of C such as 2 or 1.5, p: Poisson)");
        o.loads.push_back(*l);
      }
    } else if (arg == "--policies") {
      o.systems.clear();
      for (const auto& item : comma_items(v)) {
        auto p = ov::system_from_string(item);
        if (!p) return fail("no policy \"" + item + "\"");
        o.systems.push_back(*p);
      }
    } else if (arg == "--runs") {
      auto n = parse_count(v, 1000);
      if (!n || *n == 0) return fail("--runs takes a count from 1 to 1000");
      o.runs = static_cast<int>(*n);
    } else if (arg == "--jitter-us") {
      auto n = parse_count(v, 50'000);
      if (!n) return fail("--jitter-us takes microseconds from 0 to 50000");
      o.upstream.jitter = static_cast<double>(*n) / 1e6;
    } else {
      auto n = parse_count(v, ~std::uint64_t{0} >> 1);
      if (!n) return fail("--seed takes a non-negative integer");
      o.seed = *n;
    }
  }
  if (auto bad = configure_sluice(o.sluice)) return *bad;
  std::cout << ov::format_markdown(ov::simulate(o));
  return 0;
}

// `sluice simulate --matrix [--cells N] [--seed S] [--jobs N]`: the workload
// matrix (sim/matrix.hpp), Sluice's admission configured from the environment.
int simulate_matrix(int argc, char** argv) {
  namespace mx = sluice::sim::matrix;
  constexpr const char* kUsage =
      "usage: sluice simulate --matrix [--cells N] [--seed S] [--jobs N] [--only TEXT]";
  mx::Options o;
  auto fail = [&](const std::string& what) { return simulate_usage_error(what, kUsage); };
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--matrix") continue;
    if (arg != "--cells" && arg != "--seed" && arg != "--jobs" && arg != "--only")
      return fail("unknown argument \"" + arg + "\" with --matrix");
    if (i + 1 >= argc) return fail(arg + " needs a value");
    std::string v = argv[++i];
    if (arg == "--only") {
      o.only = v;
    } else if (arg == "--cells") {
      auto n = parse_count(v, 100'000);
      if (!n || *n == 0) return fail("--cells takes a count from 1 to 100000");
      o.cells = static_cast<int>(*n);
    } else if (arg == "--jobs") {
      auto n = parse_count(v, 256);
      if (!n) return fail("--jobs takes a count from 0 (the hardware's threads) to 256");
      o.jobs = static_cast<int>(*n);
    } else {
      auto n = parse_count(v, ~std::uint64_t{0} >> 1);
      if (!n) return fail("--seed takes a non-negative integer");
      o.seed = *n;
    }
  }
  if (auto bad = configure_sluice(o.sluice)) return *bad;
  auto cells = mx::run(o);
  std::cout << mx::format_markdown(o, cells);
  return 0;
}

// `sluice simulate [--scenario NAME|all] [--model provider|mmc] [--runs N]
// [--seed S] [--instances N,N,...] [--shared] [--balance round-robin|random] [--json]`:
// the policy simulator, Sluice's admission configured from the environment
// like `serve` (only the admission variables). --instances: fleets of that
// many Sluice instances in front of each scenario's upstream, instead of the policies;
// --shared: the instances share each upstream's capacity (admission/fleet.hpp).
int simulate(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: sluice simulate [--scenario burst|idle|isolation|step|review|all] "
      "[--model provider|mmc] [--runs N] [--seed S] [--instances N,N,...] [--shared] "
      "[--balance round-robin|random] [--json]; or sluice simulate --overload ...";
  for (int i = 2; i < argc; ++i)
    if (std::string_view(argv[i]) == "--overload") return simulate_overload(argc, argv);
  for (int i = 2; i < argc; ++i)
    if (std::string_view(argv[i]) == "--matrix") return simulate_matrix(argc, argv);
  sluice::sim::Options o;
  bool json = false;
  auto fail = [&](const std::string& what) { return simulate_usage_error(what, kUsage); };
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json" || arg == "--shared") {
      (arg == "--json" ? json : o.shared) = true;
      continue;
    }
    if (arg != "--scenario" && arg != "--model" && arg != "--runs" && arg != "--seed" &&
        arg != "--instances" && arg != "--balance")
      return fail("unknown argument \"" + arg + "\"");
    if (i + 1 >= argc) return fail(arg + " needs a value");
    std::string v = argv[++i];
    if (arg == "--scenario") {
      if (v == "all") {
        o.scenarios.assign(sluice::sim::kScenarios.begin(), sluice::sim::kScenarios.end());
      } else if (auto s = sluice::sim::scenario_from_string(v)) {
        o.scenarios = {*s};
      } else {
        return fail("no scenario \"" + v + "\"");
      }
    } else if (arg == "--model") {
      auto m = sluice::sim::model_from_string(v);
      if (!m) return fail("no model \"" + v + "\"");
      o.model = *m;
    } else if (arg == "--instances") {
      o.instances.clear();
      for (const auto& item : comma_items(v)) {
        auto n = parse_count(item, 64);
        if (!n || *n == 0) return fail("--instances takes counts from 1 to 64, comma-separated");
        o.instances.push_back(static_cast<int>(*n));
      }
    } else if (arg == "--balance") {
      auto b = sluice::sim::balance_from_string(v);
      if (!b) return fail("no balance \"" + v + "\"");
      o.balance = *b;
    } else if (arg == "--runs") {
      auto n = parse_count(v, 1000);
      if (!n || *n == 0) return fail("--runs takes a count from 1 to 1000");
      o.runs = static_cast<int>(*n);
    } else {
      auto n = parse_count(v, ~std::uint64_t{0} >> 1);
      if (!n) return fail("--seed takes a non-negative integer");
      o.seed = *n;
    }
  }
  if (auto bad = configure_sluice(o.settings.sluice)) return *bad;
  if (!o.instances.empty()) {
    auto fleets = sluice::sim::simulate_fleet(o);
    std::cout << (json ? sluice::sim::format_json(fleets)
                       : sluice::sim::format_text(fleets) + "\n");
    return 0;
  }
  auto tables = sluice::sim::simulate(o);
  std::cout << (json ? sluice::sim::format_json(tables) : sluice::sim::format_text(tables) + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view cmd = argc > 1 ? argv[1] : "serve";
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << sluice::config::help_text();
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "sluice " << kVersion << "\n";
    return 0;
  }
  if (cmd == "config-reference") {
    // --json: the variable table itself, for tests and tools that walk it.
    bool json = argc > 2 && std::string_view(argv[2]) == "--json";
    std::cout << (json ? sluice::config::reference_json() + "\n"
                       : sluice::config::reference_markdown());
    return 0;
  }
  if (cmd == "replay") return replay(argc, argv);
  if (cmd == "simulate") return simulate(argc, argv);
  if (cmd != "serve" && cmd != "check-config" && cmd != "healthcheck") {
    std::fprintf(stderr, "sluice: unknown command \"%.*s\"; see sluice --help\n",
                 static_cast<int>(cmd.size()), cmd.data());
    return 2;
  }
  sluice::config::Config cfg;
  try {
    cfg = sluice::config::load(sluice::config::sluice_environment(environ));
  } catch (const std::exception& e) {
    return config_error(e);
  }
  if (cmd == "check-config") {
    std::cout << sluice::config::to_json(cfg) << "\n";
    return 0;
  }
  if (cmd == "healthcheck") return healthcheck(cfg);
  return sluice::proxy::serve(cfg);
}
