// CPU layer norm over the last dim. x, y, dy, dx: contiguous [R, C]; w, b, dw, db: [C] (absent
// when data is null); mean, rstd: [R], x's dtype. The variance is biased (divides by C), as in
// PyTorch. Statistics and row sums accumulate in double, except in the float32 kernels with
// weight and bias (simd.h: vectorised, row statistics in float, dw/db partials in float over 16
// rows, then in double). Rows run in parallel; dw/db are summed per fixed block of rows and the
// block partials are added in block order, so every result is independent of the number of
// threads.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {
/// At most this many row blocks hold dw/db partials (bounds their memory to 2 * 256 * C doubles).
constexpr int64_t kMaxRowBlocks = 256;
/// At least this many rows a block (a batch-invariant leaf has a few hundred rows).
constexpr int64_t kMinBlockRows = 16;
/// Columns of dw/db summed over the blocks per task.
constexpr int64_t kColumnChunk = 256;
}  // namespace

// y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps)
void CpuBackend::layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                            const Strided& y, const Strided& mean, const Strided& rstd) {
  VT_ASSERT(x.shape.size() == 2 && x.is_contiguous() && y.is_contiguous() && x.shape == y.shape);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  VT_ASSERT(mean.numel() == rows && rstd.numel() == rows);
  VT_ASSERT(!w.data || w.numel() == cols);
  VT_ASSERT(!b.data || b.numel() == cols);
  if (x.dtype == DType::Float32 && w.data && b.data) {  // the vectorised row kernel of simd.h
    parallel_for(rows, 3 * cols, [&](int64_t r) {
      simd::layer_norm_row(x.ptr<float>() + r * cols, w.ptr<float>(), b.ptr<float>(),
                           static_cast<float>(eps), y.ptr<float>() + r * cols,
                           mean.ptr<float>() + r, rstd.ptr<float>() + r, cols);
    });
    return;
  }
  dispatch_float(x.dtype, "layer_norm", [&]<typename T>() {
    const T* wp = w.data ? w.ptr<T>() : nullptr;
    const T* bp = b.data ? b.ptr<T>() : nullptr;
    parallel_for(rows, 3 * cols, [&](int64_t r) {
      const T* xr = x.ptr<T>() + r * cols;
      T* yr = y.ptr<T>() + r * cols;
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += xr[c];
      const double mu = s / static_cast<double>(cols);
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = xr[c] - mu;
        ss += d * d;
      }
      const double rs = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
      mean.ptr<T>()[r] = static_cast<T>(mu);
      rstd.ptr<T>()[r] = static_cast<T>(rs);
      const T m = static_cast<T>(mu), k = static_cast<T>(rs);
      for (int64_t c = 0; c < cols; ++c) {
        T v = (xr[c] - m) * k;
        if (wp) v *= wp[c];
        if (bp) v += bp[c];
        yr[c] = v;
      }
    });
  });
}

// xhat = (x - mean) * rstd, g = dy * w (dy when w is absent):
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
//   dw = sum_r dy * xhat,  db = sum_r dy     (written, not added to)
void CpuBackend::layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                                     const Strided& rstd, const Strided& dy, const Strided& dx,
                                     const Strided& dw, const Strided& db) {
  VT_ASSERT(x.shape.size() == 2 && x.is_contiguous() && dy.is_contiguous() && x.shape == dy.shape);
  VT_ASSERT(!dx.data || (dx.is_contiguous() && dx.shape == x.shape));
  const int64_t rows = x.shape[0], cols = x.shape[1];
  VT_ASSERT(mean.numel() == rows && rstd.numel() == rows);
  VT_ASSERT(!w.data || w.numel() == cols);
  VT_ASSERT(!dw.data || dw.numel() == cols);
  VT_ASSERT(!db.data || db.numel() == cols);
  const bool want_params = dw.data || db.data;
  // (a batch-invariant leaf of 8 images had been cut into blocks of 2 rows, each zeroing and
  // summing partials of its own)
  const int64_t per_block = std::max(kMinBlockRows, (rows + kMaxRowBlocks - 1) / kMaxRowBlocks);
  const int64_t blocks = (rows + per_block - 1) / per_block;
  // Partial sums of dw and db per row block: [blocks, cols] each. The float32 row kernel's own
  // partials, [blocks, 2, cols], added into pw/pb every 16 rows. From the caching allocator (a
  // fresh vector of this size is fresh pages every call) and zeroed by each block's task.
  const bool float_partials = want_params && x.dtype == DType::Float32 && w.data;
  const StoragePtr pw_s = want_params ? allocate(blocks * cols * sizeof(double)) : nullptr;
  const StoragePtr pb_s = want_params ? allocate(blocks * cols * sizeof(double)) : nullptr;
  const StoragePtr fp_s = float_partials ? allocate(blocks * 2 * cols * sizeof(float)) : nullptr;
  double* pw = pw_s ? static_cast<double*>(pw_s->data) : nullptr;
  double* pb = pb_s ? static_cast<double*>(pb_s->data) : nullptr;
  float* fp = fp_s ? static_cast<float*>(fp_s->data) : nullptr;

  dispatch_float(x.dtype, "layer_norm_backward", [&]<typename T>() {
    const T* wp = w.data ? w.ptr<T>() : nullptr;
    parallel_for(blocks, per_block * cols * 4, [&](int64_t blk) {
      double* pwb = want_params ? pw + blk * cols : nullptr;
      double* pbb = want_params ? pb + blk * cols : nullptr;
      if (want_params) {
        std::fill_n(pwb, cols, 0.0);
        std::fill_n(pbb, cols, 0.0);
      }
      const int64_t end = std::min(rows, (blk + 1) * per_block);
      if constexpr (std::is_same_v<T, float>) {
        if (wp) {  // the vectorised row kernel, its dw and db partials summed in float over
                   // up to kFloatRows rows, then added into the block's double sums
          constexpr int kFloatRows = 16;
          float* fw = float_partials ? fp + blk * 2 * cols : nullptr;
          float* fb = fw ? fw + cols : nullptr;
          if (fw) std::fill_n(fw, 2 * cols, 0.0f);
          int pending = 0;
          for (int64_t r = blk * per_block; r < end; ++r) {
            simd::layer_norm_backward_row(x.ptr<T>() + r * cols, wp, mean.ptr<T>()[r],
                                          rstd.ptr<T>()[r], dy.ptr<T>() + r * cols,
                                          dx.data ? dx.ptr<T>() + r * cols : nullptr, fw, fb, cols);
            if (fw && (++pending == kFloatRows || r + 1 == end)) {
              for (int64_t c = 0; c < cols; ++c) {
                pwb[c] += fw[c];
                pbb[c] += fb[c];
                fw[c] = fb[c] = 0;
              }
              pending = 0;
            }
          }
          return;
        }
      }
      for (int64_t r = blk * per_block; r < end; ++r) {
        const T* xr = x.ptr<T>() + r * cols;
        const T* gr = dy.ptr<T>() + r * cols;
        const double mu = mean.ptr<T>()[r], rs = rstd.ptr<T>()[r];
        if (dx.data) {
          double sg = 0, sgx = 0;  // sum g, sum g * xhat
          for (int64_t c = 0; c < cols; ++c) {
            const double g = wp ? static_cast<double>(gr[c]) * wp[c] : gr[c];
            sg += g;
            sgx += g * ((xr[c] - mu) * rs);
          }
          const double a = sg / static_cast<double>(cols), bb = sgx / static_cast<double>(cols);
          T* dr = dx.ptr<T>() + r * cols;
          for (int64_t c = 0; c < cols; ++c) {
            const double g = wp ? static_cast<double>(gr[c]) * wp[c] : gr[c];
            const double xhat = (xr[c] - mu) * rs;
            dr[c] = static_cast<T>(rs * (g - a - xhat * bb));
          }
        }
        if (want_params) {
          for (int64_t c = 0; c < cols; ++c) {
            pwb[c] += static_cast<double>(gr[c]) * ((xr[c] - mu) * rs);
            pbb[c] += gr[c];
          }
        }
      }
    });
    if (!want_params) return;
    // Each column's block partials added in block order, a chunk of columns a task (reading the
    // partials row by row rather than down a column).
    const int64_t chunks = (cols + kColumnChunk - 1) / kColumnChunk;
    parallel_for(chunks, blocks * kColumnChunk, [&](int64_t k) {
      const int64_t c0 = k * kColumnChunk, n = std::min(kColumnChunk, cols - c0);
      double sw[kColumnChunk] = {}, sb[kColumnChunk] = {};
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const double* qw = pw + blk * cols + c0;
        const double* qb = pb + blk * cols + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) {
          sw[c] += qw[c];
          sb[c] += qb[c];
        }
      }
      for (int64_t c = 0; c < n; ++c) {
        if (dw.data) dw.ptr<T>()[c0 + c] = static_cast<T>(sw[c]);
        if (db.data) db.ptr<T>()[c0 + c] = static_cast<T>(sb[c]);
      }
    });
  });
}

}  // namespace vitrine::cpu
