// qkv: one query patch's query-key scores and the values' norms, per head, in block options.layer
// (qkv_maps in explain.h; explain/qkv.cpp). Named only (not in "all").
#include "explain/explain.h"
#include "ops/ops.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  const QkvMaps q = qkv_maps(*c.vit, c.images, c.options.layer, c.options.patch_row,
                             c.options.patch_col, c.options.pos_interp);
  Explanation e{};
  e.heads = q.similarity;
  e.values = q.value_norms;
  e.scores = q.scores;
  e.query_row = q.row;
  e.query_col = q.col;
  e.grid = ops::mean(q.similarity, {1});
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(qkv) {
  return {.name = "qkv",
          .help = "one patch's query-key scores and the values' norms, per head",
          .order = 100,
          .needs = {.class_score = false, .vit = true, .layer = true},
          .options = {"layer", "patch"},
          .extra = true,
          .compute = compute};
}

}  // namespace vitrine::explain
