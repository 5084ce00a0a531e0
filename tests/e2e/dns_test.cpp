// End-to-end tests of upstreams that move: names answered by a DNS server the
// test runs on loopback (tests/e2e/dns_peer.py), whose answers the test
// rewrites; hosts on 127.0.0.2, .3 and .4 (all loopback) on one port, as a
// headless service's pods are; and active health checks.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

const std::string kPeer = std::string(SLUICE_SOURCE_DIR) + "/tests/e2e/dns_peer.py";
// Debian's python3, which has python3-dnslib (scripts/setup.sh installs it).
const std::string kPython = "/usr/bin/python3";

// The DNS server and the file its answers come from.
struct Dns {
  std::filesystem::path zone;
  Process process;
  std::uint16_t port = 0;

  static std::filesystem::path zone_path() {
    static int n = 0;
    return std::filesystem::temp_directory_path() /
           ("sluice-zone-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".json");
  }
  explicit Dns(const json& answers)
      : zone(zone_path()),
        process((write(zone, answers),
                 std::vector<std::string>{kPython, kPeer, "dns", zone.string()})) {
    auto p = process.port_from_err("dns on ", 10s);
    if (!p) throw std::runtime_error("the DNS peer did not start: " + process.err());
    port = static_cast<std::uint16_t>(*p);
  }
  ~Dns() {
    std::filesystem::remove(zone);
    std::filesystem::remove(zone.string() + ".queries");
  }
  static int write(const std::filesystem::path& path, const json& answers) {
    auto tmp = path.string() + ".new";
    std::ofstream(tmp) << answers.dump();
    std::filesystem::rename(tmp, path);
    return 0;
  }
  void answer(const json& answers) const { write(zone, answers); }
  std::string resolver() const { return "127.0.0.1:" + std::to_string(port); }
};

json a_records(std::vector<std::string> addresses, int ttl = 1) {
  return {{"api.test.", {{"a", addresses}, {"ttl", ttl}}}};
}

// sluice-upstreams on 127.0.0.2, .3, ... all on one port (the first one's).
std::vector<Upstream> hosts_on_one_port(int n) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      std::vector<Upstream> out;
      out.emplace_back(kUpstream, std::vector<std::string>{"--listen", "127.0.0.2:0"});
      for (int i = 1; i < n; ++i)
        out.emplace_back(
            kUpstream, std::vector<std::string>{"--listen", "127.0.0." + std::to_string(i + 2) +
                                                                ":" + std::to_string(out[0].port)});
      return out;
    } catch (const std::runtime_error&) {
      // the port was taken on another address: try another
    }
  }
  throw std::runtime_error("no port free on 127.0.0.2..");
}

std::string on(const std::string& address, std::uint16_t port) {
  return address + ":" + std::to_string(port);
}

// The hosts (upstream_addr) of the access log lines from `from` on.
std::map<std::string, int> hosts_served(Sluice& s, std::size_t from) {
  std::map<std::string, int> out;
  auto lines = s.log_lines();
  for (std::size_t i = from; i < lines.size(); ++i)
    if (lines[i].contains("upstream_addr")) ++out[lines[i]["upstream_addr"].get<std::string>()];
  return out;
}

// Sends n requests one after another, each answered 200: the hosts that served them.
std::map<std::string, int> serve(Sluice& s, int n) {
  const auto from = s.log_lines().size();
  for (int i = 0; i < n; ++i) REQUIRE(request(s.port, "GET", "/hello").status == 200);
  REQUIRE(s.wait_log_lines(from + static_cast<std::size_t>(n)).size() >= from + n);
  return hosts_served(s, from);
}

// Established TCP connections to address:port (any process), from /proc/net/tcp.
int connections_to(const std::string& address, std::uint16_t port) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (std::sscanf(address.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) return -1;
  char want[32];
  std::snprintf(want, sizeof want, "%02X%02X%02X%02X:%04X", d, c, b, a, port);
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the heading
  int n = 0;
  while (std::getline(in, line)) {
    char local[64], remote[64], state[8];
    if (std::sscanf(line.c_str(), "%*d: %63s %63s %7s", local, remote, state) == 3 &&
        std::string(remote) == want && std::string(state) == "01")
      ++n;
  }
  return n;
}

json upstream_state(Sluice& s) {
  return json::parse(request(s.admin, "GET", "/admin/state").body)["upstreams"][0];
}

std::set<std::string> addresses_known(Sluice& s) {
  std::set<std::string> out;
  const auto state = upstream_state(s);
  for (const auto& h : state["hosts"]) out.insert(h["address"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE(
    "every address of a name is a host, a new one gets traffic within TTL + 1 s, one that went "
    "gets no new request while its open stream finishes",
    "[e2e][hosts]") {
  auto up = hosts_on_one_port(3);
  const auto port = up[0].port;
  const std::string h2 = on("127.0.0.2", port), h3 = on("127.0.0.3", port),
                    h4 = on("127.0.0.4", port);
  Dns dns(a_records({"127.0.0.2"}));
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "api=api.test:" + std::to_string(port)},
                     {"SLUICE_RESOLVER", dns.resolver()},
                     {"SLUICE_ADMISSION_MODE", "off"}});
  REQUIRE(addresses_known(s) == std::set<std::string>{h2});

  // A stream through the one host there is, open through every change below.
  Process stream({"curl", "-sN", "--max-time", "30",
                  "http://127.0.0.1:" + std::to_string(s.port) + "/sse?n=60&interval_ms=100"});

  // Two addresses, then three: the new one is in the choice within TTL + 1 s.
  auto gets_traffic = [&](const std::string& host, std::chrono::milliseconds within) {
    auto from = s.log_lines().size();
    auto start = std::chrono::steady_clock::now();
    bool got = eventually(
        [&] {
          REQUIRE(request(s.port, "GET", "/hello").status == 200);
          std::this_thread::sleep_for(20ms);
          return hosts_served(s, from).contains(host);
        },
        within + 1s);  // the log is written at the next heartbeat, and a lookup may be under way
    auto took = std::chrono::steady_clock::now() - start;
    return got ? std::chrono::duration_cast<std::chrono::milliseconds>(took) : -1ms;
  };
  dns.answer(a_records({"127.0.0.2", "127.0.0.3"}));
  auto took3 = gets_traffic(h3, 2s);
  CHECK(took3 >= 0ms);
  dns.answer(a_records({"127.0.0.2", "127.0.0.3", "127.0.0.4"}));
  auto took4 = gets_traffic(h4, 2s);
  INFO("the third address got traffic after " << took4.count() << " ms");
  CHECK(took4 >= 0ms);
  CHECK(took4 <= 2s + 500ms);

  // 127.0.0.2 goes: once Sluice has the new answer, no new request reaches it,
  // and its idle pooled connections close; the stream's stays open.
  REQUIRE(connections_to("127.0.0.2", port) >= 2);  // the stream's and pooled ones
  dns.answer(a_records({"127.0.0.3", "127.0.0.4"}));
  REQUIRE(eventually([&] { return addresses_known(s) == std::set<std::string>{h3, h4}; }, 3s));
  CHECK(eventually([&] { return connections_to("127.0.0.2", port) == 1; }, 2s));
  const auto from = s.log_lines().size();
  auto served = serve(s, 40);
  CHECK_FALSE(served.contains(h2));
  CHECK(served[h3] + served[h4] == 40);

  // The stream through it was not cut: every event arrived.
  REQUIRE(stream.wait_exit(30s) == 0);
  CHECK(eventually([&] { return connections_to("127.0.0.2", port) == 0; }, 2s));
  const auto body = stream.out();
  CHECK(body.find("id: 60\ndata: event 60\n\n") != std::string::npos);
  // ... and it was carried by the host that went.
  bool stream_on_h2 = false;
  for (const auto& line : s.wait_log_lines(from + 41))
    stream_on_h2 = stream_on_h2 || (line["path"] == "/sse" && line["upstream_addr"] == h2);
  CHECK(stream_on_h2);
}

TEST_CASE(
    "a name that does not resolve at start is reported and refused 503 unresolved with a "
    "Retry-After, then served once it resolves",
    "[e2e][hosts]") {
  auto up = hosts_on_one_port(1);
  Upstream other(kUpstream);
  Dns dns(json::object());  // NXDOMAIN
  // Two upstreams, two threads, a cold start: the one that resolves is served throughout.
  Sluice s(kSluice,
           {{"SLUICE_UPSTREAMS", "api=api.test:" + std::to_string(up[0].port) +
                                     ";other=127.0.0.1:" + std::to_string(other.port)},
            {"SLUICE_ROUTES",
             R"([{"prefix":"/other","upstream":"other"},{"prefix":"/","upstream":"api"}])"},
            {"SLUICE_RESOLVER", dns.resolver()}});
  CHECK(request(s.port, "GET", "/other/hello").status == 200);
  CHECK(s.process.err().find("cannot resolve") != std::string::npos);

  auto ready = request(s.admin, "GET", "/readyz");
  CHECK(ready.status == 503);
  CHECK(ready.body.find("upstream api") != std::string::npos);
  CHECK(ready.body.find("other") == std::string::npos);
  auto refused = request(s.port, "GET", "/hello");
  CHECK(refused.status == 503);
  CHECK(refused.header("X-Sluice-Reject") == "unresolved");
  CHECK_FALSE(refused.header("Retry-After").empty());
  CHECK(json::parse(refused.body)["reason"] == "unresolved");
  auto state = upstream_state(s);
  CHECK(state["unresolved"] == true);
  CHECK(state["names"][0]["resolved"] == false);
  CHECK(s.metric(R"(sluice_upstream_addresses{upstream="api"})") == 0);
  CHECK(
      s.metric(
          R"(sluice_admission_decisions_total{lane="standard",outcome="shed",reason="unresolved"})") ==
      1);
  REQUIRE(eventually(
      [&] {
        return s.metric(R"(sluice_upstream_dns_lookups_total{upstream="api",result="failed"})") >=
               2;
      },
      5s));  // and it is asked again

  dns.answer(a_records({"127.0.0.2"}));
  REQUIRE(eventually([&] { return request(s.port, "GET", "/hello").status == 200; }, 40s));
  CHECK(request(s.admin, "GET", "/readyz").status == 200);
  CHECK(s.metric(R"(sluice_upstream_addresses{upstream="api"})") == 1);
}

TEST_CASE(
    "a health check that fails takes out a host that still accepts connections, and one that "
    "passes brings it back",
    "[e2e][hosts]") {
  auto up = hosts_on_one_port(1);
  const auto port = up[0].port;
  const std::string good = on("127.0.0.2", port), sick = on("127.0.0.3", port);
  // The sick host serves every request and fails only its health check, while
  // the file exists.
  auto sick_file = Dns::zone_path().string() + ".sick";
  std::ofstream(sick_file) << "sick\n";
  Process peer({kPython, kPeer, "http", sick, "/healthz", sick_file});
  REQUIRE(peer.port_from_err("listening on ", 10s));
  Sluice s(
      kSluice,
      {{"SLUICE_UPSTREAMS", "api=" + good + "|" + sick},
       {"SLUICE_ADMISSION_MODE", "off"},
       {"SLUICE_HEALTH_CHECKS",
        R"({"api":{"path":"/healthz","interval":"300ms","timeout":"300ms","healthy":2,"unhealthy":2}})"}});
  const std::string sick_series =
      R"(sluice_upstream_host_healthy{upstream="api",host=")" + sick + "\"}";
  REQUIRE(eventually([&] { return s.metric(sick_series) == 0; }, 5s));
  CHECK(s.metric(R"(sluice_upstream_host_healthy{upstream="api",host=")" + good + "\"}") == 1);
  json sick_state;
  const auto state = upstream_state(s);
  for (const auto& h : state["hosts"])
    if (h["address"] == sick) sick_state = h;
  CHECK(sick_state["healthy"] == false);
  CHECK(sick_state["health_check"]["passing"] == false);
  CHECK(sick_state["health_check"]["last"] == "status 503");
  CHECK(s.metric(R"(sluice_upstream_health_checks_total{upstream="api",result="failed"})") >= 2);

  auto served = serve(s, 40);
  CHECK(served[good] == 40);
  CHECK_FALSE(served.contains(sick));

  // Its checks pass again: back in the balancing.
  std::filesystem::remove(sick_file);
  REQUIRE(eventually([&] { return s.metric(sick_series) == 1; }, 5s));
  CHECK(serve(s, 40)[sick] > 0);
}
