// The transformer MLP, as timm's Mlp: fc1 -> GELU -> drop1 -> fc2 -> drop2.
#pragma once
#include "nn/layers.h"

namespace vitrine::nn {

/// y = drop2(fc2(drop1(gelu(fc1(x)))))
/// When nothing observes the inside (no forward hooks on fc1, act, drop1, fc2, drop2), the
/// dropouts are off (p = 0 or eval mode) and act is the exact GELU, this runs as one op,
/// ops::mlp_gelu: the same values, with GELU and its gradient applied as the products are
/// written instead of in passes of their own.
class MLP : public Module {
 public:
  MLP(int64_t in_features, int64_t hidden_features, int64_t out_features = -1, double drop = 0,
      Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  /// residual + forward(x), the residual added as fc2's product is written when fused. Runs no
  /// hooks of this module (its caller checks has_forward_hooks(), as ViTBlock does).
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  /// Whether forward runs as the one op ops::mlp_gelu (see above).
  bool fused() const;
  std::string type_name() const override { return "MLP"; }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<GELU> act;
  std::shared_ptr<Dropout> drop1, drop2;
};

}  // namespace vitrine::nn
