// SGD with momentum, dampening, Nesterov and weight decay, as torch.optim.SGD. Per element, with g
// the gradient:
//   g = g + wd p
//   buf = g on the first step, then buf = momentum buf + (1 - dampening) g   (momentum != 0)
//   g = nesterov ? g + momentum buf : buf                                    (momentum != 0)
//   p = p - lr g
// lr and wd are per group; momentum, dampening and nesterov are per optimizer.
#pragma once
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim {

struct SGDOptions {
  double lr = 1e-3;  // only for the constructor from a parameter list
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // only for the constructor from a parameter list
  bool nesterov = false;    // needs momentum > 0 and dampening == 0
};

class SGD : public Optimizer {
 public:
  /// One group holding params, with options.lr and options.weight_decay.
  explicit SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  /// Groups keep their own lr and weight_decay; options supply momentum, dampening, nesterov.
  explicit SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});

  std::string type_name() const override { return "SGD"; }
  using Optimizer::step;
  void step() override;

  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }

  /// Tensors "<group>.<index>.momentum_buffer" (parameters that have one); JSON {"type",
  /// "momentum", "dampening", "nesterov", "groups": [{"name", "lr", "initial_lr", "weight_decay",
  /// "num_params", "has_momentum_buffer": [...]}]}. load_state restores the hyperparameters too,
  /// as PyTorch's load_state_dict, and casts buffers to their parameter's dtype and device.
  NamedTensors state_tensors() const override;
  nlohmann::json state_json() const override;
  void load_state(const NamedTensors& tensors, const nlohmann::json& json) override;

 private:
  /// buffers_[g][i] belongs to groups_[g].params[i]; undefined until its first step.
  std::vector<std::vector<Tensor>> buffers_;
  double momentum_, dampening_;
  bool nesterov_;
};

}  // namespace vitrine::nn::optim
