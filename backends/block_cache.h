// A cache of freed memory blocks, by size class, shared by the CPU and CUDA allocators. A training
// step asks for the same sizes every step, so after the first one its blocks come from here: on
// the CPU no mmap/munmap, page faults or kernel zeroing, on the GPU no cudaMalloc/cudaFree (each of
// which synchronises the device). Size classes are eight per power of two (at most 12.5%
// rounding). At most max_cached bytes wait here; beyond that, freed blocks are released.
#pragma once
#include <bit>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace vitrine {

class BlockCache {
 public:
  using Release = void (*)(void*);

  BlockCache(size_t max_cached, Release release) : max_cached_(max_cached), release_(release) {}

  /// The bytes actually allocated for a request of n (n >= 8): n rounded up to an eighth of the
  /// power of two below it.
  static size_t size_class(size_t n) {
    size_t p = std::bit_floor(n), step = p / 8;
    return (n + step - 1) / step * step;
  }
  /// A cached block of class cls, or nullptr.
  void* take(size_t cls) {
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
    return p;
  }
  /// Returns a block of class cls: cached, or released when the cache is full.
  void give(void* p, size_t cls) {
    {
      std::lock_guard lock(mu_);
      if (cached_ + cls <= max_cached_) {
        free_[cls].push_back(p);
        cached_ += cls;
        return;
      }
    }
    release_(p);
  }
  /// Releases every cached block (the CUDA allocator does this when an allocation fails, then
  /// tries again).
  void release_all() {
    std::lock_guard lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) release_(p);
    free_.clear();
    cached_ = 0;
  }
  size_t cached_bytes() {
    std::lock_guard lock(mu_);
    return cached_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t max_cached_;
  Release release_;
};

}  // namespace vitrine
