// Fuzz target: a client's request head as the session handles it. Beast's
// parser reads the bytes (a first piece, then all of them, as they may arrive
// from a socket); then Sluice's checks (check_request_head on the parsed head
// and its raw bytes, check_target with its absolute-form rewrite), the route,
// and the fields that go upstream.
//
// Beyond not crashing: a head Sluice accepts goes upstream (built as
// Session::build_request_head builds it, with append_forwarding, minus a lease) as
// one that parses again to the same request line, Host and framing, with no
// hop-by-hop field left and nothing Sluice would refuse.
#include "proxy/request_head.hpp"

#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>
#include <string_view>

#include "fuzz/fuzz.hpp"
#include "proxy/request_fields.hpp"
#include "routes/routes.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using sluice::fuzz::expect;
using sluice::proxy::HeadAlloc;
using sluice::proxy::RequestHead;
using sluice::proxy::RequestParser;

constexpr std::uint32_t kMaxHeaderBytes = 16 * 1024;  // SLUICE_MAX_HEADER_BYTES' default

// Routes of every kind the matcher knows, so classification runs every check.
const sluice::routes::Table& table() {
  static const auto t = sluice::routes::Table::parse(
      R"json([{"prefix":"/v1/uploads","methods":["PUT","POST"],"min_body_bytes":1024,"lane":"bulk"},
          {"regex":"^/v[0-9]+/(chat|responses)(/|$)","sse":true,"lane":"heavy","upstream":"b"},
          {"prefix":"/batch","header":{"name":"X-Tenant","value":"batch"},"lane":"bulk"},
          {"prefix":"/","lane":"standard"}])json",
      {"a", "b"});
  return t;
}

// What Session::on_head hands the route table.
const sluice::routes::Route* classify(const RequestParser& req) {
  auto target = req.get().target();
  return sluice::proxy::route_of(table(), req, target.substr(0, target.find('?')));
}

// The head Session::build_request_head writes, for a client on 127.0.0.1.
std::string upstream_head(const RequestParser& req, bool close_after) {
  std::string h;
  auto passed = sluice::proxy::append_upstream_head(h, req, close_after);
  sluice::proxy::Forwarding f;
  f.default_host = "127.0.0.1:9000";
  f.client = "127.0.0.1";
  f.request_id = "0123456789abcdef";
  sluice::proxy::append_forwarding(h, req.get(), passed, f);
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  std::pmr::monotonic_buffer_resource arena;
  RequestParser req(std::piecewise_construct, std::make_tuple(),
                    std::make_tuple(HeadAlloc(&arena)));
  req.header_limit(kMaxHeaderBytes);
  req.body_limit(64ull * 1024 * 1024);

  beast::error_code ec;
  std::size_t used = req.put(boost::asio::buffer(bytes, size / 2), ec);
  if (ec == http::error::need_more) {  // the rest arrives; what was not consumed is offered again
    ec = {};
    used += req.put(boost::asio::buffer(bytes + used, size - used), ec);
  }
  if (ec) return 0;  // need_more: the session reads on; any other error: 400, 413 or 431
  expect(req.is_header_done() && used <= size, "a parsed head within the bytes given");
  // The session hands check_request_head the bytes of this put: the whole head when it
  // came in one piece (a head split over two puts is checked as the session sees it).
  auto verdict = sluice::proxy::check_request_head(req.get(), {bytes, used}, req.chunked());
  if (verdict.status != 0) {
    expect(verdict.status == 400 || verdict.status == 505, "a refusal Sluice documents");
    expect(!verdict.why.empty(), "a refusal with its reason");
    return 0;
  }
  std::string_view why;
  if (sluice::proxy::check_target(req.get(), why) != 0) {
    expect(!why.empty(), "a refusal with its reason");
    return 0;
  }
  const auto& m = req.get();
  expect(m.target().starts_with('/') || m.target() == "*", "an origin-form target after checks");
  expect(classify(req) != nullptr || m.target() == "*", "the catch-all route matches every path");

  // What goes upstream parses again to the same request.
  std::string out = upstream_head(req, verdict.close_after);
  std::pmr::monotonic_buffer_resource arena2;
  RequestParser again(std::piecewise_construct, std::make_tuple(),
                      std::make_tuple(HeadAlloc(&arena2)));
  again.header_limit(UINT32_MAX);
  again.body_limit(UINT64_MAX);
  std::size_t used2 = again.put(boost::asio::buffer(out), ec);
  if (ec) std::fprintf(stderr, "upstream head: %s\n%s", ec.message().c_str(), out.c_str());
  expect(!ec && used2 == out.size(), "the upstream head parses, whole");
  const auto& u = again.get();
  expect(u.method_string() == m.method_string() && u.target() == m.target(), "same request line");
  expect(again.chunked() == req.chunked() && again.content_length() == req.content_length(),
         "same framing upstream");
  expect(u.count(http::field::host) == 1, "one Host upstream");
  expect(m.count(http::field::host) == 0 || u[http::field::host] == m[http::field::host],
         "the client's Host upstream");
  for (auto f : {http::field::keep_alive, http::field::proxy_connection, http::field::trailer,
                 http::field::proxy_authorization, http::field::expect})
    expect(u.count(f) == 0, "no hop-by-hop field upstream");
  expect(u.count(http::field::connection) == (req.upgrade() || verdict.close_after ? 1u : 0u),
         "Connection upstream only for an upgrade or a close Sluice decided");
  expect(sluice::proxy::check_request_head(u, out, again.chunked()).status == 0,
         "Sluice accepts what it sends");
  return 0;
}
