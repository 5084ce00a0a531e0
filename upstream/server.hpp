// sluice-upstream: the demo and test upstream behind the proxy.
//
// Threading: one io_context per thread, each run by exactly one thread. A single
// acceptor (on the first context) hands accepted sockets round-robin to the
// contexts, so every handler of a session runs on one thread and needs no strand.
// The counters in Stats, the slot queue and the capacity schedule are the only state
// shared between threads.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sluice::upstream {

// One change of --capacity-schedule: from `at` after the first request on, `capacity`.
struct CapacityChange {
  std::chrono::milliseconds at{0};
  std::uint64_t capacity = 0;
};

struct Options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  int threads = 1;
  std::uint64_t capacity = 0;  // 0: unlimited; the capacity until the first change, if any
  std::vector<CapacityChange> capacity_schedule;  // times strictly increasing, capacities >= 1
  // What a request finds above `capacity` in flight: a 429 at once, or a FIFO queue
  // (it waits for a slot, however long; its latency grows with the queue).
  bool queue_over_capacity = false;
  std::chrono::milliseconds service_time{0};
  std::chrono::milliseconds sse_first{
      -1};  // /sse's first event this long after its head (-1: the interval)
  std::chrono::milliseconds keepalive{120'000};  // an idle keep-alive connection is closed after
};

// Counters over all threads, reported by /stats (which does not count itself).
struct Stats {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> max_in_flight{0};
  // The most requests at the upstream at once, counting those it is refusing
  // (429 shape: from their arrival until the 429 is written) or queues (queue
  // shape): the concurrency it was offered. A request whose answer is being
  // written is not counted: the client may have read the answer, and sent its
  // next request, before the write's completion gives the slot back (a slot
  // still held for it refuses or queues that request all the same).
  std::atomic<std::uint64_t> max_offered{0};
  std::atomic<std::uint64_t> refusing{0};   // 429s being answered now
  std::atomic<std::uint64_t> answering{0};  // answers (200s and 429s) being written now
  std::atomic<std::uint64_t> rejected{0};
  std::atomic<std::uint64_t> queued{0};   // requests that waited for a slot (queue shape)
  std::atomic<std::uint64_t> waiting{0};  // requests waiting for a slot now
};

// The capacity in force: Options::capacity, then each change of the schedule from its time
// after the first request on (the clock starts with the first request served, so a run's
// phases line up with its load however long the process idled before).
//
// Threading: any thread. A request reads the clock against the next change's time, one atomic
// load; only a call that finds a change due takes the mutex and applies it. A timer in main()
// also applies each change at its time (started by `on_start`), so a rise starts the queue's
// waiters even when no request arrives or finishes.
class CapacitySchedule {
 public:
  using Clock = std::chrono::steady_clock;

  void configure(std::uint64_t initial, std::vector<CapacityChange> changes);
  bool scheduled() const { return !changes_.empty(); }
  std::uint64_t capacity() const { return capacity_.load(std::memory_order_acquire); }

  // Applies the changes due at `now` (starting the clock first when `start` and it has not
  // started); true when the capacity changed.
  bool advance(Clock::time_point now, bool start);

  // Time since the first request, or a negative duration before it.
  Clock::duration elapsed(Clock::time_point now) const;
  // When the next change is due; none before the first request and after the last change.
  std::optional<Clock::time_point> next_change() const;

  // Called once, on the first request's thread, when the clock starts. Set before any
  // request is served.
  std::function<void()> on_start;

 private:
  static constexpr Clock::rep kNotStarted = std::numeric_limits<Clock::rep>::min();

  std::vector<CapacityChange> changes_;
  std::atomic<std::uint64_t> capacity_{0};
  // The next change's time (steady clock ticks); kNotStarted before the first request, and
  // the maximum once every change is applied.
  std::atomic<Clock::rep> next_at_{kNotStarted};
  std::atomic<Clock::rep> start_{kNotStarted};
  std::mutex mutex_;
  std::size_t next_ = 0;  // the next change to apply (under mutex_)
};

// The queue shape's waiters, oldest first, across all threads. A release hands its slot to
// the oldest waiter (in_flight does not change) instead of giving it back.
struct SlotQueue {
  std::mutex mutex;
  std::deque<std::function<void()>> waiters;  // each resumes its session on its own thread
};

// What every session reads; lives longer than all io_contexts.
struct Shared {
  Options options;
  Stats stats;
  SlotQueue slot_queue;
  CapacitySchedule capacity;  // configured from options before the first request
  std::string port_text;      // the bound port, for X-Upstream-Port
};

// Applies the changes of the capacity schedule that are due now (and, with the queue shape,
// starts the waiters a rise makes room for). Any thread.
void apply_capacity_schedule(Shared& shared);

// Accepts on one endpoint and spreads connections over the contexts.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Binds and listens at once so the caller can print the real port.
  Listener(std::vector<boost::asio::io_context*> contexts, boost::asio::ip::tcp::endpoint endpoint,
           Shared& shared);

  boost::asio::ip::tcp::endpoint local_endpoint() const;
  void run();
  void stop();

 private:
  void accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);
  void on_retry(boost::system::error_code ec);

  std::vector<boost::asio::io_context*> contexts_;
  std::size_t next_ = 0;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_timer_;
  Shared& shared_;
};

}  // namespace sluice::upstream
