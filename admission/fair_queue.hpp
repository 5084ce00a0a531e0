#pragma once
// A lane's queue in one bulkhead, shared between tenants by deficit round
// robin (Shreedhar and Varghese's DRR, each request costing one), with
// fq_codel's lists of new and old flows.
//
// A tenant is a 64-bit hash (0: no key, the shared tenant) hashed again into
// one of kFlows flows, as fq_codel and stochastic fairness queuing do: a fixed
// array, O(1) per push and erase (amortized: a turn passes over the flows
// that are out of credit or empty), no allocation after construction and no
// table to evict; two tenants that meet in one flow share its turns.
//   push        a request queues at the back of its tenant's flow (at the
//               front: it asks again as the oldest, placement's ask_again). A
//               flow that was in neither list becomes new: at the back of the
//               new flows, with one quantum of credit (its tenant's weight,
//               1..100: requests per turn).
//   next        the front request of the first new flow, else of the first
//               old flow: what a release seats. A sparse tenant (no request
//               waiting when one comes) is served before the backlogged ones.
//   serving     a flow spends one of its credit per request seated from it;
//               with less than one left it moves to the back of the old
//               flows and adds its quantum. A new flow that empties moves to
//               the old flows too, so it is not new again before the old
//               flows have had their turns (a tenant cannot keep one request
//               waiting at a time and be served first forever); an old flow
//               that is empty at its turn, or empties, leaves both lists.
//   cancelled   a request that leaves unseated (its window ended, its client
//               left) costs its flow nothing.
// With one tenant (tenants off) it is the lane's oldest-first queue, exactly.
// The arrival order is kept too: oldest() is the lane's longest wait, whatever
// the flow.
//
// Threading: the bulkhead's lock.
#include <cstdint>
#include <memory>

namespace sluice::admission {

struct Seat;

class FairQueue {
 public:
  static constexpr std::size_t kFlows = 1024;
  static constexpr double kMinWeight = 1.0, kMaxWeight = 100.0;

  FairQueue();
  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;

  // The request a free slot goes to.
  Seat* next() const;
  // The request that has waited longest (arrival order; one that asked again
  // counts as arrived first).
  Seat* oldest() const { return order_head_; }
  bool empty() const { return order_head_ == nullptr; }
  // Flows with requests waiting: the tenants sharing the lane's queue now.
  int active_flows() const { return active_; }

  void push(Seat& s, bool front);
  // s leaves the queue: seated (charged to its flow's credit) or not.
  void erase(Seat& s, bool seated);

  static std::size_t flow_of(std::uint64_t tenant) {
    return tenant == 0 ? 0 : 1 + tenant % (kFlows - 1);
  }

 private:
  enum class In : std::uint8_t { none, fresh, old };
  struct Flow {
    Seat* head = nullptr;
    Seat* tail = nullptr;
    std::int32_t prev = -1, next = -1;  // in its list
    In in = In::none;
    double deficit = 0.0;
    double quantum = 1.0;
  };
  struct List {
    std::int32_t head = -1, tail = -1;
  };
  Flow& flow(std::int32_t f) { return flows_[static_cast<std::size_t>(f)]; }
  const Flow& flow(std::int32_t f) const { return flows_[static_cast<std::size_t>(f)]; }
  List& list(In in) { return in == In::fresh ? fresh_ : old_; }
  void append(std::int32_t f, In in);
  void unlink(std::int32_t f);
  // Brings the list heads to a flow that may serve now (requests and credit).
  void settle();

  std::unique_ptr<Flow[]> flows_;
  List fresh_, old_;
  int active_ = 0;
  Seat* order_head_ = nullptr;
  Seat* order_tail_ = nullptr;
};

}  // namespace sluice::admission
