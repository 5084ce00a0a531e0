#pragma once
// A fleet of instances in front of one upstream: one capacity, shared.
// docs/admission.md, "A fleet of instances".
//
// The law. Every instance keeps its own estimate of the upstream (estimate.hpp)
// as a replica of the fleet's: it measures against the fleet's load (its own
// requests in flight and the others' last reported), and each round it reports
// to the ledger (Redis; FleetLedger is the same rules in C++):
//   its requests in flight and its demand (in flight + waiting), and a change
//   of its replica measured in the fleet's current epoch:
//     decrease   K̂ = min(K̂, its value), K = its K, epoch + 1 (pushed to every
//                instance at once): one decrease per burst, fleet-wide; a
//                change measured in an earlier epoch changes nothing.
//     grow       K̂ = max(K̂, its value): replicas that grew from the same value
//                in the same interval grow the fleet once.
//   The ledger answers the fleet's K̂, K and epoch (every replica takes them:
//   the fleet's value wins), and the slots this instance may hold:
//     M = floor(K̂) slots (at least one) are split max-min fair over the
//     members' demands (Doorman's FAIR_SHARE), a member that reports none
//     claiming M / N, what is left over spread evenly; each share's whole
//     slots are its own, and the slots left by the fractions go in turns
//     (the member that had one longest ago first; one held less than
//     `hold`, kept), so sixteen instances share four slots one at a time.
//     A member may take only slots no other member holds or may still run
//     requests on: its slots = min(target, M - sum of the others'
//     max(slots, busy)), busy = max(in flight, the slots it held before its
//     last report: it admits on them until the answer reaches it). No slot
//     is ever held twice; one moves when the member that gave it up has
//     reported its requests on it done.
//   Members silent for `expiry` (3 intervals) are dropped: their slots return.
// Failure (FleetMember): no answer for `grace` (3 intervals): the instance keeps
// its last slots until then, then estimates alone from them (K̂ = its share,
// K = its share, growing 1/N as fast: N instances grow the fleet by one
// instance's step), never from the seed. An answer again: the fleet wins.
//
// Threading: none. Time comes in as Micros since an epoch the caller picks.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "admission/bulkhead.hpp"
#include "admission/estimate.hpp"
#include "admission/lane.hpp"

namespace sluice::admission {

enum class FleetChange : std::uint8_t { none, grow, decrease };

// One instance's round, for one upstream.
struct FleetReport {
  std::uint64_t member = 0;
  int in_flight = 0;
  int demand = 0;  // in flight, waiting, and turned away for want of a slot since the last round
  FleetChange change = FleetChange::none;
  double khat = 0, carrying = 0;  // the replica's (a first report: the fleet's start)
  std::uint64_t epoch = 0;        // the fleet epoch the change was measured in
};

struct FleetReply {
  double khat = 1, carrying = 0;
  std::uint64_t epoch = 0;
  int members = 1;
  int slots = 0;           // this member's
  int others = 0;          // the other members' requests in flight, as last reported
  int others_held = 0;     // what they may run: the sum of their max(slots, busy)
  bool decreased = false;  // this report decreased the fleet (pushed to every member)
};

// Max-min fair shares of `capacity` over `claims` (each at least 0): each
// gets min(claim, level), the level spending the capacity; what the claims
// leave is spread evenly.
std::vector<double> fair_shares(double capacity, const std::vector<double>& claims);

class FleetLedger {
 public:
  struct Policy {
    Micros expiry{300'000};  // a member silent this long is gone
    Micros hold{3'000'000};  // a turn's slot is kept at least this long
    double max = 256;
  };
  explicit FleetLedger(const Policy& p) : p_(p) {}
  FleetReply report(const FleetReport& r, Micros now);
  double khat() const { return khat_; }
  double carrying() const { return k_; }
  std::uint64_t epoch() const { return epoch_; }
  int members() const { return static_cast<int>(members_.size()); }
  // Slots held by every member: never above floor(K̂) but after a decrease.
  int held() const;

 private:
  struct Member {
    std::uint64_t id = 0;
    int in_flight = 0, demand = 0, slots = 0;
    // What it may run until its next report: its in flight then, and the
    // slots it held until this answer reached it (it admits on them meanwhile).
    int busy = 0;
    Micros seen{0};
    Micros turn_at{0};  // its last slot in turn began then (0: never)
    bool turn = false;  // holds a slot in turn
  };
  struct Targets {
    std::vector<int> whole;   // per member, its fair share's whole slots
    std::vector<int> target;  // and with the turns the fractions leave
  };
  Targets targets(Micros now) const;
  Policy p_;
  bool known_ = false;
  double khat_ = 1, k_ = 0;
  std::uint64_t epoch_ = 0;
  std::vector<Member> members_;
};

// One instance's side of the fleet, for one upstream, on its bulkhead: what
// it reports, and whose value it enforces.
class FleetMember {
 public:
  enum class Source : std::uint8_t { fleet, local };
  FleetMember(std::uint64_t id, Micros grace) : id_(id), grace_(grace) {}
  // This round's report: the bulkhead's in flight and demand (in flight,
  // waiting, and the requests that found no slot since the last round), and
  // its replica's change since the last answer.
  FleetReport report(Bulkhead& b) const;
  // A round answered: the fleet's K̂ and K win, and the slots it gave hold.
  void answered(Bulkhead& b, const FleetReply& r, Micros now);
  // A decrease another member pushed: the fleet's lower K̂ at once, the
  // slots scaled down with it until the next round.
  void pushed(Bulkhead& b, double khat, double carrying, std::uint64_t epoch, Micros now);
  // No answer for `grace`: the bulkhead estimates alone, from its share.
  // True when it fell back at this call.
  bool tick(Bulkhead& b, Micros now);
  Source source() const { return source_; }
  const FleetReply& last() const { return last_; }
  Micros last_answer() const { return last_ok_; }  // 0: never
  std::uint64_t id() const { return id_; }

 private:
  std::uint64_t id_;
  Micros grace_;
  Source source_ = Source::local;
  bool ever_ = false;
  Micros last_ok_{0};
  FleetReply last_;
  double synced_ = 0;            // the K̂ the replica took last
  std::uint64_t decreases_ = 0;  // the replica's own decreases then
};

}  // namespace sluice::admission
