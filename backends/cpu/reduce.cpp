// CPU reductions. x: any strides; y: contiguous, same rank as x, size 1 on the reduced dims.
// Sums accumulate in double (int64 in int64) over fixed-size chunks combined in order, so the
// result does not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {
constexpr int64_t kChunk = 16384;

/// Whether dims lie in memory as one contiguous row-major block (element o at offset o).
bool kept_contiguous(const Dims& shape, const Dims& strides) {
  int64_t expect = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}
}  // namespace

void CpuBackend::reduce(ReduceOp op, const Strided& x, const Strided& y) {
  VT_ASSERT(x.shape.size() == y.shape.size() && y.is_contiguous());
  Dims kept_shape, kept_xs, red_shape, red_xs;
  for (int i = 0; i < x.shape.size(); ++i) {
    if (y.shape[i] == x.shape[i]) {
      kept_shape.push_back(x.shape[i]);
      kept_xs.push_back(x.strides[i]);
    } else {
      VT_ASSERT(y.shape[i] == 1);
      red_shape.push_back(x.shape[i]);
      red_xs.push_back(x.strides[i]);
    }
  }
  const int64_t nout = y.numel(), m = red_shape.numel();
  const bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  VT_ASSERT(!arg || (red_shape.size() <= 1 && y.dtype == DType::Int64));
  VT_CHECK(m > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean,
           "reduce: cannot take max/min/argmax/argmin over an empty dim (shape {})", x.shape);

  // Whether the reduced dims are one contiguous run (a pooling's last two): element i of an
  // output's run at offset i.
  const bool red_unit = kept_contiguous(red_shape, red_xs);
  // x offsets of every output element.
  std::vector<int64_t> base(nout);
  for_offsets(kept_shape, kept_xs, 0, nout, [&](int64_t i, int64_t off) { base[i] = off; });

  dispatch_numeric(x.dtype, "reduce", [&]<typename T>() {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    const T* xp = x.ptr<T>();
    const bool is_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
    // One chunk of one output: returns (value, index) partial.
    auto partial = [&](int64_t o, int64_t begin, int64_t end) -> std::pair<Acc, int64_t> {
      if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
        Acc s = 0;
        if (red_unit) {  // (the same sum in the same order, without the odometer)
          const T* xo = xp + base[o];
          for (int64_t i = begin; i < end; ++i) s += static_cast<Acc>(xo[i]);
          return {s, 0};
        }
        for_offsets(red_shape, red_xs, begin, end,
                    [&](int64_t, int64_t off) { s += static_cast<Acc>(xp[base[o] + off]); });
        return {s, 0};
      }
      Acc best = is_max ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
      int64_t where = -1;
      for_offsets(red_shape, red_xs, begin, end, [&](int64_t i, int64_t off) {
        Acc v = static_cast<Acc>(xp[base[o] + off]);
        bool better = where < 0 || (is_max ? v > best : v < best);
        if constexpr (std::is_floating_point_v<T>)
          better = better || (std::isnan(v) && !std::isnan(best));
        if (better) {
          best = v;
          where = i;
        }
      });
      return {best, where};
    };
    auto combine = [&](std::pair<Acc, int64_t> a, std::pair<Acc, int64_t> b) {
      if (op == ReduceOp::Sum || op == ReduceOp::Mean)
        return std::pair<Acc, int64_t>{a.first + b.first, 0};
      if (a.second < 0) return b;
      if (b.second < 0) return a;
      bool take_b = is_max ? b.first > a.first : b.first < a.first;
      if constexpr (std::is_floating_point_v<T>)  // a NaN wins, whichever chunk it is in
        take_b = std::isnan(b.first) ? !std::isnan(a.first) : take_b && !std::isnan(a.first);
      return take_b ? b : a;
    };
    auto write = [&](int64_t o, std::pair<Acc, int64_t> r) {
      if (arg)
        y.ptr<int64_t>()[o] = r.second;
      else if (op == ReduceOp::Mean)
        y.ptr<T>()[o] = static_cast<T>(static_cast<double>(r.first) / static_cast<double>(m));
      else
        y.ptr<T>()[o] = static_cast<T>(r.first);
    };
    const int64_t nchunk = std::max<int64_t>(1, (m + kChunk - 1) / kChunk);
    auto chunk = [&](int64_t o, int64_t c) {
      return partial(o, c * kChunk, std::min(m, (c + 1) * kChunk));
    };
    if ((op == ReduceOp::Sum || op == ReduceOp::Mean) && kept_contiguous(kept_shape, kept_xs) &&
        nout >= 8 && m > 1) {
      // Column sums (a bias gradient: [rows, C] -> [C]): output o reads x[base0 + roff[i] + o],
      // so a pass over reduced index i updates every output with a contiguous, vectorised row.
      // Each output still adds its elements in the same order and the same chunks as above,
      // so the result is bit for bit the same.
      std::vector<int64_t> roff(static_cast<size_t>(m));
      for_offsets(red_shape, red_xs, 0, m, [&](int64_t i, int64_t off) { roff[i] = off; });
      const T* x0 = xp + base[0];
      const int64_t block = 64, nblock = (nout + block - 1) / block;
      parallel_for(nblock, block * m, [&](int64_t b) {
        const int64_t o0 = b * block, width = std::min(block, nout - o0);
        Acc total[block], part[block];
        for (int64_t c = 0; c < nchunk; ++c) {
          std::fill(part, part + width, Acc(0));
          for (int64_t i = c * kChunk; i < std::min(m, (c + 1) * kChunk); ++i) {
            const T* row = x0 + roff[i] + o0;
            for (int64_t j = 0; j < width; ++j) part[j] += static_cast<Acc>(row[j]);
          }
          for (int64_t j = 0; j < width; ++j) total[j] = c == 0 ? part[j] : total[j] + part[j];
        }
        for (int64_t j = 0; j < width; ++j) write(o0 + j, {total[j], 0});
      });
      return;
    }
    if (nchunk == 1 || nout >= pool_threads()) {
      parallel_for(nout, m, [&](int64_t o) {
        auto r = chunk(o, 0);
        for (int64_t c = 1; c < nchunk; ++c) r = combine(r, chunk(o, c));
        write(o, r);
      });
    } else {
      std::vector<std::pair<Acc, int64_t>> parts(nout * nchunk);
      parallel_for(nout * nchunk, kChunk, [&](int64_t t) {
        int64_t o = t / nchunk, c = t % nchunk;
        parts[t] = chunk(o, c);
      });
      for (int64_t o = 0; o < nout; ++o) {
        auto r = parts[o * nchunk];
        for (int64_t c = 1; c < nchunk; ++c) r = combine(r, parts[o * nchunk + c]);
        write(o, r);
      }
    }
  });
}

namespace {
/// parts [L, N] -> parts[0] = the pairwise tree sum (Backend::tree_sum), on columns [c0, c1):
/// each level's adds over the block while its L rows (at most 16 KiB of them) stay in L1.
template <typename T>
void tree_sum_block(T* parts, int64_t L, int64_t N, int64_t c0, int64_t c1) {
  for (int64_t s = 1; s < L; s *= 2)
    for (int64_t i = 0; i + s < L; i += 2 * s) {
      T* a = parts + i * N;
      const T* b = parts + (i + s) * N;
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) a[j] += b[j];
    }
}
}  // namespace

void CpuBackend::tree_sum(const Strided& parts) {
  VT_ASSERT(parts.shape.size() == 2 && parts.is_contiguous());
  if (parts.dtype != DType::Float32 && parts.dtype != DType::Float64)
    return Backend::tree_sum(parts);
  const int64_t L = parts.shape[0], N = parts.shape[1];
  dispatch_float(parts.dtype, "tree_sum", [&]<typename T>() {
    // Blocks of columns whose L rows fill at most 16 KiB.
    const int64_t block = std::max<int64_t>(16, 16384 / static_cast<int64_t>(sizeof(T) * L));
    const int64_t blocks = (N + block - 1) / block;
    parallel_for(blocks, L * block, [&](int64_t k) {
      tree_sum_block(parts.ptr<T>(), L, N, k * block, std::min(N, (k + 1) * block));
    });
  });
}

}  // namespace vitrine::cpu
