// attention: DINO's attention map, the class token's attention over the patches in block
// options.layer, one head or their mean (attention_map), with DINO's threshold mask.
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  Explanation e{};
  e.grid = attention_map(c.pass(), c.options.layer, c.options.head, &e.heads);
  if (c.options.threshold > 0) e.mask = threshold_mask(e.grid, c.options.threshold);
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(attention) {
  return {.name = "attention",
          .help = "the class token's attention over the patches in one block (DINO)",
          .order = 10,
          .needs = {.attention = true, .class_score = false, .layer = true},
          .options = {"layer", "head", "threshold"},
          .compute = compute};
}

}  // namespace vitrine::explain
