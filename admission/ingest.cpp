#include "admission/ingest.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::admission {

IngestBudget::IngestBudget(std::uint64_t budget, const std::array<double, kLaneCount>& shares)
    : budget_(budget) {
  for (std::size_t l = 0; l < kLaneCount; ++l)
    cap_[l] = static_cast<std::uint64_t>(
        std::floor(std::clamp(shares[l], 0.0, 1.0) * static_cast<double>(budget)));
}

bool IngestBudget::fits(Lane lane, std::uint64_t bytes) const {
  const auto l = index(lane);
  if (bytes > cap_[l]) return in_flight_[l] == 0;  // alone in its lane
  return total_ + bytes <= budget_ && in_flight_[l] + bytes <= cap_[l];
}

bool IngestBudget::reserve(IngestWaiter& w, Micros now, bool may_queue) {
  Lock lock(mutex_);
  const auto l = index(w.ingest_lane);
  // Oldest first in its lane: behind its waiting requests whatever fits.
  if (waiting_[l] == 0 && fits(w.ingest_lane, w.ingest_bytes)) {
    in_flight_[l] += w.ingest_bytes;
    total_ += w.ingest_bytes;
    return true;
  }
  if (!may_queue) return false;
  w.ingest_queued = true;
  w.ingest_since = now;
  w.ingest_next = nullptr;
  w.ingest_prev = tail_[l];
  (tail_[l] ? tail_[l]->ingest_next : head_[l]) = &w;
  tail_[l] = &w;
  ++waiting_[l];
  waiting_bytes_[l] += w.ingest_bytes;
  return false;
}

void IngestBudget::unqueue(IngestWaiter& w) {
  const auto l = index(w.ingest_lane);
  (w.ingest_prev ? w.ingest_prev->ingest_next : head_[l]) = w.ingest_next;
  (w.ingest_next ? w.ingest_next->ingest_prev : tail_[l]) = w.ingest_prev;
  w.ingest_prev = w.ingest_next = nullptr;
  w.ingest_queued = false;
  --waiting_[l];
  waiting_bytes_[l] -= w.ingest_bytes;
}

bool IngestBudget::cancel(IngestWaiter& w) {
  Lock lock(mutex_);
  if (!w.ingest_queued) return false;
  unqueue(w);
  serve();  // a smaller body behind it may fit now
  return true;
}

void IngestBudget::meter(Lane lane, std::uint64_t bytes) {
  Lock lock(mutex_);
  in_flight_[index(lane)] += bytes;
  total_ += bytes;
}

void IngestBudget::release(Lane lane, std::uint64_t bytes, std::optional<Micros> written) {
  Lock lock(mutex_);
  const auto l = index(lane);
  bytes = std::min(bytes, in_flight_[l]);
  if (bytes == 0) return;
  in_flight_[l] -= bytes;
  total_ -= bytes;
  if (written) note_drained(bytes, *written);
  serve();
}

void IngestBudget::note_drained(std::uint64_t bytes, Micros now) {
  // Bytes written after the window began; after an idle spell (or at first) a
  // window begins now: idleness is no measure of how fast bodies drain.
  if (window_start_ < Micros{0} || now - window_start_ > 4 * kWindow) {
    window_start_ = now;
    window_bytes_ = 0;
    return;
  }
  window_bytes_ += bytes;
  const Micros span = now - window_start_;
  if (span < kWindow) return;
  const double r = static_cast<double>(window_bytes_) / std::chrono::duration<double>(span).count();
  rate_ = rate_ == 0 ? r : (rate_ + r) / 2;
  window_start_ = now;
  window_bytes_ = 0;
}

void IngestBudget::serve() {
  for (;;) {
    // The longest waiting head that fits now.
    IngestWaiter* best = nullptr;
    for (Lane lane : kLanes) {
      IngestWaiter* h = head_[index(lane)];
      if (h && fits(lane, h->ingest_bytes) && (!best || h->ingest_since < best->ingest_since))
        best = h;
    }
    if (!best) return;
    unqueue(*best);
    const auto l = index(best->ingest_lane);
    in_flight_[l] += best->ingest_bytes;
    total_ += best->ingest_bytes;
    best->on_granted();
  }
}

std::optional<IngestBudget::Micros> IngestBudget::wait_for(Lane lane, std::uint64_t bytes) const {
  Lock lock(mutex_);
  if (rate_ <= 0) return std::nullopt;
  const auto l = index(lane);
  // What must drain first: the excess over the budget, or over the lane's
  // share, once the requests waiting ahead and this one are in.
  const std::uint64_t ahead = waiting_bytes_[0] + waiting_bytes_[1] + waiting_bytes_[2];
  const std::uint64_t over_total =
      total_ + ahead + bytes > budget_ ? total_ + ahead + bytes - budget_ : 0;
  const std::uint64_t lane_need = in_flight_[l] + waiting_bytes_[l] + std::min(bytes, cap_[l]);
  const std::uint64_t over_lane = lane_need > cap_[l] ? lane_need - cap_[l] : 0;
  const double seconds = static_cast<double>(std::max(over_total, over_lane)) / rate_;
  return std::chrono::duration_cast<Micros>(std::chrono::duration<double>(seconds));
}

IngestView IngestBudget::view() const {
  Lock lock(mutex_);
  IngestView v;
  v.budget = budget_;
  v.in_flight = in_flight_;
  v.cap = cap_;
  v.waiting = waiting_;
  v.total = total_;
  v.drain_bytes_per_s = rate_;
  return v;
}

}  // namespace sluice::admission
