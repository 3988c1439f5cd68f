// torch.nn.MultiheadAttention (PyTorch 1.13's math, without its inference "fast path"): queries
// attend to keys of another width (kdim) and values of a third (vdim), with PyTorch's parameter
// names, so a state_dict loads by name:
//   in_proj_weight [3E, E]                   when kdim == vdim == embed_dim, else
//   q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim];
//   in_proj_bias [3E] (the q, k, v biases), out_proj.weight [E, E], out_proj.bias [E].
// Shapes: L target length, S source length, N batch, E = embed_dim, H heads, Dh = E / H.
// Sequence first ([L, N, E]) unless batch_first ([N, L, E]); a 2-D query [L, E] is unbatched.
// Masks follow PyTorch's convention, the opposite of ops::scaled_dot_product_attention's: a bool
// true means "may NOT attend" (the position gets -inf); a float mask is added to the scores.
#pragma once
#include <utility>

#include "nn/layers.h"

namespace vitrine::nn {

/// query [L, N, E], key [S, N, kdim], value [S, N, vdim] -> ([L, N, E], weights):
///   q = query Wq^T + bq,  k = key Wk^T + bk,  v = value Wv^T + bv,  split into H heads of Dh
///   P_h = softmax(q_h k_h^T / sqrt(Dh) + M),   M = attn_mask + key_padding_mask (bool: -inf)
///   out = concat_h(dropout(P_h) v_h) Wo^T + bo
/// weights: dropout(P) [N, H, L, S], averaged over the heads to [N, L, S] by default.
/// Init as PyTorch: xavier_uniform_ on in_proj_weight (or q/k/v_proj_weight), in_proj_bias and
/// out_proj.bias 0, out_proj.weight as Linear's.
class MultiheadAttention : public Module {
 public:
  /// kdim, vdim 0: embed_dim (PyTorch's None). add_bias_kv and add_zero_attn are PyTorch's
  /// arguments; true is refused (not implemented). dropout: on the attention weights, in
  /// training, drawn from gen.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0, bool bias = true,
                     bool add_bias_kv = false, bool add_zero_attn = false, int64_t kdim = 0,
                     int64_t vdim = 0, bool batch_first = false,
                     Generator& gen = default_generator());

  /// (attn_output, attn_output_weights) as PyTorch's forward; the weights are undefined when
  /// need_weights is false. key_padding_mask: [N, S] ([S] unbatched), bool (true: ignore that
  /// key) or float (added). attn_mask: [L, S] or [N H, L, S] ([H, L, S] unbatched), bool (true:
  /// not allowed) or float (added). Masks given together are added as floats (a bool one as 0 /
  /// -inf). A float mask must have the query's dtype. is_causal: with no attn_mask, query i
  /// attends to keys j <= i; with one, a hint that attn_mask is causal (PyTorch 2's meaning), and
  /// attn_mask is used. average_attn_weights: weights [N, L, S] (mean over heads), else
  /// [N, H, L, S] (unbatched: no N).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(),
                                    bool need_weights = true, const Tensor& attn_mask = Tensor(),
                                    bool average_attn_weights = true, bool is_causal = false);
  /// Self-attention without masks or weights: forward(x, x, x, {}, false).first.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  /// Whether key and value have embed_dim's width (one packed in_proj_weight).
  bool qkv_same_embed_dim() const { return kdim == embed_dim && vdim == embed_dim; }
  void set_generator(Generator& gen) { gen_ = &gen; }
  Generator& generator() const { return *gen_; }

  Tensor in_proj_weight;                               // [3E, E], or undefined
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // [E, E], [E, kdim], [E, vdim], or undefined
  Tensor in_proj_bias;                                 // [3E], or undefined (bias false)
  std::shared_ptr<Linear> out_proj;                    // E -> E
  int64_t embed_dim, kdim, vdim, num_heads, head_dim;
  double dropout;
  bool batch_first;

 private:
  Generator* gen_;
};

}  // namespace vitrine::nn
