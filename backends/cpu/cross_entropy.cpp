// CPU cross entropy with label smoothing and ignore_index, as PyTorch's F.cross_entropy with
// class-index targets. logits, dlogits: contiguous [N, C]; target: int64 [N]; loss, dloss: [N].
// With q = (1 - s) onehot(t) + s / C and lp = log_softmax(logits_n):
//   loss_n = -sum_c q_c lp_c = -(1 - s) lp_t - (s / C) sum_c lp_c
//   dlogits_n = dloss_n * (softmax(logits_n) - q)
// Rows whose target is ignore_index get loss 0 and gradient 0. Sums run in double, one row per
// thread, so results do not depend on the thread count. float32 rows take their exponentials
// from simd.h's exp_approx (relative error below 2e-7) through simd::exp_shifted_row, float64
// rows from libm: a GPT-2 step's 50257-wide rows spent a tenth of the step in scalar exp.
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

/// Every target is ignore_index or in [0, C); checked before the parallel loops (no throwing
/// from inside OpenMP).
void check_targets(const Strided& target, int64_t n, int64_t classes, int64_t ignore_index) {
  VT_ASSERT(target.dtype == DType::Int64 && target.numel() == n);
  const int64_t* t = target.ptr<int64_t>();
  const int64_t stride = target.strides.empty() ? 1 : target.strides[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = t[i * stride];
    VT_CHECK(v == ignore_index || (v >= 0 && v < classes),
             "cross_entropy: target {} (at index {}) is out of range for {} classes (expected 0 "
             "<= target < {}, or ignore_index {})",
             v, i, classes, classes, ignore_index);
  }
}

/// max and log sum exp(x - max) of one row. scratch: cols floats (float32 rows only).
template <typename T>
std::pair<double, double> row_stats(const T* x, int64_t cols, float* scratch = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    float m = 0;
    const double s = simd::exp_shifted_row(x, scratch, cols, &m);
    return {m, std::log(s)};
  }
  double m = -INFINITY;
  for (int64_t c = 0; c < cols; ++c)
    if (x[c] > m) m = x[c];
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += std::exp(x[c] - m);
  return {m, std::log(s)};
}

}  // namespace

void CpuBackend::cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                               double label_smoothing, const Strided& loss) {
  VT_ASSERT(logits.shape.size() == 2 && logits.is_contiguous() && loss.is_contiguous());
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  VT_ASSERT(loss.numel() == n && loss.dtype == logits.dtype);
  check_targets(target, n, classes, ignore_index);
  const int64_t tstride = target.strides.empty() ? 1 : target.strides[0];
  const double s = label_smoothing;
  dispatch_float(logits.dtype, "cross_entropy", [&]<typename T>() {
    parallel_for(n, 2 * classes, [&](int64_t i) {
      const int64_t t = target.ptr<int64_t>()[i * tstride];
      T* out = loss.ptr<T>() + i;
      if (t == ignore_index) {
        *out = 0;
        return;
      }
      const T* x = logits.ptr<T>() + i * classes;
      thread_local std::vector<float> scratch;
      if constexpr (std::is_same_v<T, float>) scratch.resize(static_cast<size_t>(classes));
      const auto [m, lse] = row_stats(x, classes, scratch.data());
      const double shift = m + lse;  // lp_c = x_c - shift
      double l = -(1 - s) * (x[t] - shift);
      if (s > 0) {
        double sum_lp = 0;
        for (int64_t c = 0; c < classes; ++c) sum_lp += x[c] - shift;
        l -= s / static_cast<double>(classes) * sum_lp;
      }
      *out = static_cast<T>(l);
    });
  });
}

void CpuBackend::cross_entropy_backward(const Strided& logits, const Strided& target,
                                        int64_t ignore_index, double label_smoothing,
                                        const Strided& dloss, const Strided& dlogits) {
  VT_ASSERT(logits.shape.size() == 2 && logits.is_contiguous() && dlogits.is_contiguous());
  VT_ASSERT(dlogits.shape == logits.shape && dlogits.dtype == logits.dtype);
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  VT_ASSERT(dloss.numel() == n && dloss.dtype == logits.dtype && dloss.is_contiguous());
  check_targets(target, n, classes, ignore_index);
  const int64_t tstride = target.strides.empty() ? 1 : target.strides[0];
  const double s = label_smoothing;
  dispatch_float(logits.dtype, "cross_entropy_backward", [&]<typename T>() {
    parallel_for(n, 2 * classes, [&](int64_t i) {
      const int64_t t = target.ptr<int64_t>()[i * tstride];
      T* d = dlogits.ptr<T>() + i * classes;
      if (t == ignore_index) {
        for (int64_t c = 0; c < classes; ++c) d[c] = 0;
        return;
      }
      const T* x = logits.ptr<T>() + i * classes;
      const double g = dloss.ptr<T>()[i], off = s / static_cast<double>(classes);
      if constexpr (std::is_same_v<T, float>) {
        // d = e^{x - m} first (the row's scratch), then g (d / sum - q).
        float m = 0;
        const double sum = simd::exp_shifted_row(x, d, classes, &m);
        const float a = static_cast<float>(g / sum), b = static_cast<float>(g * off);
        for (int64_t c = 0; c < classes; ++c) d[c] = d[c] * a - b;
        d[t] -= static_cast<float>(g * (1 - s));
      } else {
        const auto [m, lse] = row_stats(x, classes);
        for (int64_t c = 0; c < classes; ++c) {
          const double q = (c == t ? 1 - s : 0) + off;
          d[c] = static_cast<T>(g * (std::exp(x[c] - m - lse) - q));
        }
      }
    });
  });
}

}  // namespace vitrine::cpu
