#pragma once
// The tick trace (SPEC: "Tick trace"): SLUICE_TICK_LOG writes it, `sluice replay`
// reads it back and runs the admission controller and the level gate over it.
//
// One JSON object per line, one per tick. Input fields (absent = not measured):
//   t (ms from start, required, never going backwards), lag_ms, lag_fresh (default
//   true), upstream_wait_ms, upstream_timeout, stall_ms, ok (default true),
//   requests {"bulk":N,"standard":N,"heavy":N}, pin {"level":N,"ttl":"60s"}, unpin,
//   upstreams {"NAME":{upstream_wait_ms, upstream_timeout, ok, pin, unpin}, ...}:
//   each upstream's own reading (the proxy's tick log writes the process's
//   loops at the top and each upstream's wait and timeouts under upstreams).
// The tick log also writes the decision (level, changed, from, to, trigger,
// suppressed, admitted, shed), at the top and per upstream: the reader ignores
// those, so a log replays as is. Any other key is an error.
//
// With SLUICE_EMERGENCY_ACTIONS on, each line also says which emergency actions
// are applied after it ("actions") and what it applied or undid
// ("actions_applied", "actions_undone", "restoration"), as the tick log does;
// a decision held for the restoration tick says "restoring". Ignored on input.
//
// Replay, per line: the pin or unpin first (at t), then Controller::step, then the
// line's requests through the Gate at the level the tick ended with, drawn from
// one Rng seeded once per run: the same trace and options give the same bytes.
// Each upstream named under upstreams has a controller of its own (same
// configuration), stepped on its reading; its decision is reported under
// upstreams in the output line and the summary. A line without upstreams (the
// format before per-upstream levels) replays on the one controller as it did.
// The requests are the process's arrivals and meet the process's level.
//
// Threading: plain functions over values and streams; no shared state.
#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "admission/controller.hpp"
#include "admission/emergency_actions.hpp"
#include "admission/gate.hpp"

namespace sluice::replay {

using Requests = std::array<std::uint64_t, admission::kLaneCount>;  // by admission::index(lane)

struct PinRequest {
  admission::Level level = admission::Level::normal;
  std::optional<admission::Millis> ttl;  // none: until removed
  std::string reason;
};

// One upstream's part of a line: its reading (t is the line's), its pin.
struct UpstreamTrace {
  std::string name;
  admission::Reading reading;
  std::optional<PinRequest> pin;
  bool unpin = false;
};

struct TraceLine {
  admission::Reading reading;
  std::optional<Requests> requests;
  std::optional<PinRequest> pin;
  bool unpin = false;
  std::vector<UpstreamTrace> upstreams;
};

// A bad line: what() says what is wrong (without the line number).
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses one line. `previous_t`: the t of the line before (t must not go back).
// Throws TraceError.
TraceLine parse_trace_line(std::string_view line, std::optional<admission::Millis> previous_t);

// SPEC's duration syntax: an integer and ms, s, m or h ("250ms", "60s"). Throws TraceError.
admission::Millis parse_duration(std::string_view text);

// One upstream's part of a tick-log line.
struct UpstreamTick {
  std::string_view name;
  const admission::Reading* reading = nullptr;
  const admission::Decision* decision = nullptr;
  const PinRequest* pin = nullptr;  // set on it since the last tick
  bool unpin = false;
};

// The emergency actions after a tick, and what the tick changed.
struct ActionsTick {
  admission::ActionStep step;
  admission::ActionSet active = 0;
};
// What a tick-log line may carry besides the reading and the decision.
struct TickLogExtras {
  const PinRequest* pin = nullptr;     // a pin set since the last tick (replay applies it at t)
  bool unpin = false;                  // a pin removed since the last tick
  const Requests* admitted = nullptr;  // what the proxy admitted in this tick, for the record
  const Requests* shed = nullptr;      // ... and refused (shed or would_shed)
  std::span<const UpstreamTick> upstreams;
  const ActionsTick* actions = nullptr;  // the emergency actions' tick (null: switch off)
};

// One tick-log line (no newline): the reading's measured fields, the requests
// when given, pin/unpin, then the decision's fields. parse_trace_line reads it
// back to the same reading, requests and pin.
std::string tick_log_line(const admission::Reading& reading, const Requests* requests,
                          const admission::Decision& decision, const TickLogExtras& extras = {});

struct ReplayOptions {
  admission::ControllerConfig controller = admission::ControllerConfig::fast();
  admission::Mode mode = admission::Mode::enforce;
  admission::LaneFactors factors = admission::default_lane_factors();
  admission::RetryBands retry = admission::default_retry_bands();
  admission::ActionsConfig actions;  // SLUICE_EMERGENCY_ACTIONS, _AFTER
  std::uint64_t seed = 1;
};

// Reads a trace from `in`, writes one JSON line per tick and a summary line to
// `out`. Returns 0, or 2 after writing "sluice: replay: line N: ..." to `err`.
int run_replay(std::istream& in, std::ostream& out, std::ostream& err,
               const ReplayOptions& options);

}  // namespace sluice::replay
