#include "admission/fleet.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::admission {

std::vector<double> fair_shares(double capacity, const std::vector<double>& claims) {
  const std::size_t n = claims.size();
  std::vector<double> out(n, 0.0);
  if (n == 0) return out;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return claims[a] < claims[b]; });
  double left = std::max(0.0, capacity);
  for (std::size_t k = 0; k < n; ++k) {
    const double level = left / static_cast<double>(n - k);
    const double claim = std::max(0.0, claims[order[k]]);
    if (claim > level) {
      for (std::size_t m = k; m < n; ++m) out[order[m]] = level;
      return out;
    }
    out[order[k]] = claim;
    left -= claim;
  }
  for (double& s : out) s += left / static_cast<double>(n);  // what the claims leave
  return out;
}

namespace {
int whole(double x) { return std::max(0, static_cast<int>(std::floor(x + 1e-9))); }
}  // namespace

int FleetLedger::held() const {
  int n = 0;
  for (const Member& m : members_) n += m.slots;
  return n;
}

FleetLedger::Targets FleetLedger::targets(Micros now) const {
  const int total = std::max(1, whole(khat_));
  const auto n = static_cast<double>(members_.size());
  std::vector<double> claims;
  claims.reserve(members_.size());
  for (const Member& m : members_) claims.push_back(m.demand > 0 ? m.demand : total / n);
  const std::vector<double> share = fair_shares(total, claims);
  Targets t;
  t.whole.resize(members_.size());
  int given = 0;
  for (std::size_t i = 0; i < share.size(); ++i) given += t.whole[i] = whole(share[i]);
  std::vector<int>& out = t.target;
  out = t.whole;
  // The slots the fractions leave go in turns, to members that want more than
  // their whole slots: a turn held less than `hold` first, then the member
  // whose last turn began longest ago.
  std::vector<std::size_t> wanting;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (members_[i].demand > out[i]) wanting.push_back(i);
  auto kept = [&](const Member& m) { return m.turn && now - m.turn_at < p_.hold; };
  std::sort(wanting.begin(), wanting.end(), [&](std::size_t a, std::size_t b) {
    const Member& x = members_[a];
    const Member& y = members_[b];
    if (kept(x) != kept(y)) return kept(x);
    if (x.turn_at != y.turn_at) return x.turn_at < y.turn_at;
    return x.id < y.id;
  });
  for (std::size_t i : wanting) {
    if (given >= total) break;
    ++out[i];
    ++given;
  }
  return t;
}

FleetReply FleetLedger::report(const FleetReport& r, Micros now) {
  FleetReply reply;
  if (!known_) {
    known_ = true;
    khat_ = std::clamp(r.khat, 1.0, std::max(1.0, p_.max));
    k_ = std::max(0.0, r.carrying);
    epoch_ = 1;
  } else if (r.change == FleetChange::decrease && r.epoch == epoch_) {
    khat_ = std::max(1.0, std::min(khat_, r.khat));
    if (r.carrying > 0) k_ = r.carrying;
    ++epoch_;
    reply.decreased = true;
  } else if (r.change == FleetChange::grow && r.epoch == epoch_ && r.khat > khat_) {
    khat_ = std::min(r.khat, std::max(1.0, p_.max));
    k_ = std::max(k_, r.carrying);
  }
  std::erase_if(members_, [&](const Member& m) { return now - m.seen > p_.expiry; });
  auto it = std::find_if(members_.begin(), members_.end(),
                         [&](const Member& m) { return m.id == r.member; });
  if (it == members_.end()) {
    members_.push_back({});
    it = members_.end() - 1;
    it->id = r.member;
  }
  it->busy = std::max(std::max(0, r.in_flight), it->slots);
  it->in_flight = std::max(0, r.in_flight);
  it->demand = std::max(0, r.demand);
  it->seen = now;
  const auto self = static_cast<std::size_t>(it - members_.begin());
  const Targets target = targets(now);
  const int total = std::max(1, whole(khat_));
  int occupied = 0, others = 0;
  for (std::size_t j = 0; j < members_.size(); ++j) {
    if (j == self) continue;
    occupied += std::max(members_[j].slots, members_[j].busy);
    others += members_[j].in_flight;
  }
  Member& m = members_[self];
  m.slots = std::clamp(total - occupied, 0, target.target[self]);
  // Its turn: a slot beyond its fair share's whole slots.
  const bool turn = m.slots > target.whole[self];
  if (turn && !m.turn) m.turn_at = now;
  m.turn = turn;
  reply.khat = khat_;
  reply.carrying = k_;
  reply.epoch = epoch_;
  reply.members = static_cast<int>(members_.size());
  reply.slots = m.slots;
  reply.others = others;
  reply.others_held = occupied;
  return reply;
}

FleetReport FleetMember::report(Bulkhead& b) const {
  FleetReport r;
  r.member = id_;
  const Census c = b.census();
  r.in_flight = c.total_running();
  r.demand = r.in_flight + c.waiting[0] + c.waiting[1] + c.waiting[2] + b.take_unmet();
  const Estimate e = b.estimate();
  r.khat = e.value();
  r.carrying = e.carrying();
  r.epoch = last_.epoch;
  if (!ever_) return r;  // the first: the fleet's start, if it has none
  if (e.decreases() > decreases_)
    r.change = FleetChange::decrease;
  else if (e.value() > synced_ + 1e-9)
    r.change = FleetChange::grow;
  return r;
}

void FleetMember::answered(Bulkhead& b, const FleetReply& r, Micros now) {
  const bool elsewhere = ever_ && r.epoch != last_.epoch && !r.decreased;
  if (source_ == Source::local) b.set_growth_scale(1.0);
  last_ = r;
  last_ok_ = now;
  ever_ = true;
  source_ = Source::fleet;
  b.sync(r.khat, r.carrying, elsewhere, now);
  b.set_fleet(FleetLimit{r.slots, r.others, r.others_held, r.khat}, now);
  synced_ = r.khat;
  decreases_ = b.estimate().decreases();
}

void FleetMember::pushed(Bulkhead& b, double khat, double carrying, std::uint64_t epoch,
                         Micros now) {
  if (!ever_ || source_ != Source::fleet || epoch <= last_.epoch) return;
  if (khat < last_.khat && last_.khat > 0)
    last_.slots = static_cast<int>(std::floor(last_.slots * khat / last_.khat + 1e-9));
  last_.khat = khat;
  if (carrying > 0) last_.carrying = carrying;
  last_.epoch = epoch;
  b.sync(khat, carrying, true, now);
  b.set_fleet(FleetLimit{last_.slots, last_.others, last_.others_held, khat}, now);
  synced_ = khat;
  decreases_ = b.estimate().decreases();
}

bool FleetMember::tick(Bulkhead& b, Micros now) {
  if (source_ != Source::fleet || now - last_ok_ <= grace_) return false;
  source_ = Source::local;
  const double share = std::max(1, last_.slots);  // never closed, never the seed
  b.set_fleet(std::nullopt, now);
  b.set_growth_scale(1.0 / std::max(1, last_.members));
  b.sync(share, share, false, now);
  synced_ = share;
  decreases_ = b.estimate().decreases();
  return true;
}

}  // namespace sluice::admission
