#pragma once
// A watched file's version, compared from one tick to the next (the pins file,
// SLUICE_CONFIG_FILE, SLUICE_ROUTES_FILE).
#include <chrono>
#include <optional>
#include <string>

namespace sluice::proxy {

// What identifies a version of a file (inode, size, mtime; "missing"), and
// when it last changed. No path: an empty key.
struct FileState {
  std::string key;
  std::optional<std::chrono::system_clock::time_point> changed;
};
FileState file_state(const std::string& path);

}  // namespace sluice::proxy
