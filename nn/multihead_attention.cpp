// torch.nn.MultiheadAttention: projections, PyTorch's masks as one additive mask, the heads
// through ops::scaled_dot_product_attention, the output projection. See the header for names and
// conventions.
#include "nn/multihead_attention.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {
constexpr const char* kOp = "MultiheadAttention";

/// A mask as scores to add, in dtype: bool true -> -inf, false -> 0 (PyTorch's convention);
/// a float mask as it is (it must have dtype: no silent cast).
Tensor additive(const Tensor& mask, DType dtype, const char* what) {
  if (mask.dtype() == kBool) {
    NoGradGuard no_grad;
    const double inf = std::numeric_limits<double>::infinity();
    return ops::where(mask, ops::scalar(-inf, dtype, mask.device()),
                      ops::scalar(0, dtype, mask.device()));
  }
  VT_CHECK(is_float(mask.dtype()), "{}: {} must be bool or floating point, got {}", kOp, what,
           dtype_name(mask.dtype()));
  VT_CHECK(mask.dtype() == dtype, "{}: a float {} must have the query's dtype {}, got {}", kOp,
           what, dtype_name(dtype), dtype_name(mask.dtype()));
  return mask;
}

/// [T, N, E] -> [N, H, T, Dh]
Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t T = x.size(0), N = x.size(1), E = x.size(2);
  return x.reshape({T, N, heads, E / heads}).permute({1, 2, 0, 3});
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t heads, double p, bool bias,
                                       bool add_bias_kv, bool add_zero_attn, int64_t kd, int64_t vd,
                                       bool bf, Generator& gen)
    : embed_dim(e),
      kdim(kd > 0 ? kd : e),
      vdim(vd > 0 ? vd : e),
      num_heads(heads),
      dropout(p),
      batch_first(bf),
      gen_(&gen) {
  VT_CHECK(e > 0 && heads > 0, "{}: embed_dim and num_heads must be positive, got {} and {}", kOp,
           e, heads);
  VT_CHECK(e % heads == 0, "{}: embed_dim {} is not divisible by num_heads {}", kOp, e, heads);
  VT_CHECK(kd >= 0 && vd >= 0, "{}: kdim and vdim must be >= 0 (0: embed_dim), got {} and {}", kOp,
           kd, vd);
  VT_CHECK(p >= 0 && p <= 1, "{}: dropout must be in [0, 1], got {}", kOp, p);
  VT_CHECK(!add_bias_kv, "{}: add_bias_kv = true is not supported (PyTorch's default is false)",
           kOp);
  VT_CHECK(!add_zero_attn, "{}: add_zero_attn = true is not supported (PyTorch's default is false)",
           kOp);
  head_dim = e / heads;
  // Registered in PyTorch's order, so that state_dict() lists PyTorch's keys in its order.
  if (qkv_same_embed_dim()) {
    in_proj_weight = register_parameter("in_proj_weight", ops::empty({3 * e, e}));
    init::xavier_uniform_(in_proj_weight, 1, gen);
  } else {
    q_proj_weight = register_parameter("q_proj_weight", ops::empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", ops::empty({e, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", ops::empty({e, vdim}));
    init::xavier_uniform_(q_proj_weight, 1, gen);
    init::xavier_uniform_(k_proj_weight, 1, gen);
    init::xavier_uniform_(v_proj_weight, 1, gen);
  }
  if (bias) in_proj_bias = register_parameter("in_proj_bias", ops::zeros({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, bias, gen));
  if (bias) init::zeros_(out_proj->bias);
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights, bool is_causal) {
  VT_CHECK(query.defined() && key.defined() && value.defined(),
           "{}: query, key and value must be defined", kOp);
  const char* layout = batch_first ? "[N, L, E]" : "[L, N, E]";
  VT_CHECK(query.dim() == 3 || query.dim() == 2,
           "{}: expected a batched query {} or an unbatched [L, E], got shape {}", kOp, layout,
           query.shape());
  const bool batched = query.dim() == 3;
  VT_CHECK(key.dim() == query.dim() && value.dim() == query.dim(),
           "{}: a {}-D query needs {}-D key and value, got key {} and value {}", kOp, query.dim(),
           query.dim(), key.shape(), value.shape());
  VT_CHECK(query.size(-1) == embed_dim, "{}: query {} has width {}, expected embed_dim {}", kOp,
           query.shape(), query.size(-1), embed_dim);
  VT_CHECK(key.size(-1) == kdim && value.size(-1) == vdim,
           "{}: expected key of width kdim {} and value of width vdim {}, got key {} and value {}",
           kOp, kdim, vdim, key.shape(), value.shape());
  // To [T, N, width], sequence first.
  Tensor q = query, k = key, v = value, kpm = key_padding_mask;
  if (!batched) {
    q = q.unsqueeze(1);
    k = k.unsqueeze(1);
    v = v.unsqueeze(1);
  } else if (batch_first) {
    q = q.transpose(0, 1);
    k = k.transpose(0, 1);
    v = v.transpose(0, 1);
  }
  const int64_t L = q.size(0), N = q.size(1), S = k.size(0), E = embed_dim, H = num_heads;
  VT_CHECK(k.size(0) == v.size(0) && k.size(1) == N && v.size(1) == N,
           "{}: key {} and value {} must have one source length and the query's batch {}", kOp,
           key.shape(), value.shape(), N);

  // The additive mask M, broadcast to [N, H, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    const Dims d2{L, S}, d3{N * H, L, S};
    VT_CHECK(attn_mask.shape() == d2 || attn_mask.shape() == d3,
             "{}: attn_mask must be [L, S] = {} or [N * num_heads, L, S] = {}, got {}", kOp, d2,
             batched ? d3 : Dims{H, L, S}, attn_mask.shape());
    mask = additive(attn_mask, q.dtype(), "attn_mask")
               .reshape({attn_mask.dim() == 3 ? N : 1, attn_mask.dim() == 3 ? H : 1, L, S});
  } else if (is_causal) {
    NoGradGuard no_grad;
    const Tensor i = ops::arange(0, static_cast<double>(L), 1, kFloat32).reshape({L, 1});
    const Tensor j = ops::arange(0, static_cast<double>(S), 1, kFloat32).reshape({1, S});
    mask = additive(ops::gt(j, i).to(q.device()), q.dtype(), "attn_mask");
  }
  if (kpm.defined()) {
    const Dims want = batched ? Dims{N, S} : Dims{S};
    VT_CHECK(kpm.shape() == want, "{}: key_padding_mask must be {} ({}), got {}", kOp, want,
             batched ? "[N, S]" : "[S]", kpm.shape());
    const Tensor m = additive(kpm, q.dtype(), "key_padding_mask").reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + m : m;
  }

  // Projections: one product for self-attention with the packed weight, else three.
  const auto part = [](const Tensor& t, int64_t i, int64_t e) {
    return t.defined() ? t.slice(0, i * e, (i + 1) * e) : Tensor();
  };
  Tensor qp, kp, vp;  // [L, N, E], [S, N, E], [S, N, E]
  if (qkv_same_embed_dim() && query.same(key) && key.same(value)) {
    const Tensor all = ops::linear(q, in_proj_weight, in_proj_bias);  // [L, N, 3E]
    qp = all.slice(2, 0, E);
    kp = all.slice(2, E, 2 * E);
    vp = all.slice(2, 2 * E, 3 * E);
  } else {
    const bool packed = qkv_same_embed_dim();
    qp = ops::linear(q, packed ? part(in_proj_weight, 0, E) : q_proj_weight,
                     part(in_proj_bias, 0, E));
    kp = ops::linear(k, packed ? part(in_proj_weight, 1, E) : k_proj_weight,
                     part(in_proj_bias, 1, E));
    vp = ops::linear(v, packed ? part(in_proj_weight, 2, E) : v_proj_weight,
                     part(in_proj_bias, 2, E));
  }
  const Tensor qh = split_heads(qp, H), kh = split_heads(kp, H), vh = split_heads(vp, H);

  const double p = is_training() ? dropout : 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Tensor heads, weights;  // [N, H, L, Dh], [N, H, L, S]
  if (need_weights && p > 0) {
    // PyTorch returns the weights after dropout: the same maths written out, keeping them.
    Tensor scores = ops::mul(ops::matmul(qh, kh.mT()), scale);
    if (mask.defined()) scores = scores + mask;
    weights = ops::dropout(ops::softmax(scores, -1), p, true, *gen_);
    heads = ops::matmul(weights, vh);
  } else {
    heads = ops::scaled_dot_product_attention(qh, kh, vh, mask, p, false, scale, *gen_,
                                              need_weights ? &weights : nullptr);
  }
  Tensor out = (*out_proj)(heads.permute({2, 0, 1, 3}).reshape({L, N, E}));  // [L, N, E]
  if (!batched)
    out = out.squeeze(1);
  else if (batch_first)
    out = out.transpose(0, 1);
  if (!need_weights) return {out, Tensor()};
  if (average_attn_weights) weights = ops::mean(weights, {1});  // [N, L, S]
  if (!batched) weights = weights.squeeze(0);
  return {out, weights};
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x, {}, false).first; }

std::string MultiheadAttention::extra_repr() const {
  std::string s = fmt::format("embed_dim={}, num_heads={}", embed_dim, num_heads);
  if (!qkv_same_embed_dim()) s += fmt::format(", kdim={}, vdim={}", kdim, vdim);
  if (dropout > 0) s += fmt::format(", dropout={}", dropout);
  if (!in_proj_bias.defined()) s += ", bias=false";
  if (batch_first) s += ", batch_first=true";
  return s;
}

}  // namespace vitrine::nn
