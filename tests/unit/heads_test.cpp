// What Sluice writes on the wire (proxy/heads.hpp), read back with Beast's own
// parser: a head is right when a client parses it to what was meant.
#include "proxy/heads.hpp"

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <catch2/catch.hpp>
#include <memory_resource>
#include <nlohmann/json.hpp>
#include <string>

using namespace sluice::proxy;
namespace http = boost::beast::http;

namespace {

// A client's reading of `wire`: the whole of it must be one response.
http::response<http::string_body> parse(const std::string& wire, bool head_request = false) {
  http::response_parser<http::string_body> p;
  p.eager(true);
  p.skip(head_request);
  boost::beast::error_code ec;
  auto used = p.put(boost::asio::buffer(wire), ec);
  INFO(wire);
  REQUIRE_FALSE(ec);
  REQUIRE(p.is_done());
  CHECK(used == wire.size());
  return p.release();
}

// An upstream's response head as the session holds it.
struct Upstream {
  std::pmr::monotonic_buffer_resource arena;
  ResponseParser parser{std::piecewise_construct, std::make_tuple(),
                        std::make_tuple(HeadAlloc(&arena))};
  explicit Upstream(std::string_view head) {
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(head.data(), head.size()), ec);
    REQUIRE((!ec || ec == http::error::need_buffer));
    REQUIRE(parser.is_header_done());
  }
};

std::string framed(bool chunked, std::initializer_list<std::string_view> pieces) {
  std::string out;
  std::size_t i = 0;
  for (auto piece : pieces) {
    auto f = frame_piece(chunked, piece.size(), ++i == pieces.size());
    out += f.size_line();
    out += piece;
    out += f.tail;
  }
  return out;
}

}  // namespace

TEST_CASE("a chunked body framed piece by piece reads back whole, ended by the last chunk",
          "[proxy][heads]") {
  auto head = std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  auto res = parse(head + framed(true, {"hello ", "", "world"}));
  CHECK(res.body() == "hello world");
  CHECK(frame_piece(true, 0, true).tail == "0\r\n\r\n");
  CHECK(frame_piece(true, 0, false).size_line().empty());
  CHECK(frame_piece(true, 0, false).tail.empty());
  CHECK(frame_piece(true, 255, false).size_line() == "ff\r\n");
  auto raw = frame_piece(false, 10, true);
  CHECK(raw.size_line().empty());
  CHECK(raw.tail.empty());
}

TEST_CASE("a body without a length goes chunked to HTTP/1.1 and to the close for HTTP/1.0",
          "[proxy][heads]") {
  CHECK(frame_response(false, 200, std::nullopt, 11, true).chunked);
  CHECK(frame_response(false, 200, std::nullopt, 11, true).keep_alive);
  auto old = frame_response(false, 200, std::nullopt, 10, true);
  CHECK_FALSE(old.chunked);
  CHECK_FALSE(old.keep_alive);
  CHECK_FALSE(frame_response(false, 200, 5, 11, true).chunked);
  CHECK_FALSE(frame_response(true, 200, std::nullopt, 11, true).chunked);  // HEAD: no body
  CHECK_FALSE(frame_response(false, 204, std::nullopt, 11, true).chunked);
  CHECK_FALSE(frame_response(false, 304, std::nullopt, 10, true).chunked);
  CHECK(frame_response(false, 304, std::nullopt, 10, true).keep_alive);
  CHECK_FALSE(frame_response(false, 200, 5, 11, false).keep_alive);
}

TEST_CASE(
    "the client's head drops hop-by-hop fields and the upstream's request id, and states its "
    "framing",
    "[proxy][heads]") {
  Upstream up(
      "HTTP/1.1 200 Fine\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\n"
      "X-Request-Id: upstream-id\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\n\r\n");
  const auto& m = up.parser.get();
  std::string h;
  auto framing = frame_response(false, 200, std::nullopt, 11, false);
  append_response_head(h, m, std::nullopt, 11, framing, "rid-1");
  auto res = parse(h + framed(framing.chunked, {"ab"}));
  CHECK(res.result_int() == 200);
  CHECK(res.reason() == "Fine");
  CHECK(res.body() == "ab");
  CHECK(res["X-Kept"] == "yes");
  CHECK(res["X-Request-Id"] == "rid-1");
  CHECK(res.count("X-Request-Id") == 1);
  CHECK(res.count("X-Hop") == 0);
  CHECK(res.count(http::field::keep_alive) == 0);
  CHECK(res[http::field::connection] == "close");
  CHECK(res.count(http::field::transfer_encoding) == 1);

  std::string h10;
  append_response_head(h10, m, 2, 10, frame_response(false, 200, 2, 10, true), "rid-2");
  CHECK(h10.starts_with("HTTP/1.0 200 Fine\r\n"));
  auto res10 = parse(h10 + "ab");
  CHECK(res10[http::field::content_length] == "2");
  CHECK(res10[http::field::connection] == "keep-alive");
}

TEST_CASE("a 101's head keeps Connection and Upgrade: the switch is agreed", "[proxy][heads]") {
  Upstream up(
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Keep-Alive: 1\r\n\r\n");
  std::string h;
  append_switch_head(h, up.parser.get(), "rid");
  CHECK(h ==
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "X-Request-Id: rid\r\n\r\n");
}

TEST_CASE("Sluice's refusal is SPEC's 503: Retry-After, X-Sluice-Reject and the JSON body",
          "[proxy][heads]") {
  OwnAnswer a;
  a.status = 503;
  a.error = "queue_timeout";
  a.refusal = true;
  a.lane = "bulk";
  a.level = 2;
  a.retry_after_s = 17;
  a.request_id = "id\"1";
  std::string out, body;
  append_own_answer(out, body, a);
  auto res = parse(out);
  CHECK(res.result_int() == 503);
  CHECK(res["Retry-After"] == "17");
  CHECK(res["X-Sluice-Reject"] == "queue_timeout");
  CHECK(res[http::field::content_type] == "application/json");
  CHECK(res.count(http::field::connection) == 0);
  auto j = nlohmann::json::parse(res.body());
  CHECK(j == nlohmann::json{{"error", "admission_rejected"},
                            {"reason", "queue_timeout"},
                            {"lane", "bulk"},
                            {"level", 2},
                            {"retry_after_s", 17},
                            {"request_id", "id\"1"}});
}

TEST_CASE("Sluice's own errors name their error and status, and close when asked",
          "[proxy][heads]") {
  OwnAnswer a;
  a.status = 431;
  a.error = "header_too_large";
  a.request_id = "r";
  a.close = true;
  std::string out, body;
  append_own_answer(out, body, a);
  auto res = parse(out);
  CHECK(res.result_int() == 431);
  CHECK(res.reason() == "Request Header Fields Too Large");
  CHECK(res[http::field::connection] == "close");
  CHECK(res.count("Retry-After") == 0);
  CHECK(res.count("X-Sluice-Reject") == 0);
  CHECK(nlohmann::json::parse(res.body()) ==
        nlohmann::json{{"error", "header_too_large"}, {"status", 431}, {"request_id", "r"}});
}
