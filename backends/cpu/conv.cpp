// CPU im2col / col2im for one image, the two halves of convolution as a GEMM (ops/conv.cpp).
// x: [C, H, W] (any strides); cols: [C * kh * kw, out_h * out_w], each row contiguous (rows
// ld = cols.strides[0] >= out_h * out_w apart, so that a chunk's images can lie side by side), row
// r = (c * kh + i) * kw + j holding x[c, oh * stride_h - pad_h + i dilation_h, ow * stride_w -
// pad_w + j dilation_w] for every output position (oh, ow), 0 where that falls in the padding.
// col2im is the adjoint: dx = 0, then every cols entry is added back to the pixel it came from.
//
// float32 at column stride 1 or 2 (a ResNet's every convolution) takes the AVX-512 im2col rows
// below where the CPU has them: each output row of a cols row is 16 lanes at a time, a masked
// load that reads the valid pixels and gives 0 for the padding, with no branch and no call per
// row (the plain loops' short zero runs became memset calls); col2im at column stride 1 is a
// gather of the same kind.
#include <algorithm>
#include <utility>
#include <vector>

#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/loops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VT_CONV_AVX512 1
#endif

namespace vitrine::cpu {

namespace {

/// The lanes l of a 16-lane block starting at k0 with lo <= k0 + l < hi.
inline uint32_t lanes(int64_t k0, int64_t lo, int64_t hi) {
  const int64_t a = std::clamp<int64_t>(lo - k0, 0, 16), b = std::clamp<int64_t>(hi - k0, 0, 16);
  return b <= a ? 0u : static_cast<uint32_t>(((uint64_t{1} << b) - 1) & ~((uint64_t{1} << a) - 1));
}

/// Output blocks of 16 columns a row of cols has at most on the AVX-512 path (OW <= 1024).
constexpr int64_t kMaxBlocks = 64;

#ifdef VT_CONV_AVX512
/// One cols row of one image at column stride S (1 or 2): out[oh OW + ow] = src(oh)[S ow] for ow
/// in [ow_lo, ow_hi) and oh in [oh_lo, oh_hi), 0 elsewhere, where src(oh) = base + oh row_step
/// is the input row that output row oh reads, shifted so that column ow is src(oh)[S ow] (only
/// the valid columns are ever read: masked loads). The masks are the same for every output row,
/// so they are made once. At stride 2 a block's 16 outputs are the even lanes of 32 inputs,
/// picked by one permute.
template <int S>
__attribute__((target("avx512f"))) void im2col_row_avx512(const float* base, int64_t row_step,
                                                          int64_t OH, int64_t OW, int64_t oh_lo,
                                                          int64_t oh_hi, int64_t ow_lo,
                                                          int64_t ow_hi, float* out) {
  const int64_t blocks = (OW + 15) / 16;
  __mmask16 store[kMaxBlocks], load[kMaxBlocks][S];
  for (int64_t k = 0; k < blocks; ++k) {
    store[k] = static_cast<__mmask16>(lanes(16 * k, 0, OW));
    const uint32_t m = lanes(16 * k, ow_lo, ow_hi);  // the outputs that read the image
    for (int h = 0; h < S; ++h) {
      uint32_t bits = 0;  // input lane t of vector h is output (16 h + t) / S: its even lanes
      for (int t = 0; t < 16; t += S)
        if (m >> ((16 * h + t) / S) & 1u) bits |= 1u << t;
      load[k][h] = static_cast<__mmask16>(bits);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t oh = 0; oh < OH; ++oh) {
    float* o = out + oh * OW;
    if (oh < oh_lo || oh >= oh_hi) {
      for (int64_t k = 0; k < blocks; ++k) _mm512_mask_storeu_ps(o + 16 * k, store[k], zero);
      continue;
    }
    const float* src = base + oh * row_step;
    for (int64_t k = 0; k < blocks; ++k) {
      __m512 v;
      if constexpr (S == 1) {
        v = _mm512_maskz_loadu_ps(load[k][0], src + 16 * k);
      } else {
        const __m512 lo = _mm512_maskz_loadu_ps(load[k][0], src + 32 * k);
        const __m512 hi = _mm512_maskz_loadu_ps(load[k][1], src + 32 * k + 16);
        v = _mm512_permutex2var_ps(lo, even, hi);
      }
      _mm512_mask_storeu_ps(o + 16 * k, store[k], v);
    }
  }
}

/// col2im of one channel at unit column stride, as a gather: each 16-pixel block of dx[c] ([H, W],
/// rows dsh apart) is the sum over the taps (i, j), in the plain loop's order, of the cols
/// entries that read it, loaded from row (c, i, j) (cols_c + (i kw + j) ld) with the lanes whose
/// output column falls outside [0, OW) masked off; then stored once (every pixel written).
__attribute__((target("avx512f"))) void col2im_channel_avx512(const float* cols_c, int64_t ld,
                                                              const ConvGeometry& g, float* dc,
                                                              int64_t dsh) {
  const int64_t OW = g.out_w;
  for (int64_t h = 0; h < g.height; ++h) {
    for (int64_t w0 = 0; w0 < g.width; w0 += 16) {
      const __mmask16 store = static_cast<__mmask16>(lanes(w0, 0, g.width));
      __m512 acc = _mm512_setzero_ps();
      for (int64_t i = 0; i < g.kernel_h; ++i) {
        const int64_t t = h + g.pad_h - i * g.dilation_h;  // oh stride_h
        if (t < 0 || t % g.stride_h != 0 || t / g.stride_h >= g.out_h) continue;
        const float* rows_i = cols_c + i * g.kernel_w * ld + (t / g.stride_h) * OW;
        for (int64_t j = 0; j < g.kernel_w; ++j) {
          // Pixel w reads output column ow = w + pad_w - j dilation_w.
          const int64_t shift = g.pad_w - j * g.dilation_w;
          const __mmask16 m = store & static_cast<__mmask16>(lanes(w0, -shift, OW - shift));
          acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, rows_i + j * ld + w0 + shift));
        }
      }
      _mm512_mask_storeu_ps(dc + h * dsh + w0, store, acc);
    }
  }
}
#endif

/// Whether the AVX-512 row kernels run here.
bool rows_avx512() {
#ifdef VT_CONV_AVX512
  static const bool on = cpu_has_avx512();
  return on;
#else
  return false;
#endif
}

}  // namespace

bool im2col_rows_f32_runs(const Strided& x, const ConvGeometry& g) {
  return x.dtype == DType::Float32 && (g.stride_w == 1 || g.stride_w == 2) &&
         x.strides.back() == 1 && g.out_w <= 16 * kMaxBlocks && rows_avx512();
}

bool im2col_rows_f32(const Strided& x, float* cols, int64_t ld, const ConvGeometry& g, int64_t oh0,
                     int64_t oh1) {
  const int64_t OW = g.out_w, rows = g.channels * g.kernel_h * g.kernel_w, n = oh1 - oh0;
  const int64_t xsc = x.strides[0], xsh = x.strides[1];
  if (!im2col_rows_f32_runs(x, g)) return false;
#ifdef VT_CONV_AVX512
  const float* xp = x.ptr<float>();
  parallel_for(rows, n * OW, [&](int64_t r) {
    const int64_t ij = r % (g.kernel_w * g.kernel_h), c = r / (g.kernel_w * g.kernel_h);
    const int64_t i = ij / g.kernel_w, j = ij % g.kernel_w;
    const auto [oh_lo, oh_hi] =
        valid_range(i * g.dilation_h, g.height, g.stride_h, g.pad_h, g.out_h);
    const auto [ow_lo, ow_hi] = valid_range(j * g.dilation_w, g.width, g.stride_w, g.pad_w, OW);
    // Output row oh reads input row oh stride_h - pad_h + i dilation_h, column ow stride_w -
    // pad_w + j dilation_w (pointer arithmetic only: the masked loads read the valid columns
    // alone); this call's rows start at oh0.
    const float* base = xp + c * xsc + (oh0 * g.stride_h + i * g.dilation_h - g.pad_h) * xsh +
                        (j * g.dilation_w - g.pad_w);
    const int64_t lo = std::clamp<int64_t>(oh_lo - oh0, 0, n);
    const int64_t hi = std::clamp<int64_t>(oh_hi - oh0, 0, n);
    if (g.stride_w == 1)
      im2col_row_avx512<1>(base, g.stride_h * xsh, n, OW, lo, hi, ow_lo, ow_hi, cols + r * ld);
    else
      im2col_row_avx512<2>(base, g.stride_h * xsh, n, OW, lo, hi, ow_lo, ow_hi, cols + r * ld);
  });
#endif
  return true;
}

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
  if (x.dtype == DType::Float32 && im2col_rows_f32(x, cols.ptr<float>(), ld, g, 0, g.out_h)) return;
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
  const bool avx512 = rows_avx512();
  dispatch_float(dx.dtype, "col2im", [&]<typename T>() {
    const T* cp = cols.ptr<T>();
    T* dp = dx.ptr<T>();
    // One channel per task: its kh * kw rows of cols write only dx[c] ([H, W]), so there are no
    // races and the summation order is fixed.
    parallel_for(g.channels, kk * L, [&](int64_t c) {
      T* dc = dp + c * dsc;
#ifdef VT_CONV_AVX512
      if constexpr (std::is_same_v<T, float>) {
        if (g.stride_w == 1 && dsw == 1 && avx512) {
          col2im_channel_avx512(cp + c * kk * ld, ld, g, dc, dsh);
          return;
        }
      }
#endif
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
