#pragma once
// Per-I/O-thread statistics. Each shard has exactly one writer (its I/O thread),
// so an increment is a relaxed load and store: no lock and no locked instruction
// on the request path. The admin thread sums the shards at scrape time.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "admission/lane.hpp"
#include "admission/placement.hpp"

namespace sluice::proxy {

// Adds to a single-writer counter.
template <class T>
inline void bump(std::atomic<T>& a, T by = 1) {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Upper bounds in seconds (the +Inf bucket is implicit).
inline constexpr std::array<double, 16> kLatencyBounds{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                       0.05,   0.1,   0.25,   0.5,   1.0,  2.5,
                                                       5.0,    10.0,  30.0,   60.0};
inline constexpr std::array<double, 12> kLagBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.2,    0.25,  0.6,  1.0,   5.0};

template <std::size_t N>
struct Histogram {
  std::span<const double, N> bounds;
  std::array<std::atomic<std::uint64_t>, N + 1> counts{};  // last: above every bound
  std::atomic<double> sum{0.0};

  explicit Histogram(const std::array<double, N>& b) : bounds(b) {}
  void observe(double v) {
    std::size_t i = 0;
    while (i < N && v > bounds[i]) ++i;
    bump(counts[i]);
    sum.store(sum.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
};

using LatencyHistogram = Histogram<kLatencyBounds.size()>;
using LagHistogram = Histogram<kLagBounds.size()>;

inline constexpr int kStatusSlots = 600;

// Why a request moved to an alternative upstream (admission/placement.hpp).
using admission::Fallback;
using admission::kFallbackWhys;

// A TLS handshake's outcome, on either side (metrics' `result`).
enum class TlsResult : std::uint8_t {
  full,              // done, a full handshake
  resumed,           // done, a session resumed (a ticket)
  verify,            // the peer's certificate did not verify (upstreams)
  http_request,      // plain HTTP sent to the HTTPS port (answered 400)
  protocol,          // a version not offered (SSLv3, TLS 1.0, 1.1) or not TLS at all
  no_shared_cipher,  // nothing in common
  truncated,         // the peer went away mid-handshake
  timeout,           // not done within its deadline
  other,
};
inline constexpr std::size_t kTlsResults = 9;
constexpr std::string_view to_string(TlsResult r) {
  constexpr std::array<std::string_view, kTlsResults> kNames{
      "full",      "resumed", "verify", "http_request", "protocol", "no_shared_cipher",
      "truncated", "timeout", "other"};
  return kNames[static_cast<std::size_t>(r)];
}
// tls::Failure's reason as a result.
inline TlsResult tls_result(std::string_view reason) {
  for (std::size_t i = 0; i < kTlsResults; ++i)
    if (to_string(static_cast<TlsResult>(i)) == reason) return static_cast<TlsResult>(i);
  return TlsResult::other;
}

struct UpstreamStats {
  LatencyHistogram wait{kLatencyBounds};           // time to get a connection
  LatencyHistogram connect{kLatencyBounds};        // TCP connects that succeeded
  LatencyHistogram tls_handshake{kLatencyBounds};  // TLS handshakes that succeeded
  std::array<std::atomic<std::uint64_t>, kTlsResults> tls_handshakes{};  // by TlsResult
  std::atomic<std::uint64_t> timeouts{0};                                // response-head timeouts
  std::atomic<std::uint64_t> connect_failures{0};                        // refused or timed out
  std::atomic<std::uint64_t> retries{0};      // idempotent replays on a fresh connection
  std::atomic<std::uint64_t> asked_again{0};  // refused by it (429, 503), then seated again
  std::atomic<std::uint64_t> host_ejections{
      0};                                    // hosts left out of the choice after a failed connect
  std::atomic<std::int64_t> connections{0};  // open connections (gauge)
  std::atomic<std::int64_t> waiting{0};      // requests queued for a connection (gauge)
  std::atomic<std::int64_t> oldest_waiting_since_ns{0};  // 0: nobody is queued
  // Decreases of the capacity estimate, by admission::Signal (refused, timeout, slow).
  std::array<std::atomic<std::uint64_t>, 4> exhausted{};
  // Requests that moved off this upstream, by [the upstream they moved to][why].
  std::unique_ptr<std::array<std::atomic<std::uint64_t>, kFallbackWhys>[]> fallbacks;
};

// A client connection cut at one of its deadlines (a slow client), by where it was.
enum class ClientTimeout : std::uint8_t { header, body, send, idle };
inline constexpr std::size_t kClientTimeouts = 4;
constexpr std::string_view to_string(ClientTimeout t) {
  switch (t) {
    case ClientTimeout::header:
      return "header";
    case ClientTimeout::body:
      return "body";
    case ClientTimeout::send:
      return "send";
    case ClientTimeout::idle:
      return "idle";
  }
  return "header";
}

inline constexpr std::size_t kOutcomes = 3;  // admission::Outcome
inline constexpr std::size_t kReasons = admission::kReasonCount;

struct LaneStats {
  // Admission decisions by [outcome][reason].
  std::array<std::array<std::atomic<std::uint64_t>, kReasons>, kOutcomes> decisions{};
  std::array<std::atomic<std::uint64_t>, kStatusSlots> requests{};  // by status code
  LatencyHistogram duration{kLatencyBounds};
  LatencyHistogram queue_wait{kLatencyBounds};  // time waited for a bulkhead slot
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<std::uint64_t> starved{0};    // episodes of starvation
  std::atomic<std::uint64_t> delegated{0};  // requests seated on a parent's lease
};

// What an HTTP/2 client connection was stopped at (proxy/h2.cpp), for
// sluice_h2_limited_total{reason}.
enum class H2Limit : std::uint8_t {
  concurrent_streams,  // a stream over SETTINGS_MAX_CONCURRENT_STREAMS, refused
  header_list,         // a header list over SLUICE_MAX_HEADER_BYTES: 431
  frame_budget,        // resets and cheap frames over SLUICE_H2_FRAME_BUDGET: GOAWAY
  unread,              // output it did not read within SLUICE_SEND_TIMEOUT: closed
  protocol,            // a frame nghttp2 rejected: its stream or connection ended
};
inline constexpr std::size_t kH2Limits = 5;
constexpr std::string_view to_string(H2Limit l) {
  switch (l) {
    case H2Limit::concurrent_streams:
      return "concurrent_streams";
    case H2Limit::header_list:
      return "header_list";
    case H2Limit::frame_budget:
      return "frame_budget";
    case H2Limit::unread:
      return "unread";
    case H2Limit::protocol:
      return "protocol";
  }
  return "protocol";
}

struct Shard {
  explicit Shard(std::size_t upstreams) : upstream(upstreams) {
    for (auto& u : upstream)
      u.fallbacks.reset(new std::array<std::atomic<std::uint64_t>, kFallbackWhys>[upstreams]());
  }
  std::array<LaneStats, admission::kLaneCount> lane;
  std::vector<UpstreamStats> upstream;
  LagHistogram lag{kLagBounds};
  std::atomic<std::int64_t> client_connections{0};
  std::atomic<std::uint64_t> connections_refused{0};  // over SLUICE_MAX_CONNECTIONS
  std::atomic<std::uint64_t> emergency_refused{0};    // refuse_connections, above its floor
  std::array<std::atomic<std::uint64_t>, kStatusSlots> client_errors{};  // answered before routing
  std::atomic<std::uint64_t> websocket_tunnels{0};
  std::atomic<std::uint64_t> sse_keepalives{0};  // ": keep-alive" comments sent
  // HTTP/2 clients: connections and streams open now, streams begun, limits met.
  std::atomic<std::int64_t> h2_connections{0};
  std::atomic<std::int64_t> h2_streams{0};
  std::atomic<std::uint64_t> h2_streams_total{0};
  std::array<std::atomic<std::uint64_t>, kH2Limits> h2_limited{};
  std::array<std::atomic<std::uint64_t>, kClientTimeouts> client_timeouts{};  // by ClientTimeout
  std::atomic<std::uint64_t> stalled_writes{0};      // slots given back by slow readers
  std::atomic<std::uint64_t> handler_exceptions{0};  // handlers that threw; the loop went on
  // The HTTPS listener: handshakes by TlsResult, names asked for that no
  // certificate holds, renegotiations refused, connections shed before a
  // handshake at the highest level.
  std::array<std::atomic<std::uint64_t>, kTlsResults> tls_handshakes{};
  std::atomic<std::uint64_t> tls_sni_unknown{0};
  std::atomic<std::uint64_t> tls_renegotiations{0};
  std::atomic<std::uint64_t> tls_shed{0};
  // Requests answered 429 tenant_limit, by the limit: concurrency, rate.
  std::array<std::atomic<std::uint64_t>, 2> tenant_limited{};
};

}  // namespace sluice::proxy
