#pragma once
// The ingest byte budget: request body bytes in flight, per lane and in total,
// against SLUICE_INGEST_BUDGET. Seed 004 refers to scaling heavy admission by
// an ingest byte budget instead of a fixed request count: a proxy whose
// clients send large bodies (uploads, long prompts) runs out of memory and
// bandwidth by bytes in flight, not by requests.
//
// A request's bytes in flight are what of its body it has committed to send
// through Sluice and Sluice has not yet written upstream:
//   declared     a Content-Length is held whole at admission (reserve()), and
//                each piece written upstream gives its bytes back (release());
//   chunked      one block (kChunkedReserve) at admission, then each piece is
//                metered as it is read (meter()) and given back once written;
//   the end of the request (answered, failed, refused) gives back the rest.
// A request of lane l with b bytes fits when
//   in_flight + b <= budget   and   in_flight_l + b <= share_l x budget
// (a body larger than its lane's share fits only while nothing of its lane is
// in flight: it goes alone, and is never refused for good; the total can then
// pass the budget by that one body). One that does not
// fit waits in its lane's queue, oldest first; every release seats the heads
// that fit now, the longest waiting first. At the end of its wait it is
// refused (503 ingest_budget) and told how long the bytes ahead of it take to
// drain at the rate measured (bytes written upstream per second, an average
// over windows of kWindow, idle spells left out): wait_for().
// Requests without a body never meet the budget.
//
// Threading: one mutex for every thread of the process, held for a few dozen
// instructions; on_granted() runs under it (on whichever thread released the
// bytes) and must only post to its own thread. Time comes in as Micros.
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

#include "admission/lane.hpp"

namespace sluice::admission {

struct IngestWaiter {
  Lane ingest_lane = Lane::standard;
  std::uint64_t ingest_bytes = 0;
  bool ingest_queued = false;
  std::chrono::microseconds ingest_since{0};
  IngestWaiter* ingest_prev = nullptr;
  IngestWaiter* ingest_next = nullptr;
  virtual ~IngestWaiter() = default;
  // Its bytes are held now (called from release(), under the budget's lock).
  virtual void on_granted() {}
};

struct IngestView {
  std::uint64_t budget = 0;
  std::array<std::uint64_t, kLaneCount> in_flight{}, cap{};
  std::array<int, kLaneCount> waiting{};
  std::uint64_t total = 0;
  double drain_bytes_per_s = 0;  // 0: not measured yet
};

class IngestBudget {
 public:
  using Micros = std::chrono::microseconds;
  static constexpr std::uint64_t kChunkedReserve = std::uint64_t{16} * 1024;
  static constexpr Micros kWindow{250'000};

  // shares: per lane, the fraction of the budget its requests may hold (0..1).
  IngestBudget(std::uint64_t budget, const std::array<double, kLaneCount>& shares);
  IngestBudget(const IngestBudget&) = delete;
  IngestBudget& operator=(const IngestBudget&) = delete;

  // w.ingest_lane's request with w.ingest_bytes. True: held now. Otherwise it
  // waits (when may_queue) until on_granted() or cancel().
  bool reserve(IngestWaiter& w, Micros now, bool may_queue = true);
  // Takes a waiting request out; false when it was granted meanwhile (its
  // bytes are held: give them back with release()).
  bool cancel(IngestWaiter& w);
  // Bytes of `lane` held without asking (a chunked body's pieces as read).
  void meter(Lane lane, std::uint64_t bytes);
  // Bytes of `lane` given back; seats the waiting requests that fit now.
  // `written`: when they were written upstream (they count in the drain rate);
  // none: the request ended without sending them.
  void release(Lane lane, std::uint64_t bytes, std::optional<Micros> written);
  // How long until `bytes` of `lane` fit, at the rate measured, behind the
  // requests waiting now (none: no rate measured yet).
  std::optional<Micros> wait_for(Lane lane, std::uint64_t bytes) const;
  IngestView view() const;

 private:
  using Lock = std::lock_guard<std::mutex>;
  bool fits(Lane lane, std::uint64_t bytes) const;
  void serve();
  void unqueue(IngestWaiter& w);
  void note_drained(std::uint64_t bytes, Micros now);

  mutable std::mutex mutex_;
  const std::uint64_t budget_;
  std::array<std::uint64_t, kLaneCount> cap_{};
  std::array<std::uint64_t, kLaneCount> in_flight_{};
  std::uint64_t total_ = 0;
  std::array<IngestWaiter*, kLaneCount> head_{}, tail_{};
  std::array<int, kLaneCount> waiting_{};
  std::array<std::uint64_t, kLaneCount> waiting_bytes_{};
  // The drain rate: bytes given back in the current window, and the average.
  Micros window_start_{-1};
  std::uint64_t window_bytes_ = 0;
  double rate_ = 0;
};

}  // namespace sluice::admission
