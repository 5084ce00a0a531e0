#include "proxy/host_set.hpp"

#include <algorithm>

namespace sluice::proxy {

HostSet::HostSet(std::size_t hosts, std::chrono::milliseconds eject_base,
                 std::chrono::milliseconds eject_max)
    : hosts_(hosts),
      present_(hosts),
      eject_base_(eject_base),
      eject_max_(std::max(eject_base, eject_max)) {}

std::size_t HostSet::add(bool healthy) {
  ++present_;
  Host fresh;
  fresh.healthy = healthy;
  for (std::size_t i = 0; i < hosts_.size(); ++i) {
    if (!hosts_[i].present && hosts_[i].in_flight == 0) {
      // A new epoch too: a connect begun for the slot's last host fails into nothing.
      fresh.ejections = hosts_[i].ejections + 1;
      hosts_[i] = fresh;
      return i;
    }
  }
  hosts_.push_back(fresh);
  return hosts_.size() - 1;
}

std::size_t HostSet::choose(Clock::time_point now, admission::Rng& rng, std::size_t avoid) const {
  const std::size_t n = hosts_.size();
  if (n == 1) return hosts_[0].present ? 0 : kNoHost;
  // A replay avoids the host that just failed it, while another is eligible.
  auto ok = [&](std::size_t i) {
    const auto& h = hosts_[i];
    return h.present && h.healthy && h.ejected_until <= now && i != avoid;
  };
  std::size_t eligible = 0;
  for (std::size_t i = 0; i < n; ++i) eligible += ok(i);
  if (eligible == 0 && avoid < n) return choose(now, rng, kNoHost);
  if (eligible == 0) {
    // None eligible: the one back soonest among those the checks pass, else
    // among all present (the connect decides).
    std::size_t best = kNoHost;
    for (bool need_healthy : {true, false}) {
      for (std::size_t i = 0; i < n; ++i) {
        const auto& h = hosts_[i];
        if (!h.present || (need_healthy && !h.healthy)) continue;
        if (best == kNoHost || h.ejected_until < hosts_[best].ejected_until) best = i;
      }
      if (best != kNoHost) break;
    }
    return best;
  }
  // The k-th eligible host (k < eligible).
  auto nth = [&](std::size_t k) {
    if (eligible == n) return k;
    for (std::size_t i = 0;; ++i)
      if (ok(i) && k-- == 0) return i;
  };
  if (eligible == 1) return nth(0);
  // Two distinct eligible hosts, drawn as an ordered pair: a is uniform, so
  // keeping a on a tie breaks ties at random.
  auto r = rng.next();
  std::size_t a = static_cast<std::size_t>(r & 0xFFFFFFFFu) % eligible;
  std::size_t b = static_cast<std::size_t>(r >> 32) % (eligible - 1);
  if (b >= a) ++b;
  a = nth(a);
  b = nth(b);
  return hosts_[b].in_flight < hosts_[a].in_flight ? b : a;
}

void HostSet::connected(std::size_t host) {
  auto& h = hosts_[host];
  h.failures = 0;
  h.ejected_until = {};
}

std::chrono::milliseconds HostSet::backoff(std::uint32_t failures) const {
  auto backoff = eject_base_;
  for (std::uint32_t i = 1; i < failures && backoff < eject_max_ && backoff.count() > 0; ++i)
    backoff *= 2;
  return std::min(backoff, eject_max_);
}

bool HostSet::connect_failed(std::size_t host, std::uint32_t epoch, Clock::time_point now) {
  auto& h = hosts_[host];
  if (epoch != h.ejections)
    return false;  // begun before the host's latest ejection: counted already
  ++h.failures;
  h.ejected_until = now + backoff(h.failures);
  ++h.ejections;
  return true;
}

bool HostSet::all_ejected(Clock::time_point now) const {
  for (const auto& h : hosts_)
    if (h.present && h.ejected_until <= now) return false;
  return true;
}

}  // namespace sluice::proxy
