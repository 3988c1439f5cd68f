#include "nn/mlp.h"

#include <array>
#include <typeinfo>
#include <utility>

#include "ops/ops.h"

namespace vitrine::nn {

namespace {
constexpr std::array<std::pair<Activation, const char*>, 4> kNames{
    {{Activation::GELU, "gelu"},
     {Activation::GELUTanh, "gelu_tanh"},
     {Activation::ReLU, "relu"},
     {Activation::SiLU, "silu"}}};
}  // namespace

Activation activation_from_name(std::string_view name) {
  for (const auto& [act, n] : kNames)
    if (name == n) return act;
  VT_CHECK(false, "MLP: activation '{}' is not known (expected gelu, gelu_tanh, relu or silu)",
           name);
  return Activation::GELU;
}

std::string activation_name(Activation act) {
  for (const auto& [a, n] : kNames)
    if (a == act) return n;
  VT_CHECK(false, "MLP: activation {} is not known", static_cast<int>(act));
  return "";
}

std::shared_ptr<Module> activation_module(Activation act) {
  switch (act) {
    case Activation::GELU:
      return std::make_shared<GELU>();
    case Activation::GELUTanh:
      return std::make_shared<GELU>(/*tanh_approx=*/true);
    case Activation::ReLU:
      return std::make_shared<ReLU>();
    case Activation::SiLU:
      return std::make_shared<SiLU>();
  }
  VT_CHECK(false, "MLP: activation {} is not known", static_cast<int>(act));
  return nullptr;
}

MLP::MLP(int64_t in, int64_t hidden, int64_t out, double drop, Generator& gen)
    : MLP(in, hidden, out, Activation::GELU, drop, gen) {}

MLP::MLP(int64_t in, int64_t hidden, int64_t out, Activation act_fn, double drop, Generator& gen) {
  if (out < 0) out = in;
  fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, true, gen));
  act = register_module("act", activation_module(act_fn));
  drop1 = register_module("drop1", std::make_shared<Dropout>(drop, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out, true, gen));
  drop2 = register_module("drop2", std::make_shared<Dropout>(drop, gen));
}

std::optional<Activation> MLP::activation() const {
  // The classes themselves, not a subclass that may compute something else.
  const Module& m = *act;
  if (typeid(m) == typeid(GELU))
    return static_cast<const GELU&>(m).tanh_approx ? Activation::GELUTanh : Activation::GELU;
  if (typeid(m) == typeid(ReLU)) return Activation::ReLU;
  if (typeid(m) == typeid(SiLU)) return Activation::SiLU;
  return std::nullopt;
}

bool MLP::fused() const {
  return activation().has_value() && !drop1->active() && !drop2->active() &&
         !fc1->has_forward_hooks() && !act->has_forward_hooks() && !drop1->has_forward_hooks() &&
         !fc2->has_forward_hooks() && !drop2->has_forward_hooks();
}

Tensor MLP::forward(const Tensor& x) {
  if (fused()) return ops::mlp(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias, *activation());
  return (*drop2)((*fc2)((*drop1)((*act)((*fc1)(x)))));
}

Tensor MLP::forward_add(const Tensor& x, const Tensor& residual) {
  if (fused())
    return ops::mlp(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias, *activation(), residual);
  return residual + forward(x);
}

}  // namespace vitrine::nn
