// The transformer MLP, as timm's Mlp: fc1 -> act -> drop1 -> fc2 -> drop2, act_layer one of
// GELU (exact, or tanh as GPT-2's), ReLU, SiLU (backend.h's Activation), or any module set in
// its place.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "nn/layers.h"

namespace vitrine::nn {

/// An activation by its config name: "gelu", "gelu_tanh", "relu", "silu" (an Error naming the
/// value and these otherwise), and back.
Activation activation_from_name(std::string_view name);
std::string activation_name(Activation act);
/// A fresh module computing act: GELU(), GELU(true), ReLU or SiLU.
std::shared_ptr<Module> activation_module(Activation act);

/// y = drop2(fc2(drop1(act(fc1(x)))))
/// When nothing observes the inside (no forward hooks on fc1, act, drop1, fc2, drop2), the
/// dropouts are off (p = 0 or eval mode) and act is a GELU (either form), ReLU or SiLU module,
/// this runs as one op, ops::mlp: the same values, with the activation and its gradient applied
/// as the products are written instead of in passes of their own. Which of them act computes is
/// read at each call, so a GELU switched to tanh_approx afterwards runs fused as the tanh GELU.
class MLP : public Module {
 public:
  /// timm's Mlp with the exact GELU.
  MLP(int64_t in_features, int64_t hidden_features, int64_t out_features = -1, double drop = 0,
      Generator& gen = default_generator());
  /// timm's Mlp with act_layer = act (out_features < 0: in_features).
  MLP(int64_t in_features, int64_t hidden_features, int64_t out_features, Activation act,
      double drop = 0, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), the residual added as fc2's product is written when fused. Runs no
  /// hooks of this module (its caller checks has_forward_hooks(), as ViTBlock does).
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  /// The activation act computes as ops::mlp knows it (a GELU, ReLU or SiLU module), or none
  /// (another module put in its place).
  std::optional<Activation> activation() const;
  /// Whether forward runs as the one op ops::mlp (see above).
  bool fused() const;
  std::string type_name() const override { return "MLP"; }
  std::shared_ptr<Linear> fc1, fc2;
  /// GELU, ReLU or SiLU as built; std::dynamic_pointer_cast<GELU>(act)->tanh_approx switches a
  /// GELU to the tanh form.
  std::shared_ptr<Module> act;
  std::shared_ptr<Dropout> drop1, drop2;
};

}  // namespace vitrine::nn
