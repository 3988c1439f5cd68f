// Internal helpers shared by the optimizers (sgd.cpp, adam.cpp); defined in optimizer.cpp. Not
// part of the public API.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/optim/optimizer.h"

namespace vitrine::nn::optim::detail {

/// Checks groups (at least one parameter, lr >= 0, weight_decay >= 0, defined float32/float64 leaf
/// tensors, none twice) with errors that start with `type`; sets initial_lr = lr where unset.
std::vector<ParamGroup> validated(const std::string& type, std::vector<ParamGroup> groups);

/// A single group holding params (the constructors that take a plain parameter list).
std::vector<ParamGroup> one_group(std::vector<Tensor> params, double lr, double weight_decay);

/// "param group 1 (\"no_decay\")", for messages.
std::string group_label(const ParamGroup& group, size_t g);

/// The gradient step() uses for parameter i of group g, contiguous; undefined when it has none.
/// Throws when its dtype or device differs from the parameter's.
Tensor step_grad(const std::string& type, const ParamGroup& group, size_t g, size_t i);

/// Runs update(p) on parameter p when contiguous, else on a contiguous copy written back.
template <typename F>
void update_in_place(const Tensor& p, F&& update) {
  if (p.is_contiguous()) {
    update(p);
  } else {
    Tensor work = p.contiguous(), target = p;
    update(work);
    target.copy_(work);
  }
  p.bump_version();
}

/// Checks that a state tensor made earlier still fits its parameter (shape, dtype, device).
void check_state_fits(const std::string& type, const Tensor& state, const std::string& key,
                      const Tensor& p);

/// The state key of a slot: "<group>.<index>.<slot>".
std::string state_key(size_t g, size_t i, const std::string& slot);

/// The hyperparameters every group has: {name, lr, initial_lr, weight_decay, num_params}.
nlohmann::json group_json(const ParamGroup& group);

/// Adam(W)'s state JSON, which ZeroAdam writes too so that checkpoints interchange:
/// {type, beta1, beta2, eps, groups: [group_json(g) + {"steps": [steps(g, i) for each i]}]}.
nlohmann::json adam_state_json(const std::string& type, double beta1, double beta2, double eps,
                               const std::vector<ParamGroup>& groups,
                               const std::function<int64_t(size_t g, size_t i)>& steps);

/// Checks that j["groups"] matches groups (count, parameter counts per group) and that j["type"]
/// is type. Throws with a message naming the first mismatch.
void check_state_groups(const std::string& type, const std::vector<ParamGroup>& groups,
                        const nlohmann::json& j);

/// Restores lr, initial_lr and weight_decay of every group from j["groups"] (already checked).
void load_group_hyperparameters(std::vector<ParamGroup>& groups, const nlohmann::json& j);

/// Reads state tensors by name, checking shapes against the parameters; remembers which names it
/// was asked for so that unexpected ones can be reported.
class StateReader {
 public:
  StateReader(std::string type, const NamedTensors& tensors);
  /// A copy of tensor `key` in p's dtype and on p's device (as PyTorch's load_state_dict casts);
  /// throws when it is missing or its shape differs from p's.
  Tensor take(const std::string& key, const Tensor& p);
  /// Throws naming a tensor that no take() asked for.
  void check_all_taken() const;

 private:
  std::string type_;
  std::map<std::string, Tensor> tensors_;
  std::set<std::string> taken_;
};

}  // namespace vitrine::nn::optim::detail
