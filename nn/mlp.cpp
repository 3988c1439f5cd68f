#include "nn/mlp.h"

namespace vitrine::nn {

MLP::MLP(int64_t in, int64_t hidden, int64_t out, double drop, Generator& gen) {
  if (out < 0) out = in;
  fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, true, gen));
  act = register_module("act", std::make_shared<GELU>());
  drop1 = register_module("drop1", std::make_shared<Dropout>(drop, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, out, true, gen));
  drop2 = register_module("drop2", std::make_shared<Dropout>(drop, gen));
}

Tensor MLP::forward(const Tensor& x) { return (*drop2)((*fc2)((*drop1)((*act)((*fc1)(x))))); }

}  // namespace vitrine::nn
