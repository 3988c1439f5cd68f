// Losses as functions and modules, with torch.nn.functional's names, argument order, defaults and
// semantics (PyTorch 1.13). cross_entropy itself is the fused op ops::cross_entropy; the others
// are compositions of ops (autograd gives their gradients), except binary_cross_entropy, whose
// backward rule is PyTorch's own (below). Shapes: input and target have the same shape unless
// said otherwise; reduction None returns the per-element loss in that shape, Mean its mean, Sum
// its sum. The modules keep the options (and class weights as buffers, as PyTorch's
// _WeightedLoss) and call the functions.
#pragma once
#include "nn/module.h"
#include "ops/ops.h"

namespace vitrine::nn {

/// mean (or sum, or none) of (input - target)^2
Tensor mse_loss(const Tensor& input, const Tensor& target,
                ops::Reduction reduction = ops::Reduction::Mean);

/// |input - target|   (gradient sign(input - target), 0 where equal)
Tensor l1_loss(const Tensor& input, const Tensor& target,
               ops::Reduction reduction = ops::Reduction::Mean);

/// With z = |input - target|: 0.5 z^2 / beta where z < beta, else z - 0.5 beta. beta = 0 is
/// l1_loss; beta < 0 is an error.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      ops::Reduction reduction = ops::Reduction::Mean, double beta = 1.0);

/// With z = |input - target|: 0.5 z^2 where z < delta, else delta (z - 0.5 delta); delta > 0.
/// (huber_loss = delta * smooth_l1_loss with beta = delta.)
Tensor huber_loss(const Tensor& input, const Tensor& target,
                  ops::Reduction reduction = ops::Reduction::Mean, double delta = 1.0);

/// Negative log likelihood of log-probabilities: loss = -weight[t] input[n, t, d...] with
/// t = target[n, d...]. input [N, C], [N, C, d1, ...] or [C]; target int64 [N], [N, d1, ...] or
/// [] with values in [0, C) or ignore_index; weight [C] or undefined (all 1). Ignored targets
/// give 0 and weigh 0. Mean divides the sum by the sum of the weights of the non-ignored
/// targets (NaN when every target is ignored), as PyTorch. The targets' range is checked on the
/// host (a copy from the device for a GPU tensor).
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, ops::Reduction reduction = ops::Reduction::Mean);

/// -weight (target max(log input, -100) + (1 - target) max(log(1 - input), -100)), input in
/// [0, 1] (checked, one scalar read back from the device), weight broadcast to input's shape or
/// undefined. The gradient is PyTorch's:
///   d/dinput = weight (input - target) / max(input (1 - input), eps),  eps = 1e-12f
/// (finite at input 0 and 1, where the clamped logarithm's own derivative is not), and
///   d/dtarget = weight (log(1 - input) - log input),  d/dweight = the unweighted loss.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const Tensor& weight = Tensor(),
                            ops::Reduction reduction = ops::Reduction::Mean);

/// binary_cross_entropy(sigmoid(input), target) in PyTorch's stable form, with
/// m = max(-input, 0) and l = 1 + (pos_weight - 1) target:
///   weight ((1 - target) input + l (log(e^-m + e^(-input - m)) + m))
/// weight and pos_weight (e.g. [C] against input [N, C]) broadcast to input's shape or are
/// undefined (all 1).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = Tensor(),
                                        ops::Reduction reduction = ops::Reduction::Mean,
                                        const Tensor& pos_weight = Tensor());

/// kl_div's reductions: ops::Reduction's three and PyTorch's 'batchmean' (the sum divided by
/// input.size(0), the KL divergence per example; 1 for a 0-dim input). Mean, as PyTorch's
/// 'mean', divides by the number of elements.
enum class KLDivReduction { None, Mean, Sum, BatchMean };

/// Kullback-Leibler divergence of the log-probabilities input from target, pointwise:
///   target (log target - input)   (0 where target = 0, as xlogy), or with log_target
///   e^target (target - input)     (target holds log-probabilities)
Tensor kl_div(const Tensor& input, const Tensor& target,
              KLDivReduction reduction = KLDivReduction::Mean, bool log_target = false);
/// The same with one of ops::Reduction's three.
Tensor kl_div(const Tensor& input, const Tensor& target, ops::Reduction reduction,
              bool log_target = false);

/// With cos = sum(x1 x2) / sqrt((sum(x1^2) + eps) (sum(x2^2) + eps)) over the last dim, eps =
/// 1e-12f (ATen's EPSILON, a float: 9.999999960041972e-13): 1 - cos where target = 1, max(0, cos -
/// margin) where target = -1, 0 for any other target. x1, x2 [N, D] with target [N], or [D] with
/// []; target float or int64.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin = 0, ops::Reduction reduction = ops::Reduction::Mean);

/// ops::cross_entropy with fixed options: logits [N, C], int64 targets [N] (or [N, C, d1, ...]
/// and [N, d1, ...])
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

/// nll_loss with fixed options; weight [C] (a buffer "weight" when given).
class NLLLoss : public Module {
 public:
  explicit NLLLoss(const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                   ops::Reduction reduction = ops::Reduction::Mean);
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return nll_loss(input, target, weight, ignore_index, reduction);
  }
  std::string type_name() const override { return "NLLLoss"; }
  Tensor weight;
  int64_t ignore_index;
  ops::Reduction reduction;
};

/// binary_cross_entropy with fixed options (weight a buffer "weight" when given).
class BCELoss : public Module {
 public:
  explicit BCELoss(const Tensor& weight = Tensor(),
                   ops::Reduction reduction = ops::Reduction::Mean);
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy(input, target, weight, reduction);
  }
  std::string type_name() const override { return "BCELoss"; }
  Tensor weight;
  ops::Reduction reduction;
};

/// binary_cross_entropy_with_logits with fixed options (buffers "weight" and "pos_weight" when
/// given).
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(const Tensor& weight = Tensor(),
                             ops::Reduction reduction = ops::Reduction::Mean,
                             const Tensor& pos_weight = Tensor());
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
  }
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  Tensor weight;
  ops::Reduction reduction;
  Tensor pos_weight;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(ops::Reduction reduction = ops::Reduction::Mean) : reduction(reduction) {}
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return l1_loss(input, target, reduction);
  }
  std::string type_name() const override { return "L1Loss"; }
  ops::Reduction reduction;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(ops::Reduction reduction = ops::Reduction::Mean, double beta = 1.0)
      : reduction(reduction), beta(beta) {}
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return smooth_l1_loss(input, target, reduction, beta);
  }
  std::string type_name() const override { return "SmoothL1Loss"; }
  ops::Reduction reduction;
  double beta;
};

class HuberLoss : public Module {
 public:
  explicit HuberLoss(ops::Reduction reduction = ops::Reduction::Mean, double delta = 1.0)
      : reduction(reduction), delta(delta) {}
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return huber_loss(input, target, reduction, delta);
  }
  std::string type_name() const override { return "HuberLoss"; }
  ops::Reduction reduction;
  double delta;
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(KLDivReduction reduction = KLDivReduction::Mean, bool log_target = false)
      : reduction(reduction), log_target(log_target) {}
  explicit KLDivLoss(ops::Reduction reduction, bool log_target = false);
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return kl_div(input, target, reduction, log_target);
  }
  std::string type_name() const override { return "KLDivLoss"; }
  KLDivReduction reduction;
  bool log_target;
};

class CosineEmbeddingLoss : public Module {
 public:
  explicit CosineEmbeddingLoss(double margin = 0, ops::Reduction reduction = ops::Reduction::Mean)
      : margin(margin), reduction(reduction) {}
  using Module::forward;
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target) const {
    return cosine_embedding_loss(input1, input2, target, margin, reduction);
  }
  std::string type_name() const override { return "CosineEmbeddingLoss"; }
  double margin;
  ops::Reduction reduction;
};

}  // namespace vitrine::nn
