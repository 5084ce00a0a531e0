#include "hosts/resolver.hpp"

#include <ares.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <map>
#include <stdexcept>

namespace sluice::hosts {

namespace net = boost::asio;
using boost::system::error_code;

namespace {
void init_library() {
  static const int status = ares_library_init(ARES_LIB_INIT_ALL);
  if (status != ARES_SUCCESS)
    throw std::runtime_error(std::string("c-ares: ") + ares_strerror(status));
}

Answer read_answer(int status, const ares_addrinfo* res) {
  Answer a;
  if (status != ARES_SUCCESS || !res) {
    a.error = ares_strerror(status);
    return a;
  }
  int lowest_ttl = -1;
  for (int family : {AF_INET, AF_INET6}) {
    for (const auto* n = res->nodes; n; n = n->ai_next) {
      if (n->ai_family != family || !n->ai_addr) continue;
      if (family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(n->ai_addr);
        net::ip::address_v4::bytes_type b;
        std::memcpy(b.data(), &sin->sin_addr, b.size());
        a.addresses.emplace_back(net::ip::address_v4(b));
      } else {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(n->ai_addr);
        net::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), &sin6->sin6_addr, b.size());
        a.addresses.emplace_back(net::ip::address_v6(b, sin6->sin6_scope_id));
      }
      lowest_ttl = lowest_ttl < 0 ? n->ai_ttl : std::min(lowest_ttl, n->ai_ttl);
    }
    if (!a.addresses.empty()) break;  // IPv4 when the name has it
  }
  std::sort(a.addresses.begin(), a.addresses.end());
  a.addresses.erase(std::unique(a.addresses.begin(), a.addresses.end()), a.addresses.end());
  a.ok = !a.addresses.empty();
  if (!a.ok) a.error = "no address";
  a.ttl = std::chrono::seconds(std::max(lowest_ttl, 0));
  return a;
}
}  // namespace

// c-ares tells which of its sockets it wants to read or write (the socket state
// callback); each gets a descriptor on the io_context that waits for that and
// hands the socket back to c-ares (ares_process_fd). c-ares owns the sockets:
// a descriptor is released, never closed, when c-ares is done with it.
struct Resolver::Impl {
  struct Watch {
    explicit Watch(net::io_context& ioc, ares_socket_t fd) : d(ioc, fd) {}
    net::posix::stream_descriptor d;
    bool want_read = false, want_write = false;
    bool reading = false, writing = false;
    bool gone = false;
  };
  struct Query {
    Impl* impl;
    std::function<void(Answer)> done;
  };

  explicit Impl(net::io_context& c) : ioc(c), timer(c) {}
  net::io_context& ioc;
  ares_channel channel = nullptr;
  net::steady_timer timer;
  std::map<ares_socket_t, std::shared_ptr<Watch>> watches;
  // Answers are posted; one that arrives after the resolver is gone is dropped.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  static void on_socket_state(void* data, ares_socket_t fd, int readable, int writable) {
    auto* self = static_cast<Impl*>(data);
    auto it = self->watches.find(fd);
    if (!readable && !writable) {
      if (it == self->watches.end()) return;
      it->second->gone = true;
      it->second->d.release();  // cancels its waits; c-ares closes the socket
      self->watches.erase(it);
      return;
    }
    if (it == self->watches.end())
      it = self->watches.emplace(fd, std::make_shared<Watch>(self->ioc, fd)).first;
    it->second->want_read = readable != 0;
    it->second->want_write = writable != 0;
    self->arm(fd, it->second);
  }

  void arm(ares_socket_t fd, const std::shared_ptr<Watch>& w) {
    if (w->want_read && !w->reading) wait(fd, w, net::posix::descriptor_base::wait_read);
    if (w->want_write && !w->writing) wait(fd, w, net::posix::descriptor_base::wait_write);
  }

  // One wait for the socket to be readable (or writable), then c-ares reads
  // (or writes) it, and the socket is armed again for what it still wants.
  void wait(ares_socket_t fd, const std::shared_ptr<Watch>& w,
            net::posix::descriptor_base::wait_type type) {
    const bool read = type == net::posix::descriptor_base::wait_read;
    (read ? w->reading : w->writing) = true;
    w->d.async_wait(type, [this, fd, w, read](error_code ec) {
      (read ? w->reading : w->writing) = false;
      if (ec || w->gone) return;
      ares_process_fd(channel, read ? fd : ARES_SOCKET_BAD, read ? ARES_SOCKET_BAD : fd);
      after_call();
      if (!w->gone) arm(fd, w);
    });
  }

  // c-ares' next timeout (a retry, a query given up) after anything it did.
  void after_call() {
    timeval tv{};
    if (!ares_timeout(channel, nullptr, &tv)) {
      timer.cancel();
      return;
    }
    timer.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
    timer.async_wait([this](error_code ec) {
      if (ec) return;
      ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      after_call();
    });
  }

  static void on_answer(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
    std::unique_ptr<Query> q(static_cast<Query*>(arg));
    Answer a = read_answer(status, res);
    if (res) ares_freeaddrinfo(res);
    if (status == ARES_EDESTRUCTION) return;  // the resolver is going
    std::weak_ptr<bool> alive = q->impl->alive;
    net::post(q->impl->ioc, [alive, done = std::move(q->done), a = std::move(a)]() mutable {
      if (alive.lock()) done(std::move(a));
    });
  }
};

Resolver::Resolver(net::io_context& ioc, const std::string& server)
    : impl_(std::make_unique<Impl>(ioc)) {
  init_library();
  ares_options opts{};
  opts.sock_state_cb = &Impl::on_socket_state;
  opts.sock_state_cb_data = impl_.get();
  opts.timeout = 1000;  // ms per try
  opts.tries = 2;
  int status = ares_init_options(&impl_->channel, &opts,
                                 ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (status != ARES_SUCCESS)
    throw std::runtime_error(std::string("c-ares: ") + ares_strerror(status));
  if (!server.empty()) {
    status = ares_set_servers_ports_csv(impl_->channel, server.c_str());
    if (status != ARES_SUCCESS) {
      ares_destroy(impl_->channel);
      throw std::runtime_error("DNS server " + server + ": " + ares_strerror(status));
    }
  }
}

Resolver::~Resolver() {
  impl_->alive.reset();
  ares_destroy(impl_->channel);  // answers pending lookups with ARES_EDESTRUCTION
  for (auto& [fd, w] : impl_->watches) {
    w->gone = true;
    w->d.release();
  }
  impl_->timer.cancel();
}

void Resolver::resolve(const std::string& name, std::function<void(Answer)> done) {
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = ARES_AI_NOSORT;
  auto* q = new Impl::Query{impl_.get(), std::move(done)};
  ares_getaddrinfo(impl_->channel, name.c_str(), nullptr, &hints, &Impl::on_answer, q);
  impl_->after_call();
}

}  // namespace sluice::hosts
