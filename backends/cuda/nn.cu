// CUDA fused neural-network kernels: softmax / log_softmax and their backward, layer norm and its
// backward, cross entropy (ignore_index, label smoothing) and its backward, and the attention's
// in-place scaled softmax and its backward. Semantics, formulas and accumulation precisions are
// those of the CPU reference (backends/cpu/softmax.cpp, layer_norm.cpp, cross_entropy.cpp,
// attention.cpp and the float32 row kernels of simd.cpp): where the CPU sums a float32 row in
// float, so does this file, and where it sums in double, so does this file. Only the order of the
// sums differs (a tree here, a sequence there), so results agree to rounding, not bit for bit.
//
// Layout: every operand is contiguous with the reduced dim last, viewed as [R, C]. A row is
// reduced by blockDim.x threads (one warp for rows up to 256 elements, up to 512 threads for long
// ones), thread t taking elements t, t + blockDim.x, ...; blockDim.y rows share a block. Sums are
// warp shuffles, then (a row over several warps) a shared-memory pass in warp order. Every
// thread of a row reads and writes only its own elements, so the in-place calls (y == x) are
// safe. Nothing uses atomics: every result is deterministic. layer_norm_backward's dw and db are
// a second kernel: 32 columns per block, each column summed over the rows in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/dispatch.cuh"
#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kRowBlockThreads = 256;  // threads of a block of short rows
constexpr int kMaxRowThreads = 512;    // threads of one long row
constexpr int kMaxWarps = 32;          // warps of a block, at most
constexpr int kTile = 32;              // columns of a dw/db block, and its threads per column
constexpr int64_t kMaxGrid = int64_t{1} << 20;  // grid-stride loops beyond this

// ---- device math, float and double -----------------------------------------------------------
__device__ inline float dexp(float v) { return expf(v); }
__device__ inline double dexp(double v) { return exp(v); }
__device__ inline double dlog(double v) { return log(v); }  // (sums in double only)
__device__ inline float dsqrt(float v) { return sqrtf(v); }
__device__ inline double dsqrt(double v) { return sqrt(v); }
/// The max that skips NaN (as the CPU's `if (x > m) m = x`).
__device__ inline float dmax(float a, float b) { return fmaxf(a, b); }
__device__ inline double dmax(double a, double b) { return fmax(a, b); }
/// a * b rounded once, never fused into a following add.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return dmax(a, b);
  }
};

/// v reduced over the 32 lanes of the warp; every lane gets lane 0's total.
template <typename A, typename Op>
__device__ A warp_reduce(A v, Op op) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  return __shfl_sync(kFullMask, v, 0);
}

/// v reduced over the blockDim.x threads of this thread's row (threadIdx.y); every thread of the
/// row gets the total. Every thread of the block must call it: a row over several warps
/// synchronises the block. The warps' totals are added in warp order (deterministic).
template <typename A, typename Op>
__device__ A row_reduce(A v, Op op) {
  __shared__ A part[kMaxWarps];
  v = warp_reduce(v, op);
  if (blockDim.x == kWarp) return v;
  const int warps = blockDim.x / kWarp;
  A* mine = part + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done with part
  if (threadIdx.x % kWarp == 0) mine[threadIdx.x / kWarp] = v;
  __syncthreads();
  A r = mine[0];
  for (int i = 1; i < warps; ++i) r = op(r, mine[i]);
  return r;
}

/// The first row of this block in a grid-stride loop over rows, and the stride.
__device__ inline int64_t first_row() { return blockIdx.x * static_cast<int64_t>(blockDim.y); }
__device__ inline int64_t row_stride() { return gridDim.x * static_cast<int64_t>(blockDim.y); }

/// A float32 or float64 statistic vector (layer norm's mean, rstd): [R].
struct Stat {
  void* data;
  bool f64;
  __device__ double load(int64_t i) const {
    return f64 ? static_cast<const double*>(data)[i]
               : static_cast<double>(static_cast<const float*>(data)[i]);
  }
  __device__ void store(int64_t i, double v) const {
    if (f64)
      static_cast<double*>(data)[i] = v;
    else
      static_cast<float*>(data)[i] = static_cast<float>(v);
  }
};

// ---- softmax ---------------------------------------------------------------------------------

/// x, y: [R, C] (y may be x). softmax: m = max, e = exp(x - m) (in T), y = e * (1 / sum e), the
/// sum in T (float32: the CPU's SIMD kernel sums in float). log: y = x - (m + log sum exp(x - m)),
/// exp and sum in double (as the CPU's, for both dtypes).
template <typename T, bool Log>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_kernel(const T* x, T* y, int64_t rows, int64_t cols) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;  // an idle row reads nothing but joins the reductions
    const T* xr = x + (r < rows ? r : 0) * cols;
    T* yr = y + (r < rows ? r : 0) * cols;
    T m = static_cast<T>(-INFINITY);
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) m = dmax(m, xr[c]);
    m = row_reduce(m, MaxOp{});
    if constexpr (Log) {
      double s = 0;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        s += dexp(static_cast<double>(xr[c] - m));
      s = row_reduce(s, SumOp{});
      const T shift = m + static_cast<T>(dlog(s));
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) yr[c] = xr[c] - shift;
    } else {
      T s = 0;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
        const T e = dexp(xr[c] - m);
        yr[c] = e;
        s += e;
      }
      s = row_reduce(s, SumOp{});
      const T inv = T(1) / s;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) yr[c] *= inv;
    }
  }
}

/// y, dy, dx: [R, C] (dx may be dy). softmax: dx = y (dy - sum(dy y)), the sum in T (float32:
/// the CPU's SIMD kernel sums in float). log: dx = dy - exp(y) sum(dy), the sum in double.
template <typename T, bool Log>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;
    const int64_t off = (r < rows ? r : 0) * cols;
    const T *yr = y + off, *gr = dy + off;
    T* dr = dx + off;
    if constexpr (Log) {
      double s = 0;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += gr[c];
      const T st = static_cast<T>(row_reduce(s, SumOp{}));
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) dr[c] = gr[c] - dexp(yr[c]) * st;
    } else {
      T s = 0;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += gr[c] * yr[c];
      const T st = row_reduce(s, SumOp{});
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) dr[c] = yr[c] * (gr[c] - st);
    }
  }
}

/// s: [R, C], in place: s = softmax(scale s). float: m = max(scale s), e = exp(scale s - m),
/// s = e * (1 / sum e), sum in float (the CPU's SIMD kernel); double: s = e / sum e (the CPU's
/// double loop, its scores already scaled by the GEMM).
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    scaled_softmax_kernel(T* s, int64_t rows, int64_t cols, T scale) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;
    T* sr = s + (r < rows ? r : 0) * cols;
    T m = static_cast<T>(-INFINITY);
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) m = dmax(m, mul_rn(sr[c], scale));
    m = row_reduce(m, MaxOp{});
    T sum = 0;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      const T e = dexp(mul_rn(sr[c], scale) - m);
      sr[c] = e;
      sum += e;
    }
    sum = row_reduce(sum, SumOp{});
    if constexpr (std::is_same_v<T, float>) {
      const float inv = 1.0f / sum;
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) sr[c] *= inv;
    } else {
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x) sr[c] /= sum;
    }
  }
}

/// p, dp: [R, C], dp in place: dp = scale (p (dp - sum(dp p))), the sum in T (as the CPU's).
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    scaled_softmax_backward_kernel(const T* p, T* dp, int64_t rows, int64_t cols, T scale) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;
    const int64_t off = (r < rows ? r : 0) * cols;
    const T* pr = p + off;
    T* dr = dp + off;
    T s = 0;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += dr[c] * pr[c];
    s = row_reduce(s, SumOp{});
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) dr[c] = scale * (pr[c] * (dr[c] - s));
  }
}

// ---- layer norm ------------------------------------------------------------------------------

/// x, y: [R, C]; w, b: [C] or null; mean, rstd: [R]. Biased variance, two passes:
///   mu = sum x / C,  rstd = 1 / sqrt(sum (x - mu)^2 / C + eps),  y = (x - mu) rstd w + b
/// Acc: float for float32 with both w and b (the CPU's SIMD kernel), double otherwise.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_kernel(const T* x, const T* w, const T* b, double eps, T* y, Stat mean, Stat rstd,
                      int64_t rows, int64_t cols) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;
    const T* xr = x + (r < rows ? r : 0) * cols;
    T* yr = y + (r < rows ? r : 0) * cols;
    Acc s = 0;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += static_cast<Acc>(xr[c]);
    const Acc mu = row_reduce(s, SumOp{}) / static_cast<Acc>(cols);
    Acc ss = 0;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      const Acc d = static_cast<Acc>(xr[c]) - mu;
      ss += d * d;
    }
    ss = row_reduce(ss, SumOp{});
    const Acc rs = Acc(1) / dsqrt(ss / static_cast<Acc>(cols) + static_cast<Acc>(eps));
    if (r < rows && threadIdx.x == 0) {
      if (mean.data) mean.store(r, mu);
      if (rstd.data) rstd.store(r, rs);
    }
    const T m = static_cast<T>(mu), k = static_cast<T>(rs);
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      T v = (xr[c] - m) * k;
      if (w) v *= w[c];
      if (b) v += b[c];
      yr[c] = v;
    }
  }
}

/// x, dy, dx: [R, C]; w: [C] or null; mean, rstd: [R]. With xhat = (x - mean) rstd and
/// g = dy w (dy when w is null):  dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)).
/// Acc: float for float32 with w (the CPU's SIMD kernel), double otherwise.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_backward_kernel(const T* x, const T* w, Stat mean, Stat rstd, const T* dy, T* dx,
                               int64_t rows, int64_t cols) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const int64_t n = r < rows ? cols : 0;
    const int64_t off = (r < rows ? r : 0) * cols;
    const T *xr = x + off, *gr = dy + off;
    T* dr = dx + off;
    const Acc mu = r < rows ? static_cast<Acc>(mean.load(r)) : Acc(0);
    const Acc rs = r < rows ? static_cast<Acc>(rstd.load(r)) : Acc(0);
    Acc sg = 0, sgx = 0;  // sum g, sum g xhat
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      const Acc g = w ? static_cast<Acc>(gr[c]) * static_cast<Acc>(w[c]) : static_cast<Acc>(gr[c]);
      sg += g;
      sgx += g * ((static_cast<Acc>(xr[c]) - mu) * rs);
    }
    const Acc a = row_reduce(sg, SumOp{}) / static_cast<Acc>(cols);
    const Acc bb = row_reduce(sgx, SumOp{}) / static_cast<Acc>(cols);
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
      const Acc g = w ? static_cast<Acc>(gr[c]) * static_cast<Acc>(w[c]) : static_cast<Acc>(gr[c]);
      const Acc xhat = (static_cast<Acc>(xr[c]) - mu) * rs;
      dr[c] = static_cast<T>(rs * (g - a - xhat * bb));
    }
  }
}

/// x, dy: [R, C]; mean, rstd: [R]; dw, db: [C] (either may be null; written, not added to):
///   dw = sum_r dy xhat,  db = sum_r dy,  summed in double.
/// The product dy xhat is taken in Acc: float for float32 with w (the CPU's SIMD kernel), double
/// otherwise. Block (kTile, kTile) per kTile columns (grid-stride in x) and per strip of
/// strip_rows rows (grid y): thread (tx, ty) sums rows ty, ty + kTile, ... of its strip in column
/// tx in order; the kTile partials are then added in ty order, into dw / db (one strip) or into
/// partial [strips, 2, C] for layer_norm_params_finish_kernel.
template <typename T, typename Acc>
__global__ void __launch_bounds__(kTile* kTile)
    layer_norm_params_kernel(const T* x, Stat mean, Stat rstd, const T* dy, T* dw, T* db,
                             int64_t rows, int64_t cols, int64_t strip_rows, double* partial) {
  __shared__ double pw[kTile][kTile], pb[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles = (cols + kTile - 1) / kTile;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * strip_rows;
  const int64_t r1 = min(rows, r0 + strip_rows);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kTile + tx;
    double sw = 0, sb = 0;
    if (c < cols) {
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += kTile) {
        const Acc mu = static_cast<Acc>(mean.load(r)), rs = static_cast<Acc>(rstd.load(r));
        const T g = dy[r * cols + c];
        const Acc xhat = (static_cast<Acc>(x[r * cols + c]) - mu) * rs;
        sw += static_cast<double>(static_cast<Acc>(g) * xhat);
        sb += static_cast<double>(g);
      }
    }
    pw[ty][tx] = sw;
    pb[ty][tx] = sb;
    __syncthreads();
    if (ty == 0 && c < cols) {
      double tw = 0, tb = 0;
      for (int i = 0; i < kTile; ++i) {
        tw += pw[i][tx];
        tb += pb[i][tx];
      }
      if (partial) {
        partial[(2 * static_cast<int64_t>(blockIdx.y)) * cols + c] = tw;
        partial[(2 * static_cast<int64_t>(blockIdx.y) + 1) * cols + c] = tb;
      } else {
        if (dw) dw[c] = static_cast<T>(tw);
        if (db) db[c] = static_cast<T>(tb);
      }
    }
    __syncthreads();  // pw, pb are read before the next tile writes them
  }
}

/// dw, db from the strips' partials [strips, 2, C], added in strip order.
template <typename T>
__global__ void layer_norm_params_finish_kernel(const double* partial, int64_t strips, int64_t cols,
                                                T* dw, T* db) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double tw = 0, tb = 0;
    for (int64_t s = 0; s < strips; ++s) {
      tw += partial[2 * s * cols + c];
      tb += partial[(2 * s + 1) * cols + c];
    }
    if (dw) dw[c] = static_cast<T>(tw);
    if (db) db[c] = static_cast<T>(tb);
  }
}

/// layer_norm_params_kernel over strips of rows: few column tiles (768 columns: 24 blocks) would
/// leave most of the GPU idle on a tall [R, C] (88 microseconds for [12608, 768] on an H200), so
/// the rows are cut into strips until the grid fills the GPU about twice.
template <typename T, typename Acc>
cudaError_t launch_layer_norm_params(const T* x, Stat mean, Stat rstd, const T* dy, T* dw, T* db,
                                     int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t tiles = std::min((cols + kTile - 1) / kTile, kMaxGrid);
  const int64_t strips = strips_to_fill(tiles, rows, 4 * kTile);
  const int64_t strip_rows = (rows + strips - 1) / strips;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(strips)), block(kTile, kTile);
  double* partial = strips > 1 ? stream_scratch<double>(2 * strips * cols, stream) : nullptr;
  if (!partial) {  // one strip (also where there is no stream-ordered allocator)
    const dim3 one(static_cast<unsigned>(tiles));
    layer_norm_params_kernel<T, Acc><<<one, block, 0, stream>>>(
        x, mean, rstd, dy, dw, db, rows, cols, std::max<int64_t>(rows, 1), nullptr);
    return cudaGetLastError();
  }
  layer_norm_params_kernel<T, Acc>
      <<<grid, block, 0, stream>>>(x, mean, rstd, dy, dw, db, rows, cols, strip_rows, partial);
  layer_norm_params_finish_kernel<T>
      <<<blocks_for(cols, kThreads), kThreads, 0, stream>>>(partial, strips, cols, dw, db);
  const cudaError_t e = cudaGetLastError();
  const cudaError_t f = cudaFreeAsync(partial, stream);
  return e != cudaSuccess ? e : f;
}

// ---- cross entropy ---------------------------------------------------------------------------

/// The target of row r: ignore_index (ignored), in [0, C) (valid), or neither (out of range: the
/// CPU throws; here the row's outputs are NaN, and nothing out of bounds is read).
enum class Target { Ignored, Valid, Invalid };
__device__ inline Target classify(int64_t t, int64_t ignore_index, int64_t classes) {
  if (t == ignore_index) return Target::Ignored;
  return t >= 0 && t < classes ? Target::Valid : Target::Invalid;
}

/// The max m and log sum exp(x - m) of the row (in double, as the CPU's row_stats), reduced over
/// the row's threads; n is 0 for a row that joins the reductions only.
template <typename T>
__device__ void row_stats(const T* xr, int64_t n, double& m, double& lse) {
  m = -INFINITY;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) m = dmax(m, static_cast<double>(xr[c]));
  m = row_reduce(m, MaxOp{});
  double s = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += dexp(static_cast<double>(xr[c]) - m);
  lse = dlog(row_reduce(s, SumOp{}));
}

/// logits: [N, C]; target: int64 [N] (element stride tstride); loss: [N]. With
/// shift = m + lse (lp_c = x_c - shift) and s the label smoothing:
///   loss = -(1 - s) lp_t - (s / C) sum_c lp_c,  0 where the target is ignore_index.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_kernel(const T* logits, const int64_t* target, int64_t tstride,
                         int64_t ignore_index, double smoothing, T* loss, int64_t rows,
                         int64_t classes) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const Target kind =
        r < rows ? classify(target[r * tstride], ignore_index, classes) : Target::Ignored;
    const int64_t n = r < rows && kind == Target::Valid ? classes : 0;
    const T* xr = logits + (r < rows ? r : 0) * classes;
    double m, lse;
    row_stats(xr, n, m, lse);
    const double shift = m + lse;
    double sum_lp = 0;
    if (smoothing > 0) {
      for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        sum_lp += static_cast<double>(xr[c]) - shift;
      sum_lp = row_reduce(sum_lp, SumOp{});
    }
    if (r >= rows || threadIdx.x != 0) continue;
    if (kind == Target::Ignored) {
      loss[r] = T(0);
    } else if (kind == Target::Invalid) {
      loss[r] = static_cast<T>(NAN);
    } else {
      const int64_t t = target[r * tstride];
      double l = -(1 - smoothing) * (static_cast<double>(xr[t]) - shift);
      if (smoothing > 0) l -= smoothing / static_cast<double>(classes) * sum_lp;
      loss[r] = static_cast<T>(l);
    }
  }
}

/// logits, dlogits: [N, C]; target: int64 [N] (element stride tstride); dloss: [N]. With q the
/// smoothed one-hot target, q_c = (c == t ? 1 - s : 0) + s / C:
///   dlogits = dloss (exp(x - m - lse) - q),  in double;  0 where the target is ignore_index.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_backward_kernel(const T* logits, const int64_t* target, int64_t tstride,
                                  int64_t ignore_index, double smoothing, const T* dloss,
                                  T* dlogits, int64_t rows, int64_t classes) {
  for (int64_t base = first_row(); base < rows; base += row_stride()) {
    const int64_t r = base + threadIdx.y;
    const Target kind =
        r < rows ? classify(target[r * tstride], ignore_index, classes) : Target::Ignored;
    const int64_t n = r < rows && kind == Target::Valid ? classes : 0;
    const int64_t off = (r < rows ? r : 0) * classes;
    const T* xr = logits + off;
    T* dr = dlogits + off;
    double m, lse;
    row_stats(xr, n, m, lse);
    if (r >= rows) continue;
    if (kind != Target::Valid) {
      const T v = kind == Target::Ignored ? T(0) : static_cast<T>(NAN);
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) dr[c] = v;
      continue;
    }
    const int64_t t = target[r * tstride];
    const double g = dloss[r], off_q = smoothing / static_cast<double>(classes);
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
      const double q = (c == t ? 1 - smoothing : 0) + off_q;
      dr[c] = static_cast<T>(g * (dexp(static_cast<double>(xr[c]) - m - lse) - q));
    }
  }
}

// ---- launch helpers --------------------------------------------------------------------------

bool is_float(Dt t) { return t == Dt::F32 || t == Dt::F64; }

/// (rows, cols) of a contiguous tensor reduced over its last dim (a 0-dim tensor: one of one).
void rows_cols(const View& t, int64_t& rows, int64_t& cols) {
  cols = t.ndim == 0 ? 1 : t.shape[t.ndim - 1];
  rows = cols == 0 ? 0 : t.numel() / cols;
}

/// The launch shape of a row kernel over rows rows of cols (rows > 0): blockDim.x threads per row
/// (a warp, doubled while a thread would take more than 8 elements, up to kMaxRowThreads),
/// blockDim.y rows per block.
struct RowLaunch {
  dim3 grid, block;
};
RowLaunch row_launch(int64_t rows, int64_t cols) {
  int per_row = kWarp;
  while (per_row < kMaxRowThreads && per_row * int64_t{8} < cols) per_row *= 2;
  const int rows_per_block = std::max(1, kRowBlockThreads / per_row);
  const int64_t blocks = std::min((rows + rows_per_block - 1) / rows_per_block, kMaxGrid);
  return {dim3(static_cast<unsigned>(blocks)), dim3(per_row, rows_per_block)};
}

/// dispatch_float for launchers whose f only launches: the status is the launch's.
template <typename F>
cudaError_t launch_float(Dt t, F&& f) {
  return dispatch_float(t, [&]<typename T>() {
    f.template operator()<T>();
    return cudaGetLastError();
  });
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

// x, y: [R, C]
cudaError_t softmax(const View& x, const View& y, bool log, cudaStream_t stream) {
  if (!is_float(x.dtype) || y.dtype != x.dtype) return cudaErrorInvalidValue;
  int64_t rows, cols;
  rows_cols(x, rows, cols);
  if (rows == 0) return cudaSuccess;
  const RowLaunch l = row_launch(rows, cols);
  return launch_float(x.dtype, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data);
    T* yp = static_cast<T*>(y.data);
    if (log)
      softmax_kernel<T, true><<<l.grid, l.block, 0, stream>>>(xp, yp, rows, cols);
    else
      softmax_kernel<T, false><<<l.grid, l.block, 0, stream>>>(xp, yp, rows, cols);
  });
}

// y, dy, dx: [R, C]
cudaError_t softmax_backward(const View& y, const View& dy, const View& dx, bool log,
                             cudaStream_t stream) {
  if (dy.dtype != y.dtype || dx.dtype != y.dtype || !is_float(y.dtype))
    return cudaErrorInvalidValue;
  int64_t rows, cols;
  rows_cols(y, rows, cols);
  if (rows == 0) return cudaSuccess;
  const RowLaunch l = row_launch(rows, cols);
  return launch_float(y.dtype, [&]<typename T>() {
    const T* yp = static_cast<const T*>(y.data);
    const T* gp = static_cast<const T*>(dy.data);
    T* dp = static_cast<T*>(dx.data);
    if (log)
      softmax_backward_kernel<T, true><<<l.grid, l.block, 0, stream>>>(yp, gp, dp, rows, cols);
    else
      softmax_backward_kernel<T, false><<<l.grid, l.block, 0, stream>>>(yp, gp, dp, rows, cols);
  });
}

// x, y: [R, C]; w, b: [C] (absent when data is null); mean, rstd: [R]
cudaError_t layer_norm(const View& x, const View& w, const View& b, double eps, const View& y,
                       const View& mean, const View& rstd, cudaStream_t stream) {
  if (x.ndim != 2 || !is_float(x.dtype) || y.dtype != x.dtype) return cudaErrorInvalidValue;
  if ((w.data && w.dtype != x.dtype) || (b.data && b.dtype != x.dtype))
    return cudaErrorInvalidValue;
  if (!is_float(mean.dtype) || !is_float(rstd.dtype)) return cudaErrorInvalidValue;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return cudaSuccess;
  const RowLaunch l = row_launch(rows, cols);
  const Stat ms{mean.data, mean.dtype == Dt::F64}, rs{rstd.data, rstd.dtype == Dt::F64};
  return launch_float(x.dtype, [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data);
    const T* wp = static_cast<const T*>(w.data);
    const T* bp = static_cast<const T*>(b.data);
    T* yp = static_cast<T*>(y.data);
    if constexpr (std::is_same_v<T, float>) {
      if (wp && bp) {  // the CPU's float32 SIMD kernel: statistics in float
        layer_norm_kernel<float, float>
            <<<l.grid, l.block, 0, stream>>>(xp, wp, bp, eps, yp, ms, rs, rows, cols);
        return;
      }
    }
    layer_norm_kernel<T, double>
        <<<l.grid, l.block, 0, stream>>>(xp, wp, bp, eps, yp, ms, rs, rows, cols);
  });
}

// x, dy, dx: [R, C]; w, dw, db: [C]; mean, rstd: [R]. dx, dw, db written when their data is
// non-null.
cudaError_t layer_norm_backward(const View& x, const View& w, const View& mean, const View& rstd,
                                const View& dy, const View& dx, const View& dw, const View& db,
                                cudaStream_t stream) {
  if (x.ndim != 2 || !is_float(x.dtype) || dy.dtype != x.dtype) return cudaErrorInvalidValue;
  if ((w.data && w.dtype != x.dtype) || (dx.data && dx.dtype != x.dtype) ||
      (dw.data && dw.dtype != x.dtype) || (db.data && db.dtype != x.dtype))
    return cudaErrorInvalidValue;
  if (!is_float(mean.dtype) || !is_float(rstd.dtype)) return cudaErrorInvalidValue;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  const bool want_dx = dx.data && rows > 0 && cols > 0;
  // dw, db are written even for zero rows (sums of nothing: 0), as the CPU's.
  const bool want_params = (dw.data || db.data) && cols > 0;
  if (!want_dx && !want_params) return cudaSuccess;
  if (rows > 0 && (!mean.data || !rstd.data)) return cudaErrorInvalidValue;
  const Stat ms{mean.data, mean.dtype == Dt::F64}, rs{rstd.data, rstd.dtype == Dt::F64};
  return dispatch_float(x.dtype, [&]<typename T>() -> cudaError_t {
    const T* xp = static_cast<const T*>(x.data);
    const T* wp = static_cast<const T*>(w.data);
    const T* gp = static_cast<const T*>(dy.data);
    T* dp = static_cast<T*>(dx.data);
    T* dwp = static_cast<T*>(dw.data);
    T* dbp = static_cast<T*>(db.data);
    const RowLaunch l = row_launch(rows > 0 ? rows : 1, cols);
    if constexpr (std::is_same_v<T, float>) {
      if (wp) {  // the CPU's float32 SIMD kernel (with w): sums and products in float
        if (want_dx)
          layer_norm_backward_kernel<float, float>
              <<<l.grid, l.block, 0, stream>>>(xp, wp, ms, rs, gp, dp, rows, cols);
        if (want_params)
          return launch_layer_norm_params<float, float>(xp, ms, rs, gp, dwp, dbp, rows, cols,
                                                        stream);
        return cudaGetLastError();
      }
    }
    if (want_dx)
      layer_norm_backward_kernel<T, double>
          <<<l.grid, l.block, 0, stream>>>(xp, wp, ms, rs, gp, dp, rows, cols);
    if (want_params)
      return launch_layer_norm_params<T, double>(xp, ms, rs, gp, dwp, dbp, rows, cols, stream);
    return cudaGetLastError();
  });
}

// logits: [N, C]; target: int64 [N]; loss: [N]
cudaError_t cross_entropy(const View& logits, const View& target, int64_t ignore_index,
                          double label_smoothing, const View& loss, cudaStream_t stream) {
  if (logits.ndim != 2 || !is_float(logits.dtype) || loss.dtype != logits.dtype ||
      target.dtype != Dt::I64)
    return cudaErrorInvalidValue;
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (target.numel() != rows) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int64_t tstride = target.ndim == 0 ? 1 : target.strides[0];
  const RowLaunch l = row_launch(rows, classes);
  return launch_float(logits.dtype, [&]<typename T>() {
    cross_entropy_kernel<T><<<l.grid, l.block, 0, stream>>>(
        static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data), tstride,
        ignore_index, label_smoothing, static_cast<T*>(loss.data), rows, classes);
  });
}

// logits, dlogits: [N, C]; target: int64 [N]; dloss: [N]
cudaError_t cross_entropy_backward(const View& logits, const View& target, int64_t ignore_index,
                                   double label_smoothing, const View& dloss, const View& dlogits,
                                   cudaStream_t stream) {
  if (logits.ndim != 2 || !is_float(logits.dtype) || dloss.dtype != logits.dtype ||
      dlogits.dtype != logits.dtype || target.dtype != Dt::I64)
    return cudaErrorInvalidValue;
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (target.numel() != rows) return cudaErrorInvalidValue;
  if (rows == 0 || classes == 0) return cudaSuccess;
  const int64_t tstride = target.ndim == 0 ? 1 : target.strides[0];
  const RowLaunch l = row_launch(rows, classes);
  return launch_float(logits.dtype, [&]<typename T>() {
    cross_entropy_backward_kernel<T><<<l.grid, l.block, 0, stream>>>(
        static_cast<const T*>(logits.data), static_cast<const int64_t*>(target.data), tstride,
        ignore_index, label_smoothing, static_cast<const T*>(dloss.data),
        static_cast<T*>(dlogits.data), rows, classes);
  });
}

// s: [rows, n]
cudaError_t scaled_softmax_rows(const View& s, int64_t rows, int64_t n, double scale,
                                cudaStream_t stream) {
  if (!is_float(s.dtype)) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const RowLaunch l = row_launch(rows, n);
  return launch_float(s.dtype, [&]<typename T>() {
    scaled_softmax_kernel<T>
        <<<l.grid, l.block, 0, stream>>>(static_cast<T*>(s.data), rows, n, static_cast<T>(scale));
  });
}

// p, dp: [rows, n]
cudaError_t scaled_softmax_rows_backward(const View& p, const View& dp, int64_t rows, int64_t n,
                                         double scale, cudaStream_t stream) {
  if (!is_float(p.dtype) || dp.dtype != p.dtype) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const RowLaunch l = row_launch(rows, n);
  return launch_float(p.dtype, [&]<typename T>() {
    scaled_softmax_backward_kernel<T><<<l.grid, l.block, 0, stream>>>(
        static_cast<const T*>(p.data), static_cast<T*>(dp.data), rows, n, static_cast<T>(scale));
  });
}

}  // namespace vitrine::cuda
