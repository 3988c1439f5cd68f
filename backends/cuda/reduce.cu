// CUDA reductions and index ops, with the CPU backend's semantics (backends/cpu/reduce.cpp and
// backends/cpu/index.cpp):
//   reduce        sum / mean / max / min / argmax / argmin of x over the dims where y (same rank,
//                 keepdim layout) is 1 and x is not. Deterministic: no atomics; each output is
//                 reduced by one thread, or by a group of threads whose partials combine in a
//                 fixed tree, or (sums over the rows of a [R, C] block) by strips of rows whose
//                 partials add in order. Sums accumulate in double (int64 in int64); max/min take
//                 the first NaN if there is one, else the first extreme (the CPU's rule).
//   index_select  y = x.index_select(dim, index)          index: int64, 1-D
//   index_add     y.index_add_(dim, index, src)           y: any strides; atomicAdd
//   gather        y = x.gather(dim, index)                index: int64, shaped like y
//   scatter_add   y.scatter_add_(dim, index, src)         atomicAdd
// Index values are already validated by the ops layer; negative ones count from the end, as the
// CPU's. atomicAdd makes float index_add / scatter_add results vary in their last bits from run
// to run (the order of the additions); int64 ones are exact.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/dispatch.cuh"
#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

namespace {

/// A (shape, strides) space in elements: maps a flat row-major index to an element offset.
struct Space {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  /// Appends a dim, dropping size-1 dims and merging a dim into the previous one when the two
  /// are contiguous with each other (the flat index -> offset map stays the same).
  void push(int64_t size, int64_t stride) {
    if (size == 1) return;
    if (ndim > 0 && strides[ndim - 1] == stride * size) {
      shape[ndim - 1] *= size;
      strides[ndim - 1] = stride;
      return;
    }
    shape[ndim] = size;
    strides[ndim] = stride;
    ++ndim;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  int64_t innermost_stride(int64_t none) const { return ndim > 0 ? strides[ndim - 1] : none; }
  /// The offset of flat index i (0 <= i < numel()). Unrolled over kMaxDims so that the arrays
  /// are read at constant indices (no local-memory copy of the kernel parameter).
  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d > 0; --d) {
      if (d < ndim) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
      }
    }
    if (ndim > 0) off += i * strides[0];
    return off;
  }
};

// ---- reduce -----------------------------------------------------------------------------------

/// The accumulation type: double for floating-point x, int64 for int64 (the CPU's).
template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

/// A partial reduction: the running sum (index unused), or the extreme so far and its flat index
/// among the reduced elements (-1: no element yet).
template <typename A>
struct Partial {
  A value;
  int64_t index;
};

template <typename A>
__device__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>)
    return v != v;
  else
    return false;
}

/// Whether partial b should replace partial a for max (is_max) or min. The CPU's sequential rule
/// (the first element, then a strictly better one, or a NaN over a number) made order-free so that
/// a tree gives the same answer: a NaN beats any number, then the larger (smaller) value wins,
/// then the smaller index; an empty partial loses to anything.
template <typename A>
__device__ bool beats(const Partial<A>& b, const Partial<A>& a, bool is_max) {
  if (b.index < 0) return false;
  if (a.index < 0) return true;
  const bool bn = is_nan(b.value), an = is_nan(a.value);
  if (bn || an) return bn && (!an || b.index < a.index);
  if (b.value == a.value) return b.index < a.index;
  return is_max ? b.value > a.value : b.value < a.value;
}

template <typename A>
__device__ Partial<A> combine(Reduce op, const Partial<A>& a, const Partial<A>& b) {
  if (op == Reduce::Sum || op == Reduce::Mean) return {a.value + b.value, 0};
  return beats(b, a, op == Reduce::Max || op == Reduce::ArgMax) ? b : a;
}

/// Writes the result of output o: the index (ArgMax/ArgMin, int64 y), sum / m (Mean, through
/// double as the CPU's) or the value.
template <typename T>
__device__ void write_result(Reduce op, const View& y, int64_t o, const Partial<Acc<T>>& r,
                             int64_t m) {
  const int64_t yo = y.offset(o);
  if (op == Reduce::ArgMax || op == Reduce::ArgMin)
    static_cast<int64_t*>(y.data)[yo] = r.index;
  else if (op == Reduce::Mean)
    static_cast<T*>(y.data)[yo] =
        static_cast<T>(static_cast<double>(r.value) / static_cast<double>(m));
  else
    static_cast<T*>(y.data)[yo] = static_cast<T>(r.value);
}

/// One thread per output element, reading its m reduced elements in order.
///   x: any strides; kept: x's kept dims ([nout] flat), red: x's reduced dims ([m] flat);
///   y: keepdim layout of x, output o at y.offset(o).
template <typename T>
__global__ void reduce_thread_kernel(Reduce op, const T* x, View y, Space kept, Space red,
                                     int64_t nout, int64_t m) {
  using A = Acc<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < nout;
       o += step) {
    const T* xo = x + kept.offset(o);
    Partial<A> r{A(0), -1};
    for (int64_t i = 0; i < m; ++i)
      r = combine(op, r, Partial<A>{static_cast<A>(xo[red.offset(i)]), i});
    write_result<T>(op, y, o, r, m);
  }
}

/// A group of `lanes` threads per output element, kThreads / lanes groups per block (shapes as
/// reduce_thread_kernel). Lane l reads the reduced elements l, l + lanes, l + 2 lanes, ... in
/// order; the lanes' partials then combine in a fixed tree (lane l with lane l + s, s halving).
/// columns: a block's groups are interleaved (thread t: group t % groups, lane t / groups), so
/// adjacent threads read adjacent outputs (kept dims contiguous, reduced ones strided); otherwise
/// a group is a run of adjacent threads (group t / lanes, lane t % lanes), which read adjacent
/// reduced elements. lanes: a power of two, 32 to kThreads.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    reduce_group_kernel(Reduce op, const T* x, View y, Space kept, Space red, int64_t nout,
                        int64_t m, int lanes, bool columns) {
  using A = Acc<T>;
  __shared__ A svalue[kThreads];
  __shared__ int64_t sindex[kThreads];
  const int groups = kThreads / lanes;
  const int t = static_cast<int>(threadIdx.x);
  const int group = columns ? t % groups : t / lanes;
  const int lane = columns ? t / groups : t % lanes;
  const int slot = group * lanes + lane;
  // `first` is the same for every thread of a block, so all of them reach each __syncthreads.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * groups; first < nout;
       first += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t o = first + group;
    Partial<A> r{A(0), -1};
    if (o < nout) {
      const T* xo = x + kept.offset(o);
      for (int64_t i = lane; i < m; i += lanes)
        r = combine(op, r, Partial<A>{static_cast<A>(xo[red.offset(i)]), i});
    }
    svalue[slot] = r.value;
    sindex[slot] = r.index;
    __syncthreads();
    for (int s = lanes / 2; s > 0; s /= 2) {
      if (lane < s) {
        const Partial<A> c = combine(op, Partial<A>{svalue[slot], sindex[slot]},
                                     Partial<A>{svalue[slot + s], sindex[slot + s]});
        svalue[slot] = c.value;
        sindex[slot] = c.index;
      }
      __syncthreads();
    }
    if (lane == 0 && o < nout) write_result<T>(op, y, o, Partial<A>{svalue[slot], sindex[slot]}, m);
    __syncthreads();  // the slots are rewritten by the next round
  }
}

/// Column sums, first pass: x row-major [R, C] (row stride ld) summed over its rows, split in
/// gridDim.y strips of `rows` rows each. Block (32, kColumnLanes) covers 32 adjacent columns:
/// thread (tx, ty) adds rows ty, ty + kColumnLanes, ... of its strip in that order (a warp reads
/// 32 adjacent elements of one row, 128 bytes of float32), then the lanes' partials add in order
/// of ty. partial: [gridDim.y, C].
constexpr int kColumnLanes = 16;
template <typename T>
__global__ void __launch_bounds__(32 * kColumnLanes)
    column_sum_kernel(const T* x, int64_t R, int64_t C, int64_t ld, int64_t rows, Acc<T>* partial) {
  using A = Acc<T>;
  __shared__ A lanes[kColumnLanes][33];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows, r1 = min(R, r0 + rows);
  A sum = 0;
  if (c < C) {
    const T* p = x + c;
    int64_t r = r0 + ty;
    constexpr int64_t L = kColumnLanes;
    for (; r + 3 * L < r1; r += 4 * L) {  // four loads in flight, added in row order
      const A a0 = static_cast<A>(p[r * ld]), a1 = static_cast<A>(p[(r + L) * ld]),
              a2 = static_cast<A>(p[(r + 2 * L) * ld]), a3 = static_cast<A>(p[(r + 3 * L) * ld]);
      sum += a0;
      sum += a1;
      sum += a2;
      sum += a3;
    }
    for (; r < r1; r += L) sum += static_cast<A>(p[r * ld]);
  }
  lanes[ty][tx] = sum;
  __syncthreads();
  if (ty == 0 && c < C) {
    A total = 0;
    for (int i = 0; i < kColumnLanes; ++i) total += lanes[i][tx];
    partial[static_cast<int64_t>(blockIdx.y) * C + c] = total;
  }
}

/// Column sums, second pass: output c adds the strips' partials [strips, C] in order.
template <typename T>
__global__ void column_sum_finish_kernel(Reduce op, const Acc<T>* partial, int64_t strips,
                                         int64_t C, int64_t R, View y) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc<T> total = 0;
    for (int64_t s = 0; s < strips; ++s) total += partial[s * C + c];
    write_result<T>(op, y, c, Partial<Acc<T>>{total, -1}, R);
  }
}

/// Sum or mean over the rows of a row-major [R, C] block (kept: C columns of stride 1; red: R
/// rows of stride ld >= C), as a bias's gradient is: strips of rows, enough blocks to fill the
/// GPU twice, then the strips' partials. Deterministic (fixed order, no atomics). The general
/// group kernel took 214 microseconds a call on average over the bias gradients of a ViT-B/16
/// training step ([12608, N], N from 768 to 3072; 12% of the step on an H200), 8 columns a
/// block with index arithmetic per element.
template <typename T>
cudaError_t launch_column_sum(Reduce op, const T* x, const View& y, int64_t R, int64_t C,
                              int64_t ld, cudaStream_t stream) {
  const int64_t col_blocks = (C + 31) / 32;
  const int64_t strips = strips_to_fill(col_blocks, R, 4 * kColumnLanes);
  const int64_t rows = (R + strips - 1) / strips;
  Acc<T>* partial = stream_scratch<Acc<T>>(strips * C, stream);
  if (!partial) return cudaErrorNotSupported;  // the caller's general kernel then
  column_sum_kernel<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(strips)),
                         dim3(32, kColumnLanes), 0, stream>>>(x, R, C, ld, rows, partial);
  column_sum_finish_kernel<T>
      <<<blocks_for(C, kThreads), kThreads, 0, stream>>>(op, partial, strips, C, R, y);
  const cudaError_t e = cudaGetLastError();
  const cudaError_t f = cudaFreeAsync(partial, stream);
  return e != cudaSuccess ? e : f;
}

template <typename T>
cudaError_t launch_reduce(Reduce op, const View& x, const View& y, const Space& kept,
                          const Space& red, int64_t nout, int64_t m, cudaStream_t stream) {
  const T* xp = static_cast<const T*>(x.data);
  // Sums over the rows of a [R, C] block with C adjacent columns (a bias's gradient).
  if ((op == Reduce::Sum || op == Reduce::Mean) && kept.ndim == 1 && kept.strides[0] == 1 &&
      red.ndim == 1 && red.strides[0] >= kept.shape[0] && nout >= 64 && m >= 64) {
    const cudaError_t e = launch_column_sum<T>(op, xp, y, m, nout, red.strides[0], stream);
    if (e != cudaErrorNotSupported) return e;
  }
  if (m <= 16) {  // few elements each: one thread per output
    reduce_thread_kernel<T>
        <<<blocks_for(nout, kThreads), kThreads, 0, stream>>>(op, xp, y, kept, red, nout, m);
    return cudaGetLastError();
  }
  // Column sums ([rows, C] -> [C]): outputs adjacent in memory, reduced elements strided; 8
  // outputs per block (a 32-byte sector of float32) with 32 lanes each.
  const bool columns = nout >= 8 && kept.innermost_stride(0) == 1 && red.innermost_stride(1) != 1;
  int lanes = 32;
  if (!columns)  // about 4 or more elements per lane, up to one block per output
    while (lanes < kThreads && lanes * int64_t{4} < m) lanes *= 2;
  const int groups = kThreads / lanes;
  reduce_group_kernel<T><<<blocks_for(nout, groups), kThreads, 0, stream>>>(
      op, xp, y, kept, red, nout, m, lanes, columns);
  return cudaGetLastError();
}

// ---- index ops ----------------------------------------------------------------------------------

__device__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ void atomic_add(int64_t* p, int64_t v) {
  // Two's-complement addition: the same bits as a signed add.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

/// The CPU's index_pairs walk: element e = (o, i, k) of [outer, n, inner] pairs
/// big[outer o, index[i] along dim, inner k] with small[outer o, i along dim, inner k]. big is x
/// of index_select (y of index_add) and sets the ranges; each tensor's offsets come from its own
/// shape and strides.
struct IndexWalk {
  Space big_outer, big_inner, small_outer, small_inner;
  int64_t big_dim_stride, small_dim_stride;
  int64_t size;          // big's size along dim
  int64_t index_stride;  // index: [n], this stride
  int64_t n, inner;

  __device__ void offsets(int64_t e, const int64_t* index, int64_t& bo, int64_t& so) const {
    const int64_t k = e % inner, r = e / inner, i = r % n, o = r / n;
    int64_t j = index[i * index_stride];
    if (j < 0) j += size;
    bo = big_outer.offset(o) + j * big_dim_stride + big_inner.offset(k);
    so = small_outer.offset(o) + i * small_dim_stride + small_inner.offset(k);
  }
};

/// Builds the walk; false when the arguments do not fit (dim out of range, ranks differ).
bool make_index_walk(const View& big, int dim, const View& index, const View& small, IndexWalk& w,
                     int64_t& total) {
  if (dim < 0 || dim >= big.ndim || small.ndim != big.ndim || index.ndim > 1) return false;
  w = IndexWalk{};
  int64_t outer = 1;
  w.inner = 1;
  for (int d = 0; d < big.ndim; ++d) {
    if (d < dim) {
      w.big_outer.push(big.shape[d], big.strides[d]);
      w.small_outer.push(small.shape[d], small.strides[d]);
      outer *= big.shape[d];
    } else if (d > dim) {
      w.big_inner.push(big.shape[d], big.strides[d]);
      w.small_inner.push(small.shape[d], small.strides[d]);
      w.inner *= big.shape[d];
    }
  }
  w.big_dim_stride = big.strides[dim];
  w.small_dim_stride = small.strides[dim];
  w.size = big.shape[dim];
  w.index_stride = index.ndim == 1 ? index.strides[0] : 0;
  w.n = index.numel();
  total = outer * w.n * w.inner;
  return true;
}

/// y[yo] = x[xo] for every element e of a walk, (xo, yo) = w.offsets(e, index): index_select
/// (IndexWalk: y[outer, i, inner] = x[outer, index[i], inner]) and gather (GatherWalk: y[c] =
/// x[c with c[dim] = index[c]]).   x, y, index: any strides; index int64.
template <typename T, typename Walk>
__global__ void walk_copy_kernel(const T* x, const int64_t* index, T* y, Walk w, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += step) {
    int64_t xo, yo;
    w.offsets(e, index, xo, yo);
    y[yo] = x[xo];
  }
}

/// y[yo] += src[so] atomically for every element e of a walk, (yo, so) = w.offsets(e, index):
/// index_add (IndexWalk) and scatter_add (GatherWalk).
template <typename T, typename Walk>
__global__ void walk_add_kernel(T* y, const int64_t* index, const T* src, Walk w, int64_t total) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += step) {
    int64_t yo, so;
    w.offsets(e, index, yo, so);
    atomic_add(y + yo, src[so]);
  }
}

/// The CPU's gather_pairs walk: flat element e of index's shape (coordinates c) pairs
/// big[c with c[dim] replaced by index[c]] with small[c]. big is x of gather (y of scatter_add).
struct GatherWalk {
  int ndim = 0, dim = 0;
  int64_t shape[kMaxDims] = {};  // index's shape
  int64_t index_strides[kMaxDims] = {}, big_strides[kMaxDims] = {}, small_strides[kMaxDims] = {};
  int64_t big_dim_stride = 0;
  int64_t size = 1;  // big's size along dim

  __device__ void offsets(int64_t e, const int64_t* index, int64_t& bo, int64_t& so) const {
    int64_t io = 0, b = 0, s = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < ndim) {
        const int64_t c = e % shape[d];
        e /= shape[d];
        io += c * index_strides[d];
        s += c * small_strides[d];
        if (d != dim) b += c * big_strides[d];
      }
    }
    int64_t j = index[io];
    if (j < 0) j += size;
    bo = b + j * big_dim_stride;
    so = s;
  }
};

/// Builds the walk; false when the arguments do not fit. A 0-dim index (dim 0) reads big's only
/// element.
bool make_gather_walk(const View& big, int dim, const View& index, const View& small,
                      GatherWalk& w) {
  const int nd = index.ndim;
  if (big.ndim != nd || small.ndim != nd || dim < 0 || dim >= (nd > 0 ? nd : 1)) return false;
  w = GatherWalk{};
  w.ndim = nd;
  w.dim = dim;
  for (int d = 0; d < nd; ++d) {
    w.shape[d] = index.shape[d];
    w.index_strides[d] = index.strides[d];
    w.big_strides[d] = big.strides[d];
    w.small_strides[d] = small.strides[d];
  }
  if (nd > 0) {
    w.big_dim_stride = big.strides[dim];
    w.size = big.shape[dim];
  }
  return true;
}

}  // namespace

cudaError_t reduce(Reduce op, const View& x, const View& y, cudaStream_t stream) {
  const bool arg = op == Reduce::ArgMax || op == Reduce::ArgMin;
  if (x.ndim != y.ndim || y.dtype != (arg ? Dt::I64 : x.dtype)) return cudaErrorInvalidValue;
  Space kept, red;
  int nred = 0;
  for (int d = 0; d < x.ndim; ++d) {
    if (y.shape[d] == x.shape[d]) {
      kept.push(x.shape[d], x.strides[d]);
    } else if (y.shape[d] == 1) {
      red.push(x.shape[d], x.strides[d]);
      ++nred;
    } else {
      return cudaErrorInvalidValue;
    }
  }
  if (arg && nred > 1) return cudaErrorInvalidValue;  // argmax/argmin reduce one dim only
  const int64_t nout = y.numel(), m = red.numel();
  // The CPU refuses max/min/argmax/argmin over an empty dim (whatever the output's size).
  if (m == 0 && op != Reduce::Sum && op != Reduce::Mean) return cudaErrorInvalidValue;
  return dispatch_numeric(x.dtype, [&]<typename T>() -> cudaError_t {
    if (nout == 0) return cudaSuccess;
    return launch_reduce<T>(op, x, y, kept, red, nout, m, stream);
  });
}

cudaError_t index_select(const View& x, int dim, const View& index, const View& y,
                         cudaStream_t stream) {
  if (index.dtype != Dt::I64 || y.dtype != x.dtype) return cudaErrorInvalidValue;
  IndexWalk w;
  int64_t total = 0;
  if (!make_index_walk(x, dim, index, y, w, total)) return cudaErrorInvalidValue;
  return dispatch_all(x.dtype, [&]<typename T>() -> cudaError_t {
    if (total == 0) return cudaSuccess;
    walk_copy_kernel<T, IndexWalk><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(y.data), w, total);
    return cudaGetLastError();
  });
}

cudaError_t index_add(const View& y, int dim, const View& index, const View& src,
                      cudaStream_t stream) {
  if (index.dtype != Dt::I64 || src.dtype != y.dtype) return cudaErrorInvalidValue;
  IndexWalk w;
  int64_t total = 0;
  if (!make_index_walk(y, dim, index, src, w, total)) return cudaErrorInvalidValue;
  return dispatch_numeric(y.dtype, [&]<typename T>() -> cudaError_t {
    if (total == 0) return cudaSuccess;
    walk_add_kernel<T, IndexWalk><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(y.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), w, total);
    return cudaGetLastError();
  });
}

cudaError_t gather(const View& x, int dim, const View& index, const View& y, cudaStream_t stream) {
  if (index.dtype != Dt::I64 || y.dtype != x.dtype) return cudaErrorInvalidValue;
  GatherWalk w;
  if (!make_gather_walk(x, dim, index, y, w)) return cudaErrorInvalidValue;
  const int64_t total = index.numel();
  return dispatch_all(x.dtype, [&]<typename T>() -> cudaError_t {
    if (total == 0) return cudaSuccess;
    walk_copy_kernel<T, GatherWalk><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const int64_t*>(index.data),
        static_cast<T*>(y.data), w, total);
    return cudaGetLastError();
  });
}

cudaError_t scatter_add(const View& y, int dim, const View& index, const View& src,
                        cudaStream_t stream) {
  if (index.dtype != Dt::I64 || src.dtype != y.dtype) return cudaErrorInvalidValue;
  GatherWalk w;
  if (!make_gather_walk(y, dim, index, src, w)) return cudaErrorInvalidValue;
  const int64_t total = index.numel();
  return dispatch_numeric(y.dtype, [&]<typename T>() -> cudaError_t {
    if (total == 0) return cudaSuccess;
    walk_add_kernel<T, GatherWalk><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(y.data), static_cast<const int64_t*>(index.data),
        static_cast<const T*>(src.data), w, total);
    return cudaGetLastError();
  });
}

// ---- index validation ----------------------------------------------------------------------

namespace {
/// first[0] = the smallest flat position i whose index[i] is neither `allowed` nor in [lo, hi).
///   index: int64, any strides   first: [1], set to INT64_MAX before the launch
__global__ void first_out_of_range_kernel(View index, int64_t n, int64_t lo, int64_t hi,
                                          int64_t allowed, unsigned long long* first) {
  const int64_t* ip = static_cast<const int64_t*>(index.data);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = ip[index.offset(i)];
    if (v != allowed && (v < lo || v >= hi)) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

__global__ void set_max_kernel(unsigned long long* first) { *first = ~0ull >> 1; }
}  // namespace

cudaError_t first_out_of_range(const View& index, int64_t lo, int64_t hi, int64_t allowed,
                               int64_t* first, cudaStream_t stream) {
  if (index.dtype != Dt::I64) return cudaErrorInvalidValue;
  auto* f = reinterpret_cast<unsigned long long*>(first);
  set_max_kernel<<<1, 1, 0, stream>>>(f);
  const int64_t n = index.numel();
  if (n > 0) {
    first_out_of_range_kernel<<<blocks_for(n), kThreads, 0, stream>>>(index, n, lo, hi, allowed, f);
  }
  return cudaGetLastError();
}

}  // namespace vitrine::cuda
