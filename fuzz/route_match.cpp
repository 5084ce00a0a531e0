// Fuzz target: the route matcher (routes::Table::match) over every kind of
// route, the defaults included. Input: a flags byte (bit 0: the client accepts
// SSE), a body-size byte, then "METHOD PATH" and "Name: value" lines.
// Beyond not crashing: match() is the first route whose every check passes.
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz.hpp"
#include "routes/routes.hpp"

namespace {

using sluice::fuzz::expect;
using sluice::routes::RequestView;
using sluice::routes::Table;

using Headers = std::vector<std::pair<std::string_view, std::string_view>>;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view header(const void* ctx, std::string_view name) {
  for (const auto& [n, v] : *static_cast<const Headers*>(ctx))
    if (iequals(n, name)) return v;
  return {};
}

const Table& table() {
  static const auto t = Table::parse(
      R"json([{"name":"uploads","prefix":"/v1/uploads","methods":["PUT","post"],"min_body_bytes":4096,"lane":"bulk"},
          {"name":"chat","regex":"^/v[0-9]+/(chat|responses)(/|$)","sse":true,"lane":"heavy","upstream":"b","alternatives":["a"]},
          {"name":"tenant","prefix":"/batch","header":{"name":"X-Tenant","value":"batch"},"lane":"bulk","pin":true},
          {"name":"items","regex":"/items/[0-9a-f]{8}-[0-9a-f]{4}(\\?|$)","methods":["GET","HEAD"]},
          {"name":"plain","sse":false,"prefix":"/","lane":"standard"}])json",
      {"a", "b"});
  return t;
}

void check(const Table& t, const RequestView& view) {
  const auto* matched = t.match(view);
  const sluice::routes::Route* first = nullptr;
  for (const auto& r : t.routes())
    if (r.matches(view)) {
      first = &r;
      break;
    }
  expect(matched == first, "match() is the first route that matches");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  RequestView view;
  view.accepts_sse = (data[0] & 1) != 0;
  view.body_bytes = std::uint64_t{data[1]} * 97;  // around the 4096 boundary
  Headers headers;
  view.header = header;
  view.ctx = &headers;

  auto eol = in.find('\n');
  auto line = in.substr(0, eol);
  auto space = line.find(' ');
  view.method = line.substr(0, space);
  view.path = space == std::string_view::npos ? std::string_view{} : line.substr(space + 1);
  while (eol != std::string_view::npos) {
    in.remove_prefix(eol + 1);
    eol = in.find('\n');
    line = in.substr(0, eol);
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto value = line.substr(colon + 1);
    while (value.starts_with(' ')) value.remove_prefix(1);
    headers.emplace_back(line.substr(0, colon), value);
  }
  check(table(), view);
  static const Table defaults = Table::defaults();
  check(defaults, view);
  expect(defaults.match(view) != nullptr, "the default table routes every request");
  return 0;
}
