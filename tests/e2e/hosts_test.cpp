// End-to-end tests of an upstream with several hosts: the pool's choice between
// them (power of two choices on requests in flight) and the ejection of a host
// whose connects fail.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

// A loopback port that refuses connections: bound to learn a free port, then closed.
std::uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string host(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

}  // namespace

TEST_CASE("requests under concurrent load are spread over both live hosts", "[e2e][hosts]") {
  Upstream a(kUpstream);
  Upstream b(kUpstream);
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "api=" + host(a.port) + "|" + host(b.port)},
                     {"SLUICE_ADMISSION_MODE", "off"}});

  constexpr int kClients = 10;
  constexpr int kPerClient = 20;  // 200 requests in all
  std::mutex mutex;
  std::map<std::string, int> by_port;
  std::vector<int> statuses;
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&] {
      for (int j = 0; j < kPerClient; ++j) {
        int status = 0;
        std::string port;
        try {
          auto res = request(s.port, "GET", "/slow?ms=5", {}, {}, 20s);
          status = res.status;
          port = res.header("X-Upstream-Port");
        } catch (const std::exception&) {
        }
        std::lock_guard lock(mutex);
        statuses.push_back(status);
        ++by_port[port];
      }
    });
  for (auto& t : clients) t.join();

  int ok = 0;
  for (int st : statuses) ok += st == 200;
  CHECK(ok == kClients * kPerClient);
  INFO("a: " << by_port[std::to_string(a.port)] << ", b: " << by_port[std::to_string(b.port)]);
  CHECK(by_port[std::to_string(a.port)] + by_port[std::to_string(b.port)] == kClients * kPerClient);
  // Roughly balanced: each host has at least a quarter of the requests.
  CHECK(by_port[std::to_string(a.port)] >= kClients * kPerClient / 4);
  CHECK(by_port[std::to_string(b.port)] >= kClients * kPerClient / 4);
  CHECK(s.metric(R"(sluice_upstream_host_ejections_total{upstream="api"})") == 0);
}

TEST_CASE("a host that refuses connections is ejected, and the request goes on to another host",
          "[e2e][hosts]") {
  Upstream live(kUpstream);
  const auto dead = closed_port();
  // Two I/O threads, each with its own pool: each may meet the dead host once.
  Sluice s(kSluice, {{"SLUICE_UPSTREAMS", "api=" + host(live.port) + "|" + host(dead)},
                     {"SLUICE_THREADS", "2"},
                     {"SLUICE_HOST_EJECT", "1m:1m"},
                     {"SLUICE_ADMISSION_MODE", "off"}});
  // A refused connect sent nothing: the request (even a POST) goes on to the
  // live host, and the dead one is left out of the choice from then on.
  constexpr int kRequests = 50;
  int ok = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto res = request(s.port, i % 2 ? "GET" : "POST", "/echo", {}, "x");
    if (res.status == 200) {
      ++ok;
      CHECK(res.header("X-Upstream-Port") == std::to_string(live.port));
    }
  }
  CHECK(ok == kRequests);
  auto failures = s.metric(R"(sluice_upstream_connect_failures_total{upstream="api"})");
  CHECK(failures >= 1);
  CHECK(failures <= 2);  // once per thread: ejected after its first failure
  CHECK(s.metric(R"(sluice_upstream_host_ejections_total{upstream="api"})") >= 1);
  CHECK(s.metric(R"(sluice_upstream_closed{upstream="api"})") == 0);  // another host answers
  // /admin/state, as of the threads' last heartbeat: the dead host is out.
  bool shown = sluice::test::eventually(
      [&] {
        auto state = nlohmann::json::parse(request(s.admin, "GET", "/admin/state").body);
        for (const auto& h : state["upstreams"][0]["hosts"])
          if (h["address"] == host(dead))
            return h["ejected"].get<bool>() && h["failures"].get<int>() >= 1;
        return false;
      },
      2s);
  CHECK(shown);
}
