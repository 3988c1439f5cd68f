// The Optimizer base (validation, zero_grad, scale_lr), param_groups_with_decay, and the helpers
// the optimizers share for steps and state (nn/optim/detail.h).
#include "nn/optim/optimizer.h"

#include <unordered_map>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/optim/detail.h"

namespace vitrine::nn::optim {

namespace detail {

std::vector<ParamGroup> one_group(std::vector<Tensor> params, double lr, double weight_decay) {
  ParamGroup group;
  group.params = std::move(params);
  group.lr = lr;
  group.weight_decay = weight_decay;
  return {std::move(group)};
}

std::string group_label(const ParamGroup& group, size_t g) {
  return group.name.empty() ? fmt::format("param group {}", g)
                            : fmt::format("param group {} (\"{}\")", g, group.name);
}

std::vector<ParamGroup> validated(const std::string& type, std::vector<ParamGroup> groups) {
  size_t count = 0;
  // Where each parameter was first seen: (group, index).
  std::unordered_map<const TensorImpl*, std::pair<size_t, size_t>> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const std::string where = group_label(group, g);
    VT_CHECK(group.lr >= 0, "{}: {}: lr must be >= 0, got {}", type, where, group.lr);
    VT_CHECK(group.weight_decay >= 0, "{}: {}: weight_decay must be >= 0, got {}", type, where,
             group.weight_decay);
    if (group.initial_lr < 0) group.initial_lr = group.lr;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      VT_CHECK(p.defined(), "{}: {}, parameter {} is an undefined tensor", type, where, i);
      VT_CHECK(is_float(p.dtype()),
               "{}: {}, parameter {} (shape {}) has dtype {}; only float32 and float64 tensors "
               "can be optimised",
               type, where, i, p.shape(), dtype_name(p.dtype()));
      VT_CHECK(p.is_leaf(),
               "{}: {}, parameter {} (shape {}) is not a leaf tensor (it was made by {}); "
               "optimise leaves, or detach() it first",
               type, where, i, p.shape(), p.grad_fn()->name);
      auto [it, fresh] = seen.emplace(p.impl_ptr().get(), std::make_pair(g, i));
      VT_CHECK(fresh,
               "{}: a parameter (shape {}) appears more than once: {}, parameter {} and {}, "
               "parameter {}",
               type, p.shape(), group_label(groups[it->second.first], it->second.first),
               it->second.second, where, i);
    }
    count += group.params.size();
  }
  VT_CHECK(count > 0, "{}: got no parameters to optimise ({} param groups, all empty)", type,
           groups.size());
  return groups;
}

Tensor step_grad(const std::string& type, const ParamGroup& group, size_t g, size_t i) {
  const Tensor& p = group.params[i];
  Tensor grad = p.grad();
  if (!grad.defined()) return grad;
  VT_CHECK(grad.dtype() == p.dtype() && grad.device() == p.device(),
           "{}: {}, parameter {} (shape {}): its gradient is {} on {}, the parameter {} on {}",
           type, group_label(group, g), i, p.shape(), dtype_name(grad.dtype()), grad.device().str(),
           dtype_name(p.dtype()), p.device().str());
  return grad.contiguous();
}

void check_state_fits(const std::string& type, const Tensor& state, const std::string& key,
                      const Tensor& p) {
  VT_CHECK(state.shape() == p.shape() && state.dtype() == p.dtype() && state.device() == p.device(),
           "{}: state {} is {} {} on {} but its parameter is now {} {} on {}; build the optimizer "
           "after converting or moving the model",
           type, key, dtype_name(state.dtype()), state.shape(), state.device().str(),
           dtype_name(p.dtype()), p.shape(), p.device().str());
}

std::string state_key(size_t g, size_t i, const std::string& slot) {
  return fmt::format("{}.{}.{}", g, i, slot);
}

nlohmann::json group_json(const ParamGroup& group) {
  return {{"name", group.name},
          {"lr", group.lr},
          {"initial_lr", group.initial_lr},
          {"weight_decay", group.weight_decay},
          {"num_params", group.params.size()}};
}

nlohmann::json adam_state_json(const std::string& type, double beta1, double beta2, double eps,
                               const std::vector<ParamGroup>& groups,
                               const std::function<int64_t(size_t g, size_t i)>& steps) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t g = 0; g < groups.size(); ++g) {
    nlohmann::json jg = group_json(groups[g]);
    std::vector<int64_t> counts(groups[g].params.size());
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = steps(g, i);
    jg["steps"] = counts;
    out.push_back(std::move(jg));
  }
  return {{"type", type}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"groups", out}};
}

void check_state_groups(const std::string& type, const std::vector<ParamGroup>& groups,
                        const nlohmann::json& j) {
  VT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string() && j.contains("groups") &&
               j["groups"].is_array(),
           "{}: load_state: the state JSON needs a string \"type\" and an array \"groups\" (got "
           "a JSON {})",
           type, j.type_name());
  const std::string saved = j["type"].get<std::string>();
  VT_CHECK(saved == type, "{}: load_state: the state was saved by {}, not {}", type, saved, type);
  const auto& js = j["groups"];
  VT_CHECK(js.size() == groups.size(),
           "{}: load_state: the state has {} param groups, this optimizer {}", type, js.size(),
           groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t n = js[g].at("num_params").get<size_t>();
    VT_CHECK(n == groups[g].params.size(),
             "{}: load_state: {} has {} parameters in the state, {} in this optimizer", type,
             group_label(groups[g], g), n, groups[g].params.size());
  }
}

void load_group_hyperparameters(std::vector<ParamGroup>& groups, const nlohmann::json& j) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& jg = j["groups"][g];
    groups[g].lr = jg.at("lr").get<double>();
    groups[g].initial_lr = jg.at("initial_lr").get<double>();
    groups[g].weight_decay = jg.at("weight_decay").get<double>();
  }
}

StateReader::StateReader(std::string type, const NamedTensors& tensors) : type_(std::move(type)) {
  for (const auto& [name, t] : tensors) {
    VT_CHECK(tensors_.emplace(name, t).second, "{}: load_state: tensor {} is given twice", type_,
             name);
  }
}

Tensor StateReader::take(const std::string& key, const Tensor& p) {
  auto it = tensors_.find(key);
  VT_CHECK(it != tensors_.end(), "{}: load_state: state tensor {} is missing", type_, key);
  const Tensor& t = it->second;
  VT_CHECK(t.defined() && t.shape() == p.shape(),
           "{}: load_state: state tensor {} has shape {}, expected {} (its parameter's shape)",
           type_, key, t.defined() ? t.shape() : Dims{}, p.shape());
  VT_CHECK(is_floating_point(t.dtype()),
           "{}: load_state: state tensor {} has dtype {}, expected a floating-point dtype", type_,
           key, dtype_name(t.dtype()));
  taken_.insert(key);
  NoGradGuard no_grad;
  return t.to(p.device()).to(p.dtype()).clone();
}

void StateReader::check_all_taken() const {
  for (const auto& [name, t] : tensors_) {
    VT_CHECK(taken_.count(name) != 0,
             "{}: load_state: unexpected state tensor {} (no parameter of this optimizer has that "
             "state)",
             type_, name);
  }
}

}  // namespace detail

Optimizer::Optimizer(std::vector<ParamGroup> groups)
    : groups_(detail::validated("optimizer", std::move(groups))) {}

Tensor Optimizer::step(const LossClosure& closure) {
  VT_CHECK(static_cast<bool>(closure), "{}: step(closure) needs a closure that returns the loss",
           type_name());
  Tensor loss;
  {
    GradModeGuard grad(true);
    loss = closure();
  }
  step();
  return loss;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& group : groups_) nn::zero_grad(group.params, set_to_none);
}

void Optimizer::scale_lr(double factor) {
  VT_CHECK(factor >= 0, "{}: scale_lr: the factor must be >= 0, got {}", type_name(), factor);
  for (ParamGroup& group : groups_) group.lr = group.initial_lr * factor;
}

std::vector<ParamGroup> param_groups_with_decay(const Module& model, double lr, double weight_decay,
                                                const std::vector<std::string>& no_decay_names,
                                                bool exempt_1d) {
  ParamGroup decay, no_decay;
  decay.name = "decay";
  decay.lr = lr;
  decay.weight_decay = weight_decay;
  no_decay.name = "no_decay";
  no_decay.lr = lr;
  no_decay.weight_decay = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    bool exempt = exempt_1d && p.dim() < 2;
    for (const std::string& n : no_decay_names)
      exempt = exempt || name.find(n) != std::string::npos;
    (exempt ? no_decay : decay).params.push_back(p);
  }
  return {decay, no_decay};
}

}  // namespace vitrine::nn::optim
