#include "nn/mlp.h"

#include "ops/ops.h"

namespace vitrine::nn {

MLP::MLP(int64_t in, int64_t hidden, int64_t out, double drop, Generator& gen) {
  if (out < 0) out = in;
  fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, true, gen));
  act = register_module("act", std::make_shared<GELU>());
  drop1 = register_module("drop1", std::make_shared<Dropout>(drop, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out, true, gen));
  drop2 = register_module("drop2", std::make_shared<Dropout>(drop, gen));
}

bool MLP::fused() const {
  return !act->tanh_approx && !drop1->active() && !drop2->active() && !fc1->has_forward_hooks() &&
         !act->has_forward_hooks() && !drop1->has_forward_hooks() && !fc2->has_forward_hooks() &&
         !drop2->has_forward_hooks();
}

Tensor MLP::forward(const Tensor& x) {
  if (fused()) return ops::mlp_gelu(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias);
  return (*drop2)((*fc2)((*drop1)((*act)((*fc1)(x)))));
}

Tensor MLP::forward_add(const Tensor& x, const Tensor& residual) {
  if (fused()) return ops::mlp_gelu(x, fc1->weight, fc1->bias, fc2->weight, fc2->bias, residual);
  return residual + forward(x);
}

}  // namespace vitrine::nn
