// A seedable, counter-based random generator (Philox4x32-10). A draw of n numbers uses the
// counters [offset, offset + n) under key = seed and then advances offset by n, so the numbers
// depend only on (seed, offset, element index): the same on any thread count and, later, on CUDA.
#pragma once
#include <array>
#include <cstdint>

#include "backends/philox.h"

namespace vitrine {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  /// Reserves n counters and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t o = offset_;
    offset_ += n;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator used when none is passed (seed 0 until manual_seed).
Generator& default_generator();
/// Seeds the default generator.
void manual_seed(uint64_t seed);

/// Philox4x32-10 (backends/philox.h, which the CUDA kernels call too) as an array.
inline std::array<uint32_t, 4> philox4x32(uint64_t index, uint64_t key) {
  const PhiloxWords p = philox_words(index, key);
  return {p.w[0], p.w[1], p.w[2], p.w[3]};
}

}  // namespace vitrine
