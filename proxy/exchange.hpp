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
// Threading: the Worker's thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "admission/placement.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

// The admission core's view of a Worker's upstreams: this thread's bulkheads,
// the process's closures, and heavy leases across every thread.
class WorkerUpstreams final : public admission::Upstreams {
 public:
  explicit WorkerUpstreams(Worker& w) : w_(w) {}
  admission::Bulkhead& bulkhead(std::size_t u) override { return w_.bulkhead(u); }
  admission::Verdict ask_gate(std::size_t u, admission::Micros now) override;
  bool closed(std::size_t u) const override;
  void probe_ended(std::size_t u, bool clean) override;
  admission::Micros reopen_hint(std::size_t u, admission::Micros now) override;
  std::optional<admission::Micros> youngest(admission::Lane lane, std::size_t u) override;

 private:
  Worker& w_;
};

class LeaseSlot {
 public:
  LeaseSlot() = default;
  // A slot of `table`, or none when every slot is taken (no token then).
  static LeaseSlot open(LeaseTable& table) {
    LeaseSlot s;
    if (table.open(s.slot_, s.generation_)) s.table_ = &table;
    return s;
  }
  LeaseSlot(LeaseSlot&& o) noexcept { take(o); }
  LeaseSlot& operator=(LeaseSlot&& o) noexcept {
    if (this != &o) {
      close();
      take(o);
    }
    return *this;
  }
  ~LeaseSlot() { close(); }
  explicit operator bool() const { return table_ != nullptr; }
  std::uint32_t slot() const { return slot_; }
  std::uint64_t generation() const { return generation_; }

 private:
  void take(LeaseSlot& o) {
    table_ = std::exchange(o.table_, nullptr);
    slot_ = o.slot_;
    generation_ = o.generation_;
  }
  void close() {
    if (table_) std::exchange(table_, nullptr)->close(slot_);
  }
  LeaseTable* table_ = nullptr;
  std::uint32_t slot_ = 0;
  std::uint64_t generation_ = 0;
};

class InFlight {
 public:
  InFlight() = default;
  explicit InFlight(std::atomic<std::int64_t>& gauge) : gauge_(&gauge) { bump(gauge, std::int64_t{1}); }
  InFlight(InFlight&& o) noexcept : gauge_(std::exchange(o.gauge_, nullptr)) {}
  InFlight& operator=(InFlight&& o) noexcept {
    if (this != &o) {
      end();
      gauge_ = std::exchange(o.gauge_, nullptr);
    }
    return *this;
  }
  ~InFlight() { end(); }

 private:
  void end() {
    if (gauge_) bump(*std::exchange(gauge_, nullptr), std::int64_t{-1});
  }
  std::atomic<std::int64_t>* gauge_ = nullptr;
};

class Checkout {
 public:
  Checkout() = default;
  Checkout(UpstreamPool& pool, std::unique_ptr<UpstreamConnection> c)
      : pool_(&pool), c_(std::move(c)) {}
  Checkout(Checkout&& o) noexcept : pool_(o.pool_), c_(std::move(o.c_)) {}
  Checkout& operator=(Checkout&& o) noexcept {
    if (this != &o) {
      give_back(false);
      pool_ = o.pool_;
      c_ = std::move(o.c_);
    }
    return *this;
  }
  ~Checkout() { give_back(false); }
  explicit operator bool() const { return c_ != nullptr; }
  UpstreamConnection* operator->() const { return c_.get(); }
  // Back to the pool: kept for the next request when reusable.
  void give_back(bool reusable) {
    if (c_) pool_->release(std::move(c_), reusable);
  }

 private:
  UpstreamPool* pool_ = nullptr;
  std::unique_ptr<UpstreamConnection> c_;
};

}  // namespace sluice::proxy
