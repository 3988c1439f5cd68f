// Launch sizes and dtype dispatch for the CUDA launchers. The dispatch is the CPU's
// dispatch_float / dispatch_numeric / dispatch_all (backends/dtype.h) with a status instead of an
// exception: each calls f.template operator()<T>() (which returns a cudaError_t) for the dtypes it
// takes, and returns cudaErrorInvalidValue for the others (the Backend class turns that into an
// Error naming the op).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

/// Threads per block of the grid-stride kernels.
constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `items` work items, per_block of them per block (items >
/// 0); at most 65535 * 8 (the loops cover any remainder).
inline unsigned blocks_for(int64_t items, int64_t per_block = kThreads) {
  constexpr int64_t kMaxBlocks = 65535 * 8;
  const int64_t b = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

/// The GPU's multiprocessors (read once; 100 if the query fails): kernels that split a reduction
/// into strips size the grid to fill the GPU about twice.
inline int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0)
      v = 100;
    return v;
  }();
  return n;
}

/// Strips of rows for a reduction over the rows of [rows, C] whose grid has col_blocks blocks per
/// strip: as many strips as fill the GPU about twice, each of at least min_rows rows (one strip
/// when there are fewer).
inline int64_t strips_to_fill(int64_t col_blocks, int64_t rows, int64_t min_rows) {
  return std::clamp<int64_t>((2 * sm_count() + col_blocks - 1) / col_blocks, 1,
                             std::max<int64_t>(1, rows / min_rows));
}

/// count elements of stream-ordered scratch (cudaMallocAsync; free with cudaFreeAsync on the same
/// stream), or nullptr with the error cleared where the device has no stream-ordered allocator.
template <typename A>
A* stream_scratch(int64_t count, cudaStream_t stream) {
  void* p = nullptr;
  if (cudaMallocAsync(&p, static_cast<size_t>(count) * sizeof(A), stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return static_cast<A*>(p);
}

/// float32 and float64.
template <typename F>
cudaError_t dispatch_float(Dt t, F&& f) {
  switch (t) {
    case Dt::F32:
      return f.template operator()<float>();
    case Dt::F64:
      return f.template operator()<double>();
    default:
      return cudaErrorInvalidValue;
  }
}
/// As dispatch_float, plus int64.
template <typename F>
cudaError_t dispatch_numeric(Dt t, F&& f) {
  if (t == Dt::I64) return f.template operator()<int64_t>();
  return dispatch_float(t, f);
}
/// As dispatch_numeric, plus bool.
template <typename F>
cudaError_t dispatch_all(Dt t, F&& f) {
  if (t == Dt::Bool) return f.template operator()<bool>();
  return dispatch_numeric(t, f);
}

}  // namespace vitrine::cuda
