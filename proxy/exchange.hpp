#pragma once
// What one exchange (a request and its response) holds, each as a value that
// gives itself back when dropped, and the per-exchange state of a session as
// one value, reset by assignment between requests.
//
//   admission::Lease  its seat in an upstream's bulkhead (admission/lease.hpp)
//   LeaseSlot         its slot in the worker's lease table (the delegation token)
//   InFlight          its count in its lane's in-flight gauge
//   Checkout          the upstream connection it carries; dropped, the
//                     connection goes back to its pool as not reusable
//
// Exchange: the rest of one exchange's state (timings, decisions, framing),
// with those four; `ex = Exchange{}` starts the next request from nothing.
//
// Threading: the Worker's thread.
#include <array>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "admission/ingest.hpp"
#include "admission/placement.hpp"
#include "proxy/runtime.hpp"
#include "tenants/key.hpp"
#include "tenants/limits.hpp"

namespace sluice::proxy {

// The admission core's view of the upstreams from one Worker: the process's
// bulkheads and closures.
class WorkerUpstreams final : public admission::Upstreams {
 public:
  explicit WorkerUpstreams(Worker& w) : w_(w) {}
  admission::Bulkhead& bulkhead(std::size_t u) override { return w_.runtime().bulkhead(u); }
  admission::Verdict ask_gate(std::size_t u, admission::Micros now) override;
  bool closed(std::size_t u) const override;
  void probe_ended(std::size_t u, bool clean) override;
  admission::Micros reopen_hint(std::size_t u, admission::Micros now) override;
  std::optional<admission::Micros> youngest(admission::Lane lane, std::size_t u) override;

 private:
  Worker& w_;
};

// The three below are unique_ptrs whose deleter gives the thing back, as
// BlockPool::Block does for relay blocks: moved, they move; dropped or reset,
// what they hold goes back.

struct CloseSlot {
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  void operator()(LeaseTable* table) const { table->close(slot); }
};
using LeaseSlot = std::unique_ptr<LeaseTable, CloseSlot>;
// A slot of `table`, or none when every slot is taken (no token then).
inline LeaseSlot open_slot(LeaseTable& table) {
  CloseSlot c;
  return LeaseSlot(table.open(c.slot, c.generation) ? &table : nullptr, c);
}

struct EndInFlight {
  void operator()(std::atomic<std::int64_t>* gauge) const { bump(*gauge, std::int64_t{-1}); }
};
using InFlight = std::unique_ptr<std::atomic<std::int64_t>, EndInFlight>;
inline InFlight count_in_flight(std::atomic<std::int64_t>& gauge) {
  bump(gauge, std::int64_t{1});
  return InFlight(&gauge);
}

struct BackToPool {
  UpstreamPool* pool = nullptr;
  void operator()(UpstreamConnection* c) const {
    pool->release(std::unique_ptr<UpstreamConnection>(c), false);
  }
};
using Checkout = std::unique_ptr<UpstreamConnection, BackToPool>;
inline Checkout checkout(UpstreamPool& pool, std::unique_ptr<UpstreamConnection> c) {
  return Checkout(c.release(), BackToPool{&pool});
}
// Back to its pool now: kept for the next request when reusable.
inline void give_back(Checkout& c, bool reusable) {
  if (!c) return;
  auto* pool = c.get_deleter().pool;
  pool->release(std::unique_ptr<UpstreamConnection>(c.release()), reusable);
}

// A request's place under its tenant's limits (tenants/limits.hpp): given back
// when dropped (the concurrency unit), or refunded (the token too) when the
// request is refused after it was taken.
class TenantHold {
 public:
  TenantHold() = default;
  TenantHold(tenants::Table& t, const tenants::Grant& g) : table_(&t), grant_(g) {}
  TenantHold(TenantHold&& o) noexcept
      : table_(std::exchange(o.table_, nullptr)), grant_(o.grant_) {}
  TenantHold& operator=(TenantHold&& o) noexcept {
    if (this != &o) {
      give_back(false);
      table_ = std::exchange(o.table_, nullptr);
      grant_ = o.grant_;
    }
    return *this;
  }
  TenantHold(const TenantHold&) = delete;
  TenantHold& operator=(const TenantHold&) = delete;
  ~TenantHold() { give_back(false); }
  const tenants::Grant& grant() const { return grant_; }
  void give_back(bool refund) {
    if (table_) std::exchange(table_, nullptr)->release(grant_, refund);
  }

 private:
  tenants::Table* table_ = nullptr;
  tenants::Grant grant_;
};

// A request's bytes in SLUICE_INGEST_BUDGET (admission/ingest.hpp): what it
// reserved, more as a chunked body grows past it, less as pieces are written
// upstream; the rest goes back when the exchange ends.
class IngestHold {
 public:
  IngestHold() = default;
  IngestHold(admission::IngestBudget& b, admission::Lane lane, std::uint64_t reserved)
      : budget_(&b), lane_(lane), held_(reserved), reserved_(reserved) {}
  IngestHold(IngestHold&& o) noexcept { *this = std::move(o); }
  IngestHold& operator=(IngestHold&& o) noexcept {
    if (this != &o) {
      give_back();
      budget_ = std::exchange(o.budget_, nullptr);
      lane_ = o.lane_;
      held_ = o.held_;
      reserved_ = o.reserved_;
      read_ = o.read_;
    }
    return *this;
  }
  IngestHold(const IngestHold&) = delete;
  IngestHold& operator=(const IngestHold&) = delete;
  ~IngestHold() { give_back(); }
  bool on() const { return budget_ != nullptr; }
  // n more body bytes read: past what was reserved (a chunked body), metered.
  void read(std::uint64_t n) {
    if (!budget_) return;
    const std::uint64_t before = std::max(read_, reserved_);
    read_ += n;
    if (read_ > before) {
      budget_->meter(lane_, read_ - before);
      held_ += read_ - before;
    }
  }
  // n body bytes written upstream at `now`: given back, counted as drained.
  void written(std::uint64_t n, admission::Micros now) {
    if (!budget_ || n == 0) return;
    n = std::min(n, held_);
    held_ -= n;
    budget_->release(lane_, n, now);
  }
  void give_back() {
    if (budget_) std::exchange(budget_, nullptr)->release(lane_, held_, std::nullopt);
  }

 private:
  admission::IngestBudget* budget_ = nullptr;
  admission::Lane lane_ = admission::Lane::standard;
  std::uint64_t held_ = 0, reserved_ = 0, read_ = 0;
};

// Everything one request and its response hold, reset by assignment.
struct Exchange {
  // The request.
  bool started = false;  // a byte of it arrived
  Clock::time_point start{}, head_deadline{};
  std::chrono::system_clock::time_point start_wall{};
  boost::beast::http::verb method = boost::beast::http::verb::get;
  unsigned version = 11;
  bool upgrade = false;
  bool keep_alive = true;   // the client's connection stays open after it
  bool close_both = false;  // this exchange ends both connections (check_request_head)
  bool expect_continue = false;
  std::string_view path;
  std::string_view request_id;  // the client's or a fresh one, in the session's buffer

  // Routing and admission.
  const Live* live = nullptr;
  const routes::Route* route = nullptr;
  admission::Lane lane = admission::Lane::standard;
  tenants::Id tenant = 0;                             // its tenant's hash (0: the shared tenant)
  admission::Level level = admission::Level::normal;  // published when its head was read
  admission::GateDecision decision{};
  int retry_after = -1;
  std::size_t upstream = 0;
  int fallback_from = -1;  // the route's upstream, when it moved off it
  admission::Fallback fallback_why = admission::Fallback::closed;
  int moves = 0;
  bool retried = false;
  bool asked_again = false;  // its upstream refused it once and it asked for a seat again
  bool delegated = false;    // seated on a live parent lease's lane
  bool forwarded = false;    // counted in flight and on its way upstream

  // What it holds.
  std::array<TenantHold, 2> tenant_holds;  // under its route's own limits, under the process's
  IngestHold ingest;                       // its body's bytes in SLUICE_INGEST_BUDGET
  std::size_t piece = 0;                   // body bytes in the write upstream under way
  bool body_streamed = false;              // more body than its first block (read after admission)
  admission::Lease lease;
  LeaseSlot slot;
  InFlight in_flight;
  Checkout up;

  // The request body.
  std::size_t prebuffered = 0;    // body bytes read before admission, in the block
  std::size_t body_stride = 0;    // body bytes since the budget was last renewed
  Clock::duration body_budget{};  // client time left for the rest of this stride
  Clock::time_point body_read_start{};
  bool request_sent = false;  // the whole request is with the upstream

  // The upstream.
  Clock::time_point queue_start{}, sent_at{};
  Clock::duration queue_wait{0}, upstream_wait{-1}, ttfb{-1};
  // A new upstream connection carried it: its connect and TLS handshake (-1: none).
  Clock::duration connect_time{-1}, tls_time{-1};
  // The host that carried it last, address:port (the access log's upstream_addr).
  std::array<char, 48> upstream_addr{};
  std::uint8_t upstream_addr_len = 0;
  bool seat_wait_pressure = false;  // it queued on a bulkhead held at the pool's share
  admission::Micros up_ttfb{0};     // request sent to response head: what the estimate learns from
  admission::Signal signal = admission::Signal::none;
  bool closing_status = false;  // the upstream answered a status that closes it
  bool upstream_keep_alive = false;
  // Its route's first_event_timeout: when the head (an SSE response: its
  // first event) is due while it may still move, that it came late and the
  // upstream is being cut, and that it moved once already.
  std::optional<Clock::time_point> first_event_due;
  bool first_event_late = false;
  bool first_event_moved = false;

  // The response.
  bool sse = false;
  bool end_stream = false;  // draining: an SSE stream ends at its next event boundary
  // An SSE stream's keep-alive comments (its route's sse_keepalive): the last
  // body bytes sent to the client (an event boundary ends in a blank line),
  // when a byte last went, and when the upstream's silence is cut.
  std::uint32_t sse_tail = 0;
  bool sse_started = false;
  bool sse_open_ended = false;  // chunked or close-delimited, not encoded: comments fit
  Clock::time_point client_written_at{}, idle_cut{};
  bool header_sent = false;
  bool response_sent = false;         // the last piece of the response was written
  bool chunked_out = false;           // the client's response is chunked by Sluice
  Clock::time_point write_started{};  // when the pending write to the client began

  bool timed_out = false;
  int status_override = 0;
  std::string_view reason;
  std::uint64_t bytes_in = 0, bytes_out = 0;
};

// The access-log line of an exchange that ended with `status` at `now`.
AccessRecord access_record(const Exchange& ex, int status, std::string_view method,
                           std::string_view client, const config::Config& cfg,
                           Clock::time_point now);

}  // namespace sluice::proxy
