// CPU im2col / col2im for one image, the two halves of convolution as a GEMM (ops/conv.cpp).
// x: [C, H, W] (any strides); cols: [C * kh * kw, out_h * out_w], each row contiguous (rows
// ld = cols.strides[0] >= out_h * out_w apart, so that a chunk's images can lie side by side), row
// r = (c * kh + i) * kw + j holding x[c, oh * stride_h - pad_h + i dilation_h, ow * stride_w -
// pad_w + j dilation_w] for every output position (oh, ow), 0 where that falls in the padding.
// col2im is the adjoint: dx = 0, then every cols entry is added back to the pixel it came from.
#include <algorithm>
#include <utility>
#include <vector>

#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

void CpuBackend::im2col(const Strided& x, const Strided& cols, const ConvGeometry& g) {
  VT_ASSERT(x.shape.size() == 3 && cols.shape.size() == 2);
  VT_ASSERT(x.shape[0] == g.channels && x.shape[1] == g.height && x.shape[2] == g.width);
  const int64_t OW = g.out_w, L = g.out_h * g.out_w;
  const int64_t rows = g.channels * g.kernel_h * g.kernel_w;
  VT_ASSERT(cols.shape[0] == rows && cols.shape[1] == L);
  const int64_t ld = cols.strides[0];
  VT_ASSERT((cols.strides[1] == 1 || L <= 1) && (ld >= L || rows <= 1));
  const int64_t xsc = x.strides[0], xsh = x.strides[1], xsw = x.strides[2];
  // The valid window of each kernel offset (i, j): the same for every channel, so computed once.
  struct Window {
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  };
  std::vector<Window> win(static_cast<size_t>(g.kernel_h * g.kernel_w));
  for (int64_t i = 0; i < g.kernel_h; ++i)
    for (int64_t j = 0; j < g.kernel_w; ++j) {
      const auto [oh_lo, oh_hi] =
          valid_range(i * g.dilation_h, g.height, g.stride_h, g.pad_h, g.out_h);
      const auto [ow_lo, ow_hi] = valid_range(j * g.dilation_w, g.width, g.stride_w, g.pad_w, OW);
      win[i * g.kernel_w + j] = {oh_lo, oh_hi, ow_lo, ow_hi};
    }
  dispatch_float(x.dtype, "im2col", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* cp = cols.ptr<T>();
    // One row of cols per (c, i, j): [out_h, out_w], zero outside the valid window. The rows of
    // a small map are short (7 elements on a 7x7 grid): plain loops, not memset/memmove calls.
    parallel_for(rows, L, [&](int64_t r) {
      const int64_t ij = r % (g.kernel_w * g.kernel_h), c = r / (g.kernel_w * g.kernel_h);
      const int64_t i = ij / g.kernel_w, j = ij % g.kernel_w;
      const Window w = win[ij];
      T* row = cp + r * ld;
      for (int64_t l = 0; l < w.oh_lo * OW; ++l) row[l] = T(0);
      for (int64_t l = w.oh_hi * OW; l < L; ++l) row[l] = T(0);
      const int64_t step = g.stride_w * xsw, n = w.ow_hi - w.ow_lo;
      for (int64_t oh = w.oh_lo; oh < w.oh_hi; ++oh) {
        T* out = row + oh * OW;
        for (int64_t k = 0; k < w.ow_lo; ++k) out[k] = T(0);
        for (int64_t k = w.ow_hi; k < OW; ++k) out[k] = T(0);
        const T* in = xp + c * xsc + (oh * g.stride_h - g.pad_h + i * g.dilation_h) * xsh +
                      (w.ow_lo * g.stride_w - g.pad_w + j * g.dilation_w) * xsw;
        T* o = out + w.ow_lo;
        if (step == 1) {
#pragma omp simd
          for (int64_t k = 0; k < n; ++k) o[k] = in[k];
        } else {
          for (int64_t k = 0; k < n; ++k) o[k] = in[k * step];
        }
      }
    });
  });
}

void CpuBackend::col2im(const Strided& cols, const Strided& dx, const ConvGeometry& g) {
  VT_ASSERT(dx.shape.size() == 3 && cols.shape.size() == 2);
  VT_ASSERT(dx.shape[0] == g.channels && dx.shape[1] == g.height && dx.shape[2] == g.width);
  const int64_t OW = g.out_w, L = g.out_h * g.out_w, kk = g.kernel_h * g.kernel_w;
  VT_ASSERT(cols.shape[0] == g.channels * kk && cols.shape[1] == L);
  const int64_t ld = cols.strides[0];
  VT_ASSERT((cols.strides[1] == 1 || L <= 1) && (ld >= L || cols.shape[0] <= 1));
  const int64_t dsc = dx.strides[0], dsh = dx.strides[1], dsw = dx.strides[2];
  dispatch_float(dx.dtype, "col2im", [&]<typename T>() {
    const T* cp = cols.ptr<T>();
    T* dp = dx.ptr<T>();
    // One channel per task: its kh * kw rows of cols write only dx[c] ([H, W]), so there are no
    // races and the summation order is fixed.
    parallel_for(g.channels, kk * L, [&](int64_t c) {
      T* dc = dp + c * dsc;
      for (int64_t h = 0; h < g.height; ++h)
        for (int64_t w = 0; w < g.width; ++w) dc[h * dsh + w * dsw] = T(0);
      for (int64_t i = 0; i < g.kernel_h; ++i) {
        const auto [oh_lo, oh_hi] =
            valid_range(i * g.dilation_h, g.height, g.stride_h, g.pad_h, g.out_h);
        for (int64_t j = 0; j < g.kernel_w; ++j) {
          const auto [ow_lo, ow_hi] =
              valid_range(j * g.dilation_w, g.width, g.stride_w, g.pad_w, OW);
          const T* row = cp + ((c * g.kernel_h + i) * g.kernel_w + j) * ld;
          const int64_t step = g.stride_w * dsw, n = ow_hi - ow_lo;
          for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            const T* in = row + oh * OW + ow_lo;
            T* out = dc + (oh * g.stride_h - g.pad_h + i * g.dilation_h) * dsh +
                     (ow_lo * g.stride_w - g.pad_w + j * g.dilation_w) * dsw;
            for (int64_t k = 0; k < n; ++k) out[k * step] += in[k];
          }
        }
      }
    });
  });
}

}  // namespace vitrine::cpu
