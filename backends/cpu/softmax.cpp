// CPU softmax / log_softmax over the last dim, and their backward. All operands contiguous and of
// one shape, viewed as [R, C] (C = the last dim; a 0-dim tensor is one row of one). Rows run in
// parallel; each row is computed by one thread in a fixed order, so results do not depend on the
// thread count. Float32 softmax and log_softmax run the vectorised row kernels of simd.h (sums in
// float, in SIMD lanes); float64 sums in double. The max is subtracted before exp (no overflow); as
// in PyTorch, a row holding NaN or +inf, or only -inf, gives NaN.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {
/// A contiguous tensor reduced over its last dim, seen as [rows, cols].
struct RowsCols {
  int64_t rows, cols;
};
RowsCols rows_cols(const Strided& t) {
  const int64_t c = t.shape.empty() ? 1 : t.shape.back();
  return {c == 0 ? 0 : t.numel() / c, c};
}
}  // namespace

// x, y: [R, C]
void CpuBackend::softmax(const Strided& x, const Strided& y, bool log) {
  VT_ASSERT(x.is_contiguous() && y.is_contiguous() && x.shape == y.shape && x.dtype == y.dtype);
  const RowsCols rc = rows_cols(x);
  const int64_t rows = rc.rows, cols = rc.cols;
  if (x.dtype == DType::Float32) {  // the vectorised row kernels (sums in float)
    parallel_for(rows, 8 * cols, [&](int64_t r) {
      if (log)
        simd::log_softmax_row(x.ptr<float>() + r * cols, y.ptr<float>() + r * cols, cols);
      else
        simd::softmax_rows(x.ptr<float>() + r * cols, y.ptr<float>() + r * cols, 1, cols, 1.0f);
    });
    return;
  }
  dispatch_float(x.dtype, log ? "log_softmax" : "softmax", [&]<typename T>() {
    parallel_for(rows, cols, [&](int64_t r) {
      const T* xr = x.ptr<T>() + r * cols;
      T* yr = y.ptr<T>() + r * cols;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < cols; ++c)
        if (xr[c] > m) m = xr[c];  // a NaN is skipped here but propagates through the sum
      double s = 0;
      if (log) {
        for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(xr[c] - m));
        const T shift = m + static_cast<T>(std::log(s));
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - shift;
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          yr[c] = std::exp(xr[c] - m);
          s += yr[c];
        }
        const T inv = static_cast<T>(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
      }
    });
  });
}

// y, dy, dx: [R, C]. softmax: dx = y * (dy - sum(dy * y)); log: dx = dy - exp(y) * sum(dy).
void CpuBackend::softmax_backward(const Strided& y, const Strided& dy, const Strided& dx,
                                  bool log) {
  VT_ASSERT(y.is_contiguous() && dy.is_contiguous() && dx.is_contiguous());
  VT_ASSERT(y.shape == dy.shape && y.shape == dx.shape && y.dtype == dy.dtype &&
            y.dtype == dx.dtype);
  const RowsCols rc = rows_cols(y);
  const int64_t rows = rc.rows, cols = rc.cols;
  if (y.dtype == DType::Float32) {
    parallel_for(rows, 4 * cols, [&](int64_t r) {
      const float *yr = y.ptr<float>() + r * cols, *gr = dy.ptr<float>() + r * cols;
      float* dr = dx.ptr<float>() + r * cols;
      if (log)
        simd::log_softmax_backward_row(yr, gr, dr, cols);
      else
        simd::softmax_backward_row(yr, gr, dr, cols);
    });
    return;
  }
  dispatch_float(y.dtype, log ? "log_softmax_backward" : "softmax_backward", [&]<typename T>() {
    parallel_for(rows, cols, [&](int64_t r) {
      const T* yr = y.ptr<T>() + r * cols;
      const T* gr = dy.ptr<T>() + r * cols;
      T* dr = dx.ptr<T>() + r * cols;
      double s = 0;
      if (log) {
        for (int64_t c = 0; c < cols; ++c) s += gr[c];
        const T st = static_cast<T>(s);
        for (int64_t c = 0; c < cols; ++c) dr[c] = gr[c] - std::exp(yr[c]) * st;
      } else {
        for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(gr[c]) * yr[c];
        const T st = static_cast<T>(s);
        for (int64_t c = 0; c < cols; ++c) dr[c] = yr[c] * (gr[c] - st);
      }
    });
  });
}

}  // namespace vitrine::cpu
