// CPU random kernels: element i uses Philox4x32-10 at counter (offset + i) under key = seed.
// float32 uniform: 24 bits of word 0; float64: 53 bits of words 0-1; normal: Box-Muller on
// words 0-1 (float64) / words 0 and 1 (float32), cosine branch only, so each element is
// independent.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/generator.h"

namespace vitrine::cpu {

namespace {
/// Uniform in [0, 1) from a Philox block.
template <typename T>
T unit(const std::array<uint32_t, 4>& w) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(w[0] >> 8) * (1.0f / 16777216.0f);
  } else {
    uint64_t x = (static_cast<uint64_t>(w[0]) << 32 | w[1]) >> 11;
    return static_cast<double>(x) * (1.0 / 9007199254740992.0);
  }
}
}  // namespace

void CpuBackend::uniform(const Strided& dst, uint64_t seed, uint64_t offset, double lo, double hi) {
  VT_ASSERT(dst.is_contiguous());
  dispatch_float(dst.dtype, "rand", [&]<typename T>() {
    T* d = dst.ptr<T>();
    parallel_for(dst.numel(), 20, [&](int64_t i) {
      T u = unit<T>(philox4x32(offset + i, seed));
      d[i] = static_cast<T>(lo + (hi - lo) * u);
    });
  });
}

void CpuBackend::normal(const Strided& dst, uint64_t seed, uint64_t offset, double mean,
                        double std) {
  VT_ASSERT(dst.is_contiguous());
  dispatch_float(dst.dtype, "randn", [&]<typename T>() {
    T* d = dst.ptr<T>();
    parallel_for(dst.numel(), 40, [&](int64_t i) {
      auto w = philox4x32(offset + i, seed);
      // u1 in (0, 1] from words 0-1, u2 in [0, 1) from words 2-3.
      double u1 = (static_cast<double>((static_cast<uint64_t>(w[0]) << 32 | w[1]) >> 11) + 1.0) *
                  (1.0 / 9007199254740992.0);
      double u2 = static_cast<double>((static_cast<uint64_t>(w[2]) << 32 | w[3]) >> 11) *
                  (1.0 / 9007199254740992.0);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      d[i] = static_cast<T>(mean + std * z);
    });
  });
}

void CpuBackend::randint(const Strided& dst, uint64_t seed, uint64_t offset, int64_t lo,
                         int64_t hi) {
  VT_ASSERT(dst.is_contiguous() && dst.dtype == DType::Int64 && hi > lo);
  int64_t* d = dst.ptr<int64_t>();
  uint64_t range = static_cast<uint64_t>(hi - lo);
  parallel_for(dst.numel(), 20, [&](int64_t i) {
    auto w = philox4x32(offset + i, seed);
    uint64_t x = static_cast<uint64_t>(w[0]) << 32 | w[1];
    d[i] = lo + static_cast<int64_t>(x % range);
  });
}

}  // namespace vitrine::cpu
