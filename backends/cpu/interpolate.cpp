// CPU resize kernels with PyTorch's CPU semantics (aten/src/ATen/native/UpSample.h and
// cpu/UpSampleKernel.cpp). x: [B, C, H, W] (any strides) -> y: [B, C, OH, OW] contiguous.
// Every mode is separable: output row oh reads a few input rows ih with weights wh, output
// column ow a few input columns iw with weights ww, and y[oh, ow] = sum wh * ww * x[ih, iw].
// The backward scatters dy through the same taps, so it is the exact adjoint of the forward.
//
// Per dim (in -> out), with `scale` = InterpGeometry's ratio (1 / scale_factor or in / out):
//   nearest : in == out: identity; out == 2 in: o >> 1; else min(floor(o * float(scale)), in - 1)
//   bilinear: in == out: identity; else src = align_corners ? s o : max(s (o + 0.5) - 0.5, 0),
//             i0 = min(floor(src), in - 1), l = clamp(src - i0, 0, 1), taps (i0, 1 - l), (i1, l)
//             with i1 = i0 + 1 clamped to in - 1
//   bicubic : src as bilinear without the clamp at 0, i0 and t as l, taps i0 - 1 .. i0 + 2
//             clamped to [0, in - 1] with Keys' cubic weights, A = -0.75
// where s = (in - 1) / (out - 1) with align_corners (0 when out == 1), else scale.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {

/// The taps of one dim: output index o reads index[o * n + k] with weight[o * n + k], k < n.
struct Taps {
  int n = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
};

// Keys' cubic convolution kernel for |x| <= 1 and 1 < |x| < 2.
double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

/// i0 = min(floor(src), in - 1) and the fraction clamped to [0, 1] (guard_index_and_lambda).
void floor_and_frac(double src, int64_t in, int64_t& i0, double& frac) {
  i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  frac = std::clamp(src - static_cast<double>(i0), 0.0, 1.0);
}

Taps make_taps(InterpMode mode, bool align_corners, double scale, int64_t in, int64_t out) {
  Taps t;
  t.n = mode == InterpMode::Nearest ? 1 : mode == InterpMode::Bilinear ? 2 : 4;
  t.index.resize(out * t.n);
  t.weight.resize(out * t.n);
  const double s = align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0) : scale;
  for (int64_t o = 0; o < out; ++o) {
    int64_t* idx = &t.index[o * t.n];
    double* w = &t.weight[o * t.n];
    if (mode == InterpMode::Nearest) {
      if (out == in)
        idx[0] = o;
      else if (out == 2 * in)
        idx[0] = o >> 1;
      else {  // float arithmetic, as PyTorch's nearest_neighbor_compute_source_index
        const float fs = static_cast<float>(scale);
        idx[0] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * fs)), in - 1);
      }
      w[0] = 1;
    } else if (mode == InterpMode::Bilinear) {
      if (out == in) {
        idx[0] = idx[1] = o;
        w[0] = 1;
        w[1] = 0;
        continue;
      }
      double src = align_corners ? s * double(o) : std::max(s * (double(o) + 0.5) - 0.5, 0.0);
      int64_t i0;
      double l;
      floor_and_frac(src, in, i0, l);
      idx[0] = i0;
      idx[1] = i0 < in - 1 ? i0 + 1 : i0;
      w[0] = 1 - l;
      w[1] = l;
    } else {
      constexpr double A = -0.75;
      double src = align_corners ? s * double(o) : s * (double(o) + 0.5) - 0.5;
      int64_t i0;
      double f;
      floor_and_frac(src, in, i0, f);
      w[0] = cubic2(f + 1, A);
      w[1] = cubic1(f, A);
      w[2] = cubic1(1 - f, A);
      w[3] = cubic2(2 - f, A);
      for (int k = 0; k < 4; ++k) idx[k] = std::clamp<int64_t>(i0 - 1 + k, 0, in - 1);
    }
  }
  return t;
}

struct Plan {
  Taps h, w;
};

Plan make_plan(const Dims& x_shape, const Dims& y_shape, const InterpGeometry& g) {
  return {make_taps(g.mode, g.align_corners, g.scale_h, x_shape[2], y_shape[2]),
          make_taps(g.mode, g.align_corners, g.scale_w, x_shape[3], y_shape[3])};
}

}  // namespace

void CpuBackend::interpolate(const Strided& x, const Strided& y, const InterpGeometry& g) {
  VT_ASSERT(x.shape.size() == 4 && y.shape.size() == 4 && y.is_contiguous());
  VT_ASSERT(x.shape[0] == y.shape[0] && x.shape[1] == y.shape[1] && x.dtype == y.dtype);
  const Plan p = make_plan(x.shape, y.shape, g);
  const int64_t C = x.shape[1], OH = y.shape[2], OW = y.shape[3];
  const int64_t sb = x.strides[0], sc = x.strides[1], sh = x.strides[2], sw = x.strides[3];
  const int nh = p.h.n, nw = p.w.n;
  dispatch_float(x.dtype, "interpolate", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* yp = y.ptr<T>();
    // One (b, c) plane per task: x[b, c] is [H, W], y[b, c] is [OH, OW].
    parallel_for(x.shape[0] * C, OH * OW * nh * nw, [&](int64_t bc) {
      const T* xc = xp + (bc / C) * sb + (bc % C) * sc;
      T* yc = yp + bc * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          for (int i = 0; i < nh; ++i) {
            const T* xr = xc + p.h.index[oh * nh + i] * sh;
            double row = 0;
            for (int j = 0; j < nw; ++j)
              row += p.w.weight[ow * nw + j] * static_cast<double>(xr[p.w.index[ow * nw + j] * sw]);
            acc += p.h.weight[oh * nh + i] * row;
          }
          yc[oh * OW + ow] = static_cast<T>(acc);
        }
      }
    });
  });
}

void CpuBackend::interpolate_backward(const Strided& dy, const Strided& dx,
                                      const InterpGeometry& g) {
  VT_ASSERT(dy.shape.size() == 4 && dx.shape.size() == 4 && dx.is_contiguous());
  VT_ASSERT(dx.shape[0] == dy.shape[0] && dx.shape[1] == dy.shape[1] && dx.dtype == dy.dtype);
  const Plan p = make_plan(dx.shape, dy.shape, g);
  const int64_t C = dx.shape[1], H = dx.shape[2], W = dx.shape[3];
  const int64_t OH = dy.shape[2], OW = dy.shape[3];
  const int64_t sb = dy.strides[0], sc = dy.strides[1], sh = dy.strides[2], sw = dy.strides[3];
  const int nh = p.h.n, nw = p.w.n;
  dispatch_float(dx.dtype, "interpolate_backward", [&]<typename T>() {
    const T* dyp = dy.ptr<T>();
    T* dxp = dx.ptr<T>();
    // One (b, c) plane per task: dy[b, c] is [OH, OW], dx[b, c] is [H, W]; tasks write disjoint
    // planes and each plane is summed in a fixed order.
    parallel_for(dx.shape[0] * C, OH * OW * nh * nw, [&](int64_t bc) {
      const T* dyc = dyp + (bc / C) * sb + (bc % C) * sc;
      T* dxc = dxp + bc * H * W;
      std::fill(dxc, dxc + H * W, T(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double d = static_cast<double>(dyc[oh * sh + ow * sw]);
          for (int i = 0; i < nh; ++i) {
            T* dr = dxc + p.h.index[oh * nh + i] * W;
            const double dh = p.h.weight[oh * nh + i] * d;
            for (int j = 0; j < nw; ++j)
              dr[p.w.index[ow * nw + j]] += static_cast<T>(p.w.weight[ow * nw + j] * dh);
          }
        }
      }
    });
  });
}

}  // namespace vitrine::cpu
