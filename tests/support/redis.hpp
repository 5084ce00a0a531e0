#pragma once
// A redis-server of the test's own on loopback (Debian redis-server), on a
// free port, with nothing persisted; redis-cli to read it.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace sluice::test {

class Redis {
 public:
  Redis() {
    for (int attempt = 0; attempt < 5 && !process_; ++attempt) {
      port = free_port();
      process_.emplace(std::vector<std::string>{"redis-server", "--port", std::to_string(port),
                                                "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                                "no"});
      if (!process_->wait_for_out("Ready to accept connections", std::chrono::seconds(10)))
        process_.reset();  // the port was taken meanwhile: another one
    }
    if (!process_) throw std::runtime_error("redis-server did not start");
  }
  ~Redis() {
    if (process_) ::kill(process_->pid(), SIGCONT);  // a paused one dies as well
  }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port); }
  // Freezes it (SIGSTOP): connections stay open and nothing is answered.
  void pause() { ::kill(process_->pid(), SIGSTOP); }
  void resume() { ::kill(process_->pid(), SIGCONT); }
  // redis-cli's output for one command.
  std::string cli(std::vector<std::string> args) const {
    args.insert(args.begin(), {"redis-cli", "-p", std::to_string(port)});
    Process p(args);
    p.wait_exit(std::chrono::seconds(10));
    return p.out();
  }

  std::uint16_t port = 0;

 private:
  static std::uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("no free port");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }
  std::optional<Process> process_;
};

}  // namespace sluice::test
