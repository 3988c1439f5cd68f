// The transformer MLP, as timm's Mlp: fc1 -> GELU -> drop1 -> fc2 -> drop2.
#pragma once
#include "nn/layers.h"

namespace vitrine::nn {

/// y = drop2(fc2(drop1(gelu(fc1(x)))))
class MLP : public Module {
 public:
  MLP(int64_t in_features, int64_t hidden_features, int64_t out_features = -1, double drop = 0,
      Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<GELU> act;
  std::shared_ptr<Dropout> drop1, drop2;
};

}  // namespace vitrine::nn
