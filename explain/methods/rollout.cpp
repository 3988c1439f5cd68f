// rollout: attention rollout (Abnar & Zuidema, 2020), the heads fused, the smallest entries
// discarded (rollout in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  Explanation e{};
  e.grid = rollout(c.pass(), c.options.head_fusion, c.options.discard_ratio);
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(rollout) {
  return {.name = "rollout",
          .help = "attention rollout: the product of every block's attention (Abnar & Zuidema)",
          .order = 20,
          .needs = {.attention = true, .class_score = false},
          .options = {"head-fusion", "discard-ratio"},
          .compute = compute};
}

}  // namespace vitrine::explain
