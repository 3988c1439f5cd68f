// Gradient clipping by global norm (see clip.h).
#include "nn/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::nn::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  VT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got {}", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    VT_CHECK(params[i].defined(), "clip_grad_norm_: parameter {} is an undefined tensor", i);
    if (params[i].grad().defined()) grads.push_back(params[i].grad());
  }
  // Squares summed in float64, a large gradient 2^20 elements at a time (a [50257, 768]
  // embedding's would otherwise take two 300 MB temporaries).
  constexpr int64_t kChunk = int64_t{1} << 20;
  auto sum_squares = [](const Tensor& g) {
    const Tensor g64 = g.to(kFloat64);
    return ops::sum(g64 * g64).item();
  };
  double sum_sq = 0;
  for (const Tensor& g : grads) {
    const int64_t n = g.numel();
    if (n <= kChunk || !g.is_contiguous()) {
      sum_sq += sum_squares(g);
      continue;
    }
    const Tensor flat = g.view({n});
    for (int64_t start = 0; start < n; start += kChunk)
      sum_sq += sum_squares(flat.narrow(0, start, std::min(kChunk, n - start)));
  }
  const double total_norm = std::sqrt(sum_sq);
  const double clip_coef = max_norm / (total_norm + 1e-6);
  if (clip_coef < 1) {
    for (Tensor& g : grads) g.mul_(clip_coef);
  }
  return total_norm;
}

}  // namespace vitrine::nn::optim
