// qkv: one query patch's scaled query-key scores with every key and the values' norms, per head
// of one block (explain.h). Conventions: the block's attention input T = norm1(x) [B, N, D] is
// read by a forward hook; qkv(T) is timm's layout [B, N, 3, heads, Dh].
#include <cmath>

#include "autograd/grad_mode.h"
#include "explain/detail.h"
#include "explain/explain.h"
#include "ops/ops.h"

namespace vitrine::explain {

using namespace detail;

QkvMaps qkv_maps(models::VisionTransformer& model, const Tensor& images, int64_t layer, int64_t row,
                 int64_t col, models::PosInterp pos_interp) {
  check_images(model, images);
  const auto& c = model.config();
  VT_CHECK(layer >= -c.depth && layer < c.depth,
           "explain: qkv layer {} is out of range for a model with {} blocks (0..{}, or -{}..-1 "
           "counted from the end)",
           layer, c.depth, c.depth - 1, c.depth);
  const int64_t l = layer < 0 ? layer + c.depth : layer;
  auto block = model.blocks->at<models::ViTBlock>(l);
  EvalMode eval(model);
  NoGradGuard no_grad;
  Tensor tokens;  // T [B, N, D]
  {
    ForwardHook hook(*block->norm1, [&tokens](nn::Module&, const Tensor&, const Tensor& out) {
      tokens = out;
      return Tensor();
    });
    const Tensor x = images.to(model_device(model)).to(model_dtype(model)).contiguous();
    (void)model.forward(x, {pos_interp, false});
  }
  const auto [gh, gw] = model.last_grid();
  const int64_t P = model.prefix_tokens(), B = tokens.size(0), N = tokens.size(1);
  const int64_t heads = block->attn->num_heads, Dh = block->attn->head_dim;
  QkvMaps out;
  out.row = row < 0 ? gh / 2 : row;
  out.col = col < 0 ? gw / 2 : col;
  VT_CHECK(out.row < gh && out.col < gw,
           "explain: qkv patch ({}, {}) is outside the {}x{} grid (rows 0..{}, columns 0..{})",
           out.row, out.col, gh, gw, gh - 1, gw - 1);
  const auto qkv = values(ops::linear(tokens, block->attn->qkv->weight, block->attn->qkv->bias));
  const double scale = block->attn->scale;
  const int64_t p = P + out.row * gw + out.col, n = N - P;
  // qkv[b, t, s, h, d] at ((b N + t) 3 + s) heads Dh + h Dh + d, s = 0 (q), 1 (k), 2 (v).
  const auto at = [&](int64_t b, int64_t t, int64_t s, int64_t h) {
    return qkv.data() + (((b * N + t) * 3 + s) * heads + h) * Dh;
  };
  std::vector<double> scores(static_cast<size_t>(B * heads * N)),
      norms(static_cast<size_t>(B * heads * n));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const double* q = at(b, p, 0, h);
      for (int64_t t = 0; t < N; ++t) {
        const double* k = at(b, t, 1, h);
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += q[d] * k[d];
        scores[(b * heads + h) * N + t] = scale * s;
        if (t < P) continue;
        const double* v = at(b, t, 2, h);
        double v2 = 0;
        for (int64_t d = 0; d < Dh; ++d) v2 += v[d] * v[d];
        norms[(b * heads + h) * n + t - P] = std::sqrt(v2);
      }
    }
  out.scores = make(scores, {B, heads, N});
  out.similarity = out.scores.narrow(2, P, n).contiguous().reshape({B, heads, gh, gw});
  out.value_norms = make(norms, {B, heads, gh, gw});
  return out;
}

}  // namespace vitrine::explain
