// Fuzz target: the configuration parser. The input is read twice: as an
// environment (one NAME=value entry a line, through sluice_environment) and as
// a SLUICE_CONFIG_FILE (through with_config_file); each result goes through
// load() and load_admission(), every variable's parser with it. Files the
// input names are not read (SLUICE_ROUTES_FILE, a nested config file): the
// parsers are what is fuzzed, not the file system.
// Beyond not crashing: every refusal is a ConfigError naming a SLUICE_
// variable (what start-up prints as "sluice: config: SLUICE_X: ..."), never
// another exception.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "fuzz/fuzz.hpp"

namespace {

using sluice::config::ConfigError;
using sluice::config::Env;
using sluice::fuzz::expect;

void load_both(Env env) {
  env.erase("SLUICE_CONFIG_FILE");
  env.erase("SLUICE_ROUTES_FILE");
  env.emplace("SLUICE_UPSTREAMS", "api=127.0.0.1:9000");  // unless the input has its own
  try {
    auto c = sluice::config::load(env);
    expect(!sluice::config::to_json(c).empty(), "an accepted configuration prints");
  } catch (const ConfigError& e) {
    expect(e.variable().starts_with("SLUICE_"), "a refusal names its variable");
  }
  try {
    (void)sluice::config::load_admission(env);
  } catch (const ConfigError& e) {
    expect(e.variable().starts_with("SLUICE_"), "a refusal names its variable");
  }
}

// The config file: an in-memory file, rewritten for each input.
const std::string& config_file(std::string_view text) {
  static const int fd = memfd_create("sluice-fuzz-config", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  expect(fd >= 0 && ftruncate(fd, 0) == 0 &&
             pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()),
         "the in-memory config file takes the input");
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  std::vector<std::string> lines;
  for (std::size_t at = 0; at <= text.size();) {
    auto eol = text.find('\n', at);
    if (eol == std::string_view::npos) eol = text.size();
    lines.emplace_back(text.substr(at, eol - at));
    at = eol + 1;
  }
  std::vector<char*> envp;
  for (auto& l : lines) envp.push_back(l.data());
  envp.push_back(nullptr);
  load_both(sluice::config::sluice_environment(envp.data()));

  Env from_file;
  try {
    from_file = sluice::config::with_config_file({{"SLUICE_CONFIG_FILE", config_file(text)}});
  } catch (const ConfigError& e) {
    expect(e.variable() == "SLUICE_CONFIG_FILE", "a bad config file line names the file");
    return 0;
  }
  load_both(std::move(from_file));
  return 0;
}
