// How much memory a device's tensors hold, as torch.cuda.memory_allocated /
// max_memory_allocated / memory_reserved: the allocators of both backends count every block they
// hand out (its size class, the bytes really taken) and every block given back.
#pragma once
#include <atomic>
#include <cstddef>

#include "backends/device.h"

namespace vitrine {

struct MemoryStats {
  size_t current = 0;  ///< bytes in blocks that tensors hold now
  size_t peak = 0;     ///< the most `current` has been since the start or the last reset
  size_t cached = 0;   ///< bytes in freed blocks kept for reuse (not counted in current)
};

/// The allocator statistics of a device ("cpu", "cuda").
MemoryStats memory_stats(const Device& device);
/// Starts a new peak: peak = current.
void reset_peak_memory_stats(const Device& device);

/// The counters behind MemoryStats: current and peak, thread-safe.
class MemoryCounter {
 public:
  void add(size_t n) {
    size_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
    size_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(size_t n) { current_.fetch_sub(n, std::memory_order_relaxed); }
  size_t current() const { return current_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(current(), std::memory_order_relaxed); }

 private:
  std::atomic<size_t> current_{0}, peak_{0};
};

}  // namespace vitrine
