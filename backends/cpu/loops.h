// The CPU's strided loop: visits every element of a shape, given N stride sets (one per operand,
// in elements; 0 on broadcast dims). Dims that are contiguous for every operand are merged, the
// innermost dim is cut into blocks, and blocks run in parallel (OpenMP) when the work is large.
// The row function receives each operand's offset of a block's first element and the block's
// length; within the block operand k advances by inner[k].
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

#include "backends/cpu/thread_pool.h"
#include "backends/shape.h"

namespace vitrine::cpu {

/// Elements below which a loop stays on one thread.
constexpr int64_t kParallelGrain = 32768;
constexpr int64_t kBlock = 4096;
/// Chunks per thread in a parallel loop. The threads take chunks as they come
/// (backends/cpu/thread_pool.h), not a fixed share each: on a busy machine the threads that run
/// take the work of one the operating system has put aside (docs/performance.md). Every item is
/// still computed by one thread in the same way, so results do not depend on who takes it.
constexpr int64_t kChunksPerThread = 8;

/// Items per chunk for n items on the current thread count.
inline int64_t chunk_of(int64_t n) {
  return std::max<int64_t>(1, n / (int64_t{pool_threads()} * kChunksPerThread));
}

template <size_t N>
struct Loop {
  Dims shape;
  std::array<Dims, N> strides;

  Loop(const Dims& s, const std::array<Dims, N>& st) {
    // Drop size-1 dims, then merge dim i into i+1 where every operand is contiguous across them.
    for (int i = 0; i < s.size(); ++i) {
      if (s[i] == 1) continue;
      int n = shape.size();
      bool merge = n > 0;
      for (size_t k = 0; k < N && merge; ++k) merge = strides[k][n - 1] == st[k][i] * s[i];
      if (merge) {
        shape[n - 1] *= s[i];
        for (size_t k = 0; k < N; ++k) strides[k][n - 1] = st[k][i];
      } else {
        shape.push_back(s[i]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(st[k][i]);
      }
    }
    if (shape.empty()) {  // a single element
      shape.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  template <typename RowFn>
  void run(RowFn&& row) const {
    if (shape.numel() == 0) return;
    const int nd = shape.size();
    const int64_t inner = shape[nd - 1];
    const int64_t nblk = (inner + kBlock - 1) / kBlock;
    const int64_t outer = shape.numel() / inner;
    const int64_t total = outer * nblk;
    std::array<int64_t, N> in;
    for (size_t k = 0; k < N; ++k) in[k] = strides[k][nd - 1];
    const bool par = shape.numel() >= kParallelGrain && total > 1;
    const auto blocks = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        int64_t r = t / nblk, b = t % nblk;
        std::array<int64_t, N> off{};
        for (int d = nd - 2; d >= 0; --d) {
          int64_t i = r % shape[d];
          r /= shape[d];
          for (size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
        }
        int64_t start = b * kBlock;
        for (size_t k = 0; k < N; ++k) off[k] += start * in[k];
        row(off, std::min(kBlock, inner - start), in);
      }
    };
    if (par)
      parallel_chunks(total, chunk_of(total), blocks);
    else
      blocks(0, total);
  }
};

/// Runs f(i) for i in [0, n), in parallel (chunks of chunk_of(n) items, taken as threads come
/// free) when n * work_per_item is large.
template <typename F>
void parallel_for(int64_t n, int64_t work_per_item, F&& f) {
  const auto items = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) f(i);
  };
  if (n > 1 && n * work_per_item >= kParallelGrain)
    parallel_chunks(n, chunk_of(n), items);
  else
    items(0, n);
}

/// Offsets of flat indices [begin, end) of a (shape, strides) space, visited in row-major order.
template <typename F>
void for_offsets(const Dims& shape, const Dims& strides, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;  // also keeps a zero-size dim out of the divisions below
  const int nd = shape.size();
  if (nd == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  Dims idx = Dims::filled(nd, 0);
  int64_t r = begin, off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = r % shape[d];
    r /= shape[d];
    off += idx[d] * strides[d];
  }
  for (int64_t m = begin; m < end; ++m) {
    f(m, off);
    for (int d = nd - 1; d >= 0; --d) {  // odometer step
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
}

}  // namespace vitrine::cpu
