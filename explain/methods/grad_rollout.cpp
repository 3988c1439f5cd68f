// grad-rollout: rollout of the gradient-weighted attention, max(0, mean_h G * A) per block
// (grad_rollout in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  Explanation e{};
  e.grid = grad_rollout(c.pass(), c.options.discard_ratio);
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(grad_rollout) {
  return {.name = "grad-rollout",
          .help = "rollout of the attention weighted by its gradient (vit-explain)",
          .order = 30,
          .needs = {.attention = true, .gradients = true},
          .options = {"discard-ratio"},
          .compute = compute};
}

}  // namespace vitrine::explain
