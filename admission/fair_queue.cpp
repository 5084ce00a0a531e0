#include "admission/fair_queue.hpp"

#include <algorithm>
#include <cmath>

#include "admission/bulkhead.hpp"

namespace sluice::admission {

FairQueue::FairQueue()
    : flows_(std::make_unique<Flow[]>(kFlows)), buckets_(std::make_unique<Bucket[]>(kLevels)) {}

Seat* FairQueue::next() const {
  if (lowest_ >= kLevels) return nullptr;
  return flow(buckets_[lowest_].head).head;
}

std::uint32_t FairQueue::level_of(const Flow& fl) const {
  const double level = std::floor(static_cast<double>(std::max(0, fl.held)) / fl.weight);
  return static_cast<std::uint32_t>(std::min(level, static_cast<double>(kLevels - 1)));
}

void FairQueue::enter(std::int32_t f) {
  Flow& fl = flow(f);
  fl.level = level_of(fl);
  Bucket& b = buckets_[fl.level];
  fl.next = -1;
  fl.prev = b.tail;
  (b.tail >= 0 ? flow(b.tail).next : b.head) = f;
  b.tail = f;
  ++bucketed_;
  lowest_ = std::min(lowest_, fl.level);
}

void FairQueue::leave(std::int32_t f) {
  Flow& fl = flow(f);
  Bucket& b = buckets_[fl.level];
  (fl.prev >= 0 ? flow(fl.prev).next : b.head) = fl.next;
  (fl.next >= 0 ? flow(fl.next).prev : b.tail) = fl.prev;
  fl.prev = fl.next = -1;
  // The lowest bucket is looked for only up to the next flow still in one: a
  // lone flow that moves a level as it is seated or released scans nothing.
  if (--bucketed_ == 0)
    lowest_ = kLevels;
  else if (fl.level == lowest_)
    while (buckets_[lowest_].head < 0) ++lowest_;
}

void FairQueue::push(Seat& s, bool front) {
  // The arrival order: the seat's own links.
  if (front) {
    s.prev = nullptr;
    s.next = order_head_;
    (order_head_ ? order_head_->prev : order_tail_) = &s;
    order_head_ = &s;
  } else {
    s.prev = order_tail_;
    s.next = nullptr;
    (order_tail_ ? order_tail_->next : order_head_) = &s;
    order_tail_ = &s;
  }
  // Its tenant's flow: the flow links.
  const auto f = static_cast<std::int32_t>(flow_of(s.tenant));
  Flow& fl = flow(f);
  fl.weight = std::clamp(s.weight, kMinWeight, kMaxWeight);
  if (front) {
    s.flow_prev = nullptr;
    s.flow_next = fl.head;
    (fl.head ? fl.head->flow_prev : fl.tail) = &s;
    fl.head = &s;
  } else {
    s.flow_prev = fl.tail;
    s.flow_next = nullptr;
    (fl.tail ? fl.tail->flow_next : fl.head) = &s;
    fl.tail = &s;
  }
  ++fl.queued;
  if (!fl.waiting) {
    fl.waiting = true;
    ++active_;
    enter(f);
  }
}

void FairQueue::erase(Seat& s) {
  (s.prev ? s.prev->next : order_head_) = s.next;
  (s.next ? s.next->prev : order_tail_) = s.prev;
  s.prev = s.next = nullptr;

  const auto f = static_cast<std::int32_t>(flow_of(s.tenant));
  Flow& fl = flow(f);
  (s.flow_prev ? s.flow_prev->flow_next : fl.head) = s.flow_next;
  (s.flow_next ? s.flow_next->flow_prev : fl.tail) = s.flow_prev;
  s.flow_prev = s.flow_next = nullptr;
  --fl.queued;
  if (!fl.head && fl.waiting) {
    fl.waiting = false;
    --active_;
    leave(f);
  }
}

void FairQueue::held(const Seat& s, int delta) { held(s.tenant, delta); }

int FairQueue::waiting_of(std::uint64_t tenant) const {
  return flow(static_cast<std::int32_t>(flow_of(tenant))).queued;
}

bool FairQueue::leads(const Seat& s) const {
  const Flow& fl = flow(static_cast<std::int32_t>(flow_of(s.tenant)));
  if (fl.waiting || lowest_ >= kLevels) return false;
  const double level = std::floor(static_cast<double>(std::max(0, fl.held)) /
                                  std::clamp(s.weight, kMinWeight, kMaxWeight));
  return level < static_cast<double>(lowest_);
}

void FairQueue::held(std::uint64_t tenant, int delta) {
  const auto f = static_cast<std::int32_t>(flow_of(tenant));
  Flow& fl = flow(f);
  fl.held += delta;
  if (fl.waiting && level_of(fl) != fl.level) {  // to the back of its new level
    leave(f);
    enter(f);
  }
}

}  // namespace sluice::admission
