#include "tenants/limits.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>

namespace sluice::tenants {

namespace {

constexpr std::int32_t kNone = -1;

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double number(std::string_view text, std::string_view what) {
  std::string s(text);
  char* end = nullptr;
  double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || s.front() == '+' ||
      s.front() == '-' || s.find_first_of("xXeEnNiI") != std::string::npos)
    throw std::invalid_argument("\"" + s + "\" is not a number of " + std::string(what) +
                                "; e.g. 50 or 50:100 (50 per second, a burst of 100)");
  return v;
}

}  // namespace

Limits parse_rate(std::string_view text) {
  Limits l;
  auto colon = text.find(':');
  l.rate = number(text.substr(0, colon), "requests per second");
  if (l.rate <= 0 || l.rate > 1e6)
    throw std::invalid_argument("\"" + std::string(text) +
                                "\": the rate is out of range; valid: above 0, at most 1000000 "
                                "requests per second");
  if (colon != std::string_view::npos) {
    l.burst = number(text.substr(colon + 1), "requests");
    if (l.burst < 1 || l.burst > 1e9)
      throw std::invalid_argument("\"" + std::string(text) +
                                  "\": the burst is out of range; valid: 1..1000000000 requests");
  }
  return l;
}

std::string rate_text(const Limits& l) {
  auto num = [](double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
    return s;
  };
  return l.burst > 0 ? num(l.rate) + ":" + num(l.burst) : num(l.rate);
}

struct Table::Stripe {
  struct Entry {
    std::uint64_t key = 0;
    std::uint32_t in_flight = 0;
    double tokens = 0;
    Micros refilled{0};
    std::int32_t newer = kNone, older = kNone;  // the LRU list; free entries chain on `older`
    // The fleet: counts by window parity, the rate last asked under, the allowance.
    double rate = 0;
    std::array<std::int64_t, 2> window{-1, -1};
    std::array<std::uint32_t, 2> pending{}, reported{};
    bool asked = false;    // since the last collect (it is then among the most recent)
    bool allowed = false;  // an allowance was set
    double allowance = 0;
    Micros allowed_until{0};  // the allowance holds until then (two intervals)
    Micros retry_at{0};       // none left: when the fleet's count is under the limit again
  };
  mutable std::mutex mutex;
  std::vector<Entry> entries;
  std::vector<std::int32_t> index;  // open addressing: entry numbers, kNone when empty
  std::size_t mask = 0;
  std::int32_t newest = kNone, oldest = kNone, free = kNone;
  std::size_t used = 0;
  std::uint64_t evictions = 0, untracked = 0;

  std::size_t capacity;
  explicit Stripe(std::size_t n) : capacity(n) {}
  // The arrays, at the stripe's first tenant: a process without tenant
  // limits never touches them (6 MB at the default capacity).
  void ensure() {
    if (!entries.empty()) return;
    entries.resize(capacity);
    index.assign(std::bit_ceil(2 * capacity), kNone);
    mask = index.size() - 1;
    for (std::size_t i = capacity; i-- > 0;) {
      entries[i].older = free;
      free = static_cast<std::int32_t>(i);
    }
  }
  // The entry of `key`, or kNone.
  std::int32_t find(std::uint64_t key) const { return index.empty() ? kNone : index[slot(key)]; }
  Entry& at(std::int32_t e) { return entries[static_cast<std::size_t>(e)]; }
  std::size_t home(std::uint64_t key) const { return mix(key) & mask; }

  // The index slot holding key, or the empty slot where it would go.
  std::size_t slot(std::uint64_t key) const {
    std::size_t i = home(key);
    while (index[i] != kNone && entries[static_cast<std::size_t>(index[i])].key != key)
      i = (i + 1) & mask;
    return i;
  }

  // Removes index slot i, shifting back the entries after it that probed past it.
  void unindex(std::size_t i) {
    for (std::size_t j = (i + 1) & mask; index[j] != kNone; j = (j + 1) & mask) {
      const std::size_t k = home(entries[static_cast<std::size_t>(index[j])].key);
      // j's entry may move to i when its home is not in (i, j] (cyclically).
      const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (stays) continue;
      index[i] = index[j];
      i = j;
    }
    index[i] = kNone;
  }

  void unlink(std::int32_t e) {
    Entry& x = at(e);
    (x.newer != kNone ? at(x.newer).older : newest) = x.older;
    (x.older != kNone ? at(x.older).newer : oldest) = x.newer;
    x.newer = x.older = kNone;
  }

  void make_newest(std::int32_t e) {
    Entry& x = at(e);
    x.older = newest;
    x.newer = kNone;
    (newest != kNone ? at(newest).newer : oldest) = e;
    newest = e;
  }

  void touch(std::int32_t e) {
    unlink(e);
    make_newest(e);
  }

  // A free entry: from the free list, else the least recently used entry with
  // nothing in flight (of the kEvictionTries oldest), else none.
  std::int32_t take_entry() {
    if (free != kNone) {
      std::int32_t e = free;
      free = at(e).older;
      at(e).older = kNone;
      return e;
    }
    std::int32_t e = oldest;
    for (int tries = 0; e != kNone && tries < kEvictionTries; ++tries, e = at(e).newer) {
      if (at(e).in_flight > 0) continue;
      unindex(slot(at(e).key));
      unlink(e);
      --used;
      ++evictions;
      return e;
    }
    return kNone;
  }

  // The entry of `key`, made the most recent; a new one (a full bucket) when
  // absent; kNone when the stripe has no entry to give.
  std::int32_t find_or_add(std::uint64_t key, const Limits& l, Micros now) {
    ensure();
    std::size_t i = slot(key);
    if (index[i] != kNone) {
      std::int32_t e = index[i];
      touch(e);
      return e;
    }
    std::int32_t e = take_entry();
    if (e == kNone) return kNone;
    i = slot(key);  // an eviction may have shifted the index
    index[i] = e;
    Entry& x = at(e);
    x = Entry{};
    x.key = key;
    x.tokens = l.bucket();
    x.refilled = now;
    make_newest(e);
    ++used;
    return e;
  }
};

Table::Table(std::size_t capacity) : capacity_(std::max(capacity, kStripes)) {
  for (auto& s : stripes_) s = std::make_unique<Stripe>(capacity_ / kStripes);
  capacity_ = capacity_ / kStripes * kStripes;
}

Table::~Table() = default;

std::uint64_t Table::scoped(std::uint64_t tenant, std::uint64_t route) {
  return mix(tenant ^ mix(route + 1));
}

std::size_t Table::stripe_of(std::uint64_t key) {
  return mix(key) >> 60;  // the top 4 bits: kStripes == 16
}

Grant Table::acquire(std::uint64_t key, const Limits& l, Micros now) {
  Grant g;
  g.key = key;
  g.stripe = static_cast<std::uint8_t>(stripe_of(key));
  Stripe& s = *stripes_[g.stripe];
  std::lock_guard lock(s.mutex);
  std::int32_t e = s.find_or_add(key, l, now);
  if (e == kNone) {
    ++s.untracked;
    g.limited = Limited::untracked;
    return g;
  }
  auto& x = s.at(e);
  g.entry = e;
  const Fleet mode = fleet();
  if (mode != Fleet::off) x.asked = true;  // collect() finds it among the most recent
  if (l.concurrency > 0 && x.in_flight >= l.concurrency) {
    g.limited = Limited::concurrency;
    return g;
  }
  if (l.rate > 0) {
    // The fleet's allowance while it is fresh; else (the link down, an
    // allowance gone stale, before the tenant's first reconcile) its share.
    const bool gated = mode == Fleet::up && x.allowed && now < x.allowed_until;
    const double divisor =
        mode == Fleet::off || gated ? 1.0 : std::max(1.0, divisor_.load(std::memory_order_relaxed));
    const double rate = l.rate / divisor, bucket = std::max(1.0, l.bucket() / divisor);
    std::size_t slot = 0;
    if (mode != Fleet::off) {
      x.rate = l.rate;
      const std::int64_t w = window_of(now);
      slot = static_cast<std::size_t>(w & 1);
      if (x.window[slot] != w) {
        x.window[slot] = w;
        x.pending[slot] = x.reported[slot] = 0;
      }
      if (gated && x.allowance < 1.0) {
        g.limited = Limited::rate;
        g.retry_after = std::max(x.retry_at - now, Micros{1'000});
        return g;
      }
    }
    if (!gated && x.allowed) {
      // The allowance lapsed (the link down or slow): what the fleet last
      // allowed this instance is all its bucket holds, refilled from there at
      // its share (no burst of a whole bucket in every instance at once).
      x.tokens = std::min(x.tokens, std::max(0.0, x.allowance));
      x.refilled = std::max(x.refilled, std::min(now, x.allowed_until));  // the share from then
      x.allowed = false;
    }
    const double seconds = std::chrono::duration<double>(now - x.refilled).count();
    x.tokens = std::min(bucket, x.tokens + std::max(0.0, seconds) * rate);
    x.refilled = std::max(now, x.refilled);
    if (x.tokens < 1.0) {
      g.limited = Limited::rate;
      g.retry_after = Micros(static_cast<std::int64_t>(std::ceil((1.0 - x.tokens) / rate * 1e6)));
      return g;
    }
    x.tokens -= 1.0;
    g.took_token = true;
    if (mode != Fleet::off) {
      ++x.pending[slot];
      g.window = x.window[slot];
      if (gated) {
        x.allowance -= 1.0;
        g.gated = true;
      }
    }
  }
  if (l.concurrency > 0) {
    ++x.in_flight;
    g.holds = true;
  }
  return g;
}

void Table::release(Grant& g, bool refund) {
  if (g.entry == kNone || (!g.holds && !(refund && g.took_token))) return;
  Stripe& s = *stripes_[g.stripe];
  std::lock_guard lock(s.mutex);
  auto& x = s.at(g.entry);
  if (x.key == g.key) {  // an entry with nothing in flight may have gone to another tenant
    if (g.holds) --x.in_flight;
    if (refund && g.took_token) {
      x.tokens += 1.0;
      if (g.gated) x.allowance += 1.0;
      const auto slot = static_cast<std::size_t>(g.window & 1);
      if (g.window >= 0 && x.window[slot] == g.window) {
        // Not counted after all: before its report, or in the next total
        // (a whole total: Redis is corrected by the next round).
        if (x.pending[slot] > 0) {
          --x.pending[slot];
        } else if (x.reported[slot] > 0) {
          --x.reported[slot];
          x.asked = true;
          s.touch(g.entry);
        }
      }
    }
  }
  g.holds = g.took_token = false;
  g.entry = kNone;
}

void Table::set_fleet(Fleet mode, double divisor) {
  divisor_.store(std::max(1.0, divisor), std::memory_order_relaxed);
  fleet_.store(mode, std::memory_order_relaxed);
}

void Table::collect(Micros now, std::vector<FleetItem>& out) {
  const std::int64_t w = window_of(now);
  for (auto& sp : stripes_) {
    Stripe& s = *sp;
    std::lock_guard lock(s.mutex);
    // Asked since the last collect means used since: the front of the LRU list.
    for (std::int32_t e = s.newest; e != kNone && s.at(e).asked; e = s.at(e).older) {
      auto& x = s.at(e);
      x.asked = false;
      if (x.rate <= 0) continue;
      FleetItem item;
      item.key = x.key;
      item.rate = x.rate;
      item.window = w;
      for (std::size_t i = 0; i < 2; ++i) {  // i = 0: the current window, 1: the one before
        const std::int64_t wi = w - static_cast<std::int64_t>(i);
        const auto slot = static_cast<std::size_t>(wi & 1);
        if (x.window[slot] != wi) continue;
        item.pending[i] = std::exchange(x.pending[slot], 0);
        item.reported[i] = x.reported[slot];
        x.reported[slot] += item.pending[i];
      }
      out.push_back(item);
    }
  }
}

void Table::restore(const std::vector<FleetItem>& items) {
  for (const auto& item : items) {
    Stripe& s = *stripes_[stripe_of(item.key)];
    std::lock_guard lock(s.mutex);
    std::int32_t e = s.find(item.key);
    if (e == kNone) continue;  // forgotten meanwhile: its counts go with it
    auto& x = s.at(e);
    x.asked = true;
    s.touch(e);  // among the most recent, where collect() looks
    for (std::size_t i = 0; i < 2; ++i) {
      const std::int64_t wi = item.window - static_cast<std::int64_t>(i);
      const auto slot = static_cast<std::size_t>(wi & 1);
      if (x.window[slot] != wi) continue;
      x.pending[slot] += item.pending[i];
      x.reported[slot] -= std::min(x.reported[slot], item.pending[i]);
    }
  }
}

void Table::set_allowance(std::uint64_t key, const FleetAllowance& a, Micros now, Micros valid) {
  Stripe& s = *stripes_[stripe_of(key)];
  std::lock_guard lock(s.mutex);
  std::int32_t e = s.find(key);
  if (e == kNone) return;
  auto& x = s.at(e);
  x.allowed = true;
  x.allowance = a.admissions;
  x.allowed_until = now + valid;
  x.retry_at = now + a.retry;
}

FleetAllowance fleet_allowance(const FleetReading& r) {
  const double w_us = static_cast<double>(Table::kWindow.count());
  const double elapsed = std::clamp(r.elapsed, 0.0, 1.0);
  const double previous_left = r.previous * (1.0 - elapsed);  // still in the sliding window
  const double sliding = previous_left + r.current;
  const double frees = std::min(previous_left, r.previous * r.interval);
  const double gap = std::max(0.0, r.limit - sliding + frees);
  const double total = r.current + r.previous;
  const double even = 1.0 / std::max(1, r.instances);
  const double share = std::clamp(total > 0 ? r.mine / total : 0.0, even, 1.0);
  FleetAllowance a;
  a.admissions = gap * share;
  // None left: when the sliding count is one under the limit again (the
  // previous window sliding out, then the current one).
  const double need = sliding + 1.0 - r.limit;
  double t = r.interval;  // in windows
  if (need > 0) {
    if (r.previous > 0 && need <= previous_left)
      t = need / r.previous;
    else
      t = (1.0 - elapsed) + (need - previous_left) / std::max(1.0, r.current);
  }
  t = std::clamp(t, std::min(r.interval, 2.0), 2.0);
  a.retry = Micros(static_cast<std::int64_t>(t * w_us));
  return a;
}

template <class F>
std::uint64_t Table::sum(F field) const {
  std::uint64_t n = 0;
  for (const auto& s : stripes_) {
    std::lock_guard lock(s->mutex);
    n += field(*s);
  }
  return n;
}

std::uint64_t Table::evictions() const {
  return sum([](const Stripe& s) { return s.evictions; });
}

std::uint64_t Table::untracked() const {
  return sum([](const Stripe& s) { return s.untracked; });
}

std::size_t Table::size() const {
  return sum([](const Stripe& s) { return s.used; });
}

}  // namespace sluice::tenants
