#include "admission/fair_queue.hpp"

#include <algorithm>

#include "admission/bulkhead.hpp"

namespace sluice::admission {

FairQueue::FairQueue() : flows_(std::make_unique<Flow[]>(kFlows)) {}

Seat* FairQueue::next() const {
  // settle() keeps the first flow of a list non-empty with credit, the new first.
  if (fresh_.head >= 0) return flow(fresh_.head).head;
  if (old_.head >= 0) return flow(old_.head).head;
  return nullptr;
}

void FairQueue::append(std::int32_t f, In in) {
  Flow& fl = flow(f);
  List& l = list(in);
  fl.in = in;
  fl.next = -1;
  fl.prev = l.tail;
  (l.tail >= 0 ? flow(l.tail).next : l.head) = f;
  l.tail = f;
}

void FairQueue::unlink(std::int32_t f) {
  Flow& fl = flow(f);
  List& l = list(fl.in);
  (fl.prev >= 0 ? flow(fl.prev).next : l.head) = fl.next;
  (fl.next >= 0 ? flow(fl.next).prev : l.tail) = fl.prev;
  fl.prev = fl.next = -1;
  fl.in = In::none;
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
  fl.quantum = std::clamp(s.weight, kMinWeight, kMaxWeight);
  if (!fl.head) ++active_;
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
  if (fl.in == In::none) {  // a sparse tenant: new, with one quantum
    fl.deficit = fl.quantum;
    append(f, In::fresh);
  }
  settle();
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
  if (seated) fl.deficit -= 1.0;
  if (!fl.head) {
    --active_;
    const In was = fl.in;
    unlink(f);
    if (was == In::fresh)
      append(f, In::old);  // not new again before the old flows' turns
    else
      fl.deficit = 0.0;  // out of both lists: credit is for flows with requests
  }
  settle();
}

void FairQueue::settle() {
  for (;;) {
    if (fresh_.head >= 0) {
      const std::int32_t f = fresh_.head;
      Flow& fl = flow(f);
      if (fl.deficit >= 1.0) return;  // a new flow is never empty (it moves when it empties)
      fl.deficit += fl.quantum;
      unlink(f);
      append(f, In::old);
      continue;
    }
    if (old_.head < 0) return;
    const std::int32_t f = old_.head;
    Flow& fl = flow(f);
    if (!fl.head) {  // an emptied new flow at its old turn: it leaves
      unlink(f);
      fl.deficit = 0.0;
      continue;
    }
    if (fl.deficit >= 1.0) return;
    fl.deficit += fl.quantum;
    unlink(f);
    append(f, In::old);
  }
}

}  // namespace sluice::admission
