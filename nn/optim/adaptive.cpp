// SlotOptimizer (generic per-parameter state) and Adadelta, RMSprop, Adagrad on it. The updates
// are composed from ops in PyTorch's order of operations (see adaptive.h for the formulas).
#include "nn/optim/adaptive.h"

#include <cmath>
#include <utility>

#include "autograd/grad_mode.h"
#include "nn/optim/detail.h"
#include "ops/ops.h"

namespace vitrine::nn::optim {

// ---- SlotOptimizer ------------------------------------------------------------------------------

SlotOptimizer::SlotOptimizer(const std::string& type, std::vector<ParamGroup> groups)
    : Optimizer(detail::validated(type, std::move(groups))) {}

Tensor SlotOptimizer::initial_slot(const std::string&, const Tensor& p) const {
  return ops::zeros_like(p);
}

void SlotOptimizer::step() {
  NoGradGuard no_grad;
  state_.resize(groups_.size());
  const std::vector<std::string> names = slot_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    state_[g].resize(group.params.size());
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      const Tensor grad = detail::step_grad(type_name(), group, g, i);
      if (!grad.defined()) continue;
      State& s = state_[g][i];
      for (const std::string& slot : names) {
        auto it = s.slots.find(slot);
        if (it == s.slots.end())
          s.slots.emplace(slot, initial_slot(slot, p));
        else
          detail::check_state_fits(type_name(), it->second, detail::state_key(g, i, slot), p);
      }
      ++s.step;
      detail::update_in_place(p, [&](const Tensor& w) { update(group, w, grad, s); });
    }
  }
}

int64_t SlotOptimizer::step_count(size_t g, size_t i) const {
  return g < state_.size() && i < state_[g].size() ? state_[g][i].step : 0;
}

NamedTensors SlotOptimizer::state_tensors() const {
  NamedTensors out;
  for (size_t g = 0; g < state_.size(); ++g)
    for (size_t i = 0; i < state_[g].size(); ++i)
      for (const auto& [slot, t] : state_[g][i].slots)
        out.emplace_back(detail::state_key(g, i, slot), t);
  return out;
}

nlohmann::json SlotOptimizer::state_json() const {
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json jg = detail::group_json(groups_[g]);
    std::vector<int64_t> steps(groups_[g].params.size());
    for (size_t i = 0; i < steps.size(); ++i) steps[i] = step_count(g, i);
    jg["steps"] = steps;
    groups.push_back(std::move(jg));
  }
  nlohmann::json j = hyper_json();
  j["type"] = type_name();
  j["groups"] = std::move(groups);
  return j;
}

void SlotOptimizer::load_state(const NamedTensors& tensors, const nlohmann::json& j) {
  // Everything is read and checked before anything changes: a failed load leaves the optimizer
  // as it was.
  std::vector<std::vector<State>> state(groups_.size());
  const std::vector<std::string> names = slot_names();
  try {
    detail::check_state_groups(type_name(), groups_, j);
    detail::StateReader reader(type_name(), tensors);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& steps = j["groups"][g].at("steps");
      VT_CHECK(steps.is_array() && steps.size() == groups_[g].params.size(),
               "{}: load_state: {} needs one step count per parameter ({}), got {}", type_name(),
               detail::group_label(groups_[g], g), groups_[g].params.size(), steps.dump());
      state[g].resize(groups_[g].params.size());
      for (size_t i = 0; i < state[g].size(); ++i) {
        const int64_t n = steps[i].get<int64_t>();
        VT_CHECK(n >= 0, "{}: load_state: a negative step count {}", type_name(), n);
        state[g][i].step = n;
        if (n == 0) continue;
        for (const std::string& slot : names)
          state[g][i].slots.emplace(
              slot, reader.take(detail::state_key(g, i, slot), groups_[g].params[i]));
      }
    }
    reader.check_all_taken();
    load_hyper(j);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: load_state: malformed state JSON: {}", type_name(), e.what());
  }
  detail::load_group_hyperparameters(groups_, j);
  state_ = std::move(state);
}

namespace {

/// g (or -g with maximize) plus weight decay: grad.add(param, alpha=wd).
Tensor decayed(const Tensor& grad, const Tensor& p, double wd, bool maximize) {
  const Tensor g = maximize ? -grad : grad;
  return wd != 0 ? g + p * wd : g;
}

double number(const nlohmann::json& j, const char* key) { return j.at(key).get<double>(); }

}  // namespace

// ---- Adadelta -----------------------------------------------------------------------------------

namespace {
void check(const AdadeltaOptions& o) {
  VT_CHECK(o.rho >= 0 && o.rho <= 1, "Adadelta: rho must be in [0, 1], got {}", o.rho);
  VT_CHECK(o.eps >= 0, "Adadelta: eps must be >= 0, got {}", o.eps);
}
}  // namespace

Adadelta::Adadelta(std::vector<Tensor> params, const AdadeltaOptions& options)
    : Adadelta(detail::one_group(std::move(params), options.lr, options.weight_decay), options) {}

Adadelta::Adadelta(std::vector<ParamGroup> groups, const AdadeltaOptions& options)
    : SlotOptimizer("Adadelta", std::move(groups)), o_(options) {
  check(o_);
}

void Adadelta::update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
                      State& state) const {
  const Tensor g = decayed(grad, p, group.weight_decay, o_.maximize);
  Tensor& square_avg = state.slots.at("square_avg");
  Tensor& acc_delta = state.slots.at("acc_delta");
  square_avg = square_avg * o_.rho + g * g * (1 - o_.rho);
  const Tensor std = ops::sqrt(square_avg + o_.eps);
  const Tensor delta = ops::sqrt(acc_delta + o_.eps) / std * g;
  acc_delta = acc_delta * o_.rho + delta * delta * (1 - o_.rho);
  Tensor(p).copy_(p + delta * -group.lr);
}

nlohmann::json Adadelta::hyper_json() const {
  return {{"rho", o_.rho}, {"eps", o_.eps}, {"maximize", o_.maximize}};
}

void Adadelta::load_hyper(const nlohmann::json& j) {
  AdadeltaOptions o = o_;
  o.rho = number(j, "rho"), o.eps = number(j, "eps"), o.maximize = j.at("maximize").get<bool>();
  check(o);
  o_ = o;
}

// ---- RMSprop ------------------------------------------------------------------------------------

namespace {
void check(const RMSpropOptions& o) {
  VT_CHECK(o.alpha >= 0, "RMSprop: alpha must be >= 0, got {}", o.alpha);
  VT_CHECK(o.eps >= 0, "RMSprop: eps must be >= 0, got {}", o.eps);
  VT_CHECK(o.momentum >= 0, "RMSprop: momentum must be >= 0, got {}", o.momentum);
}
}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options)
    : RMSprop(detail::one_group(std::move(params), options.lr, options.weight_decay), options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& options)
    : SlotOptimizer("RMSprop", std::move(groups)), o_(options) {
  check(o_);
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names = {"square_avg"};
  if (o_.momentum > 0) names.push_back("momentum_buffer");
  if (o_.centered) names.push_back("grad_avg");
  return names;
}

void RMSprop::update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
                     State& state) const {
  const Tensor g = decayed(grad, p, group.weight_decay, o_.maximize);
  Tensor& square_avg = state.slots.at("square_avg");
  square_avg = square_avg * o_.alpha + g * g * (1 - o_.alpha);
  Tensor avg;
  if (o_.centered) {
    Tensor& grad_avg = state.slots.at("grad_avg");
    grad_avg = grad_avg * o_.alpha + g * (1 - o_.alpha);
    avg = ops::sqrt(square_avg - grad_avg * grad_avg) + o_.eps;
  } else {
    avg = ops::sqrt(square_avg) + o_.eps;
  }
  if (o_.momentum > 0) {
    Tensor& buf = state.slots.at("momentum_buffer");
    buf = buf * o_.momentum + g / avg;
    Tensor(p).copy_(p + buf * -group.lr);
  } else {
    Tensor(p).copy_(p + g / avg * -group.lr);
  }
}

nlohmann::json RMSprop::hyper_json() const {
  return {{"alpha", o_.alpha},
          {"eps", o_.eps},
          {"momentum", o_.momentum},
          {"centered", o_.centered},
          {"maximize", o_.maximize}};
}

void RMSprop::load_hyper(const nlohmann::json& j) {
  RMSpropOptions o = o_;
  o.alpha = number(j, "alpha"), o.eps = number(j, "eps"), o.momentum = number(j, "momentum");
  o.centered = j.at("centered").get<bool>(), o.maximize = j.at("maximize").get<bool>();
  check(o);
  VT_CHECK((o.momentum > 0) == (o_.momentum > 0) && o.centered == o_.centered,
           "RMSprop: load_state: the state was saved with momentum {} and centered {}; this "
           "optimizer has momentum {} and centered {} (other state slots)",
           o.momentum, o.centered, o_.momentum, o_.centered);
  o_ = o;
}

// ---- Adagrad ------------------------------------------------------------------------------------

namespace {
void check(const AdagradOptions& o) {
  VT_CHECK(o.lr_decay >= 0, "Adagrad: lr_decay must be >= 0, got {}", o.lr_decay);
  VT_CHECK(o.initial_accumulator_value >= 0,
           "Adagrad: initial_accumulator_value must be >= 0, got {}", o.initial_accumulator_value);
  VT_CHECK(o.eps >= 0, "Adagrad: eps must be >= 0, got {}", o.eps);
}
}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& options)
    : Adagrad(detail::one_group(std::move(params), options.lr, options.weight_decay), options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options)
    : SlotOptimizer("Adagrad", std::move(groups)), o_(options) {
  check(o_);
}

Tensor Adagrad::initial_slot(const std::string&, const Tensor& p) const {
  return ops::full_like(p, o_.initial_accumulator_value);
}

void Adagrad::update(const ParamGroup& group, const Tensor& p, const Tensor& grad,
                     State& state) const {
  const Tensor g = decayed(grad, p, group.weight_decay, o_.maximize);
  Tensor& sum = state.slots.at("sum");
  const double clr = group.lr / (1 + static_cast<double>(state.step - 1) * o_.lr_decay);
  sum = sum + g * g;
  const Tensor std = ops::sqrt(sum) + o_.eps;
  Tensor(p).copy_(p + g / std * -clr);
}

nlohmann::json Adagrad::hyper_json() const {
  return {{"lr_decay", o_.lr_decay},
          {"initial_accumulator_value", o_.initial_accumulator_value},
          {"eps", o_.eps},
          {"maximize", o_.maximize}};
}

void Adagrad::load_hyper(const nlohmann::json& j) {
  AdagradOptions o = o_;
  o.lr_decay = number(j, "lr_decay");
  o.initial_accumulator_value = number(j, "initial_accumulator_value");
  o.eps = number(j, "eps"), o.maximize = j.at("maximize").get<bool>();
  check(o);
  o_ = o;
}

}  // namespace vitrine::nn::optim
