// Child processes for end-to-end tests: spawn a binary, watch its output, stop it.
//
// Output goes to temp files rather than pipes, so a chatty child never blocks on a full pipe
// while a test is busy elsewhere. A Process only ever signals the pid it started, and never
// after it has reaped it (the pid may belong to someone else by then).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

class Process {
 public:
  // Spawns argv[0] (a path, or a name looked up in PATH) with the parent's environment minus
  // every SLUICE_ variable, plus `env`. Throws std::runtime_error when it cannot spawn.
  Process(std::vector<std::string> argv, std::map<std::string, std::string> env = {});
  Process(Process&& other) noexcept;
  Process& operator=(Process&&) = delete;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  // Kills a still running child (SIGKILL), reaps it and removes the output files.
  ~Process();

  pid_t pid() const { return pid_; }

  // Everything the child has written so far.
  std::string out() const;
  std::string err() const;

  // Polls every 10 ms until the output contains `needle`; false on timeout.
  bool wait_for_out(std::string_view needle, std::chrono::milliseconds timeout) const;
  bool wait_for_err(std::string_view needle, std::chrono::milliseconds timeout) const;

  // Waits for `prefix` followed by HOST:PORT (the first such match) and returns PORT;
  // nullopt on timeout or when the child exits first.
  std::optional<int> port_from_err(std::string_view prefix, std::chrono::milliseconds timeout);
  std::optional<int> port_from_out(std::string_view prefix, std::chrono::milliseconds timeout);

  // Sends `sig`, waits for the exit and returns the exit code, or 128 + the signal that ended
  // it; after `timeout` the child is SIGKILLed (and 128 + SIGKILL returned).
  int signal_and_wait(int sig, std::chrono::milliseconds timeout);
  // The exit code (128 + signal when killed) once the child has exited; nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  bool running();

 private:
  bool reap(bool block);
  std::optional<int> port_from(const std::string& path, std::string_view prefix,
                               std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;  // set once reaped
  std::string out_path_;
  std::string err_path_;
};

// A running sluice-upstream on a free loopback port.
struct Upstream {
  // Starts `binary` (e.g. SLUICE_UPSTREAM_BIN) with `args` and waits for its port; throws
  // std::runtime_error, with its stderr, if it does not announce one in time.
  explicit Upstream(const std::string& binary, std::vector<std::string> args = {});

  Process process;
  std::uint16_t port = 0;
};

}  // namespace sluice::test
