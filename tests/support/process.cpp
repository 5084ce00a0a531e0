#include "tests/support/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace sluice::test {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(10);

// A fresh, close-on-exec temp file: only the child it is dup2'ed into inherits it.
std::pair<std::string, int> make_temp_file(const char* stem) {
  std::string path = std::string("/tmp/") + stem + "-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("mkostemp: " + std::string(std::strerror(errno)));
  return {path, fd};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool wait_for_text(const std::string& path, std::string_view needle,
                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (read_file(path).find(needle) != std::string::npos) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

// PORT from "HOST:PORT" at the start of `text`, only when the token is complete (something
// follows it), so a half-written line is not misread.
std::optional<int> parse_host_port(std::string_view text) {
  std::size_t end = 0;
  while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
         text[end] != ',' && text[end] != ')' && text[end] != ';') {
    ++end;
  }
  if (end == text.size()) return std::nullopt;
  const auto token = text.substr(0, end);
  const auto colon = token.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == token.size()) return std::nullopt;
  int port = 0;
  for (const char c : token.substr(colon + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    port = port * 10 + (c - '0');
    if (port > 65535) return std::nullopt;
  }
  return port;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Process::Process(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  if (argv.empty()) throw std::runtime_error("Process: empty argv");

  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const auto name = text.substr(0, text.find('='));
    if (name.substr(0, 7) == "SLUICE_" || env.count(std::string(name)) != 0) continue;
    environment.emplace_back(text);
  }
  for (const auto& [name, value] : env) environment.push_back(name + "=" + value);

  std::vector<char*> argv_pointers;
  for (auto& arg : argv) argv_pointers.push_back(arg.data());
  argv_pointers.push_back(nullptr);
  std::vector<char*> env_pointers;
  for (auto& entry : environment) env_pointers.push_back(entry.data());
  env_pointers.push_back(nullptr);

  auto [out_path, out_fd] = make_temp_file("sluice-test-out");
  auto [err_path, err_fd] = make_temp_file("sluice-test-err");
  out_path_ = out_path;
  err_path_ = err_path;

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);

  // The test runner may block or ignore signals; the child must start with the defaults or
  // SIGTERM tests would hang.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  const int rc = ::posix_spawnp(&pid_, argv_pointers[0], &actions, &attr, argv_pointers.data(),
                                env_pointers.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_fd);
  ::close(err_fd);
  if (rc != 0) {
    pid_ = -1;
    ::unlink(out_path_.c_str());
    ::unlink(err_path_.c_str());
    throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  }
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_),
      exit_code_(other.exit_code_),
      out_path_(std::move(other.out_path_)),
      err_path_(std::move(other.err_path_)) {
  other.pid_ = -1;
  other.out_path_.clear();
  other.err_path_.clear();
}

Process::~Process() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    reap(true);
  }
  if (!out_path_.empty()) ::unlink(out_path_.c_str());
  if (!err_path_.empty()) ::unlink(err_path_.c_str());
}

std::string Process::out() const { return read_file(out_path_); }
std::string Process::err() const { return read_file(err_path_); }

bool Process::wait_for_out(std::string_view needle, std::chrono::milliseconds timeout) const {
  return wait_for_text(out_path_, needle, timeout);
}

bool Process::wait_for_err(std::string_view needle, std::chrono::milliseconds timeout) const {
  return wait_for_text(err_path_, needle, timeout);
}

std::optional<int> Process::port_from_err(std::string_view prefix,
                                          std::chrono::milliseconds timeout) {
  return port_from(err_path_, prefix, timeout);
}

std::optional<int> Process::port_from_out(std::string_view prefix,
                                          std::chrono::milliseconds timeout) {
  return port_from(out_path_, prefix, timeout);
}

std::optional<int> Process::port_from(const std::string& path, std::string_view prefix,
                                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const bool was_running = running();
    const auto text = read_file(path);
    const auto at = text.find(prefix);
    if (at != std::string::npos) {
      if (auto port = parse_host_port(std::string_view(text).substr(at + prefix.size()))) {
        return port;
      }
    }
    // Read once more after the exit so output written just before it still counts.
    if (!was_running || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
}

int Process::signal_and_wait(int sig, std::chrono::milliseconds timeout) {
  if (running()) ::kill(pid_, sig);
  if (auto code = wait_exit(timeout)) return *code;
  ::kill(pid_, SIGKILL);
  reap(true);
  return exit_code_.value_or(-1);
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
  return exit_code_;
}

bool Process::running() {
  if (pid_ <= 0 || exit_code_) return false;
  return !reap(false);
}

// True once the child has been reaped (its exit code is then known).
bool Process::reap(bool block) {
  if (exit_code_) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exit_code_ = exit_code_of(status);
    return true;
  }
  if (r < 0) {  // not our child any more (ECHILD): never touch the pid again
    exit_code_ = -1;
    return true;
  }
  return false;
}

Upstream::Upstream(const std::string& binary, std::vector<std::string> args)
    : process([&] {
        std::vector<std::string> argv{binary};
        argv.insert(argv.end(), args.begin(), args.end());
        return Process(std::move(argv));
      }()) {
  const auto found =
      process.port_from_err("sluice-upstream: listening on ", std::chrono::seconds(10));
  if (!found) {
    throw std::runtime_error("sluice-upstream did not announce its port; stderr:\n" +
                             process.err());
  }
  port = static_cast<std::uint16_t>(*found);
}

}  // namespace sluice::test
