#include "proxy/directory.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <string_view>

#include "proxy/runtime.hpp"
#include "proxy/stream_io.hpp"

namespace sluice::proxy {

using boost::system::error_code;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One health check of one host: connect, TLS for an https:// upstream, GET the
// path, read the status line; a 2xx or 3xx within the timeout passes. A new
// connection each time, closed after (Connection: close).
class Probe : public std::enable_shared_from_this<Probe> {
 public:
  using Done = std::function<void(bool passed, std::string why)>;
  Probe(net::io_context& ioc, Done done) : stream_(ioc), timer_(ioc), done_(std::move(done)) {}

  void start(const tcp::endpoint& ep, Clock::duration timeout, std::string request,
             net::ssl::context* tls, const std::string& sni, tls::SessionSlot* session) {
    request_ = std::move(request);
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->finish(false, "timed out");
    });
    stream_.socket().async_connect(
        ep, [self = shared_from_this(), tls, sni, session](error_code ec) {
          if (self->finished_) return;
          if (ec) return self->finish(false, "connect: " + ec.message());
          if (!tls) return self->send();
          self->stream_.start_tls(*tls);
          tls::prepare_client(self->stream_.ssl(), sni, *session);
          self->stream_.async_handshake(false, [self](error_code e) {
            if (self->finished_) return;
            if (e) return self->finish(false, "TLS handshake: " + e.message());
            self->send();
          });
        });
  }

 private:
  void send() {
    net::async_write(stream_, net::buffer(request_),
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       if (self->finished_) return;
                       if (ec) return self->finish(false, "send: " + ec.message());
                       self->read();
                     });
  }
  void read() {
    stream_.async_read_some(
        net::buffer(buf_.data() + got_, buf_.size() - got_),
        [self = shared_from_this()](error_code ec, std::size_t n) {
          if (self->finished_) return;
          self->got_ += n;
          std::string_view head(self->buf_.data(), self->got_);
          if (auto eol = head.find("\r\n"); eol != std::string_view::npos) {
            // "HTTP/1.x NNN ..."
            auto line = head.substr(0, eol);
            int status = 0;
            if (line.size() >= 12 && line.starts_with("HTTP/1.") && line[8] == ' ')
              for (std::size_t i = 9; i < 12; ++i)
                status = line[i] >= '0' && line[i] <= '9' ? status * 10 + (line[i] - '0') : -1000;
            if (status < 100) return self->finish(false, "not an HTTP response");
            return self->finish(status >= 200 && status < 400, "status " + std::to_string(status));
          }
          if (ec) return self->finish(false, "read: " + ec.message());
          if (self->got_ == self->buf_.size()) return self->finish(false, "not an HTTP response");
          self->read();
        });
  }
  void finish(bool passed, std::string why) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    error_code ignored;
    stream_.socket().close(ignored);
    done_(passed, std::move(why));
  }

  Stream stream_;
  net::steady_timer timer_;
  Done done_;
  std::string request_;
  std::array<char, 512> buf_{};
  std::size_t got_ = 0;
  bool finished_ = false;
};

}  // namespace

Directory::Directory(Runtime& rt, net::io_context& ioc) : rt_(rt), ioc_(ioc) {
  const auto& cfg = rt.config;
  try {
    resolver_ =
        std::make_unique<hosts::Resolver>(ioc, cfg.resolver ? cfg.resolver->str() : std::string());
  } catch (const std::runtime_error& e) {
    throw config::ConfigError("SLUICE_RESOLVER", e.what());
  }
  ups_.resize(cfg.upstreams.size());
  for (std::size_t u = 0; u < cfg.upstreams.size(); ++u) {
    auto& up = ups_[u];
    if (auto it = cfg.health_checks.find(cfg.upstreams[u].name); it != cfg.health_checks.end())
      up.check = &it->second;
    for (const auto& h : cfg.upstreams[u].hosts) {
      Target t;
      t.name = h.host;
      t.port = h.port;
      error_code ec;
      auto literal = net::ip::make_address(h.host, ec);
      if (!ec) {
        t.literal = true;
        t.answered = true;
        t.addresses.push_back(literal);
      }
      t.timer = std::make_unique<net::steady_timer>(ioc);
      up.targets.push_back(std::move(t));
    }
  }
}

Directory::~Directory() = default;

void Directory::start(Clock::duration patience) {
  for (std::size_t u = 0; u < ups_.size(); ++u) {
    for (std::size_t t = 0; t < ups_[u].targets.size(); ++t)
      if (!ups_[u].targets[t].literal) lookup(u, t);
    rebuild(u);
  }
  auto until = Clock::now() + patience;
  while (!settled() && ioc_.run_one_until(until) > 0) {
  }
  if (ioc_.stopped()) ioc_.restart();
}

bool Directory::settled() const {
  for (const auto& up : ups_)
    for (const auto& t : up.targets)
      if (!t.answered) return false;
  return true;
}

void Directory::lookup(std::size_t u, std::size_t t) {
  resolver_->resolve(ups_[u].targets[t].name,
                     [this, u, t](hosts::Answer a) { answered(u, t, std::move(a)); });
}

void Directory::answered(std::size_t u, std::size_t t, hosts::Answer a) {
  auto& up = ups_[u];
  auto& target = up.targets[t];
  const auto& cfg = rt_.config;
  const std::string where =
      "sluice: upstream " + cfg.upstreams[u].name + " host " + cfg.upstreams[u].hosts[t].str();
  hosts::Millis wait{};
  if (a.ok) {
    ++target.ok;
    ++up.counts.lookups_ok;
    if (target.failures > 0 || !target.answered || a.addresses != target.addresses) {
      std::string list;
      for (const auto& addr : a.addresses) list += (list.empty() ? "" : ", ") + addr.to_string();
      std::fprintf(stderr, "%s: %zu address%s (%s), ttl %llds\n", where.c_str(), a.addresses.size(),
                   a.addresses.size() == 1 ? "" : "es", list.c_str(),
                   static_cast<long long>(a.ttl.count()));
    }
    target.addresses = std::move(a.addresses);
    target.failures = 0;
    target.error.clear();
    target.ttl = a.ttl;
    wait = hosts::refresh_after(a.ttl, cfg.dns_ttl);
  } else {
    ++target.failed;
    ++up.counts.lookups_failed;
    ++target.failures;
    wait = hosts::retry_after(target.failures, cfg.dns_ttl);
    if (target.failures == 1 || a.error != target.error)
      std::fprintf(
          stderr, "%s: cannot resolve: %s; %s, asked again in %llds\n", where.c_str(),
          a.error.c_str(),
          target.addresses.empty()
              ? "no address: its requests get 503 unresolved"
              : ("keeping its " + std::to_string(target.addresses.size()) + " addresses").c_str(),
          static_cast<long long>(std::chrono::ceil<std::chrono::seconds>(wait).count()));
    target.error = std::move(a.error);
  }
  std::fflush(stderr);
  target.answered = true;
  target.next = Clock::now() + wait;
  target.timer->expires_at(target.next);
  target.timer->async_wait([this, u, t](error_code ec) {
    if (!ec) lookup(u, t);
  });
  // An upstream still without an address is posted its new retry time too.
  rebuild(u, !a.ok && up.hosts.empty());
}

void Directory::rebuild(std::size_t u, bool force_post) {
  auto& up = ups_[u];
  std::vector<HostEntry> hosts;
  for (std::size_t t = 0; t < up.targets.size(); ++t) {
    for (const auto& addr : up.targets[t].addresses) {
      tcp::endpoint ep(addr, up.targets[t].port);
      bool dup = false;
      for (const auto& h : hosts) dup = dup || h.endpoint == ep;
      if (dup) continue;  // two names with one address: one host
      HostEntry e{ep, t, true};
      if (up.check) {
        auto it = up.checks.find(ep);
        if (it == up.checks.end()) {
          auto c = std::make_unique<Check>(ioc_);
          c->target = t;
          it = up.checks.emplace(ep, std::move(c)).first;
          // The first check at once, spread over a tenth of the interval.
          schedule_check(u, ep, hosts::next_check(*up.check, rng_()) - up.check->interval);
        }
        e.healthy = it->second->state.healthy();
      }
      hosts.push_back(e);
    }
  }
  // Hosts that went stop being checked.
  for (auto it = up.checks.begin(); it != up.checks.end();) {
    bool kept = false;
    for (const auto& h : hosts) kept = kept || h.endpoint == it->first;
    it = kept ? std::next(it) : up.checks.erase(it);
  }
  if (hosts == up.hosts && !force_post) return;
  up.hosts = hosts;
  auto retry = retry_at(u);
  for (auto& w : rt_.workers)
    net::post(w->ioc(),
              [worker = w.get(), u, hosts, retry] { worker->pool(u).update(hosts, retry); });
}

Clock::time_point Directory::retry_at(std::size_t u) const {
  Clock::time_point soonest = Clock::time_point::max();
  for (const auto& t : ups_[u].targets)
    if (!t.literal && t.addresses.empty() && t.answered) soonest = std::min(soonest, t.next);
  return soonest == Clock::time_point::max() ? Clock::time_point{} : soonest;
}

std::vector<std::string> Directory::unresolved() const {
  std::vector<std::string> out;
  for (std::size_t u = 0; u < ups_.size(); ++u)
    if (ups_[u].hosts.empty()) out.push_back(rt_.config.upstreams[u].name);
  return out;
}

void Directory::schedule_check(std::size_t u, const tcp::endpoint& ep, Clock::duration after) {
  auto& c = *ups_[u].checks.at(ep);
  c.timer.expires_after(after);
  c.timer.async_wait([this, u, ep](error_code ec) {
    if (!ec) run_check(u, ep);
  });
}

void Directory::run_check(std::size_t u, const tcp::endpoint& ep) {
  auto& up = ups_[u];
  auto it = up.checks.find(ep);
  if (it == up.checks.end()) return;
  auto& c = *it->second;
  c.generation = ++generation_;
  const auto& cu = rt_.config.upstreams[u];
  const auto& configured = cu.hosts[c.target];
  std::string request = "GET " + up.check->path +
                        " HTTP/1.1\r\nHost: " + upstream_authority(cu, configured) +
                        "\r\nUser-Agent: sluice-health-check\r\nConnection: close\r\n\r\n";
  auto probe = std::make_shared<Probe>(
      ioc_, [this, u, ep, generation = c.generation](bool passed, std::string why) {
        checked(u, ep, generation, passed, std::move(why));
      });
  probe->start(ep, up.check->timeout, std::move(request), cu.tls ? rt_.upstream_tls.get() : nullptr,
               configured.host, &c.session);
}

void Directory::checked(std::size_t u, const tcp::endpoint& ep, std::uint64_t generation,
                        bool passed, std::string why) {
  auto& up = ups_[u];
  auto it = up.checks.find(ep);
  if (it == up.checks.end() || it->second->generation != generation) return;  // gone since
  auto& c = *it->second;
  ++(passed ? c.passed : c.failed);
  ++(passed ? up.counts.checks_passed : up.counts.checks_failed);
  c.last = why;
  if (c.state.record(passed, *up.check)) {
    std::fprintf(stderr,
                 "sluice: upstream %s host %s: health check %s %u times in a row (%s): %s\n",
                 rt_.config.upstreams[u].name.c_str(), show(ep).c_str(),
                 passed ? "passed" : "failed", passed ? up.check->healthy : up.check->unhealthy,
                 why.c_str(), passed ? "back in the balancing" : "out of the balancing");
    std::fflush(stderr);
    rebuild(u);
  }
  schedule_check(u, ep, hosts::next_check(*up.check, rng_()));
}

std::vector<Directory::NameView> Directory::names(std::size_t u, Clock::time_point now) const {
  std::vector<NameView> out;
  const auto& cu = rt_.config.upstreams[u];
  for (std::size_t t = 0; t < ups_[u].targets.size(); ++t) {
    const auto& target = ups_[u].targets[t];
    NameView v{cu.hosts[t].str(), target.literal, {}, target.error, 0.0, 0.0,
               target.ok,         target.failed};
    for (const auto& a : target.addresses) v.addresses.push_back(a.to_string());
    if (!target.literal) {
      v.ttl_s = static_cast<double>(target.ttl.count());
      v.next_lookup_in_s = target.answered ? std::max(0.0, seconds(target.next - now)) : 0.0;
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Directory::HostState> Directory::host_states(std::size_t u) const {
  const auto& up = ups_[u];
  const auto& cu = rt_.config.upstreams[u];
  std::vector<HostState> out;
  for (const auto& h : up.hosts) {
    HostState s{show(h.endpoint),
                cu.hosts[h.target].str(),
                up.check != nullptr,
                h.healthy,
                0,
                {},
                0,
                0,
                0,
                false,
                0.0,
                0};
    if (auto it = up.checks.find(h.endpoint); it != up.checks.end()) {
      s.streak = it->second->state.streak();
      s.last_check = it->second->last;
      s.checks_passed = it->second->passed;
      s.checks_failed = it->second->failed;
    }
    out.push_back(std::move(s));
  }
  // What the I/O threads' pools saw last (their heartbeat copies it).
  for (const auto& w : rt_.workers) {
    auto views = w->host_views();
    if (u >= views.size()) continue;
    for (const auto& v : views[u])
      for (auto& s : out)
        if (s.address == v.address) {
          s.in_flight += v.in_flight;
          s.ejected = s.ejected || v.ejected;
          s.ejected_for_s = std::max(s.ejected_for_s, v.ejected_for_s);
          s.failures = std::max(s.failures, v.failures);
        }
  }
  return out;
}

}  // namespace sluice::proxy
