// Losses as modules and functions. cross_entropy itself is the fused op ops::cross_entropy.
#pragma once
#include "nn/module.h"
#include "ops/ops.h"

namespace vitrine::nn {

/// mean (or sum, or none) of (input - target)^2
Tensor mse_loss(const Tensor& input, const Tensor& target,
                ops::Reduction reduction = ops::Reduction::Mean);

/// ops::cross_entropy with fixed options: logits [N, C], int64 targets [N]
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(double label_smoothing = 0,
                            ops::Reduction reduction = ops::Reduction::Mean,
                            int64_t ignore_index = -100)
      : label_smoothing(label_smoothing), reduction(reduction), ignore_index(ignore_index) {}
  using Module::forward;
  Tensor forward(const Tensor& logits, const Tensor& target) const {
    return ops::cross_entropy(logits, target, reduction, label_smoothing, ignore_index);
  }
  std::string type_name() const override { return "CrossEntropyLoss"; }
  double label_smoothing;
  ops::Reduction reduction;
  int64_t ignore_index;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(ops::Reduction reduction = ops::Reduction::Mean) : reduction(reduction) {}
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction);
  }
  std::string type_name() const override { return "MSELoss"; }
  ops::Reduction reduction;
};

}  // namespace vitrine::nn
