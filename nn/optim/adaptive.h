// Adadelta, RMSprop and Adagrad, as torch.optim's (single-tensor implementations, PyTorch 1.13),
// composed from ops under no-grad so that they run on every device and dtype. Per element, with g
// the gradient (-g with maximize), p the parameter, t its step count (1 on its first update):
//
//   every one:  g = g + wd p                                           (wd: the group's)
//   Adadelta:   v = rho v + (1 - rho) g^2              (square_avg)
//               d = sqrt(u + eps) / sqrt(v + eps) * g
//               u = rho u + (1 - rho) d^2              (acc_delta)
//               p = p - lr d
//   RMSprop:    v = alpha v + (1 - alpha) g^2          (square_avg)
//               centered: m = alpha m + (1 - alpha) g  (grad_avg);  a = sqrt(v - m^2) + eps
//               else:                                               a = sqrt(v) + eps
//               momentum: b = momentum b + g / a       (momentum_buffer);  p = p - lr b
//               else:                                  p = p - lr g / a
//   Adagrad:    s = s + g^2                            (sum, from initial_accumulator_value)
//               p = p - lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)
//
// The state slots carry PyTorch's names and start as zeros (Adagrad's sum as its initial value)
// on a parameter's first gradient. lr and wd are per group; the rest per optimizer.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim {

/// An optimizer whose per-parameter state is a step count and named tensors of the parameter's
/// shape: step() walks the parameters that have a gradient and calls update(); the state is
/// saved and loaded generically as "<group>.<index>.<slot>" tensors and JSON {"type", the
/// hyperparameters (hyper_json), "groups": [{"name", "lr", "initial_lr", "weight_decay",
/// "num_params", "steps": [...]}]}, restoring the hyperparameters as PyTorch's load_state_dict.
class SlotOptimizer : public Optimizer {
 public:
  using Optimizer::step;
  void step() override;
  /// Updates made so far to parameter i of group g (0 before its first gradient).
  int64_t step_count(size_t g, size_t i) const;

  NamedTensors state_tensors() const override;
  nlohmann::json state_json() const override;
  void load_state(const NamedTensors& tensors, const nlohmann::json& json) override;

 protected:
  struct State {
    int64_t step = 0;
    std::map<std::string, Tensor> slots;
  };
  SlotOptimizer(const std::string& type, std::vector<ParamGroup> groups);
  /// The slots a parameter's state holds (PyTorch's names).
  virtual std::vector<std::string> slot_names() const = 0;
  /// A slot's value before the first update (zeros unless overridden).
  virtual Tensor initial_slot(const std::string& slot, const Tensor& p) const;
  /// One update of p (contiguous) from its gradient grad; state.step is already counted.
  virtual void update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
                      State& state) const = 0;
  /// The optimizer's own hyperparameters as JSON, and back (checked).
  virtual nlohmann::json hyper_json() const = 0;
  virtual void load_hyper(const nlohmann::json& j) = 0;

 private:
  std::vector<std::vector<State>> state_;  // state_[g][i] belongs to groups_[g].params[i]
};

struct AdadeltaOptions {
  double lr = 1.0;  // only for the constructor from a parameter list
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;  // only for the constructor from a parameter list
  bool maximize = false;
};

/// torch.optim.Adadelta (Zeiler 2012, with a learning rate): state square_avg and acc_delta.
class Adadelta : public SlotOptimizer {
 public:
  explicit Adadelta(std::vector<Tensor> params, const AdadeltaOptions& options = {});
  explicit Adadelta(std::vector<ParamGroup> groups, const AdadeltaOptions& options = {});
  std::string type_name() const override { return "Adadelta"; }

 protected:
  std::vector<std::string> slot_names() const override { return {"square_avg", "acc_delta"}; }
  void update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
              State& state) const override;
  nlohmann::json hyper_json() const override;
  void load_hyper(const nlohmann::json& j) override;

 private:
  AdadeltaOptions o_;
};

struct RMSpropOptions {
  double lr = 1e-2;  // only for the constructor from a parameter list
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;  // only for the constructor from a parameter list
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

/// torch.optim.RMSprop (Hinton's lecture 6e; centered as Graves 2013): state square_avg, and
/// momentum_buffer with momentum > 0, grad_avg when centered.
class RMSprop : public SlotOptimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, const RMSpropOptions& options = {});
  explicit RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& options = {});
  std::string type_name() const override { return "RMSprop"; }

 protected:
  std::vector<std::string> slot_names() const override;
  void update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
              State& state) const override;
  nlohmann::json hyper_json() const override;
  void load_hyper(const nlohmann::json& j) override;

 private:
  RMSpropOptions o_;
};

struct AdagradOptions {
  double lr = 1e-2;  // only for the constructor from a parameter list
  double lr_decay = 0;
  double weight_decay = 0;  // only for the constructor from a parameter list
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

/// torch.optim.Adagrad (Duchi et al. 2011): state sum, starting at initial_accumulator_value.
class Adagrad : public SlotOptimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, const AdagradOptions& options = {});
  explicit Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options = {});
  std::string type_name() const override { return "Adagrad"; }

 protected:
  std::vector<std::string> slot_names() const override { return {"sum"}; }
  Tensor initial_slot(const std::string& slot, const Tensor& p) const override;
  void update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
              State& state) const override;
  nlohmann::json hyper_json() const override;
  void load_hyper(const nlohmann::json& j) override;

 private:
  AdagradOptions o_;
};

}  // namespace vitrine::nn::optim
