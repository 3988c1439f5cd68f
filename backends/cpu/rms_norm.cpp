// CPU RMS norm over the last dim (ops::rms_norm). x, y, dy, dx: contiguous [R, C]; w, dw: [C]
// (absent when data is null); rstd: [R], x's dtype. A row's sums accumulate in double (float32
// included); the elementwise passes run in x's dtype, in the composition's order (y = (x rstd) w).
// Rows run in parallel; dw is summed per block of rows (their number fixed by the shape) in double
// and the block partials are added in block order, so every result is independent of the number
// of threads.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {
/// At most this many row blocks hold dw partials (bounds their memory to 256 * C doubles).
constexpr int64_t kMaxRowBlocks = 256;
/// A row block holds at least this many elements (fewer partials to add when rows are long).
constexpr int64_t kBlockElements = 32768;
/// Columns of dw summed over the blocks per task.
constexpr int64_t kColumnChunk = 512;
}  // namespace

// rstd = 1 / sqrt(mean(x^2) + eps), y = x rstd w
void CpuBackend::rms_norm(const Strided& x, const Strided& w, double eps, const Strided& y,
                          const Strided& rstd) {
  VT_ASSERT(x.shape.size() == 2 && x.is_contiguous() && y.is_contiguous() && x.shape == y.shape);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  VT_ASSERT(rstd.numel() == rows);
  VT_ASSERT(!w.data || w.numel() == cols);
  dispatch_float(x.dtype, "rms_norm", [&]<typename T>() {
    const T* wp = w.data ? w.ptr<T>() : nullptr;
    parallel_for(rows, 2 * cols, [&](int64_t r) {
      const T* xr = x.ptr<T>() + r * cols;
      T* yr = y.ptr<T>() + r * cols;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
      const T k = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(cols) + eps));
      rstd.ptr<T>()[r] = k;
      if (wp) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * k * wp[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * k;
      }
    });
  });
}

// xhat = x rstd, g = dy w (dy when w is absent):
//   dx = rstd (g - xhat mean_c(g xhat)) = rstd g - x (rstd^3 mean_c(g x))
//   dw = sum_r dy xhat     (written, not added to)
void CpuBackend::rms_norm_backward(const Strided& x, const Strided& w, const Strided& rstd,
                                   const Strided& dy, const Strided& dx, const Strided& dw) {
  VT_ASSERT(x.shape.size() == 2 && x.is_contiguous() && dy.is_contiguous() && x.shape == dy.shape);
  VT_ASSERT(!dx.data || (dx.is_contiguous() && dx.shape == x.shape));
  const int64_t rows = x.shape[0], cols = x.shape[1];
  VT_ASSERT(rstd.numel() == rows);
  VT_ASSERT(!w.data || w.numel() == cols);
  VT_ASSERT(!dw.data || dw.numel() == cols);
  // Blocks depend on the shape only, never on the thread count.
  const int64_t per_block = std::max<int64_t>(
      {1, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks, kBlockElements / std::max<int64_t>(cols, 1)});
  const int64_t blocks = (rows + per_block - 1) / per_block;
  // [blocks, cols] partials of dw, from the caching allocator (a fresh vector of this size is
  // fresh pages every call), zeroed by each block's task.
  const StoragePtr pw_s = dw.data ? allocate(blocks * cols * sizeof(double)) : nullptr;
  double* pw = pw_s ? static_cast<double*>(pw_s->data) : nullptr;

  dispatch_float(x.dtype, "rms_norm_backward", [&]<typename T>() {
    const T* wp = w.data ? w.ptr<T>() : nullptr;
    parallel_for(blocks, per_block * cols * 3, [&](int64_t blk) {
      double* pwb = dw.data ? pw + blk * cols : nullptr;
      if (pwb) std::fill_n(pwb, cols, 0.0);
      const int64_t end = std::min(rows, (blk + 1) * per_block);
      for (int64_t r = blk * per_block; r < end; ++r) {
        const T* xr = x.ptr<T>() + r * cols;
        const T* gr = dy.ptr<T>() + r * cols;
        const T k = rstd.ptr<T>()[r];
        if (dx.data) {
          double sgx = 0;  // sum g x
          if (wp) {
#pragma omp simd reduction(+ : sgx)
            for (int64_t c = 0; c < cols; ++c)
              sgx += static_cast<double>(gr[c]) * wp[c] * static_cast<double>(xr[c]);
          } else {
#pragma omp simd reduction(+ : sgx)
            for (int64_t c = 0; c < cols; ++c) sgx += static_cast<double>(gr[c]) * xr[c];
          }
          const double kd = k;
          const T kb = static_cast<T>(kd * kd * kd * sgx / static_cast<double>(cols));
          T* dr = dx.ptr<T>() + r * cols;
          if (wp) {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) dr[c] = k * (gr[c] * wp[c]) - xr[c] * kb;
          } else {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) dr[c] = k * gr[c] - xr[c] * kb;
          }
        }
        if (pwb) {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c)
            pwb[c] += static_cast<double>(gr[c]) * static_cast<double>(xr[c] * k);
        }
      }
    });
    if (!dw.data) return;
    // dw[c] = the block partials of column c added in block order, a chunk of columns a task.
    const int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
    parallel_for(chunks, blocks * kColumnChunk, [&](int64_t k) {
      const int64_t c0 = k * kColumnChunk, n = std::min(kColumnChunk, cols - c0);
      double s[kColumnChunk] = {};
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const double* p = pw + blk * cols + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) s[c] += p[c];
      }
      for (int64_t c = 0; c < n; ++c) dw.ptr<T>()[c0 + c] = static_cast<T>(s[c]);
    });
  });
}

}  // namespace vitrine::cpu
