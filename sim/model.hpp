#pragma once
// Modelled upstreams for the policy simulator: what a request of `work` tokens
// meets once a policy lets it start. Time is virtual, in seconds.
//
// provider (seed 001's fit to a measured LLM provider, capacity K):
//   progress   every request in flight advances at
//              r(n) = alone / (1 + (n - 1) / (spread K)) tokens/s, n in flight
//   refusal    a request started with n > K in flight (itself counted) is
//              refused (429) at a uniform time within refuse_within, with
//              probability min(cap, (n - K) / 10); until then it counts in n
//   cut        a request unfinished cut_after after its start is cut
//   slow       a request whose mean rate fell below slow_rate tokens/s
//              reports the pool exhausted (seed 001 writes "tokens / 1,200":
//              1,200 tokens a minute, the fitted rate at twenty in flight)
// mmc (M/M/c with 429): c servers; a request started with more than c in
//   flight (itself counted) is refused (429) at once, any other is served in
//   an exponential time of mean work / rate. No cut, no slow report.
//
// A request's response head comes when it ends (a refusal, a cut, or the
// whole answer): the proxy's time to first byte is its time in the model.
//
// Threading: none; one simulation run owns its models.
#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include "admission/gate.hpp"

namespace sluice::sim {

using admission::Rng;
inline constexpr double kNever = std::numeric_limits<double>::infinity();

// How a request ended in the upstream.
struct Ending {
  std::uint64_t id = 0;
  double at = 0;      // seconds
  int status = 200;   // 200 or 429
  bool cut = false;   // unfinished at the upstream's cut (a timeout to the proxy)
  bool slow = false;  // the upstream reported its pool exhausted
};

class UpstreamModel {
 public:
  virtual ~UpstreamModel() = default;
  // A request of `work` tokens starts at `now` (never earlier than the last call).
  virtual void start(std::uint64_t id, double work, double now, Rng& rng) = 0;
  // When the next request ends (kNever: none in flight). Valid until the next start.
  virtual double next_end() const = 0;
  // Ends the request due at next_end() and says how.
  virtual Ending finish_next() = 0;
  virtual int in_flight() const = 0;
  // The concurrency it serves well (K, or c) and the tokens/s it serves there:
  // scenarios size their load by it, and a remembered estimate starts from it.
  virtual double capacity() const = 0;
  virtual double throughput() const = 0;
};

struct ProviderParams {
  double k = 18;              // the carrying capacity K
  double alone = 61;          // tokens/s with one in flight
  double spread = 0.53;       // of K
  double refuse_within = 15;  // s
  double refuse_cap = 0.9;
  double cut_after = 1800;  // s
  double slow_rate = 20;    // tokens/s (1,200 a minute)
};

struct MmcParams {
  int servers = 18;
  double rate = 22;  // tokens/s per request: the provider's r(K), so both serve alike at capacity
};

std::unique_ptr<UpstreamModel> make_provider(const ProviderParams& p);
std::unique_ptr<UpstreamModel> make_mmc(const MmcParams& p);

enum class ModelKind : std::uint8_t { provider, mmc };
std::string_view to_string(ModelKind kind);
// The model of `kind` whose capacity is `k` (K, or c).
std::unique_ptr<UpstreamModel> make_model(ModelKind kind, double k);

// A seed for one of a run's random streams: `a` the run's, `b` the stream's.
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  Rng r(a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull));
  return r.next();
}

// An exponential draw of mean `mean`.
double exponential(Rng& rng, double mean);
// A standard normal draw (Box-Muller).
double normal(Rng& rng);

}  // namespace sluice::sim
