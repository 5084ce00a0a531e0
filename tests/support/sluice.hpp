#pragma once
// A running `sluice` on free loopback ports, for end-to-end tests.
#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"

namespace sluice::test {

// The binaries under test (tests/CMakeLists.txt defines the paths). The
// sanitizer jobs of scripts/test.sh run this suite, built once, against the
// sluice their preset built: TEST_SLUICE_BIN names it.
inline const std::string kSluice = [] {
  const char* bin = std::getenv("TEST_SLUICE_BIN");
  return std::string(bin != nullptr && *bin != '\0' ? bin : SLUICE_BIN);
}();
inline const std::string kUpstream = SLUICE_UPSTREAM_BIN;

// Sluice built with ASan or TSan (this suite built so, or TEST_SLUICE_SANITIZED
// set, as the sanitizer jobs do): it runs several times slower, so a
// throughput figure says nothing about Sluice.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline const bool kSanitized = true;
#else
inline const bool kSanitized = std::getenv("TEST_SLUICE_SANITIZED") != nullptr;
#endif

// extra, plus SLUICE_UPSTREAMS naming `up` "api".
inline std::map<std::string, std::string> upstream_env(
    const Upstream& up, std::map<std::string, std::string> extra = {}) {
  extra.emplace("SLUICE_UPSTREAMS", "api=127.0.0.1:" + std::to_string(up.port));
  return extra;
}

// extra, plus SLUICE_UPSTREAMS naming `api` and `search` and, unless extra has
// its own, routes sending /search to search and the rest to api: the production
// shape of the admission tests (Sluice runs 2 threads unless told otherwise).
inline std::map<std::string, std::string> two_upstreams(
    const Upstream& api, const Upstream& search, std::map<std::string, std::string> extra = {}) {
  extra.emplace("SLUICE_UPSTREAMS", "api=127.0.0.1:" + std::to_string(api.port) +
                                        ";search=127.0.0.1:" + std::to_string(search.port));
  extra.emplace("SLUICE_ROUTES", R"([{"prefix":"/search","upstream":"search"},{"prefix":"/"}])");
  return extra;
}

// Polls pred every 20 ms until it holds or timeout passes; returns the last answer.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

struct Sluice {
  // env: SLUICE_ variables besides the listeners (SLUICE_UPSTREAMS at least).
  explicit Sluice(const std::string& binary, std::map<std::string, std::string> env)
      : process({binary}, with_listeners(std::move(env))) {
    auto p = process.port_from_err("listening on ", std::chrono::seconds(10));
    auto a = process.port_from_err("admin on ", std::chrono::seconds(1));
    if (!p || !a) throw std::runtime_error("sluice did not start: " + process.err());
    port = static_cast<std::uint16_t>(*p);
    admin = static_cast<std::uint16_t>(*a);
    // The HTTPS listener: beside the plain one, or the only one (then `port` too).
    if (auto h = process.port_from_err("https on ", std::chrono::milliseconds(0)))
      https = static_cast<std::uint16_t>(*h);
    else if (process.err().find("(https only)") != std::string::npos)
      https = port;
  }

  std::string metrics() { return request(admin, "GET", "/metrics").body; }

  // The value of one sample line of /metrics ("name{labels}"), or -1.
  double metric(const std::string& series) { return sample(metrics(), series); }

  // The value of one sample line in a /metrics text, or -1: to compare two
  // series of one scrape (two metric() calls may see a sample land between them).
  static double sample(const std::string& text, const std::string& series) {
    auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  // The access log lines written so far, parsed.
  std::vector<nlohmann::json> log_lines() {
    std::vector<nlohmann::json> out;
    auto text = process.out();
    std::size_t at = 0;
    while (at < text.size()) {
      auto end = text.find('\n', at);
      if (end == std::string::npos) break;
      out.push_back(nlohmann::json::parse(text.substr(at, end - at)));
      at = end + 1;
    }
    return out;
  }

  // Waits until the access log has at least n lines (it is flushed every heartbeat).
  std::vector<nlohmann::json> wait_log_lines(
      std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto lines = log_lines();
      if (lines.size() >= n || std::chrono::steady_clock::now() > deadline) return lines;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  Process process;
  std::uint16_t port = 0;
  std::uint16_t admin = 0;
  std::uint16_t https = 0;  // 0: no HTTPS listener

 private:
  static std::map<std::string, std::string> with_listeners(std::map<std::string, std::string> env) {
    env.emplace("SLUICE_LISTEN", "127.0.0.1:0");
    env.emplace("SLUICE_ADMIN_LISTEN", "127.0.0.1:0");
    env.emplace("SLUICE_THREADS", "2");
    return env;
  }
};

// The upstream's /stats: requests, in_flight, rejected, ...
inline nlohmann::json upstream_stats(const Upstream& up) {
  return nlohmann::json::parse(request(up.port, "GET", "/stats").body);
}

// `sluice ARGS...` run to its end: its exit code (-1: still running after 10 s) and output.
struct Ran {
  int code;
  std::string out, err;
};

inline Ran run(std::vector<std::string> args, std::map<std::string, std::string> env) {
  args.insert(args.begin(), kSluice);
  Process p(args, std::move(env));
  auto code = p.wait_exit(std::chrono::seconds(10));
  return {code.value_or(-1), p.out(), p.err()};
}

}  // namespace sluice::test
