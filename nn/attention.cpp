#include "nn/attention.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
void check_input(const Tensor& x, int64_t dim) {
  VT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == dim,
           "MultiheadSelfAttention: expected input [B, N, {}], got {}", dim,
           x.defined() ? x.shape() : Dims{});
}
}  // namespace

MultiheadSelfAttention::MultiheadSelfAttention(int64_t d, int64_t heads, bool qkv_bias,
                                               double attn_p, double proj_p, Generator& gen,
                                               int64_t dh)
    : dim(d), num_heads(heads) {
  VT_CHECK(dh >= 0, "MultiheadSelfAttention: head_dim must be >= 0 (0: dim / num_heads), got {}",
           dh);
  VT_CHECK(heads > 0 && (dh > 0 || d % heads == 0),
           "MultiheadSelfAttention: dim {} is not divisible by num_heads {}", d, heads);
  head_dim = dh > 0 ? dh : d / heads;
  inner = num_heads * head_dim;
  scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  qkv = register_module("qkv", std::make_shared<Linear>(d, 3 * inner, qkv_bias, gen));
  attn_drop = register_module("attn_drop", std::make_shared<Dropout>(attn_p, gen));
  proj = register_module("proj", std::make_shared<Linear>(inner, d, true, gen));
  proj_drop = register_module("proj_drop", std::make_shared<Dropout>(proj_p, gen));
}

Tensor MultiheadSelfAttention::probabilities(const Tensor& qkv_out) {
  Tensor attn = ops::attention_probs(qkv_out, num_heads, scale);  // [B, H, N, N]
  if (capture_probs_) {
    attn_ = attn;
    *attn_grad_ = Tensor();
    if (capture_grads_ && attn.requires_grad()) {
      std::shared_ptr<Tensor> slot = attn_grad_;
      attn.register_hook([slot](const Tensor& g) { *slot = g.detach(); });
    }
  }
  return attn;
}

Tensor MultiheadSelfAttention::attend(const Tensor& x) {
  check_input(x, dim);
  const int64_t B = x.size(0), N = x.size(1);
  const Tensor y = (*qkv)(x);
  return ops::attention_apply((*attn_drop)(probabilities(y)), y)
      .reshape({B, N, num_heads, head_dim})
      .transpose(1, 2);  // [B, H, N, Dh]
}

Tensor MultiheadSelfAttention::merged_heads(const Tensor& x) {
  check_input(x, dim);
  const Tensor y = (*qkv)(x);  // [B, N, 3I]: q, k, v of every head, read in place below
  // One fused op whenever the probabilities need not be a tensor of the graph: no dropout on
  // them, and either no capture or a capture without gradients (grad mode off: the explain
  // tools' forward-only pass). Otherwise the same kernels in two ops, probabilities then their
  // application, so that a hook can read their gradient and dropout can act on them.
  const bool dropping = attn_drop->active();
  Tensor out;  // [B, N, I], the heads side by side
  if (!dropping && (!capture_probs_ || !GradMode::is_enabled())) {
    Tensor probs;
    out = ops::attention(y, num_heads, scale, capture_probs_ ? &probs : nullptr);
    if (capture_probs_) {
      attn_ = probs;
      *attn_grad_ = Tensor();
    }
  } else {
    out = ops::attention_apply((*attn_drop)(probabilities(y)), y);
  }
  return out;
}

Tensor MultiheadSelfAttention::forward(const Tensor& x) {
  return (*proj_drop)((*proj)(merged_heads(x)));
}

Tensor MultiheadSelfAttention::forward_add(const Tensor& x, const Tensor& residual) {
  if (proj->has_forward_hooks() || proj_drop->has_forward_hooks() || proj_drop->active())
    return residual + forward(x);
  return ops::linear(merged_heads(x), proj->weight, proj->bias, residual);
}

Tensor MultiheadSelfAttention::forward_first(const Tensor& x, int64_t rows,
                                             const Tensor& residual) {
  check_input(x, dim);
  const int64_t B = x.size(0), N = x.size(1);
  VT_CHECK(rows >= 1 && rows <= N, "MultiheadSelfAttention::forward_first: rows {} not in [1, {}]",
           rows, N);
  VT_CHECK(!attn_drop->active() && !proj_drop->active() && !capture_probs_,
           "MultiheadSelfAttention::forward_first: needs dropout off and no attention capture");
  const Tensor& w = qkv->weight;  // [3I, D]: the rows of q, then k, then v
  const Tensor& b = qkv->bias;
  const auto part = [&](const Tensor& t, int64_t from, int64_t to) {
    return t.defined() ? t.slice(0, from, to) : Tensor();
  };
  const Tensor q = ops::linear(x.slice(1, 0, rows), part(w, 0, inner), part(b, 0, inner))
                       .reshape({B, rows, num_heads, head_dim})
                       .transpose(1, 2);  // [B, H, rows, Dh]
  const Tensor kv = ops::linear(x, part(w, inner, 3 * inner), part(b, inner, 3 * inner))
                        .reshape({B, N, 2, num_heads, head_dim})
                        .permute({2, 0, 3, 1, 4});  // [2, B, H, N, Dh]
  const Tensor out =
      ops::scaled_dot_product_attention(q, kv.select(0, 0), kv.select(0, 1), Tensor(), 0, false,
                                        scale)  // [B, H, rows, Dh]
          .transpose(1, 2)
          .reshape({B, rows, inner});
  return ops::linear(out, proj->weight, proj->bias, residual);
}

Tensor MultiheadSelfAttention::forward(const Tensor& x, const Tensor& attn_mask, bool is_causal) {
  if (!attn_mask.defined() && !is_causal) return forward(x);
  check_input(x, dim);
  const int64_t B = x.size(0), N = x.size(1);
  // [B, N, 3I] -> q, k, v, each [B, H, N, Dh]
  const Tensor parts = (*qkv)(x).reshape({B, N, 3, num_heads, head_dim}).permute({2, 0, 3, 1, 4});
  const double p = attn_drop->is_training() ? attn_drop->p : 0;
  Tensor probs;
  Tensor out = ops::scaled_dot_product_attention(
      parts.select(0, 0), parts.select(0, 1), parts.select(0, 2), attn_mask, p, is_causal, scale,
      attn_drop->generator(), capture_probs_ ? &probs : nullptr);  // [B, H, N, Dh]
  if (capture_probs_) {
    attn_ = probs;
    *attn_grad_ = Tensor();
    if (capture_grads_ && probs.requires_grad()) {
      std::shared_ptr<Tensor> slot = attn_grad_;
      probs.register_hook([slot](const Tensor& g) { *slot = g.detach(); });
    }
  }
  out = out.transpose(1, 2).reshape({B, N, inner});
  return (*proj_drop)((*proj)(out));
}

std::string MultiheadSelfAttention::extra_repr() const {
  if (head_dim * num_heads != dim)
    return fmt::format("dim={}, heads={}, head_dim={}, qkv_bias={}", dim, num_heads, head_dim,
                       qkv->bias.defined());
  return fmt::format("dim={}, heads={}, qkv_bias={}", dim, num_heads, qkv->bias.defined());
}

}  // namespace vitrine::nn
