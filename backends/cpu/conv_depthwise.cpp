// Depthwise convolution (groups = input channels, PyTorch's Conv2d(C, m C, k, groups=C)): output
// channel co filters input channel c = co / m alone with its own kh x kw taps, so there is no
// product to give a GEMM; these are direct loops. x [B, C, H, W] (any strides), w [m C, kh, kw],
// y and dy [B, m C, OH, OW] contiguous, with (o = (oh, ow), tap (i, j) reading input pixel
// p(o, i, j) = (oh s_h - pad_h + i d_h, ow s_w - pad_w + j d_w), inside the image only):
//   y[b, co, o]   = bias[co] + sum_{i,j} w[co, i, j] x[b, c, p(o, i, j)]
//   dx[b, c, p]  += sum over co of c's, (i, j) and the o reading p: w[co, i, j] dy[b, co, o]
//   dw[co, i, j]  = sum_b sum_o dy[b, co, o] x[b, c, p(o, i, j)]
// For each tap the valid outputs are one rectangle (valid_range), so the inner loops run along
// an output row without a bounds test. The forward and dx run in parallel over (b, channel); dw
// over co, each summing its batch in order: results do not depend on the thread count.
#include <algorithm>

#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {

struct Tap {
  int64_t i, j, oh_lo, oh_hi, ow_lo, ow_hi;
};

/// Every tap with its rectangle of valid outputs.
std::vector<Tap> taps_of(const ConvGeometry& g) {
  std::vector<Tap> taps;
  for (int64_t i = 0; i < g.kernel_h; ++i)
    for (int64_t j = 0; j < g.kernel_w; ++j) {
      const auto [oh_lo, oh_hi] =
          valid_range(i * g.dilation_h, g.height, g.stride_h, g.pad_h, g.out_h);
      const auto [ow_lo, ow_hi] =
          valid_range(j * g.dilation_w, g.width, g.stride_w, g.pad_w, g.out_w);
      taps.push_back({i, j, oh_lo, oh_hi, ow_lo, ow_hi});
    }
  return taps;
}

}  // namespace

bool CpuBackend::depthwise_conv2d(const Strided& x, const Strided& w, const Strided& bias,
                                  const Strided& y, const ConvGeometry& g) {
  const int64_t B = x.shape[0], C = x.shape[1], Cout = w.shape[0], m = Cout / C;
  const int64_t L = g.out_h * g.out_w, kk = g.kernel_h * g.kernel_w;
  VT_ASSERT(Cout == m * C && w.is_contiguous() && y.is_contiguous());
  const std::vector<Tap> taps = taps_of(g);
  const int64_t xsb = x.strides[0], xsc = x.strides[1], xsh = x.strides[2], xsw = x.strides[3];
  dispatch_float(x.dtype, "conv2d (depthwise)", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    const T* wp = w.ptr<T>();
    const T* bp = bias.data ? bias.ptr<T>() : nullptr;
    T* yp = y.ptr<T>();
    parallel_for(B * Cout, L * kk, [&](int64_t r) {
      const int64_t b = r / Cout, co = r % Cout, c = co / m;
      T* out = yp + r * L;
      std::fill(out, out + L, bp ? bp[co] : T(0));
      const T* in = xp + b * xsb + c * xsc;
      for (const Tap& t : taps) {
        const T wt = wp[co * kk + t.i * g.kernel_w + t.j];
        const int64_t n = t.ow_hi - t.ow_lo, step = g.stride_w * xsw;
        for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
          const T* src = in + (oh * g.stride_h - g.pad_h + t.i * g.dilation_h) * xsh +
                         (t.ow_lo * g.stride_w - g.pad_w + t.j * g.dilation_w) * xsw;
          T* dst = out + oh * g.out_w + t.ow_lo;
          if (step == 1) {
#pragma omp simd
            for (int64_t k = 0; k < n; ++k) dst[k] += wt * src[k];
          } else {
            for (int64_t k = 0; k < n; ++k) dst[k] += wt * src[k * step];
          }
        }
      }
    });
  });
  return true;
}

bool CpuBackend::depthwise_conv2d_backward(const Strided& x, const Strided& w, const Strided& dy,
                                           const Strided& dx, const Strided& dw,
                                           const ConvGeometry& g) {
  const int64_t B = x.shape[0], C = x.shape[1], Cout = w.shape[0], m = Cout / C;
  const int64_t L = g.out_h * g.out_w, kk = g.kernel_h * g.kernel_w, HW = g.height * g.width;
  VT_ASSERT(Cout == m * C && w.is_contiguous() && dy.is_contiguous());
  VT_ASSERT(!dx.data || dx.is_contiguous());
  const std::vector<Tap> taps = taps_of(g);
  const int64_t xsb = x.strides[0], xsc = x.strides[1], xsh = x.strides[2], xsw = x.strides[3];
  dispatch_float(x.dtype, "conv2d_backward (depthwise)", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    const T* wp = w.ptr<T>();
    const T* gp = dy.ptr<T>();
    if (dx.data) {
      T* dxp = dx.ptr<T>();
      parallel_for(B * C, HW * m * kk, [&](int64_t r) {  // one input plane per task
        const int64_t b = r / C, c = r % C;
        T* plane = dxp + r * HW;
        std::fill(plane, plane + HW, T(0));
        for (int64_t co = c * m; co < (c + 1) * m; ++co) {
          const T* grad = gp + (b * Cout + co) * L;
          for (const Tap& t : taps) {
            const T wt = wp[co * kk + t.i * g.kernel_w + t.j];
            const int64_t n = t.ow_hi - t.ow_lo;
            for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
              T* dst = plane + (oh * g.stride_h - g.pad_h + t.i * g.dilation_h) * g.width +
                       (t.ow_lo * g.stride_w - g.pad_w + t.j * g.dilation_w);
              const T* src = grad + oh * g.out_w + t.ow_lo;
              for (int64_t k = 0; k < n; ++k) dst[k * g.stride_w] += wt * src[k];
            }
          }
        }
      });
    }
    if (dw.data) {
      T* dwp = dw.ptr<T>();
      parallel_for(Cout, B * L * kk, [&](int64_t co) {
        const int64_t c = co / m;
        for (const Tap& t : taps) {
          T s = 0;
          const int64_t n = t.ow_hi - t.ow_lo, step = g.stride_w * xsw;
          for (int64_t b = 0; b < B; ++b) {
            const T* in = xp + b * xsb + c * xsc;
            const T* grad = gp + (b * Cout + co) * L;
            for (int64_t oh = t.oh_lo; oh < t.oh_hi; ++oh) {
              const T* src = in + (oh * g.stride_h - g.pad_h + t.i * g.dilation_h) * xsh +
                             (t.ow_lo * g.stride_w - g.pad_w + t.j * g.dilation_w) * xsw;
              const T* gr = grad + oh * g.out_w + t.ow_lo;
              T row = 0;
              if (step == 1) {
#pragma omp simd reduction(+ : row)
                for (int64_t k = 0; k < n; ++k) row += gr[k] * src[k];
              } else {
                for (int64_t k = 0; k < n; ++k) row += gr[k] * src[k * step];
              }
              s += row;
            }
          }
          dwp[co * kk + t.i * g.kernel_w + t.j] = s;
        }
      });
    }
  });
  return true;
}

}  // namespace vitrine::cpu
