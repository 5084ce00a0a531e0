#pragma once
// Asynchronous DNS on an Asio io_context, through c-ares (Debian
// libc-ares-dev): lookups that report their records' TTLs, that never block
// the thread that asks, and that can ask a DNS server of the caller's choice.
//
// Threading: one io_context's thread asks and is answered; the answer is
// posted to that io_context, never delivered inside resolve().
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice::hosts {

struct Answer {
  bool ok = false;
  // Every address of the name: its IPv4 ones when it has any, else its IPv6
  // ones; sorted, no duplicates.
  std::vector<boost::asio::ip::address> addresses;
  std::chrono::seconds ttl{0};  // the lowest of the records' TTLs
  std::string error;            // why not, when !ok: c-ares' reason
};

class Resolver {
 public:
  // `server`: the DNS server to ask, as "address:port" ("[v6]:port"); empty:
  // the system's (/etc/resolv.conf, after /etc/hosts). Throws
  // std::runtime_error when c-ares cannot start.
  Resolver(boost::asio::io_context& ioc, const std::string& server);
  ~Resolver();  // lookups still under way are never answered
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  void resolve(const std::string& name, std::function<void(Answer)> done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::hosts
