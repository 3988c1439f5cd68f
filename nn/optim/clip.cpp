// Gradient clipping by global norm (see clip.h).
#include "nn/optim/clip.h"

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
  double sum_sq = 0;
  for (const Tensor& g : grads) {
    Tensor g64 = g.to(kFloat64);
    sum_sq += ops::sum(g64 * g64).item();
  }
  const double total_norm = std::sqrt(sum_sq);
  const double clip_coef = max_norm / (total_norm + 1e-6);
  if (clip_coef < 1) {
    for (Tensor& g : grads) g.mul_(clip_coef);
  }
  return total_norm;
}

}  // namespace vitrine::nn::optim
