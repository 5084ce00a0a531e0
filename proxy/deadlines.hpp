#pragma once
// Deadlines on a Worker, swept by its heartbeat.
#include <boost/intrusive/list.hpp>

#include "proxy/clock.hpp"

namespace sluice::proxy {

// Something with a deadline on a Worker. Deadlines are checked by the Worker's
// heartbeat (every SLUICE_LAG_PROBE_INTERVAL), not by a timer per operation:
// arming and cancelling a timer per read or write would cost system calls on
// every request, while a sweep over the live connections costs a few ns each.
struct Tracked
    : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
  Clock::time_point deadline = Clock::time_point::max();
  virtual ~Tracked() = default;
  virtual void on_deadline() = 0;  // the deadline passed; cancel what is pending
  virtual void on_drain() {}       // the proxy is draining
};
using TrackedList = boost::intrusive::list<Tracked, boost::intrusive::constant_time_size<false>>;

}  // namespace sluice::proxy
