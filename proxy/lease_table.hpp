#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::proxy {

// The live leases of one Worker, by slot. A slot's generation is odd while its
// lease lives and moves on when it ends, so a token (admission/lease_token.hpp)
// names a live lease exactly while the generations match. The owner thread
// opens and closes; any thread may ask live().
class LeaseTable {
 public:
  explicit LeaseTable(std::size_t slots) : gen_(new std::atomic<std::uint64_t>[slots]()) {
    free_.reserve(slots);
    for (std::size_t i = slots; i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
    size_ = slots;
  }
  // A slot and its generation; none when every slot is taken (no token then).
  bool open(std::uint32_t& slot, std::uint64_t& generation) {
    if (free_.empty()) return false;
    slot = free_.back();
    free_.pop_back();
    generation = gen_[slot].load(std::memory_order_relaxed) + 1;
    gen_[slot].store(generation, std::memory_order_release);
    return true;
  }
  void close(std::uint32_t slot) {
    gen_[slot].store(gen_[slot].load(std::memory_order_relaxed) + 1, std::memory_order_release);
    free_.push_back(slot);
  }
  bool live(std::uint32_t slot, std::uint64_t generation) const {
    return slot < size_ && (generation & 1) &&
           gen_[slot].load(std::memory_order_acquire) == generation;
  }

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> gen_;
  std::vector<std::uint32_t> free_;
  std::size_t size_ = 0;
};

}  // namespace sluice::proxy
