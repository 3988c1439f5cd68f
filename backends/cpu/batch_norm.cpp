// CPU batch normalisation kernels (backend.h; the op is ops/batch_norm.cpp), one pass over x
// each. x, dy, y: [B, C, L] contiguous; per-channel operands [C]. Channels run in parallel; one
// channel's sum goes over its B rows of L in order (float32: each row summed in float lanes,
// simd.h, the rows added in double; float64: double throughout), so every result is independent
// of the number of threads.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

struct Bcl {
  int64_t B, C, L;
};

Bcl bcl_of(const Strided& x) {
  VT_ASSERT(x.shape.size() == 3 && x.is_contiguous());
  return {x.shape[0], x.shape[1], x.shape[2]};
}

/// sum over b of row(b) (a row's sum of its L elements), in double.
template <typename RowSum>
double over_rows(int64_t B, RowSum&& row) {
  double s = 0;
  for (int64_t b = 0; b < B; ++b) s += row(b);
  return s;
}

}  // namespace

// mean[c] = sum x / n;  var[c] = sum (x - mean[c])^2 / n   (n = B L)
void CpuBackend::batch_norm_stats(const Strided& x, const Strided& mean, const Strided& var) {
  const Bcl dims = bcl_of(x);
  const int64_t B = dims.B, C = dims.C, L = dims.L;
  VT_ASSERT(mean.numel() == C && var.numel() == C);
  const double n = static_cast<double>(B * L);
  dispatch_float(x.dtype, "batch_norm", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    parallel_for(C, 2 * B * L, [&](int64_t c) {
      const auto row = [&](int64_t b) { return xp + (b * C + c) * L; };
      double mu, ss;
      if constexpr (std::is_same_v<T, float>) {
        mu = over_rows(B, [&](int64_t b) { return simd::sum_row(row(b), L); }) / n;
        const float m = static_cast<float>(mu);
        ss = over_rows(B, [&](int64_t b) { return simd::centered_sq_sum_row(row(b), m, L); });
      } else {
        mu = over_rows(B,
                       [&](int64_t b) {
                         double s = 0;
                         for (int64_t l = 0; l < L; ++l) s += row(b)[l];
                         return s;
                       }) /
             n;
        ss = over_rows(B, [&](int64_t b) {
          double s = 0;
          for (int64_t l = 0; l < L; ++l) s += (row(b)[l] - mu) * (row(b)[l] - mu);
          return s;
        });
      }
      mean.ptr<T>()[c] = static_cast<T>(mu);
      var.ptr<T>()[c] = static_cast<T>(ss / n);
    });
  });
}

// sum_dy[c] = sum dy;  sum_dy_xmu[c] = sum dy (x - mean[c])
void CpuBackend::batch_norm_backward_reduce(const Strided& x, const Strided& mean,
                                            const Strided& dy, const Strided& sum_dy,
                                            const Strided& sum_dy_xmu) {
  const Bcl dims = bcl_of(x);
  const int64_t B = dims.B, C = dims.C, L = dims.L;
  VT_ASSERT(dy.shape == x.shape && dy.is_contiguous() && mean.numel() == C);
  dispatch_float(x.dtype, "batch_norm_backward", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    const T* gp = dy.ptr<T>();
    parallel_for(C, 2 * B * L, [&](int64_t c) {
      const T m = mean.ptr<T>()[c];
      double s, d;
      if constexpr (std::is_same_v<T, float>) {
        s = over_rows(B, [&](int64_t b) { return simd::sum_row(gp + (b * C + c) * L, L); });
        d = over_rows(B, [&](int64_t b) {
          const int64_t o = (b * C + c) * L;
          return simd::centered_dot_row(xp + o, gp + o, m, L);
        });
      } else {
        s = d = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t o = (b * C + c) * L;
          for (int64_t l = 0; l < L; ++l) {
            s += gp[o + l];
            d += gp[o + l] * (xp[o + l] - m);
          }
        }
      }
      sum_dy.ptr<T>()[c] = static_cast<T>(s);
      sum_dy_xmu.ptr<T>()[c] = static_cast<T>(d);
    });
  });
}

// y = x a[c] (+ z zc[c]) + d[c]
void CpuBackend::channel_affine(const Strided& x, const Strided& a, const Strided& z,
                                const Strided& zc, const Strided& d, const Strided& y) {
  const Bcl dims = bcl_of(x);
  const int64_t B = dims.B, C = dims.C, L = dims.L;
  VT_ASSERT(y.shape == x.shape && y.is_contiguous() && a.numel() == C && d.numel() == C);
  VT_ASSERT(!z.data || (z.shape == x.shape && z.is_contiguous() && zc.numel() == C));
  dispatch_float(x.dtype, "batch_norm", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    const T* zp = z.data ? z.ptr<T>() : nullptr;
    T* yp = y.ptr<T>();
    parallel_for(B * C, 2 * L, [&](int64_t r) {
      const int64_t c = r % C, o = r * L;
      const T ac = a.ptr<T>()[c], dc = d.ptr<T>()[c];
      if constexpr (std::is_same_v<T, float>) {
        if (zp)
          simd::affine2_row(xp + o, ac, zp + o, zc.ptr<T>()[c], dc, yp + o, L);
        else
          simd::affine_row(xp + o, ac, dc, yp + o, L);
      } else {
        const T zcc = zp ? zc.ptr<T>()[c] : T(0);
        for (int64_t l = 0; l < L; ++l)
          yp[o + l] = zp ? xp[o + l] * ac + zp[o + l] * zcc + dc : xp[o + l] * ac + dc;
      }
    });
  });
}

// y = max((x a[c] + d[c]) + z, 0): batch norm's own rounding (affine_row), then the residual's
// add, as relu(batch_norm(x) + z) rounds them, so that the fused op gives the composition's bits.
void CpuBackend::channel_affine_relu(const Strided& x, const Strided& a, const Strided& d,
                                     const Strided& z, const Strided& y) {
  const Bcl dims = bcl_of(x);
  const int64_t B = dims.B, C = dims.C, L = dims.L;
  VT_ASSERT(y.shape == x.shape && y.is_contiguous() && a.numel() == C && d.numel() == C);
  VT_ASSERT(!z.data || (z.shape == x.shape && z.is_contiguous()));
  dispatch_float(x.dtype, "batch_norm_relu", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    const T* zp = z.data ? z.ptr<T>() : nullptr;
    T* yp = y.ptr<T>();
    parallel_for(B * C, 2 * L, [&](int64_t r) {  // one row at a time, in L1 for the second loop
      const int64_t c = r % C, o = r * L;
      const T ac = a.ptr<T>()[c], dc = d.ptr<T>()[c];
      T* row = yp + o;
      if constexpr (std::is_same_v<T, float>) {
        simd::affine_row(xp + o, ac, dc, row, L);
      } else {
        for (int64_t l = 0; l < L; ++l) row[l] = xp[o + l] * ac + dc;
      }
      const T* zr = zp ? zp + o : nullptr;
#pragma omp simd
      for (int64_t l = 0; l < L; ++l) {
        const T v = zr ? row[l] + zr[l] : row[l];
        row[l] = v > T(0) ? v : T(0);
      }
    });
  });
}

}  // namespace vitrine::cpu
