// TLS both ways through the real binary, with certificates made here by
// `openssl req`, real clients (curl, Python's ssl, openssl s_client) and a
// Python HTTPS upstream (tests/e2e/tls_peer.py), all on loopback.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/certs.hpp"
#include "tests/support/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sluice.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using sluice::test::Certs;
using sluice::test::eventually;
using sluice::test::kSluice;
using sluice::test::kUpstream;
using sluice::test::Process;
using sluice::test::request;
using sluice::test::Sluice;
using sluice::test::Upstream;

namespace {

const std::string kPeer = std::string(SLUICE_SOURCE_DIR) + "/tests/e2e/tls_peer.py";

// tls_peer.py run to its end: its stdout.
std::string peer(std::vector<std::string> args) {
  args.insert(args.begin(), kPeer);
  args.insert(args.begin(), "python3");
  Process p(args);
  auto code = p.wait_exit(30s);
  INFO(p.err());
  REQUIRE(code == 0);
  return p.out();
}

json peer_json(std::vector<std::string> args) { return json::parse(peer(std::move(args))); }

std::map<std::string, std::string> https_env(const Certs& c, const std::string& upstreams,
                                             const std::string& pairs = "a") {
  std::string certs, keys;
  for (std::size_t at = 0; at <= pairs.size();) {
    auto end = std::min(pairs.find(',', at), pairs.size());
    auto name = pairs.substr(at, end - at);
    certs += (certs.empty() ? "" : ",") + c.path(name + ".pem");
    keys += (keys.empty() ? "" : ",") + c.path(name + ".key");
    at = end + 1;
  }
  return {{"SLUICE_UPSTREAMS", upstreams},
          {"SLUICE_TLS_CERT", certs},
          {"SLUICE_TLS_KEY", keys},
          {"SLUICE_TLS_LISTEN", "127.0.0.1:0"}};
}

std::string port_of(const Upstream& up) { return "127.0.0.1:" + std::to_string(up.port); }

// The HTTPS upstream (tls_peer.py upstream) on a free loopback port.
struct TlsUpstream {
  explicit TlsUpstream(const Certs& c, const std::string& name, const std::string& client_ca = "")
      : process(argv(c, name, client_ca)) {
    auto p = process.port_from_err("tls-upstream: listening on ", 10s);
    if (!p) throw std::runtime_error("tls upstream did not start: " + process.err());
    port = static_cast<std::uint16_t>(*p);
  }
  static std::vector<std::string> argv(const Certs& c, const std::string& name,
                                       const std::string& client_ca) {
    std::vector<std::string> a{"python3", kPeer, "upstream", c.path(name + ".pem"),
                               c.path(name + ".key")};
    if (!client_ca.empty()) {
      a.emplace_back("--client-ca");
      a.push_back(client_ca);
    }
    return a;
  }
  Process process;
  std::uint16_t port = 0;
};

}  // namespace

TEST_CASE("HTTPS clients reach a plain upstream over TLS 1.2 and 1.3, curl and Python alike",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  Upstream up(kUpstream);
  Sluice s(kSluice, https_env(c, "api=" + port_of(up)));
  REQUIRE(s.https != 0);
  REQUIRE(s.https != s.port);
  auto https = std::to_string(s.https);

  for (std::string version : {"1.2", "1.3"}) {
    auto r = peer_json({"get", https, "a.test", c.path("a.pem"), "/headers", "--tls", version});
    CHECK(r["status"] == 200);
    CHECK(r["version"] == "TLSv" + version);
    CHECK(r["alpn"] == "http/1.1");  // it offered only what it speaks (h2: tests/e2e/h2_test.cpp)
    // The upstream is told how the client came.
    CHECK(r["body"].get<std::string>().find(R"(["X-Forwarded-Proto","https"])") !=
          std::string::npos);
  }
  // curl, verifying the certificate and its name.
  Process curl({"curl", "-sS", "--cacert", c.path("a.pem"), "--resolve",
                "a.test:" + https + ":127.0.0.1", "https://a.test:" + https + "/echo", "-d",
                "hello"});
  REQUIRE(curl.wait_exit(20s) == 0);
  CHECK(curl.out() == "hello");
  // Plain HTTP stays on its own listener.
  CHECK(request(s.port, "GET", "/echo").status == 200);
  // A ticket resumes the next connection.
  auto r = peer_json({"get", https, "a.test", c.path("a.pem"), "/echo", "--twice"});
  CHECK(r["resumed"] == true);
  CHECK(r["second_status"] == 200);

  auto log = s.wait_log_lines(5);
  REQUIRE(!log.empty());
  CHECK(log.front()["tls"].get<std::string>().starts_with("TLSv1."));
  CHECK(s.metric("sluice_tls_handshakes_total{result=\"full\"}") >= 4);
  CHECK(s.metric("sluice_tls_handshakes_total{result=\"resumed\"}") >= 1);
}

TEST_CASE("the session ticket key rotates: a ticket resumes within its period, not after it",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  Upstream up(kUpstream);
  auto env = https_env(c, "api=" + port_of(up));
  env["SLUICE_TLS_TICKET_ROTATE"] = "2s";
  env["SLUICE_TICK"] = "100ms";
  Sluice s(kSluice, env);
  auto https = std::to_string(s.https);
  CHECK(peer_json({"get", https, "a.test", c.path("a.pem"), "/echo", "--twice"})["resumed"] ==
        true);
  // A ticket kept past the period (and a tick) meets a new key: a full handshake
  // (the ticket itself is good for two periods: the rotation ended it).
  CHECK(peer_json({"get", https, "a.test", c.path("a.pem"), "/echo", "--twice", "--pause",
                   "3"})["resumed"] == false);
  // And the new key's tickets resume.
  CHECK(peer_json({"get", https, "a.test", c.path("a.pem"), "/echo", "--twice"})["resumed"] ==
        true);
}

TEST_CASE("https:// upstreams verify against the system's store, which honours SSL_CERT_FILE",
          "[e2e][tls]") {
  Certs c;
  c.make("up", "127.0.0.1", "IP:127.0.0.1");
  TlsUpstream tls_up(c, "up");
  auto upstream = "api=https://127.0.0.1:" + std::to_string(tls_up.port);
  {
    Sluice store(kSluice, {{"SLUICE_UPSTREAMS", upstream}});  // the system's store lacks it
    CHECK(request(store.port, "GET", "/headers").status == 502);
  }
  Sluice file(kSluice, {{"SLUICE_UPSTREAMS", upstream}, {"SSL_CERT_FILE", c.path("up.pem")}});
  CHECK(request(file.port, "GET", "/headers").status == 200);
}

TEST_CASE("SNI picks the certificate that holds the name, an unknown name gets the default",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  c.make("b", "b.test", "DNS:b.test,DNS:*.wild.test");
  Upstream up(kUpstream);
  Sluice s(kSluice, https_env(c, "api=" + port_of(up), "a,b"));
  auto https = std::to_string(s.https);
  auto ca = c.bundle("ca.pem", {"a", "b"});

  CHECK(peer_json({"get", https, "b.test", ca, "/echo"})["subject"] == "b.test");
  CHECK(peer_json({"get", https, "x.wild.test", ca, "/echo"})["subject"] == "b.test");
  CHECK(peer_json({"get", https, "a.test", ca, "/echo"})["subject"] == "a.test");
  CHECK(s.metric("sluice_tls_sni_unknown_total") == 0);
  CHECK(peer_json({"get", https, "nobody.test", ca, "/echo"})["subject"] == "a.test");
  CHECK(s.metric("sluice_tls_sni_unknown_total") == 1);
}

TEST_CASE("hostile input on the HTTPS port gets its answer, is counted, and costs nothing else",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  Upstream up(kUpstream);
  auto env = https_env(c, "api=" + port_of(up));
  env["SLUICE_TLS_HANDSHAKE_TIMEOUT"] = "300ms";
  Sluice s(kSluice, env);
  auto https = std::to_string(s.https);
  auto count = [&](const std::string& result) {
    return s.metric("sluice_tls_handshakes_total{result=\"" + result + "\"}");
  };

  // Plain HTTP: a plain 400 that says what to do.
  auto plain = peer({"plain", https});
  CHECK(plain.starts_with("HTTP/1.1 400 Bad Request"));
  CHECK(plain.find("https://") != std::string::npos);
  CHECK(eventually([&] { return count("http_request") == 1; }, 2s));

  // Half a ClientHello, then gone.
  peer({"truncated", https});
  CHECK(eventually([&] { return count("truncated") == 1; }, 2s));

  // A handshake that never starts: cut at its own deadline.
  auto silent = peer_json({"silent", https});
  CHECK(silent["closed_after_s"].get<double>() < 5.0);
  CHECK(eventually([&] { return count("timeout") == 1; }, 2s));

  // SSLv3 and TLS 1.0 / 1.1: refused with an alert.
  auto sslv3 = peer({"sslv3", https});
  CHECK(sslv3.starts_with("15"));  // an alert record
  for (std::string v : {"1.0", "1.1"}) CHECK(peer({"old", https, v}).starts_with("refused"));
  CHECK(eventually([&] { return count("protocol") == 3; }, 2s));

  // A renegotiation (TLS 1.2, openssl s_client's "R"): refused, counted.
  Process reneg({"sh", "-c",
                 "(printf 'R\\n'; sleep 1) | openssl s_client -tls1_2 -connect 127.0.0.1:" + https +
                     " -servername a.test -CAfile " + c.path("a.pem") + " 2>&1"});
  reneg.wait_exit(20s);
  CHECK(reneg.out().find("RENEGOTIATING") != std::string::npos);
  CHECK(eventually([&] { return s.metric("sluice_tls_renegotiations_total") == 1; }, 3s));

  // None of it cost the next client anything.
  CHECK(peer_json({"get", https, "a.test", c.path("a.pem"), "/echo"})["status"] == 200);
  CHECK(up.process.running());
  CHECK(sluice::test::upstream_stats(up)["requests"] == 1);  // only the good one reached it
}

TEST_CASE("at level 3 new HTTPS connections are shed before their handshake, open ones are served",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  Upstream up(kUpstream);
  Sluice s(kSluice, https_env(c, "api=" + port_of(up)));
  auto https = std::to_string(s.https);
  CHECK(peer({"try", https}) == "handshake done\n");
  // A stream over TLS, open before the level rises.
  Process stream(
      {"python3", kPeer, "stream", https, "a.test", c.path("a.pem"), "/sse?n=20&interval_ms=100"});
  REQUIRE(stream.wait_for_out("data: event 2", 10s));
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3,"ttl":"1m","reason":"test"})")
              .status == 200);
  REQUIRE(eventually([&] { return s.metric("sluice_admission_level") == 3; }, 3s));
  CHECK(peer({"try", https}).starts_with("refused"));
  CHECK(s.metric("sluice_tls_connections_shed_total{reason=\"level\"}") >= 1);
  CHECK(s.metric("sluice_tls_handshakes_total{result=\"truncated\"}") == 0);  // never began one
  REQUIRE(stream.wait_for_out("end", 20s));
  CHECK(stream.out().find("data: event 20") != std::string::npos);
  // Plain HTTP is not shed at accept (its requests meet the level as ever).
  CHECK(request(s.port, "GET", "/echo").status != 0);
}

TEST_CASE("sslscan finds no weak protocol or cipher offered by default", "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  c.make("r", "r.test", "DNS:r.test", 2, true);  // RSA 2048
  Upstream up(kUpstream);
  for (std::string pair : {"a", "r"}) {
    INFO(pair);
    Sluice s(kSluice, https_env(c, "api=" + port_of(up), pair));
    Process scan({"sslscan", "--no-colour", "127.0.0.1:" + std::to_string(s.https)});
    REQUIRE(scan.wait_exit(60s) == 0);
    auto out = scan.out();
    INFO(out);
    for (auto line :
         {"SSLv2     disabled", "SSLv3     disabled", "TLSv1.0   disabled", "TLSv1.1   disabled",
          "TLSv1.2   enabled", "TLSv1.3   enabled", "Session renegotiation not supported"})
      CHECK(out.find(line) != std::string::npos);
    // Every cipher it accepts: forward secrecy and an AEAD.
    int accepted = 0;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      if (!line.starts_with("Accepted") && !line.starts_with("Preferred")) continue;
      ++accepted;
      INFO(line);
      CHECK((line.find("GCM") != std::string::npos || line.find("CHACHA20") != std::string::npos));
      if (line.find("TLSv1.2") != std::string::npos)
        CHECK(line.find("ECDHE-") != std::string::npos);
    }
    CHECK(accepted == 6);  // three TLS 1.3 suites, three TLS 1.2 ciphers for the key
    // The scan's hundred refused handshakes cost the next client nothing.
    CHECK(peer_json({"get", std::to_string(s.https), pair + ".test", c.path(pair + ".pem"),
                     "/echo"})["status"] == 200);
  }
}

TEST_CASE(
    "a certificate reload keeps the open stream and serves the new certificate to the next "
    "handshake, a bad file is refused and the one in use stays",
    "[e2e][tls][reload]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  c.make("next", "a.test", "DNS:a.test,DNS:next.test", 3);
  Upstream up(kUpstream);
  Sluice s(kSluice, https_env(c, "api=" + port_of(up)));
  auto https = std::to_string(s.https);
  auto ca = c.bundle("ca.pem", {"a", "next"});
  auto not_after = [&] { return peer_json({"get", https, "a.test", ca, "/echo"})["not_after"]; };
  auto before = not_after();

  // A stream over TLS, open across the reload.
  Process stream({"python3", kPeer, "stream", https, "a.test", ca, "/sse?n=30&interval_ms=100"});
  REQUIRE(stream.wait_for_out("data: event 2", 10s));

  // New files, written as a Secret update does: replaced whole.
  std::filesystem::copy_file(c.path("next.key"), c.path("a.key.new"));
  std::filesystem::copy_file(c.path("next.pem"), c.path("a.pem.new"));
  std::filesystem::rename(c.path("a.key.new"), c.path("a.key"));
  std::filesystem::rename(c.path("a.pem.new"), c.path("a.pem"));
  REQUIRE(eventually(
      [&] { return s.metric("sluice_tls_certificate_reloads_total{result=\"ok\"}") >= 1; }, 5s));
  // The next handshake gets the new certificate (it also names next.test).
  CHECK(peer_json({"get", https, "next.test", ca, "/echo"})["subject"] == "a.test");
  CHECK(s.metric("sluice_tls_sni_unknown_total") == 0);
  CHECK(not_after() != before);
  // The stream went on to its end.
  REQUIRE(stream.wait_for_out("end", 20s));
  CHECK(stream.out().find("data: event 30") != std::string::npos);

  // A broken file: refused, the certificate in use stays.
  std::ofstream(c.path("a.pem")) << "not a certificate\n";
  ::kill(s.process.pid(), SIGHUP);
  REQUIRE(eventually(
      [&] { return s.metric("sluice_tls_certificate_reloads_total{result=\"failed\"}") >= 1; },
      5s));
  CHECK(s.process.err().find("certificates not reloaded") != std::string::npos);
  CHECK(peer_json({"get", https, "next.test", ca, "/echo"})["status"] == 200);
}

TEST_CASE("an expired certificate is reported by the expiry metric", "[e2e][tls]") {
  Certs c;
  c.make("old", "old.test", "", -1);
  c.make("a", "a.test", "DNS:a.test");
  Upstream up(kUpstream);
  Sluice s(kSluice, https_env(c, "api=" + port_of(up), "a,old"));
  auto text = s.metrics();
  auto expired = Sluice::sample(text, "sluice_tls_certificate_expiry_seconds{file=\"" +
                                          c.path("old.pem") + "\",subject=\"old.test\"}");
  auto valid = Sluice::sample(text, "sluice_tls_certificate_expiry_seconds{file=\"" +
                                        c.path("a.pem") + "\",subject=\"a.test\"}");
  CHECK(expired < 0);
  CHECK(expired > -2 * 86400);
  CHECK(valid > 86400);
  CHECK(valid <= 2 * 86400);
}

TEST_CASE(
    "https:// upstreams are verified: the right name and CA pass, others are 502s that say so",
    "[e2e][tls]") {
  Certs c;
  c.make("up", "127.0.0.1", "IP:127.0.0.1,DNS:localhost");
  c.make("other", "other.test", "DNS:other.test");
  c.make("stranger", "127.0.0.1", "IP:127.0.0.1");
  TlsUpstream good(c, "up");
  TlsUpstream wrong_name(c, "other");
  TlsUpstream unknown_ca(c, "stranger");
  auto ca = c.bundle("ca.pem", {"up", "other"});
  auto url = [](const TlsUpstream& u) { return "https://127.0.0.1:" + std::to_string(u.port); };
  Sluice s(
      kSluice,
      {{"SLUICE_UPSTREAMS",
        "good=" + url(good) + ";name=" + url(wrong_name) + ";ca=" + url(unknown_ca)},
       {"SLUICE_UPSTREAM_CA", ca},
       {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "200ms"},
       {"SLUICE_THREADS", "1"},  // one pool: the second request finds the first's connection
       {"SLUICE_ROUTES",
        R"([{"prefix":"/name","upstream":"name"},{"prefix":"/ca","upstream":"ca"},{"prefix":"/","upstream":"good"}])"}});

  auto r = request(s.port, "GET", "/headers");
  REQUIRE(r.status == 200);
  auto headers = json::parse(r.body);
  // Reached by its name: the upstream's Host, the client's as X-Forwarded-Host.
  CHECK(headers["host"] == "127.0.0.1:" + std::to_string(good.port));
  CHECK(headers["x-forwarded-host"].get<std::string>().starts_with("127.0.0.1:"));
  // Kept alive: the second request reuses the connection.
  CHECK(request(s.port, "GET", "/headers").status == 200);
  // Once the idle connection is closed, the next one resumes the session.
  std::this_thread::sleep_for(600ms);
  CHECK(request(s.port, "GET", "/headers").status == 200);

  auto bad_name = request(s.port, "GET", "/name");
  CHECK(bad_name.status == 502);
  CHECK(bad_name.body.find("upstream_tls_verify") != std::string::npos);
  auto bad_ca = request(s.port, "GET", "/ca");
  CHECK(bad_ca.status == 502);
  CHECK(bad_ca.body.find("upstream_tls_verify") != std::string::npos);

  auto text = s.metrics();
  CHECK(Sluice::sample(
            text, R"(sluice_upstream_tls_handshakes_total{upstream="good",result="full"})") >= 1);
  CHECK(Sluice::sample(
            text, R"(sluice_upstream_tls_handshakes_total{upstream="good",result="resumed"})") >=
        1);
  CHECK(Sluice::sample(
            text, R"(sluice_upstream_tls_handshakes_total{upstream="name",result="verify"})") == 1);
  CHECK(Sluice::sample(
            text, R"(sluice_upstream_tls_handshakes_total{upstream="ca",result="verify"})") == 1);
  CHECK(Sluice::sample(text, R"(sluice_upstream_tls_handshake_seconds_count{upstream="good"})") >=
        2);
  CHECK(s.process.err().find("certificate verify failed") != std::string::npos);

  // The access log: the handshake apart from the connect, on the request that opened it.
  auto log = s.wait_log_lines(5);
  REQUIRE(log.size() >= 5);
  CHECK(log[0].contains("upstream_connect_ms"));
  CHECK(log[0].contains("upstream_tls_ms"));
  CHECK(!log[1].contains("upstream_tls_ms"));  // the reused connection
  CHECK(log[3]["reason"] == "upstream_tls_verify");
}

TEST_CASE("TLS both ways: curl and Python over HTTPS through Sluice to an HTTPS upstream",
          "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  c.make("up", "127.0.0.1", "IP:127.0.0.1");
  TlsUpstream tls_up(c, "up");
  auto env = https_env(c, "api=https://127.0.0.1:" + std::to_string(tls_up.port));
  env["SLUICE_UPSTREAM_CA"] = c.path("up.pem");
  Sluice s(kSluice, env);
  auto https = std::to_string(s.https);
  Process curl({"curl", "-sS", "--cacert", c.path("a.pem"), "--resolve",
                "a.test:" + https + ":127.0.0.1", "https://a.test:" + https + "/headers"});
  REQUIRE(curl.wait_exit(20s) == 0);
  auto headers = json::parse(curl.out());
  CHECK(headers["x-forwarded-proto"] == "https");
  CHECK(headers["x-forwarded-host"] == "a.test:" + https);
  auto r = peer_json({"get", https, "a.test", c.path("a.pem"), "/sse?n=3&interval_ms=10"});
  CHECK(r["status"] == 200);
  CHECK(r["body"].get<std::string>().find("data: 2") != std::string::npos);
}

TEST_CASE("mTLS: an upstream that requires a client certificate gets Sluice's", "[e2e][tls]") {
  Certs c;
  c.make("up", "127.0.0.1", "IP:127.0.0.1");
  c.make("client", "sluice", "DNS:sluice");
  TlsUpstream strict(c, "up", c.path("client.pem"));
  auto upstream = "api=https://127.0.0.1:" + std::to_string(strict.port);
  {
    Sluice without(kSluice,
                   {{"SLUICE_UPSTREAMS", upstream}, {"SLUICE_UPSTREAM_CA", c.path("up.pem")}});
    CHECK(request(without.port, "GET", "/headers").status == 502);
  }
  Sluice with(kSluice, {{"SLUICE_UPSTREAMS", upstream},
                        {"SLUICE_UPSTREAM_CA", c.path("up.pem")},
                        {"SLUICE_UPSTREAM_CLIENT_CERT", c.path("client.pem")},
                        {"SLUICE_UPSTREAM_CLIENT_KEY", c.path("client.key")}});
  CHECK(request(with.port, "GET", "/headers").status == 200);
}

TEST_CASE("TLS settings that cannot work stop start-up with the variable named", "[e2e][tls]") {
  Certs c;
  c.make("a", "a.test", "DNS:a.test");
  c.make("b", "b.test", "DNS:b.test");
  auto check = [](std::map<std::string, std::string> env) {
    env.emplace("SLUICE_UPSTREAMS", "127.0.0.1:9");
    return sluice::test::run({"check-config"}, env);
  };
  auto mismatch =
      check({{"SLUICE_TLS_CERT", c.path("a.pem")}, {"SLUICE_TLS_KEY", c.path("b.key")}});
  CHECK(mismatch.code == 2);
  CHECK(mismatch.err.find("sluice: config: SLUICE_TLS_KEY: ") != std::string::npos);
  auto missing =
      check({{"SLUICE_TLS_CERT", c.path("nope.pem")}, {"SLUICE_TLS_KEY", c.path("a.key")}});
  CHECK(missing.code == 2);
  CHECK(missing.err.find("sluice: config: SLUICE_TLS_CERT: ") != std::string::npos);
  auto count = check({{"SLUICE_TLS_CERT", c.path("a.pem") + "," + c.path("b.pem")},
                      {"SLUICE_TLS_KEY", c.path("a.key")}});
  CHECK(count.err.find("sluice: config: SLUICE_TLS_KEY: 2 certificate(s)") != std::string::npos);
  auto ciphers = check({{"SLUICE_TLS_CERT", c.path("a.pem")},
                        {"SLUICE_TLS_KEY", c.path("a.key")},
                        {"SLUICE_TLS_CIPHERS", "NOT-A-CIPHER"}});
  CHECK(ciphers.err.find("sluice: config: SLUICE_TLS_CIPHERS: ") != std::string::npos);
  auto nothing = check({{"SLUICE_LISTEN", "off"}});
  CHECK(nothing.err.find("sluice: config: SLUICE_LISTEN: off leaves no listener") !=
        std::string::npos);
  auto ca =
      check({{"SLUICE_UPSTREAMS", "https://127.0.0.1:9"}, {"SLUICE_UPSTREAM_CA", c.path("x")}});
  CHECK(ca.err.find("sluice: config: SLUICE_UPSTREAM_CA: ") != std::string::npos);
  auto mixed = check({{"SLUICE_UPSTREAMS", "api=https://127.0.0.1:9|127.0.0.1:10"}});
  CHECK(mixed.err.find("mixes https:// and plain hosts") != std::string::npos);
  auto ok = check({{"SLUICE_TLS_CERT", c.path("a.pem")}, {"SLUICE_TLS_KEY", c.path("a.key")}});
  CHECK(ok.code == 0);
}
