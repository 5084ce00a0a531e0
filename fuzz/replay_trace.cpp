// Fuzz target: the tick-trace reader (`sluice replay`): every line through
// parse_trace_line, then the controller and the gate over what parsed.
// Beyond not crashing: a bad line is refused with exit code 2 and
// "sluice: replay: line N: ..." on stderr, never an exception; a good trace
// ends with the summary line.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "fuzz/fuzz.hpp"
#include "replay/trace.hpp"

namespace {

// Replay draws once per request a line states (a tick's count of each lane),
// so its time grows with those counts: a line of 10^11 requests is hours, as
// it should be. Inputs asking for more than this many a line are left out.
constexpr std::uint64_t kMaxRequestsPerLine = 10'000;

bool asks_too_much(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    auto eol = std::min(text.find('\n', at), text.size());
    auto line_text = text.substr(at, eol - at);
    if (line_text.ends_with('\r')) line_text.remove_suffix(1);  // as run_replay reads it
    try {
      auto line = sluice::replay::parse_trace_line(line_text, std::nullopt);
      if (line.requests && std::ranges::any_of(*line.requests, [](std::uint64_t n) {
            return n > kMaxRequestsPerLine;
          }))
        return true;
    } catch (const sluice::replay::TraceError&) {
    }
    at = eol + 1;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (asks_too_much(text)) return 0;
  std::istringstream in(text);
  std::ostringstream out, err;
  int code = sluice::replay::run_replay(in, out, err, sluice::replay::ReplayOptions{});
  if (code == 2) {
    sluice::fuzz::expect(err.str().starts_with("sluice: replay: "), "a refusal says which line");
  } else {
    sluice::fuzz::expect(code == 0 && err.str().empty(), "exit 0 and nothing on stderr otherwise");
    sluice::fuzz::expect(!out.str().empty(), "a summary line");
  }
  return 0;
}
