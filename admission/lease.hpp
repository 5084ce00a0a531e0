#pragma once
// A lease: what one request holds of the admission core, as a move-only value
// (seastar's semaphore_units, Netflix's Listener). It holds the request's seat
// in one upstream's bulkhead (queued or seated, with a heavy-cap unit when the
// seat took one, and the seat's sequence number) and, for the probe of a
// closed upstream, that probe.
//
//   complete(...)  ends it once with what the upstream said: the seat goes back
//                  and teaches the estimate, a probe reports clean or not.
//   leave(...)     ends it the same way for a request that moves on to another
//                  upstream: the heavy-cap unit stays with the seat, a probe
//                  here failed.
//   cancel()       whatever is left goes back and teaches nothing: a queued
//                  seat leaves its queue (its window ended, its client left), a
//                  seated one is given back (its bulkhead's waiters are served at
//                  its next release or tick), a heavy-cap unit goes back, a probe
//                  failed. The destructor does the same: no path can leak a slot.
//
// Threading: the thread of the request that holds it.
#include <cstddef>
#include <optional>
#include <utility>

#include "admission/bulkhead.hpp"
#include "admission/resilience.hpp"

namespace sluice::admission {

// What placement reads and changes of the upstreams: the proxy implements it
// over its bulkheads and its process-wide closures, tests over plain objects.
class Upstreams {
 public:
  virtual ~Upstreams() = default;
  virtual Bulkhead& bulkhead(std::size_t upstream) = 0;
  // May a request start there now (admit / probe / closed)? A probe verdict
  // hands the probe to this request.
  virtual Verdict ask_gate(std::size_t upstream, Micros now) = 0;
  // Closed now, asking nothing.
  virtual bool closed(std::size_t upstream) const = 0;
  virtual void probe_ended(std::size_t upstream, bool clean) = 0;
  // When a request refused for the closure could next get in.
  virtual Micros reopen_hint(std::size_t upstream, Micros now) = 0;
  // When the youngest live lease of `lane` began, where a refusal of that lane
  // on `upstream` looks (seed 004: when its capacity last turned over).
  virtual std::optional<Micros> youngest(Lane lane, std::size_t upstream) = 0;
};

class Lease {
 public:
  Lease() = default;
  Lease(Upstreams& upstreams, std::size_t upstream, Seat& seat, bool probe = false)
      : ups_(&upstreams), upstream_(upstream), seat_(&seat), probe_(probe) {}
  Lease(Lease&& o) noexcept { take(o); }
  Lease& operator=(Lease&& o) noexcept {
    if (this != &o) {
      drop();
      take(o);
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { drop(); }

  // Holds a seat (queued or seated) or a heavy-cap unit.
  explicit operator bool() const { return seat_ != nullptr; }
  bool seated() const { return seat_ && seat_->seated; }
  bool queued() const { return seat_ && seat_->queued; }
  bool probe() const { return probe_; }
  std::size_t upstream() const { return upstream_; }

  // Ends the lease with what the upstream said. `closes`: its status closes
  // the upstream (a probe that met it failed). True when the signal decreased
  // the estimate (a new burst of too much).
  bool complete(Signal signal, Micros ttfb, Micros now, bool closes = false);
  // Ends it for a request moving on to another upstream: as complete(), the
  // heavy-cap unit kept, a probe here failed.
  bool leave(Signal signal, Micros ttfb, Micros now);
  void cancel() { drop(); }

 private:
  void take(Lease& o) {
    ups_ = o.ups_;
    upstream_ = o.upstream_;
    seat_ = std::exchange(o.seat_, nullptr);
    probe_ = std::exchange(o.probe_, false);
  }
  void end_probe(bool clean);
  void drop() {
    if (seat_) abandon();
  }
  void abandon();

  Upstreams* ups_ = nullptr;
  std::size_t upstream_ = 0;
  Seat* seat_ = nullptr;
  bool probe_ = false;
};

}  // namespace sluice::admission
