// Max pooling on the CPU (backend.h; the op is ops/pool.cpp). x [B, C, H, W] contiguous, values
// [B, C, OH, OW] and indices int64 [B, C, OH, OW], either not wanted; one (b, c) plane per task.
// Each window is scanned in row-major order with PyTorch's rule (a value replaces the maximum
// when greater, or NaN) as a select, not a branch: which of 9 values wins is unpredictable, and
// the branchy loop spent a tenth of a ResNet-18's inference mispredicting it. The window's
// bounds inside the image are worked out once per output row and once per column (the columns'
// in a table), so the inner loops test nothing but the values.
#include <algorithm>
#include <vector>

#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {

/// The taps [lo, hi) of a window starting at `start` (stride `dil` between taps, `k` taps) that
/// fall inside [0, size).
struct Taps {
  int64_t lo, hi;
};
Taps taps(int64_t start, int64_t k, int64_t dil, int64_t size) {
  int64_t lo = 0, hi = k;
  while (lo < k && start + lo * dil < 0) ++lo;
  while (hi > lo && start + (hi - 1) * dil >= size) --hi;
  return {lo, hi};
}

template <typename T, bool Values, bool Indices>
void pool_plane(const T* plane, T* vals, int64_t* idx, const ConvGeometry& g,
                const std::vector<Taps>& cols) {
  const int64_t W = g.width;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t h0 = oh * g.stride_h - g.pad_h;
    const Taps rows = taps(h0, g.kernel_h, g.dilation_h, g.height);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_w;
      const Taps c = cols[static_cast<size_t>(ow)];
      // Every window holds at least one element (padding is at most half the kernel).
      int64_t best = (h0 + rows.lo * g.dilation_h) * W + w0 + c.lo * g.dilation_w;
      T m = plane[best];
      for (int64_t i = rows.lo; i < rows.hi; ++i) {
        const int64_t row = (h0 + i * g.dilation_h) * W + w0;
        for (int64_t j = c.lo; j < c.hi; ++j) {
          const int64_t at = row + j * g.dilation_w;
          const T v = plane[at];
          const bool take = (v > m) | (v != v);  // (v != v: NaN)
          m = take ? v : m;
          if constexpr (Indices) best = take ? at : best;
        }
      }
      if constexpr (Values) vals[oh * g.out_w + ow] = m;
      if constexpr (Indices) idx[oh * g.out_w + ow] = best;
    }
  }
}

}  // namespace

bool CpuBackend::max_pool2d(const Strided& x, const Strided& values, const Strided& indices,
                            const ConvGeometry& g) {
  VT_ASSERT(x.shape.size() == 4 && x.is_contiguous());
  VT_ASSERT(values.data || indices.data);
  const int64_t planes = x.shape[0] * x.shape[1], HW = g.height * g.width;
  const int64_t L = g.out_h * g.out_w;
  VT_ASSERT(!indices.data || (indices.is_contiguous() && indices.numel() == planes * L &&
                              indices.dtype == DType::Int64));
  VT_ASSERT(!values.data ||
            (values.is_contiguous() && values.numel() == planes * L && values.dtype == x.dtype));
  std::vector<Taps> cols(static_cast<size_t>(g.out_w));
  for (int64_t ow = 0; ow < g.out_w; ++ow)
    cols[static_cast<size_t>(ow)] =
        taps(ow * g.stride_w - g.pad_w, g.kernel_w, g.dilation_w, g.width);
  dispatch_float(x.dtype, "max_pool2d", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* vp = values.data ? values.ptr<T>() : nullptr;
    int64_t* ip = indices.data ? indices.ptr<int64_t>() : nullptr;
    parallel_for(planes, L * g.kernel_h * g.kernel_w, [&](int64_t p) {
      const T* plane = xp + p * HW;
      T* v = vp ? vp + p * L : nullptr;
      int64_t* i = ip ? ip + p * L : nullptr;
      if (v && i)
        pool_plane<T, true, true>(plane, v, i, g, cols);
      else if (v)
        pool_plane<T, true, false>(plane, v, i, g, cols);
      else
        pool_plane<T, false, true>(plane, v, i, g, cols);
    });
  });
  return true;
}

}  // namespace vitrine::cpu
