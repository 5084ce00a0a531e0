#pragma once
// The pins file (SLUICE_PINS_FILE): an operator pins the level by writing a
// JSON object, {"level": 0..3, "ttl": "10m", "reason": "..."}, read once per
// tick when the file changed. An empty, missing or unreadable file, or one
// without a level, asks for no pin (loudly when it cannot be read). The TTL
// runs from the file's change, so a restart does not extend it.
//
// Threading: the admin thread only (the ticker's, which applies the pin).
#include <chrono>
#include <optional>
#include <string>

#include "admission/controller.hpp"

namespace sluice::proxy {

class PinsFile {
 public:
  explicit PinsFile(std::string path) : path_(std::move(path)) {}
  struct Pin {
    int level;  // as written: the controller checks the range
    std::optional<admission::Millis> ttl;
    std::string reason;
  };
  struct Read {
    bool changed = false;    // false: nothing to do (no path, or the version already read)
    std::optional<Pin> pin;  // none: no pin (one the file set is to be removed)
  };
  // What the file asks for at `now` (the wall clock, which file times are on).
  Read read(std::chrono::system_clock::time_point now);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string key_;  // mtime/size/inode of the version read
};

}  // namespace sluice::proxy
