// HTTP/2 for clients through the real binary, with real clients: curl
// (--http2, --http2-prior-knowledge), nghttp and h2load (nghttp2-client), a
// stream-reset flood from nghttp2's own client library, and a case list of
// raw frames (h2_conformance.py). Two threads and two upstreams throughout,
// each instance fresh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
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
using sluice::test::two_upstreams;
using sluice::test::Upstream;

namespace {

const std::string kConformance = std::string(SLUICE_SOURCE_DIR) + "/tests/e2e/h2_conformance.py";

struct Ran {
  int code = -1;
  std::string out, err;
};

Ran run(std::vector<std::string> argv, std::chrono::milliseconds timeout = 60s) {
  Process p(std::move(argv));
  Ran r;
  r.code = p.wait_exit(timeout).value_or(-1);
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::string url(std::uint16_t port, const std::string& path, const char* scheme = "http") {
  return std::string(scheme) + "://127.0.0.1:" + std::to_string(port) + path;
}

// The responses of one curl run with -D - (heads) and -o /dev/null: per
// response, its status line's code and its fields (names lowercased).
struct Head {
  std::string version;
  int status = 0;
  std::map<std::string, std::string> fields;
};
std::vector<Head> heads(const std::string& out) {
  std::vector<Head> all;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("HTTP/", 0) == 0) {
      Head h;
      auto sp = line.find(' ');
      h.version = line.substr(0, sp);
      h.status = std::stoi(line.substr(sp + 1, 3));
      all.push_back(h);
    } else if (auto colon = line.find(':'); colon != std::string::npos && !all.empty()) {
      auto name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      all.back().fields[name] = line.substr(colon + 2);
    }
  }
  return all;
}

// nghttp -v's received fields, per stream id: "[  0.003] recv (stream_id=13) name: value"
// ("(stream_id=13, sensitive)" for a field that came never indexed).
std::map<int, std::map<std::string, std::string>> frames_by_stream(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> all;
  std::regex field(R"(recv \(stream_id=([0-9]+)(?:, sensitive)?\) (:?[a-z0-9-]+): ([^\n]*))");
  for (std::sregex_iterator i(out.begin(), out.end(), field), end; i != end; ++i)
    all[std::stoi((*i)[1])][(*i)[2]] = (*i)[3];
  return all;
}

std::map<std::string, std::string> h2c(std::map<std::string, std::string> extra = {}) {
  extra.emplace("SLUICE_H2C", "true");
  return extra;
}

double metric(Sluice& s, const std::string& series) { return std::max(0.0, s.metric(series)); }

}  // namespace

TEST_CASE("h2c: streams on one connection get their own lanes, and a refusal is that stream's 503",
          "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(api, search,
                         h2c({{"SLUICE_ROUTES", R"([{"prefix":"/bulk","lane":"bulk"},)"
                                                R"({"prefix":"/search","upstream":"search"},)"
                                                R"({"prefix":"/"}])"}})));
  // Level 2: bulk is refused, standard goes on.
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":2,"ttl":"1m","reason":"test"})")
              .status == 200);
  // nghttp: one connection, the three streams on it at once (curl 7.88.1
  // cannot reuse an h2c connection: its issue 10634).
  auto r = run(
      {"nghttp", "-nv", url(s.port, "/bulk/x"), url(s.port, "/search/q"), url(s.port, "/echo")});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto streams = frames_by_stream(r.out);
  REQUIRE(streams.size() == 3);
  auto it = streams.begin();  // in stream id order: the URLs' order
  CHECK(it->second[":status"] == "503");
  CHECK(std::stoi(it->second["retry-after"]) >= 1);
  CHECK(it->second["x-sluice-reject"] == "level");
  CHECK((++it)->second[":status"] == "200");
  CHECK((++it)->second[":status"] == "200");
  CHECK(r.out.find("recv GOAWAY") == std::string::npos);  // the refusal did not end the connection
  CHECK(metric(s, "sluice_h2_streams_total") == 3);
  CHECK(
      metric(s, R"(sluice_admission_decisions_total{lane="bulk",outcome="shed",reason="level"})") ==
      1);
  // Each stream is a request of its own in the access log.
  auto lines = s.wait_log_lines(4);  // the audit line, then three requests
  REQUIRE(lines.size() >= 4);
  int refused = 0, served = 0;
  for (const auto& l : lines) {
    if (!l.contains("status")) continue;
    (l["status"] == 503 ? refused : served)++;
  }
  CHECK(refused == 1);
  CHECK(served == 2);
  CHECK(eventually([&] { return metric(s, "sluice_h2_connections") == 0; }, 5s));

  // Bodies both ways, sized and chunked, and HTTP/1.1 on the same port.
  std::string body(300'000, 'x');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  auto path = std::filesystem::temp_directory_path() / ("sluice-h2-" + std::to_string(getpid()));
  std::ofstream(path) << body;
  auto echo = run({"curl", "-sS", "--http2-prior-knowledge", "--data-binary", "@" + path.string(),
                   url(s.port, "/echo")});
  auto chunked = run({"curl", "-sS", "--http2-prior-knowledge", "-H", "Transfer-Encoding: chunked",
                      "--data-binary", "@" + path.string(), url(s.port, "/echo")});
  std::filesystem::remove(path);
  CHECK(echo.out == body);
  CHECK(chunked.out == body);
  CHECK(request(s.port, "GET", "/echo").status == 200);
}

TEST_CASE("an HTTP/2 stream's head goes upstream as the HTTP/1.1 request it means", "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search, h2c()));
  // Cookies split into two fields (RFC 9113 8.2.3), a field after them; the
  // upstream's /headers answers what it received.
  auto r = run({"nghttp", "-H", "cookie: a=1", "-H", "cookie: b=2", "-H", "x-custom: v",
                url(s.port, "/headers?q=1")});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  auto doc = json::parse(r.out);
  CHECK(doc["method"] == "GET");
  CHECK(doc["target"] == "/headers?q=1");
  std::map<std::string, std::vector<std::string>> seen;
  for (auto& h : doc["headers"]) {
    std::string n = h[0];
    for (auto& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    seen[n].push_back(h[1]);
  }
  CHECK(seen["host"] == std::vector<std::string>{"127.0.0.1:" + std::to_string(s.port)});
  CHECK(seen["cookie"] == std::vector<std::string>{"a=1; b=2"});
  CHECK(seen["x-custom"] == std::vector<std::string>{"v"});
  CHECK(seen.count("transfer-encoding") == 0);
  CHECK(seen.count("content-length") == 0);
}

TEST_CASE("h2c is off unless SLUICE_H2C says so: the preface gets no HTTP/2", "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search));
  auto r = run({"curl", "-sS", "--http2-prior-knowledge", url(s.port, "/echo")});
  CHECK(r.code != 0);
  CHECK(metric(s, "sluice_h2_streams_total") == 0);
  CHECK(request(s.port, "GET", "/echo").status == 200);
}

TEST_CASE("h2 by ALPN on the TLS listener, on by default, and SLUICE_H2=false offers HTTP/1.1 only",
          "[e2e][h2][concurrency]") {
  Certs c;
  c.make("a", "localhost", "DNS:localhost,IP:127.0.0.1");
  Upstream api(kUpstream), search(kUpstream);
  auto env = two_upstreams(api, search,
                           {{"SLUICE_TLS_CERT", c.path("a.pem")},
                            {"SLUICE_TLS_KEY", c.path("a.key")},
                            {"SLUICE_TLS_LISTEN", "127.0.0.1:0"}});
  {
    Sluice s(kSluice, env);
    auto r = run({"curl", "-sS", "-k", "--http2", "-D", "-", "-o", "/dev/null",
                  url(s.https, "/echo", "https"), url(s.https, "/search/x", "https")});
    INFO(r.err);
    auto h = heads(r.out);
    REQUIRE(h.size() == 2);
    CHECK(h[0].version == "HTTP/2");
    CHECK(h[0].status == 200);
    CHECK(h[1].status == 200);
    // 100 streams at a time over 4 connections, every one answered.
    auto load = run({"h2load", "-n", "2000", "-c", "4", "-m", "25", url(s.https, "/", "https")});
    INFO(load.out);
    CHECK(load.out.find("2000 succeeded") != std::string::npos);
    CHECK(load.out.find("Application protocol: h2") != std::string::npos);
    auto lines = s.wait_log_lines(2);
    REQUIRE(!lines.empty());
    CHECK(lines.front()["tls"] == "TLSv1.3");
  }
  env["SLUICE_H2"] = "false";
  Sluice s(kSluice, env);
  auto r = run({"curl", "-sS", "-k", "--http2", "-D", "-", "-o", "/dev/null",
                url(s.https, "/echo", "https")});
  auto h = heads(r.out);
  REQUIRE(h.size() == 1);
  CHECK(h[0].version == "HTTP/1.1");
  CHECK(metric(s, "sluice_h2_streams_total") == 0);
}

TEST_CASE("many SSE streams share one HTTP/2 connection, each flushed event by event",
          "[e2e][h2][concurrency]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(api, search,
                         h2c({{"SLUICE_ROUTES", R"([{"prefix":"/sse","lane":"heavy"},)"
                                                R"({"prefix":"/search","upstream":"search"},)"
                                                R"({"prefix":"/"}])"}})));
  constexpr int kStreams = 20;
  std::vector<std::string> argv{"nghttp", "-nv"};
  for (int i = 0; i < kStreams; ++i)  // (nghttp asks once for a URL given twice)
    argv.push_back(url(s.port, "/sse?n=3&interval_ms=500&i=" + std::to_string(i)));
  Process client(argv);
  // While they run: one connection, kStreams streams on it.
  double per_connection = 0;
  CHECK(eventually(
      [&] {
        auto st = json::parse(request(s.admin, "GET", "/admin/state").body);
        if (st["clients"]["h2_streams_per_connection"].is_number())
          per_connection = st["clients"]["h2_streams_per_connection"].get<double>();
        return per_connection == kStreams;
      },
      5s));
  CHECK(metric(s, "sluice_h2_connections") == 1);
  REQUIRE(client.wait_exit(20s) == 0);
  // nghttp -v: "[  1.234] recv DATA frame <length=N, flags=F, stream_id=S>".
  std::regex data(
      R"(\[\s*([0-9.]+)\] recv DATA frame <length=([0-9]+), flags=0x[0-9a-f]+, stream_id=([0-9]+)>)");
  std::map<int, std::vector<double>> events;
  auto out = client.out();
  for (std::sregex_iterator it(out.begin(), out.end(), data), end; it != end; ++it)
    if (std::stoi((*it)[2]) > 0) events[std::stoi((*it)[3])].push_back(std::stod((*it)[1]));
  REQUIRE(events.size() == kStreams);
  for (const auto& [id, at] : events) {
    INFO("stream " << id);
    // Three events half a second apart, each as it came: not held to the end.
    REQUIRE(at.size() >= 3);
    CHECK(at.back() - at.front() >= 0.8);
  }
  CHECK(out.find(":status: 503") == std::string::npos);
  CHECK(metric(s, R"(sluice_requests_total{code="200",lane="heavy"})") == kStreams);
}

namespace {

// A client that opens streams and resets each at once (rapid reset,
// CVE-2023-44487), on nghttp2's own client session over a blocking socket.
// Returns the GOAWAY error code it got (-1: none) and how many it reset.
struct Flood {
  int goaway = -1;
  int reset = 0;
};
int connect_loopback(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

nghttp2_nv client_nv(const char* n, const char* v) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n)),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(v)), std::strlen(n),
                    std::strlen(v), NGHTTP2_NV_FLAG_NONE};
}

Flood reset_flood(std::uint16_t port, int streams) {
  Flood f;
  int fd = connect_loopback(port);
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      cb, [](nghttp2_session*, const nghttp2_frame* fr, void* ud) {
        if (fr->hd.type == NGHTTP2_GOAWAY)
          static_cast<Flood*>(ud)->goaway = static_cast<int>(fr->goaway.error_code);
        return 0;
      });
  nghttp2_session* s = nullptr;
  nghttp2_session_client_new(&s, cb, &f);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, nullptr, 0);
  auto send_all = [&] {
    const std::uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(s, &data)) > 0;)
      if (::send(fd, data, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return false;
    return true;
  };
  const nghttp2_nv req[] = {client_nv(":method", "GET"), client_nv(":scheme", "http"),
                            client_nv(":authority", "127.0.0.1"),
                            client_nv(":path", "/slow?ms=300")};
  bool open = send_all();
  for (int i = 0; i < streams && open; ++i) {
    auto id = nghttp2_submit_request(s, nullptr, req, std::size(req), nullptr, nullptr);
    open = send_all();
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    open = open && send_all();
    if (open) ++f.reset;
  }
  // Read to the end (the server closes after its GOAWAY) or a 5 s silence.
  std::uint8_t buf[16384];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    nghttp2_session_mem_recv(s, buf, static_cast<std::size_t>(n));
  nghttp2_session_del(s);
  ::close(fd);
  return f;
}

// The response fields of `streams` GETs of `path` on one h2c connection, one
// after another, as nghttp2's client session decoded them: name, value and
// whether the field came "never indexed".
struct Field {
  std::int32_t stream;
  std::string name, value;
  bool never_indexed;
};
std::vector<Field> response_fields(std::uint16_t port, const char* path, int streams) {
  struct State {
    std::vector<Field> fields;
    bool closed = false;
  } st;
  int fd = connect_loopback(port);
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(
      cb, [](nghttp2_session*, const nghttp2_frame* fr, const std::uint8_t* n, std::size_t nl,
             const std::uint8_t* v, std::size_t vl, std::uint8_t flags, void* ud) {
        static_cast<State*>(ud)->fields.push_back(
            {fr->hd.stream_id, std::string(reinterpret_cast<const char*>(n), nl),
             std::string(reinterpret_cast<const char*>(v), vl),
             (flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0});
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cb, [](nghttp2_session*, std::int32_t, std::uint32_t, void* ud) {
        static_cast<State*>(ud)->closed = true;
        return 0;
      });
  nghttp2_session* s = nullptr;
  nghttp2_session_client_new(&s, cb, &st);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, nullptr, 0);
  const nghttp2_nv req[] = {client_nv(":method", "GET"), client_nv(":scheme", "http"),
                            client_nv(":authority", "127.0.0.1"), client_nv(":path", path)};
  std::uint8_t buf[16384];
  for (int i = 0; i < streams; ++i) {
    st.closed = false;
    REQUIRE(nghttp2_submit_request(s, nullptr, req, std::size(req), nullptr, nullptr) > 0);
    const std::uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(s, &data)) > 0;)
      REQUIRE(::send(fd, data, static_cast<std::size_t>(n), MSG_NOSIGNAL) == n);
    while (!st.closed) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      REQUIRE(n > 0);
      REQUIRE(nghttp2_session_mem_recv(s, buf, static_cast<std::size_t>(n)) == n);
    }
  }
  nghttp2_session_del(s);
  ::close(fd);
  return st.fields;
}

}  // namespace

TEST_CASE("a flood of stream resets is cut by the frame budget while other clients are served",
          "[e2e][h2][concurrency]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search, h2c({{"SLUICE_H2_FRAME_BUDGET", "100"}})));
  // Another client's streams run all along.
  Process other({"h2load", "-n", "400", "-c", "2", "-m", "10", url(s.port, "/search/q")});
  auto flood = reset_flood(s.port, 5000);
  CHECK(flood.goaway == NGHTTP2_ENHANCE_YOUR_CALM);
  CHECK(metric(s, R"(sluice_h2_limited_total{reason="frame_budget"})") == 1);
  REQUIRE(other.wait_exit(30s) == 0);
  // The bucket holds two seconds of the budget (200): the flood is cut after a
  // few hundred of its streams, wherever the client had got to by then (the
  // kernel's buffers take all 5000 from a fast client before the GOAWAY).
  CHECK(metric(s, "sluice_h2_streams_total") < 400 + 1000);
  CHECK(other.out().find("400 succeeded") != std::string::npos);
  // Streams reset in the read that brought them cost the upstream nothing;
  // the rest at most one request each.
  auto stats = json::parse(request(api.port, "GET", "/stats").body);
  CHECK(stats["requests"].get<int>() < flood.reset / 2);
  CHECK(request(s.port, "GET", "/echo").status == 200);
}

TEST_CASE("a response's per-response fields go never indexed, the others into HPACK's table",
          "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search, h2c()));
  auto fields = response_fields(s.port, "/search/q", 4);
  std::map<std::string, std::set<std::string>> values;
  for (const auto& f : fields) {
    values[f.name].insert(f.value);
    // X-Request-Id differs in every response: indexed, each would take a new
    // entry in the connection's table and evict the fields that repeat.
    if (f.name == "x-request-id") CHECK(f.never_indexed);
    if (f.name == "content-type" || f.name == ":status") CHECK_FALSE(f.never_indexed);
  }
  CHECK(values["x-request-id"].size() == 4);
  CHECK(values["content-type"].size() == 1);
}

TEST_CASE("a header list over SLUICE_MAX_HEADER_BYTES is that stream's 431", "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search, h2c({{"SLUICE_MAX_HEADER_BYTES", "4KiB"}})));
  auto r = run({"curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null", "-H",
                "X-Big: " + std::string(5000, 'b'), url(s.port, "/echo")});
  auto h = heads(r.out);
  REQUIRE(h.size() == 1);
  CHECK(h[0].status == 431);
  CHECK(metric(s, R"(sluice_h2_limited_total{reason="header_list"})") == 1);
  CHECK(json::parse(request(api.port, "GET", "/stats").body)["requests"] == 0);
}

TEST_CASE("drain: two GOAWAYs, and the streams in flight finish", "[e2e][h2][drain]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(api, search,
                         h2c({{"SLUICE_DRAIN_DELAY", "0s"}, {"SLUICE_DRAIN_TIMEOUT", "10s"}})));
  Process client({"nghttp", "-nv", url(s.port, "/slow?ms=2000"), url(s.port, "/slow?ms=2000&b")});
  REQUIRE(eventually([&] { return metric(s, "sluice_h2_streams") == 2; }, 5s));
  CHECK(s.process.signal_and_wait(SIGTERM, 15s) == 0);
  REQUIRE(client.wait_exit(10s) == 0);
  auto out = client.out();
  INFO(out);
  // Announced (the highest stream id), then the last stream id taken: the
  // client's second request's.
  std::regex opened(R"(send HEADERS frame <[^>]*stream_id=([0-9]+)>)");
  int last = 0;
  for (std::sregex_iterator i(out.begin(), out.end(), opened), end; i != end; ++i)
    last = std::max(last, std::stoi((*i)[1]));
  auto first = out.find("recv GOAWAY");
  REQUIRE(first != std::string::npos);
  CHECK(out.find("last_stream_id=2147483647", first) != std::string::npos);
  auto second = out.find("recv GOAWAY", first + 1);
  REQUIRE(second != std::string::npos);
  CHECK(out.find("last_stream_id=" + std::to_string(last), second) != std::string::npos);
  std::regex ok(R"(:status: 200)");
  CHECK(std::distance(std::sregex_iterator(out.begin(), out.end(), ok), std::sregex_iterator()) ==
        2);
}

TEST_CASE("SSE keep-alive comments go over HTTP/2 as over HTTP/1.1", "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice,
           two_upstreams(api, search,
                         h2c({{"SLUICE_ROUTES",
                               R"([{"prefix":"/sse","lane":"heavy","sse_keepalive":"300ms"},)"
                               R"({"prefix":"/"}])"}})));
  auto r = run(
      {"curl", "-sS", "-N", "--http2-prior-knowledge", url(s.port, "/sse?n=2&interval_ms=1500")});
  INFO(r.err);
  CHECK(r.out.find(": keep-alive\n\n") != std::string::npos);
  CHECK(r.out.find("data: event 1\n\n") != std::string::npos);
  CHECK(r.out.find("data: event 2\n\n") != std::string::npos);
  CHECK(metric(s, "sluice_sse_keepalives_total") >= 3);
}

TEST_CASE("HTTP/2 conformance: a case list of raw frames (tests/e2e/h2_conformance.py)",
          "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search, h2c()));
  auto r = run({"python3", kConformance, "127.0.0.1", std::to_string(s.port)});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("0 failed") != std::string::npos);
  // After it all, the proxy serves as before.
  CHECK(request(s.port, "GET", "/echo").status == 200);
}

TEST_CASE("the no_keepalive emergency action sends HTTP/2 connections the drain's GOAWAYs",
          "[e2e][h2][emergency_actions]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search,
                                  h2c({{"SLUICE_EMERGENCY_ACTIONS", "no_keepalive"},
                                       {"SLUICE_EMERGENCY_ACTIONS_AFTER", "200ms"},
                                       {"SLUICE_TICK", "100ms"},
                                       {"SLUICE_LANE_FACTORS", "standard=1,1,1,1"}})));
  // Before: a stream is answered and its connection is not asked to go.
  auto before = run({"nghttp", "-nv", url(s.port, "/echo")});
  CHECK(before.out.find("recv GOAWAY") == std::string::npos);
  REQUIRE(request(s.admin, "POST", "/admin/pins", {}, R"({"level":3,"reason":"test"})").status ==
          200);
  REQUIRE(eventually(
      [&] { return metric(s, R"(sluice_emergency_action{action="no_keepalive"})") == 1; }, 10s));
  auto r = run({"nghttp", "-nv", url(s.port, "/slow?ms=2000")});
  INFO(r.out);
  CHECK(r.out.find(":status: 200") != std::string::npos);
  auto first = r.out.find("recv GOAWAY");
  REQUIRE(first != std::string::npos);
  CHECK(r.out.find("last_stream_id=2147483647", first) != std::string::npos);
}

TEST_CASE(
    "uploads refused after a wait give their connection's window back: a later one goes through",
    "[e2e][h2]") {
  Upstream api(kUpstream), search(kUpstream);
  Sluice s(kSluice, two_upstreams(api, search,
                                  h2c({{"SLUICE_H2_WINDOW", "64KiB"},  // the connection's: 256 KiB
                                       {"SLUICE_INGEST_BUDGET", "64KiB"},
                                       {"SLUICE_ROUTES", R"([{"prefix":"/bulk","lane":"bulk"},)"
                                                         R"({"prefix":"/"}])"}})));
  auto path = std::filesystem::temp_directory_path() / ("sluice-h2-up-" + std::to_string(getpid()));
  std::ofstream(path) << std::string(200'000, 'u');
  // Six bulk uploads, each over bulk's share of the ingest budget: one goes
  // alone, the others wait (their Sessions read nothing past a first block
  // while the client sends up to two windows) and are refused after a
  // second; then one to /echo on the same connection.
  std::vector<std::string> argv{"nghttp", "-nv", "-d", path.string()};
  for (int i = 0; i < 6; ++i) argv.push_back(url(s.port, "/bulk/up?i=" + std::to_string(i)));
  argv.push_back(url(s.port, "/echo"));
  auto r = run(argv, 30s);
  std::filesystem::remove(path);
  INFO(r.out.substr(0, 4000) << r.err);
  CHECK(r.code == 0);
  auto streams = frames_by_stream(r.out);
  REQUIRE(streams.size() == 7);
  int refused = 0, served = 0;
  for (auto& [id, f] : streams) (f[":status"] == "503" ? refused : served) += 1;
  CHECK(refused >= 1);
  CHECK(served >= 2);
  CHECK(refused + served == 7);
  CHECK(streams.rbegin()->second[":status"] == "200");  // /echo
}
