#pragma once
// A lane's queue in one bulkhead, shared between tenants by deficit round
// robin (Shreedhar and Varghese's DRR, each request costing one).
//
// A tenant is a 64-bit hash (0: no key, the shared tenant) hashed again into
// one of kFlows flows, as fq_codel and stochastic fairness queuing do: a fixed
// array, O(1) per push, erase and serve, no allocation after construction and
// no table to evict; two tenants that meet in one flow share its turn.
//   push        a request queues at the back of its tenant's flow (at the
//               front: it asks again as the oldest, placement's ask_again);
//               a flow that was empty is served next (a sparse tenant first,
//               as fq_codel serves new flows): it joins the round just before
//               the flow being served and takes the turn for one quantum, and
//               the flow it interrupted then resumes with the deficit it had.
//               A tenant that keeps a queue is in the round like any other.
//   next        the front of the flow being served: what a release seats.
//   serving     the flow being served spends one unit of its deficit per
//               request seated from it; with less than one left, or empty, the
//               turn passes to the next flow in the round, which adds its
//               quantum (its tenant's weight, 1..100: requests per turn) to
//               its deficit. An emptied flow leaves the round and forgets its
//               deficit (DRR: credit is for backlogged flows).
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

  // The request a free slot goes to: the front of the flow being served.
  Seat* next() const { return current_ < 0 ? nullptr : flow(current_).head; }
  // The request that has waited longest (arrival order; one that asked again
  // counts as arrived first).
  Seat* oldest() const { return order_head_; }
  bool empty() const { return order_head_ == nullptr; }
  // Flows with requests waiting: the tenants sharing the lane's queue now.
  int active_flows() const { return active_; }

  void push(Seat& s, bool front);
  // s leaves the queue: seated (charged to its flow's deficit) or not.
  void erase(Seat& s, bool seated);

  static std::size_t flow_of(std::uint64_t tenant) {
    return tenant == 0 ? 0 : 1 + tenant % (kFlows - 1);
  }

 private:
  struct Flow {
    Seat* head = nullptr;
    Seat* tail = nullptr;
    std::int32_t prev = -1, next = -1;  // the round (circular), while it has requests
    double deficit = 0.0;
    double quantum = 1.0;
  };
  Flow& flow(std::int32_t f) { return flows_[static_cast<std::size_t>(f)]; }
  const Flow& flow(std::int32_t f) const { return flows_[static_cast<std::size_t>(f)]; }
  void join(std::int32_t f);
  void leave(std::int32_t f);
  void turn_to(std::int32_t f);

  std::unique_ptr<Flow[]> flows_;
  std::int32_t current_ = -1;
  std::int32_t interrupted_ = -1;  // the flow a newly active one took the turn from
  int active_ = 0;
  Seat* order_head_ = nullptr;
  Seat* order_tail_ = nullptr;
};

}  // namespace sluice::admission
