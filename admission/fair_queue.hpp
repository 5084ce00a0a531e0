#pragma once
// A lane's queue in one bulkhead, shared between tenants by max-min fairness
// on the slots they hold: a free slot goes to the waiting tenant that holds
// the fewest slots of the lane (per unit of its weight), the longest waiting
// of those first.
//
// A tenant is a 64-bit hash (0: no key, the shared tenant) hashed again into
// one of kFlows flows, as fq_codel and stochastic fairness queuing do: a fixed
// array, nothing to allocate or evict; two tenants that meet in a flow are
// one. Each flow counts the slots it holds in the lane (held(): every seat and
// release of the lane, queued or not); a flow with requests waiting sits in
// the bucket of its level, floor(held / weight) (weight 1..100,
// SLUICE_TENANT_WEIGHTS), at the back when it enters it; next() is the front
// request of the first flow of the lowest bucket. So:
//   - a tenant below its share of the slots is seated at the next release,
//     ahead of the tenants holding more (a quiet tenant beside a flood);
//   - tenants that all want more than their share end up holding the same
//     number of slots (by weight): nobody gets more by sending more, or by
//     timing its requests;
//   - among tenants holding as many, the one that entered that level first
//     goes first (round robin).
// Each operation is O(1) but for finding the lowest bucket again after it
// empties, a scan upward over at most kLevels (amortized O(1): the lowest
// level only rises by one per seat). A request that leaves unseated (its
// window ended, its client left) changes nothing of its flow's level.
// With one tenant (tenants off) it is the lane's oldest-first queue, exactly.
// The arrival order is kept too: oldest() is the lane's longest wait.
//
// Threading: the bulkhead's lock.
#include <cstdint>
#include <memory>

namespace sluice::admission {

struct Seat;

class FairQueue {
 public:
  static constexpr std::size_t kFlows = 1024;
  static constexpr std::size_t kLevels = 1024;  // slots held (per weight) told apart
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
  // s leaves the queue (seated or not).
  void erase(Seat& s);
  // s's tenant holds a slot of the lane more (s was seated) or fewer (released).
  void held(const Seat& s, int delta);
  void held(std::uint64_t tenant, int delta);
  // Would a request of s's tenant, which has none waiting, be served before
  // every tenant waiting now (it holds fewer slots, per weight, than the
  // lowest of them)? False when nobody waits.
  bool leads(const Seat& s) const;
  // The requests of `tenant` waiting in this queue.
  int waiting_of(std::uint64_t tenant) const;

  static std::size_t flow_of(std::uint64_t tenant) {
    return tenant == 0 ? 0 : 1 + tenant % (kFlows - 1);
  }

 private:
  struct Flow {
    Seat* head = nullptr;  // its waiting requests
    Seat* tail = nullptr;
    std::int32_t prev = -1, next = -1;  // in its level's bucket, while it has requests waiting
    int held = 0;
    int queued = 0;  // its requests waiting
    double weight = 1.0;
    std::uint32_t level = 0;
    bool waiting = false;
  };
  struct Bucket {
    std::int32_t head = -1, tail = -1;
  };
  Flow& flow(std::int32_t f) { return flows_[static_cast<std::size_t>(f)]; }
  const Flow& flow(std::int32_t f) const { return flows_[static_cast<std::size_t>(f)]; }
  std::uint32_t level_of(const Flow& fl) const;
  void enter(std::int32_t f);  // at the back of its level's bucket
  void leave(std::int32_t f);

  std::unique_ptr<Flow[]> flows_;
  std::unique_ptr<Bucket[]> buckets_;
  std::uint32_t lowest_ = kLevels;  // the lowest bucket with a flow (kLevels: none)
  int active_ = 0;
  int bucketed_ = 0;  // flows in a bucket (active_, but for a flow moving between levels)
  Seat* order_head_ = nullptr;
  Seat* order_tail_ = nullptr;
};

}  // namespace sluice::admission
