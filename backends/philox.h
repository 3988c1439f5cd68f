// Philox4x32-10, the counter-based generator behind every random number in Vitrine, written once
// for both compilers: the CPU (backends/generator.h) and the CUDA kernels
// (backends/cuda/elementwise.cu) call this same function, so both devices draw the same numbers.
// No library headers: nvcc compiles it too.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define VT_HOST_DEVICE __host__ __device__
#else
#define VT_HOST_DEVICE
#endif

namespace vitrine {

/// Four 32-bit random words.
struct PhiloxWords {
  uint32_t w[4];
};

/// Philox4x32-10: four 32-bit random words for the 128-bit counter (index, 0) under a 64-bit key.
/// Pure function.
VT_HOST_DEVICE inline PhiloxWords philox_words(uint64_t index, uint64_t key) {
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
  return {{c0, c1, c2, c3}};
}

}  // namespace vitrine
