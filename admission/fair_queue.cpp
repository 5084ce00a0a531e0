#include "admission/fair_queue.hpp"

#include <algorithm>
#include <utility>

#include "admission/bulkhead.hpp"

namespace sluice::admission {

FairQueue::FairQueue() : flows_(std::make_unique<Flow[]>(kFlows)) {}

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
  fl.quantum = std::clamp(s.weight, kMinWeight, kMaxWeight);
  const bool was_empty = fl.head == nullptr;
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
  if (was_empty) join(f);
}

void FairQueue::erase(Seat& s, bool seated) {
  (s.prev ? s.prev->next : order_head_) = s.next;
  (s.next ? s.next->prev : order_tail_) = s.prev;
  s.prev = s.next = nullptr;

  const auto f = static_cast<std::int32_t>(flow_of(s.tenant));
  Flow& fl = flow(f);
  (s.flow_prev ? s.flow_prev->flow_next : fl.head) = s.flow_next;
  (s.flow_next ? s.flow_next->flow_prev : fl.tail) = s.flow_prev;
  s.flow_prev = s.flow_next = nullptr;
  if (seated && f == current_) fl.deficit -= 1.0;
  if (!fl.head)
    leave(f);
  else if (f == current_ && fl.deficit < 1.0)
    turn_to(fl.next);
}

// A flow that has requests again is served next (a sparse flow first, as
// fq_codel serves its new flows): it joins the round just before the flow
// being served and takes the turn for one quantum; then the interrupted flow
// resumes with the deficit it had.
void FairQueue::join(std::int32_t f) {
  Flow& fl = flow(f);
  fl.deficit = 0.0;
  ++active_;
  if (current_ < 0) {
    fl.prev = fl.next = f;
    turn_to(f);
    return;
  }
  Flow& cur = flow(current_);
  fl.next = current_;
  fl.prev = cur.prev;
  flow(cur.prev).next = f;
  cur.prev = f;
  interrupted_ = current_;
  turn_to(f);
}

void FairQueue::leave(std::int32_t f) {
  Flow& fl = flow(f);
  --active_;
  fl.deficit = 0.0;
  const std::int32_t after = fl.next;
  if (after == f) {
    current_ = -1;
  } else {
    flow(fl.prev).next = fl.next;
    flow(fl.next).prev = fl.prev;
    if (f == current_) turn_to(after);
  }
  fl.prev = fl.next = -1;
  if (interrupted_ == f) interrupted_ = -1;
}

void FairQueue::turn_to(std::int32_t f) {
  current_ = f;
  if (f == interrupted_) {
    interrupted_ = -1;
    if (flow(f).deficit >= 1.0) return;  // it resumes with what it had
  }
  flow(f).deficit += flow(f).quantum;  // quantum >= 1: the flow on turn serves at least one
}

}  // namespace sluice::admission
