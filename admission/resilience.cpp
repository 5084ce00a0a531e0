#include "admission/resilience.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sluice::admission {

namespace {

double normal_sample(Rng& rng) {
  // Box-Muller; u1 in (0, 1].
  double u1 = 1.0 - rng.uniform();
  double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Gamma(shape >= 1, 1), Marsaglia and Tsang (2000).
double gamma_sample(double shape, Rng& rng) {
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = normal_sample(rng);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

std::optional<double> number(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  // RateLimit-Limit may carry a policy after a comma or semicolon: "100, 100;w=60".
  s = s.substr(0, s.find_first_of(",; \t"));
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size() || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v;
}

}  // namespace

double beta_sample(double a, double b, Rng& rng) {
  double x = gamma_sample(a, rng);
  double y = gamma_sample(b, rng);
  return x / (x + y);
}

std::size_t thompson_pick(std::span<const Candidate> candidates, Rng& rng) {
  Micros best{0};
  for (const auto& c : candidates)
    if (c.mean_latency > Micros{0} && (best == Micros{0} || c.mean_latency < best))
      best = c.mean_latency;
  std::size_t pick = 0;
  double top = -1.0;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    double draw = beta_sample(static_cast<double>(c.successes) + 1.0,
                              static_cast<double>(c.failures) + 1.0, rng);
    if (best > Micros{0} && c.mean_latency > best)
      draw *= static_cast<double>(best.count()) / static_cast<double>(c.mean_latency.count());
    if (draw > top) {
      top = draw;
      pick = i;
    }
  }
  return pick;
}

void Closure::close(Micros now, std::optional<Micros> until) {
  Micros end = until && *until > now ? *until : now + p_.close_for;
  if (closed_) {
    until_ = std::max(until_, end);
    return;
  }
  closed_ = true;
  probing_ = false;
  until_ = end;
  next_probe_ = now + p_.probe_every;
}

Verdict Closure::ask(Micros now, int running) {
  if (!closed_) return Verdict::admit;
  if (now >= until_) {
    closed_ = false;
    probing_ = false;
    return Verdict::admit;
  }
  if (probing_ || running > 0 || now < next_probe_) return Verdict::closed;
  probing_ = true;
  last_probe_ = now;
  next_probe_ = now + p_.probe_every;
  return Verdict::probe;
}

void Closure::probe_ended(bool clean) {
  probing_ = false;
  if (clean) closed_ = false;  // else the next probe was scheduled when this one started
}

Micros Closure::reopen_hint(Micros now) const {
  if (!closed_) return Micros{0};
  Micros next = std::min(next_probe_, until_);
  return std::max(Micros{0}, next - now);
}

std::optional<BudgetReading> read_budget(std::string_view limit, std::string_view remaining,
                                         std::string_view reset, Micros now,
                                         std::int64_t now_unix) {
  auto l = number(limit), r = number(remaining), z = number(reset);
  if (!l || !r || !z || *l <= 0) return std::nullopt;
  double seconds = *z;
  if (seconds > static_cast<double>(now_unix - 1) && now_unix > 0)
    seconds = std::max(0.0, seconds - static_cast<double>(now_unix));
  BudgetReading b;
  b.remaining = std::clamp(*r / *l, 0.0, 1.0);
  b.until = now + Micros(static_cast<std::int64_t>(seconds * 1e6));
  return b;
}

}  // namespace sluice::admission
