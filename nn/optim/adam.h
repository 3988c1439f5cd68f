// Adam and AdamW, as torch.optim.Adam / AdamW (single-tensor implementation, amsgrad off). With
// g the gradient, t the parameter's step count (1 on its first update), per element:
//   AdamW: p = p (1 - lr wd)              Adam: g = g + wd p   (L2 penalty in the gradient)
//   m = b1 m + (1 - b1) g                 v = b2 v + (1 - b2) g^2
//   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// m (exp_avg) and v (exp_avg_sq) start as zeros on the first step the parameter has a gradient.
// lr and wd are per group; betas and eps are per optimizer.
#pragma once
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim {

struct AdamOptions {
  double lr = 1e-3;  // only for the constructor from a parameter list
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // only for the constructor from a parameter list
};

/// AdamOptions with AdamW's default weight decay (0.01, as PyTorch).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Adam : public Optimizer {
 public:
  /// One group holding params, with options.lr and options.weight_decay.
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  /// Groups keep their own lr and weight_decay; options supply betas and eps.
  explicit Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});

  std::string type_name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  using Optimizer::step;
  void step() override;

  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  /// Updates made so far to parameter i of group g (0 before its first gradient).
  int64_t step_count(size_t g, size_t i) const;

  /// Tensors "<group>.<index>.exp_avg" and ".exp_avg_sq" of every parameter updated at least
  /// once; JSON {"type", "beta1", "beta2", "eps", "groups": [{"name", "lr", "initial_lr",
  /// "weight_decay", "num_params", "steps": [...]}]}. load_state restores the hyperparameters too,
  /// as PyTorch's load_state_dict, and casts state tensors to their parameter's dtype and device.
  NamedTensors state_tensors() const override;
  nlohmann::json state_json() const override;
  void load_state(const NamedTensors& tensors, const nlohmann::json& json) override;

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled);

 private:
  struct ParamState {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq;
  };
  /// state_[g][i] belongs to groups_[g].params[i] (grown when groups grow).
  std::vector<std::vector<ParamState>> state_;
  double beta1_, beta2_, eps_;
  bool decoupled_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter): the decay multiplies the parameter by
/// (1 - lr wd) before the Adam update instead of entering the gradient.
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  explicit AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

}  // namespace vitrine::nn::optim
