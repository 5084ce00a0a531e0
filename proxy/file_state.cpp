#include "proxy/file_state.hpp"

#include <sys/stat.h>

namespace sluice::proxy {

FileState file_state(const std::string& path) {
  if (path.empty()) return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {"missing", std::nullopt};
  return {std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
              std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec),
          std::chrono::system_clock::time_point(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                std::chrono::nanoseconds(st.st_mtim.tv_nsec))};
}

}  // namespace sluice::proxy
