// Fuzz target: an upstream's response as the session relays it. Beast's parser
// reads the upstream's bytes (the first byte picks the client: HTTP/1.1 or 1.0,
// GET or HEAD, keep-alive or not); Sluice writes the client's head
// (frame_response, append_response_head) and frames the body piece by piece
// (frame_piece), as Session::on_response_head and write_client do.
//
// Beyond not crashing: what the client gets parses, whole, to the same status
// and the same body bytes, with one X-Request-Id (Sluice's), no hop-by-hop
// field, one framing (Content-Length or chunked, never both), and keep-alive
// only where the client can find the end of the body.
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <cstdio>
#include <memory_resource>
#include <string>
#include <string_view>

#include "fuzz/fuzz.hpp"
#include "proxy/heads.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using sluice::fuzz::expect;
using namespace sluice::proxy;

constexpr std::size_t kPiece = 7;  // small pieces: every framing boundary gets exercised

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned client_version = (data[0] & 1) ? 10 : 11;
  const bool head_request = data[0] & 2;
  const bool keep = data[0] & 4;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  size -= 1;

  std::pmr::monotonic_buffer_resource arena;
  ResponseParser up(std::piecewise_construct, std::make_tuple(),
                    std::make_tuple(HeadAlloc(&arena)));
  up.header_limit(64 * 1024);
  up.body_limit(boost::none);
  up.skip(head_request);
  beast::error_code ec;
  std::size_t used = up.put(boost::asio::buffer(bytes, size), ec);
  if (ec && ec != http::error::need_buffer) return 0;  // the session answers 502
  if (!up.is_header_done()) return 0;
  const auto& m = up.get();
  int status = m.result_int();
  if (status < 200) return 0;  // 1xx: dropped or a tunnel, not relayed as a body
  std::optional<std::uint64_t> len;
  if (auto l = up.content_length()) len = *l;
  auto framing = frame_response(head_request, status, len, client_version, keep);

  std::string wire;
  append_response_head(wire, m, len, client_version, framing, "sluice-id");
  // The body as the session relays it: decoded pieces, framed again.
  std::string body;
  char block[kPiece];
  bool ended = false;  // the last piece's framing is written
  while (!up.is_done()) {
    up.get().body().data = block;
    up.get().body().size = sizeof block;
    ec = {};
    used += up.put(boost::asio::buffer(bytes + used, size - used), ec);
    if (ec == http::error::need_buffer) ec = {};
    std::size_t n = sizeof block - up.get().body().size;
    if (ec || (n == 0 && used == size && !up.is_done())) {
      // Cut short (or a body read to the close): the session ends it at the
      // upstream's end of stream; only what arrived was relayed.
      if (ec && ec != http::error::need_more) return 0;
      up.put_eof(ec);
      if (ec) return 0;  // truncated: the session cuts the client connection
      wire += frame_piece(framing.chunked, 0, true).tail;  // the end, as write_client(0, true)
      ended = true;
      break;
    }
    auto f = frame_piece(framing.chunked, n, up.is_done());
    wire += f.size_line();
    wire.append(block, n);
    wire += f.tail;
    body.append(block, n);
    ended = up.is_done();
  }
  if (!ended) wire += frame_piece(framing.chunked, 0, true).tail;  // no body: just the end

  http::response_parser<http::string_body> client;
  client.header_limit(UINT32_MAX);
  client.body_limit(boost::none);
  client.eager(true);
  client.skip(head_request);
  used = client.put(boost::asio::buffer(wire), ec);
  if (!ec && !client.is_done()) client.put_eof(ec);  // read to the close
  if (ec) std::fprintf(stderr, "client: %s\n%s", ec.message().c_str(), wire.c_str());
  expect(!ec && client.is_done(), "the client's response parses");
  expect(used == wire.size() || !framing.keep_alive, "a kept-alive response ends where it says");
  const auto& c = client.get();
  expect(static_cast<int>(c.result_int()) == status, "the same status");
  expect(head_request || c.body() == body, "the same body bytes");
  expect(c.count("X-Request-Id") == 1 && c["X-Request-Id"] == "sluice-id", "Sluice's request id");
  expect(c.count(http::field::content_length) + c.count(http::field::transfer_encoding) <= 1,
         "one framing");
  for (auto f : {http::field::keep_alive, http::field::proxy_connection, http::field::te,
                 http::field::trailer, http::field::upgrade, http::field::proxy_authenticate})
    expect(c.count(f) == 0, "no hop-by-hop field");
  expect(!framing.keep_alive || head_request || status == 204 || status == 304 || len ||
             framing.chunked,
         "keep-alive only when the client can find the body's end");
  return 0;
}
