// The HTTP/1.1 response a Session writes to an HTTP/2 stream, read back
// (proxy/response_bytes.hpp): what it reads must be what Beast's own parser
// reads from the same bytes, however the bytes are split, and the heads Sluice
// writes (proxy/heads.hpp) must read back as written.
#include "proxy/response_bytes.hpp"

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <memory_resource>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proxy/heads.hpp"

using namespace sluice::proxy;
namespace http = boost::beast::http;

namespace {

struct Read {
  bool ok = true;
  std::vector<unsigned> statuses;                           // every head, interim ones first
  std::vector<std::pair<std::string, std::string>> fields;  // the final head's
  std::string body;
  bool done = false;
  bool body_flag = false;
};

// Reads `wire` fed in pieces of `step` bytes (0: whole).
Read read(std::string_view wire, std::size_t step, bool head_request = false, bool eof = false) {
  ResponseBytes r(head_request);
  Read out;
  auto on_head = [&](const ResponseBytes::Head& h) {
    out.statuses.push_back(h.status);
    out.fields.clear();
    ResponseBytes::for_each_field(
        h.fields, [&](std::string_view n, std::string_view v) { out.fields.emplace_back(n, v); });
    out.body_flag = h.body;
    return true;
  };
  if (step == 0) step = wire.size();
  for (std::size_t at = 0; at < wire.size() && out.ok; at += step)
    out.ok = r.feed(wire.substr(at, step), out.body, on_head);
  if (eof) r.eof();
  out.done = r.done();
  return out;
}

// Beast's reading of the same bytes, the final response's.
http::response<http::string_body> beast_read(const std::string& wire, bool head_request) {
  std::optional<http::response_parser<http::string_body>> p;
  auto fresh = [&] {
    p.emplace();
    p->eager(true);
    p->skip(head_request);
  };
  fresh();
  boost::beast::error_code ec;
  std::size_t at = 0;
  while (at < wire.size()) {
    at += p->put(boost::asio::buffer(wire.data() + at, wire.size() - at), ec);
    if (p->is_done() && p->get().result_int() < 200) {  // an interim head: the next follows
      fresh();
      continue;
    }
    if (ec || p->is_done()) break;
  }
  if (ec == http::error::need_more || !p->is_done()) p->put_eof(ec);
  REQUIRE_FALSE(ec);
  return p->release();
}

}  // namespace

TEST_CASE("each response shape reads as Beast reads it, split anywhere", "[proxy][h2]") {
  struct Case {
    const char* what;
    std::string wire;
    bool head_request = false;
    bool to_close = false;
  };
  const std::vector<Case> cases{
      {"a length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
      {"chunked, with an extension and a trailer",
       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A:  spaced \t\r\n\r\n"
       "6;ext=1\r\nhello \r\n0\r\n\r\nA\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n"},
      {"interim heads, then the response",
       "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
       "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"},
      {"a HEAD's length describes the GET", "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
       true},
      {"204", "HTTP/1.1 204 No Content\r\nX-Request-Id: r\r\n\r\n"},
      {"304", "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"},
      {"zero length", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
      {"to the close", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n",
       false, true},
      {"a status line with an empty reason", "HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    auto want = beast_read(c.wire, c.head_request);
    for (std::size_t step : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7}}) {
      INFO("step " << step);
      auto got = read(c.wire, step, c.head_request, c.to_close);
      REQUIRE(got.ok);
      CHECK(got.done);
      REQUIRE_FALSE(got.statuses.empty());
      CHECK(got.statuses.back() == want.result_int());
      CHECK(got.body == want.body());
      std::size_t i = 0;
      for (const auto& f : want) {  // the same fields in the same order, values trimmed
        REQUIRE(i < got.fields.size());
        CHECK(got.fields[i].first == std::string(f.name_string()));
        CHECK(got.fields[i].second == std::string(f.value()));
        ++i;
      }
      CHECK(i == got.fields.size());
    }
  }
}

TEST_CASE("a response ends where its framing says, and what follows is not taken", "[proxy][h2]") {
  auto r = read("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 0);
  CHECK(r.ok);
  CHECK(r.done);
  CHECK(r.body == "ok");
  // Close-delimited: whole only at the writer's end.
  auto open = read("HTTP/1.1 200 OK\r\n\r\npart", 3);
  CHECK(open.ok);
  CHECK_FALSE(open.done);
  CHECK(open.body_flag);
  CHECK(open.body == "part");
  // A chunked body is whole at its last chunk's blank line, not before.
  auto chunked = read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n", 1);
  CHECK(chunked.ok);
  CHECK_FALSE(chunked.done);
  // No body: the head says so, and the stream can end with its HEADERS.
  CHECK_FALSE(read("HTTP/1.1 204 No Content\r\n\r\n", 0).body_flag);
  CHECK_FALSE(read("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 0, true).body_flag);
}

TEST_CASE("bytes that are not a response of Sluice's shape are an error", "[proxy][h2]") {
  for (const char* wire : {
           "HTTP/2 200\r\n\r\n",
           "HTTP/1.1 2x0 OK\r\n\r\n",
           "HTTP/1.1 099 Low\r\n\r\n",
           "HTTP/1.1 200OK\r\n\r\n",
           "HTTP/1.1 200\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\n\n0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
       }) {
    INFO(wire);
    CHECK_FALSE(read(wire, 0).ok);
    CHECK_FALSE(read(wire, 1).ok);
  }
  // A head that never ends is cut at its limit.
  std::string endless = "HTTP/1.1 200 OK\r\n";
  while (endless.size() <= ResponseBytes::kMaxHead) endless += "X-Fill: aaaaaaaaaaaaaaaa\r\n";
  CHECK_FALSE(read(endless, 4096).ok);
  // A refusal from the head's taker stops the reading.
  ResponseBytes r(false);
  std::string body;
  CHECK_FALSE(r.feed("HTTP/1.1 101 Switching Protocols\r\n\r\n", body,
                     [](const ResponseBytes::Head& h) { return h.status != 101; }));
}

TEST_CASE("the head Sluice writes for an upstream's response reads back as written",
          "[proxy][h2]") {
  std::pmr::monotonic_buffer_resource arena;
  ResponseParser parser{std::piecewise_construct, std::make_tuple(),
                        std::make_tuple(HeadAlloc(&arena))};
  const std::string upstream =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\n"
      "X-Upstream: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(upstream), ec);
  REQUIRE(parser.is_header_done());
  auto framing = frame_response(false, 200, std::nullopt, 11, false);
  std::string wire;
  append_response_head(wire, parser.get(), std::nullopt, 11, framing, "req-1");
  for (std::string_view piece : {"hello ", "world"}) {
    auto f = frame_piece(true, piece.size(), false);
    wire += f.size_line();
    wire += piece;
    wire += f.tail;
  }
  wire += frame_piece(true, 0, true).tail;
  auto r = read(wire, 5);
  REQUIRE(r.ok);
  CHECK(r.done);
  CHECK(r.body == "hello world");
  std::map<std::string, std::string> fields(r.fields.begin(), r.fields.end());
  CHECK(fields["Content-Type"] == "text/plain");
  CHECK(fields["X-Upstream"] == "a");
  CHECK(fields["X-Request-Id"] == "req-1");
  CHECK(fields["Transfer-Encoding"] == "chunked");
}
