// A seedable, counter-based random generator (Philox4x32-10). A draw of n numbers uses the
// counters [offset, offset + n) under key = seed and then advances offset by n, so the numbers
// depend only on (seed, offset, element index): the same on any thread count and, later, on CUDA.
#pragma once
#include <array>
#include <cstdint>

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

/// Philox4x32-10: four 32-bit random words for a 128-bit counter (here: counter = (index, 0))
/// under a 64-bit key. Pure function; the CUDA backend uses the same rounds.
inline std::array<uint32_t, 4> philox4x32(uint64_t index, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0, p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

}  // namespace vitrine
