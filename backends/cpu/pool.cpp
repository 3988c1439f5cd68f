// Max pooling on the CPU (backend.h; the op is ops/pool.cpp). x [B, C, H, W] contiguous, values
// [B, C, OH, OW] and, unless not wanted (no gradient), indices int64 [B, C, OH, OW]; one (b, c)
// plane per task.
//
// PyTorch's rule scans each window in row-major order: a value replaces the maximum when it is
// greater, or NaN. Here an output row is done tap by tap, with the row's OW maxima (and indices)
// side by side:
//   m[ow] = the window's first element inside the image          (ow < OW)
//   for each tap (i, j) in row-major order, for the ow whose tap lies inside the image:
//     v = x[h0 + i dil_h, ow stride_w - pad_w + j dil_w]
//     take = v > m[ow] or v is NaN;  m[ow] = take ? v : m[ow];  idx[ow] = take ? its index : ..
// (the first element is compared with itself again: a NaN takes its own place, nothing changes).
// The inner loop runs over ow with selects, no branches: the compiler vectorises it (a stride of
// 1 or 2 a compile-time constant), where the window-by-window loop it replaces branched on every
// comparison and spent a tenth of a ResNet-18's inference mispredicting which of 9 values wins.
#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

/// One output row oh of a plane: the maxima m [OW] and, unless null, their indices idx [OW]; S
/// the column stride when known at compile time (0: g.stride_w).
template <typename T, int S>
[[gnu::always_inline]] inline void pool_row(const T* plane, int64_t oh, T* m, int64_t* idx,
                                            const ConvGeometry& g) {
  const int64_t sw = S > 0 ? S : g.stride_w, W = g.width, OW = g.out_w;
  const int64_t h0 = oh * g.stride_h - g.pad_h;
  const auto [i0, i1] = valid_range(0, g.height, g.dilation_h, -h0, g.kernel_h);
  // The first tap inside the image of each column's window (padding is at most half the kernel,
  // so there is one).
  const int64_t first_row = (h0 + i0 * g.dilation_h) * W;
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w0 = ow * sw - g.pad_w;
    const int64_t j0 = w0 >= 0 ? 0 : (-w0 + g.dilation_w - 1) / g.dilation_w;
    const int64_t at = first_row + w0 + j0 * g.dilation_w;
    m[ow] = plane[at];
    if (idx) idx[ow] = at;
  }
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t row = (h0 + i * g.dilation_h) * W;
    const T* rp = plane + row;
    for (int64_t j = 0; j < g.kernel_w; ++j) {
      const int64_t off = j * g.dilation_w - g.pad_w;  // column = ow sw + off
      const auto [lo, hi] = valid_range(j * g.dilation_w, W, sw, g.pad_w, OW);
      if (idx == nullptr) {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const T v = rp[ow * sw + off];
          m[ow] = ((v > m[ow]) | (v != v)) ? v : m[ow];
        }
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) {
          const T v = rp[ow * sw + off];
          const bool take = (v > m[ow]) | (v != v);
          m[ow] = take ? v : m[ow];
          idx[ow] = take ? row + ow * sw + off : idx[ow];
        }
      }
    }
  }
}

VT_SIMD_CLONES void pool_rows_f32(const float* plane, float* vals, int64_t* idx,
                                  const ConvGeometry& g) {
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    float* m = vals + oh * g.out_w;
    int64_t* id = idx ? idx + oh * g.out_w : nullptr;
    if (g.stride_w == 2)
      pool_row<float, 2>(plane, oh, m, id, g);
    else if (g.stride_w == 1)
      pool_row<float, 1>(plane, oh, m, id, g);
    else
      pool_row<float, 0>(plane, oh, m, id, g);
  }
}

void pool_rows_f64(const double* plane, double* vals, int64_t* idx, const ConvGeometry& g) {
  for (int64_t oh = 0; oh < g.out_h; ++oh)
    pool_row<double, 0>(plane, oh, vals + oh * g.out_w, idx ? idx + oh * g.out_w : nullptr, g);
}

}  // namespace

bool CpuBackend::max_pool2d(const Strided& x, const Strided& values, const Strided& indices,
                            const ConvGeometry& g) {
  VT_ASSERT(x.shape.size() == 4 && x.is_contiguous());
  VT_ASSERT(values.data != nullptr);
  const int64_t planes = x.shape[0] * x.shape[1], HW = g.height * g.width;
  const int64_t L = g.out_h * g.out_w;
  VT_ASSERT(!indices.data || (indices.is_contiguous() && indices.numel() == planes * L &&
                              indices.dtype == DType::Int64));
  VT_ASSERT(values.is_contiguous() && values.numel() == planes * L && values.dtype == x.dtype);
  dispatch_float(x.dtype, "max_pool2d", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* vp = values.ptr<T>();
    int64_t* ip = indices.data ? indices.ptr<int64_t>() : nullptr;
    parallel_for(planes, L * g.kernel_h * g.kernel_w, [&](int64_t p) {
      T* v = vp + p * L;
      int64_t* i = ip ? ip + p * L : nullptr;
      if constexpr (std::is_same_v<T, float>)
        pool_rows_f32(xp + p * HW, v, i, g);
      else
        pool_rows_f64(xp + p * HW, v, i, g);
    });
  });
  return true;
}

}  // namespace vitrine::cpu
