// Optimizer base: a flat list of parameter groups, each with its own options, and per-parameter
// state tensors; step() updates parameters in place through a backend kernel under no-grad.
// Subclasses: SGD (sgd.h), Adam and AdamW (adam.h), with PyTorch's exact update rules.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/module.h"

namespace vitrine::nn::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0;
  std::string name;  // optional label ("decay", "no_decay")
  /// The lr the schedule scales (set from lr when the optimizer is built).
  double initial_lr = -1;
};

/// Two groups, as timm / most ViT recipes (timm's param_groups_weight_decay): weight decay on
/// weights with >= 2 dims, none on biases and norms (1-D; exempt_1d false decays them too) and on
/// parameters whose name contains any of no_decay_names (e.g. "pos_embed", "cls_token"). Frozen
/// parameters (requires_grad false) are left out. ({}, false): every parameter decays, as
/// torch.optim.Adam(model.parameters(), weight_decay=...).
std::vector<ParamGroup> param_groups_with_decay(
    const Module& model, double lr, double weight_decay,
    const std::vector<std::string>& no_decay_names = {"pos_embed", "cls_token", "register_tokens"},
    bool exempt_1d = true);

/// PyTorch's closure: re-evaluates the model (zero_grad, the loss, backward) and returns the loss.
using LossClosure = std::function<Tensor()>;

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  virtual std::string type_name() const = 0;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// PyTorch's step(closure): runs closure with gradients on (whatever the caller's grad mode),
  /// then one update; returns closure's loss. An optimizer that needs the loss several times per
  /// step (LBFGS) overrides it. A class that overrides step() says `using Optimizer::step;` so
  /// that both stay callable on it.
  virtual Tensor step(const LossClosure& closure);
  void zero_grad(bool set_to_none = true);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// Sets every group's lr to initial_lr * factor (what schedules call).
  void scale_lr(double factor);

  /// The optimizer's state: tensors named "<group>.<index>.<slot>" (e.g. "0.3.exp_avg") and a
  /// JSON object with the hyperparameters and step counts. load_state checks names and shapes.
  virtual NamedTensors state_tensors() const = 0;
  virtual nlohmann::json state_json() const = 0;
  virtual void load_state(const NamedTensors& tensors, const nlohmann::json& json) = 0;

 protected:
  std::vector<ParamGroup> groups_;
};

}  // namespace vitrine::nn::optim
