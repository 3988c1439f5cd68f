// Reflection and replication padding as index_select along each padded dim (see padding.h).
#include "ops/padding.h"

#include <algorithm>

#include "ops/helpers.h"

namespace vitrine::ops {

namespace {

enum class Mode { Reflect, Replicate };

Tensor pad_by_index(const Tensor& x, const std::vector<int64_t>& pads, Mode mode, const char* op) {
  detail::check_defined(x, op, "x");
  VT_CHECK(pads.size() % 2 == 0 && static_cast<int>(pads.size()) <= 2 * x.dim(),
           "{}: {} pad values for a tensor of shape {} (expected an even count, at most {})", op,
           pads.size(), x.shape(), 2 * x.dim());
  Tensor y = x;
  for (size_t k = 0; k < pads.size(); k += 2) {
    int d = x.dim() - 1 - static_cast<int>(k / 2);
    int64_t n = x.size(d), lo = pads[k], hi = pads[k + 1];
    if (lo == 0 && hi == 0) continue;
    VT_CHECK(n > 0, "{}: dim {} of input {} is empty; it cannot be padded", op, d, x.shape());
    if (mode == Mode::Reflect)
      VT_CHECK(lo < n && hi < n,
               "{}: padding ({}, {}) of dim {} must be less than its size {} (input shape {})", op,
               lo, hi, d, n, x.shape());
    int64_t out = n + lo + hi;
    VT_CHECK(out > 0, "{}: padding ({}, {}) leaves dim {} of input {} with size {} (expected >= 1)",
             op, lo, hi, d, x.shape(), out);
    std::vector<int64_t> index(static_cast<size_t>(out));
    for (int64_t i = 0; i < out; ++i) {
      int64_t j = i - lo;
      if (mode == Mode::Reflect)
        j = j < 0 ? -j : (j > n - 1 ? 2 * (n - 1) - j : j);
      else
        j = std::clamp<int64_t>(j, 0, n - 1);
      index[static_cast<size_t>(i)] = j;
    }
    y = index_select(y, d, from_vector(index).to(x.device()));
  }
  return y;
}

}  // namespace

Tensor reflection_pad(const Tensor& x, const std::vector<int64_t>& pads) {
  return pad_by_index(x, pads, Mode::Reflect, "reflection_pad");
}

Tensor replication_pad(const Tensor& x, const std::vector<int64_t>& pads) {
  return pad_by_index(x, pads, Mode::Replicate, "replication_pad");
}

}  // namespace vitrine::ops
