// Fuzz target: the JSON routes parser (routes::Table::parse, what SLUICE_ROUTES
// and SLUICE_ROUTES_FILE hold). Beyond not crashing: a bad table is refused
// with a RouteError (what start-up prints), never another exception; a table
// that parses routes a request.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz.hpp"
#include "routes/routes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  sluice::routes::Table table;
  try {
    table = sluice::routes::Table::parse(text, {"api", "search", "billing"});
  } catch (const sluice::routes::RouteError& e) {
    sluice::fuzz::expect(e.what()[0] != '\0', "a refusal says what is wrong");
    return 0;
  }
  sluice::fuzz::expect(!table.routes().empty(), "a parsed table has a route");
  sluice::routes::RequestView view;
  view.method = "POST";
  view.path = "/v1/chat/completions";
  view.accepts_sse = true;
  view.body_bytes = 1 << 20;
  (void)table.match(view);
  return 0;
}
