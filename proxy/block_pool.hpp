#pragma once
#include <cstddef>
#include <memory>
#include <vector>

namespace sluice::proxy {

// Fixed-size relay buffers, recycled per Worker: a body relay borrows one and
// gives it back, so steady-state relaying allocates nothing and idle
// connections hold no relay buffer.
class BlockPool {
 public:
  static constexpr std::size_t kBlockSize = 16 * 1024;
  struct Deleter {
    BlockPool* pool;
    void operator()(char* p) const { pool->free_.push_back(p); }
  };
  using Block = std::unique_ptr<char[], Deleter>;
  ~BlockPool() {
    for (char* p : free_) delete[] p;
  }
  Block get() {
    if (free_.empty()) return Block(new char[kBlockSize], Deleter{this});
    char* p = free_.back();
    free_.pop_back();
    return Block(p, Deleter{this});
  }

 private:
  std::vector<char*> free_;
};

}  // namespace sluice::proxy
