// Multi-head self-attention as timm's Attention: one fused qkv projection, scaled dot-product
// attention per head, attention dropout, output projection. For explanation methods it can keep
// its attention probabilities (after softmax, before dropout) and their gradient. When nothing
// asks for them (no capture; no attention dropout, or eval mode) forward runs the fused kernel
// (ops::attention), as timm's fused_attn path does; attn_drop is then not called. Otherwise the
// same kernels run as two ops (ops::attention_probs, ops::attention_apply), so that the
// probabilities are a tensor of the graph.
#pragma once
#include "nn/layers.h"

namespace vitrine::nn {

/// x: [B, N, D] -> [B, N, D], with Dh = head_dim (D/H unless given) and the inner width I = H Dh
///   q, k, v = split(qkv(x)) per head: [B, H, N, Dh]     (qkv: D -> 3 I)
///   attn = softmax((q * Dh^-1/2) k^T)                    [B, H, N, N]
///   y = proj(attn_drop(attn) v, heads merged)            (proj: I -> D)
/// An inner width other than D is lucidrains' vit-pytorch's Attention(dim, heads, dim_head).
class MultiheadSelfAttention : public Module {
 public:
  /// head_dim 0: dim / num_heads (timm's, torch.nn.MultiheadAttention's).
  MultiheadSelfAttention(int64_t dim, int64_t num_heads, bool qkv_bias = true, double attn_drop = 0,
                         double proj_drop = 0, Generator& gen = default_generator(),
                         int64_t head_dim = 0);
  Tensor forward(const Tensor& x) override;
  /// Masked attention, as timm's Attention.forward(x, attn_mask) through
  /// ops::scaled_dot_product_attention: attn_mask broadcast to [B, H, N, N], bool (true where a
  /// query may attend: a padding mask [B, 1, 1, N] is false at padded keys) or float (added to
  /// the scores); is_causal: token i attends to tokens j <= i (a GPT). An undefined mask and
  /// is_causal false is forward(x).
  Tensor forward(const Tensor& x, const Tensor& attn_mask, bool is_causal = false);
  /// The heads' outputs before they are merged and projected: attn_drop(attn) v, [B, H, N, Dh].
  Tensor attend(const Tensor& x);
  /// residual + forward(x), the residual added as proj's product is written when proj and
  /// proj_drop have no hooks and proj_drop is off. Runs no hooks of this module (its caller
  /// checks has_forward_hooks(), as ViTBlock does).
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  /// forward(x)[:, :rows] (+ residual [B, rows, D] when defined), computing only what those rows
  /// need: keys and values of all N tokens, queries, attention and projection of the first rows
  ///   q = x[:, :rows] W_q^T + b_q,  k, v = x W_{k,v}^T + b_{k,v}   (W_q, W_k, W_v: qkv's thirds)
  /// What a ViT's last block does when the head reads the class token only. Needs dropout off
  /// (in eval mode, or p = 0) and no capture; runs no hooks (its caller checks them).
  Tensor forward_first(const Tensor& x, int64_t rows, const Tensor& residual = Tensor());
  std::string type_name() const override { return "MultiheadSelfAttention"; }
  std::string extra_repr() const override;

  /// Keep the attention probabilities of each forward (and, with grads, their gradient, which a
  /// hook stores when backward reaches them).
  void capture(bool probs, bool grads = false) {
    capture_probs_ = probs || grads;
    capture_grads_ = grads;
  }
  bool capturing_probs() const { return capture_probs_; }
  bool capturing_grads() const { return capture_grads_; }
  /// The last forward's attention probabilities [B, H, N, N] (undefined unless capturing).
  const Tensor& attention() const { return attn_; }
  /// d(target)/d(attention) from the last backward (undefined unless capturing grads).
  Tensor attention_grad() const { return *attn_grad_; }

  std::shared_ptr<Linear> qkv, proj;
  std::shared_ptr<Dropout> attn_drop, proj_drop;
  int64_t dim, num_heads, head_dim;
  int64_t inner;  // num_heads * head_dim: qkv's output is 3 inner wide, proj's input inner
  double scale;

 private:
  /// softmax(scale q k^T) from the qkv projection's output, kept when capturing.
  Tensor probabilities(const Tensor& qkv_out);
  /// attn_drop(attn) v with the heads side by side, [B, N, I]: what proj reads.
  Tensor merged_heads(const Tensor& x);

  bool capture_probs_ = false, capture_grads_ = false;
  Tensor attn_;
  std::shared_ptr<Tensor> attn_grad_ = std::make_shared<Tensor>();
};

}  // namespace vitrine::nn
