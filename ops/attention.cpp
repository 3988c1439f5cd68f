// Fused multi-head self-attention: the op nn::MultiheadSelfAttention runs when nothing asks for
// the attention probabilities or their gradients (no capture, no attention dropout). It computes
// what the composition of reshape, permute, matmul, softmax and matmul computes (nn/attention.cpp
// spells it out), in one kernel per direction (backends/cpu/attention.cpp), without the copies.
// attention_probs and attention_apply are the same computation in two ops, so that the
// probabilities are a tensor of the graph (the gradient-based explanations read their gradient,
// and attention dropout applies to them) while q, k and v are still read in place.
// When nothing asks for the probabilities, attention first offers the backend its flash attention
// (backend.h flash_attention: the GPU's FlashAttention-2, backends/cuda/flash_attention.cu), which
// keeps each row's log-sum-exp instead of the N x N probabilities (the CPU's:
// backends/cpu/flash_attention.cpp, which declines the shapes where the materialised path is
// faster); where the backend declines, the materialised path runs. scaled_dot_product_attention
// does the same (causal or not) when q, k and v are the parts of one qkv tensor, read in place.
#include <cmath>
#include <limits>

#include "ops/helpers.h"

namespace vitrine::ops {

Strided detail::view5(const Tensor& t, int64_t heads) {
  Strided s = t.strided();
  const int64_t B = t.size(0), N = t.size(1), D = t.size(2) / 3;
  s.shape = {B, N, 3, heads, D / heads};
  s.strides = {N * 3 * D, 3 * D, D, D / heads, 1};
  return s;
}

using detail::check_float;
using detail::empty_on;
using detail::no_double_backward;
using detail::plain;
using detail::view5;

namespace {
void check_qkv_shape(const Tensor& qkv, int64_t heads, const char* op) {
  detail::check_defined(qkv, op, "qkv");
  VT_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
           "{}: expected qkv [B, N, 3 * heads * head_dim] with heads = {}, got shape {}", op, heads,
           qkv.shape());
}
void check_qkv(const Tensor& qkv, int64_t heads, const char* op) {
  check_float(qkv, op);
  check_qkv_shape(qkv, heads, op);
}

/// The log-sum-exp's dtype: float64 for float64 qkv (the CPU's kernels, so that a gradcheck sees
/// exact derivatives), else float32 (what the GPU's kernels read and write).
DType lse_dtype(const Tensor& qkv) { return qkv.dtype() == kFloat64 ? kFloat64 : kFloat32; }

/// Flash attention (backend.h's flash_attention) into out [B, N, D], when the backend has it for
/// qkv (false otherwise, out untouched): no probabilities are kept, only each row's log-sum-exp,
/// from which the backward recomputes them.
bool flash(const Tensor& qkv, int64_t heads, double scale, bool causal, Tensor& out) {
  const int64_t B = qkv.size(0), N = qkv.size(1);
  const Tensor x = plain(qkv);
  Tensor lse = empty_on(qkv, {B, heads, N}, lse_dtype(qkv));
  if (!qkv.backend().flash_attention(view5(x, heads), scale, causal, out.strided(), lse.strided()))
    return false;
  // The output is saved through a detached alias (its own node would be a cycle); lse is no
  // tensor of the graph.
  out = record(out, "flash_attention", {qkv},
               [sx = save(qkv), so = save(out.detach()), lse, heads, scale, causal](
                   const Tensor& dy, const Needs&) -> Grads {
                 const Tensor& qkv = sx.get();
                 const Tensor x = plain(qkv), dyc = plain(dy);
                 Tensor dx = empty_on(x, x.shape(), x.dtype());
                 const bool ran = x.backend().flash_attention_backward(
                     view5(x, heads), so.get().strided(), dyc.strided(), lse.strided(), scale,
                     causal, view5(dx, heads));
                 VT_CHECK(ran,
                          "attention: the forward ran flash attention, the backward cannot "
                          "(its backend declined qkv {} ({}))",
                          qkv.shape(), dtype_name(qkv.dtype()));
                 return {no_double_backward(dx, "flash_attention_backward", {qkv, dy})};
               });
  return true;
}

/// Whether q, k and v [B, H, N, E] are the three parts of one [B, N, 3, H, E] tensor, permuted to
/// [3, B, H, N, E] as nn::MultiheadSelfAttention's masked forward makes them (q = parts[0], k =
/// parts[1], v = parts[2]); if so, qkv is the kernels' view of that tensor.
bool qkv_parts(const Tensor& q, const Tensor& k, const Tensor& v, Strided& qkv) {
  if (q.dim() != 4 || k.shape() != q.shape() || v.shape() != q.shape() || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype() || k.device() != q.device() || v.device() != q.device())
    return false;
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), E = q.size(3), D = H * E;
  const Dims strides{N * 3 * D, E, 3 * D, 1};
  if (q.strides() != strides || k.strides() != strides || v.strides() != strides) return false;
  const size_t part = static_cast<size_t>(D) * dtype_size(q.dtype());
  const char* base = static_cast<const char*>(q.data_ptr());
  if (static_cast<const char*>(k.data_ptr()) != base + part ||
      static_cast<const char*>(v.data_ptr()) != base + 2 * part)
    return false;
  qkv = q.strided();
  qkv.shape = {B, N, 3, H, E};
  qkv.strides = {N * 3 * D, 3 * D, D, E, 1};
  return true;
}

/// scaled_dot_product_attention through the backend's flash attention, when q, k and v are the
/// parts of one qkv tensor (qkv_parts) and the backend takes it: [B, H, N, E], a view of the
/// kernel's [B, N, H, E] output; undefined otherwise.
Tensor flash_parts(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Strided x;
  if (!qkv_parts(q, k, v, x)) return Tensor();
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), E = q.size(3);
  Tensor out = empty_on(q, {B, N, H * E}, q.dtype());
  Tensor lse = empty_on(q, {B, H, N}, lse_dtype(q));
  if (!q.backend().flash_attention(x, scale, causal, out.strided(), lse.strided())) return Tensor();
  out = record(
      out, "flash_attention", {q, k, v},
      [sq = save(q), sk = save(k), sv = save(v), so = save(out.detach()), lse, H, scale, causal](
          const Tensor& dy, const Needs&) -> Grads {
        const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
        Strided x;
        VT_ASSERT(qkv_parts(q, k, v, x));
        const int64_t B = q.size(0), N = q.size(2), E = q.size(3);
        const Tensor dyc = plain(dy);
        Tensor dx = empty_on(q, {B, N, 3 * H * E}, q.dtype());
        const bool ran = q.backend().flash_attention_backward(
            x, so.get().strided(), dyc.strided(), lse.strided(), scale, causal, view5(dx, H));
        VT_CHECK(ran,
                 "scaled_dot_product_attention: the forward ran flash attention, the "
                 "backward cannot (its backend declined q {} ({}))",
                 q.shape(), dtype_name(q.dtype()));
        const Tensor parts = no_double_backward(dx, "flash_attention_backward", {q, k, v, dy})
                                 .reshape({B, N, 3, H, E})
                                 .permute({2, 0, 3, 1, 4});
        return {parts.select(0, 0), parts.select(0, 1), parts.select(0, 2)};
      });
  return out.reshape({B, N, H, E}).transpose(1, 2);
}
}  // namespace

Tensor attention(const Tensor& qkv, int64_t heads, double scale, Tensor* probs_out) {
  check_qkv_shape(qkv, heads, "attention");
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  Tensor out = empty_on(qkv, {B, N, D}, qkv.dtype());
  // Without a request for the probabilities, the backend's flash attention where it has one (the
  // GPU's, under matmul precision "medium" or on bfloat16 qkv); bfloat16 goes no further.
  if (!probs_out && flash(qkv, heads, scale, /*causal=*/false, out)) return out;
  check_float(qkv, "attention");
  const Tensor x = plain(qkv);
  Tensor probs = empty_on(qkv, {B, heads, N, N}, qkv.dtype());
  qkv.backend().attention(view5(x, heads), scale, probs.strided(), out.strided());
  if (probs_out) *probs_out = probs;  // values only: no gradient reaches them
  // probs is kept for backward (as the unfused path keeps it for its second matmul).
  return record(out, "attention", {qkv},
                [sx = save(qkv), probs, heads, scale](const Tensor& dy, const Needs&) -> Grads {
                  const Tensor& qkv = sx.get();
                  const Tensor x = plain(qkv), dyc = plain(dy);
                  Tensor dx = empty_on(x, x.shape(), x.dtype());
                  x.backend().attention_backward(view5(x, heads), probs.strided(), dyc.strided(),
                                                 scale, view5(dx, heads));
                  return {no_double_backward(dx, "attention_backward", {qkv, dy})};
                });
}

Tensor attention_probs(const Tensor& qkv, int64_t heads, double scale) {
  check_qkv(qkv, heads, "attention_probs");
  const int64_t B = qkv.size(0), N = qkv.size(1);
  const Tensor x = plain(qkv);
  Tensor probs = empty_on(qkv, {B, heads, N, N}, qkv.dtype());
  qkv.backend().attention_probs(view5(x, heads), scale, probs.strided());
  // The probabilities are saved through a detached alias (the same storage and version counter):
  // the output itself would hold its own node, a cycle.
  return record(probs, "attention_probs", {qkv},
                [sx = save(qkv), sp = save(probs.detach()), heads, scale](const Tensor& dp,
                                                                          const Needs&) -> Grads {
                  const Tensor& qkv = sx.get();
                  const Tensor x = plain(qkv), dpc = plain(dp);
                  Tensor dx = empty_on(x, x.shape(), x.dtype());
                  x.backend().attention_probs_backward(view5(x, heads), sp.get().strided(),
                                                       dpc.strided(), scale, view5(dx, heads));
                  return {no_double_backward(dx, "attention_probs_backward", {qkv, dp})};
                });
}

Tensor attention_apply(const Tensor& probs, const Tensor& qkv) {
  VT_CHECK(probs.defined() && probs.dim() == 4 && probs.size(2) == probs.size(3),
           "attention_apply: expected probs [B, heads, N, N], got shape {}",
           probs.defined() ? probs.shape() : Dims{});
  const int64_t heads = probs.size(1);
  check_qkv(qkv, heads, "attention_apply");
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  VT_CHECK(probs.size(0) == B && probs.size(2) == N && probs.dtype() == qkv.dtype() &&
               probs.device() == qkv.device(),
           "attention_apply: probs {} ({}) do not match qkv {} ({}): expected [{}, {}, {}, {}]",
           probs.shape(), dtype_name(probs.dtype()), qkv.shape(), dtype_name(qkv.dtype()), B, heads,
           N, N);
  const Tensor x = plain(qkv), p = plain(probs);
  Tensor out = empty_on(qkv, {B, N, D}, qkv.dtype());
  qkv.backend().attention_apply(view5(x, heads), p.strided(), out.strided());
  return record(out, "attention_apply", {probs, qkv},
                [sp = save(probs), sx = save(qkv), heads](const Tensor& dy, const Needs&) -> Grads {
                  const Tensor &probs = sp.get(), &qkv = sx.get();
                  const Tensor x = plain(qkv), p = plain(probs), dyc = plain(dy);
                  Tensor dp = empty_on(p, p.shape(), p.dtype());
                  Tensor dx = empty_on(x, x.shape(), x.dtype());
                  x.backend().attention_apply_backward(view5(x, heads), p.strided(), dyc.strided(),
                                                       dp.strided(), view5(dx, heads));
                  return {no_double_backward(dp, "attention_apply_backward", {probs, qkv, dy}),
                          no_double_backward(dx, "attention_apply_backward", {probs, qkv, dy})};
                });
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator& gen, Tensor* probs) {
  constexpr const char* op = "scaled_dot_product_attention";
  detail::check_defined(q, op, "q");
  detail::check_defined(k, op, "k");
  detail::check_defined(v, op, "v");
  check_float(q, op);
  VT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
           "{}: expected q [..., L, E], k [..., S, E], v [..., S, Ev] of one rank, got {}, {}, {}",
           op, q.shape(), k.shape(), v.shape());
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1);
  VT_CHECK(k.size(-1) == E && v.size(-2) == S,
           "{}: q [..., {}, {}] needs k [..., S, {}] and v [..., S, Ev] with the same S; got k {} "
           "and v {}",
           op, L, E, E, k.shape(), v.shape());
  VT_CHECK(!(is_causal && attn_mask.defined()),
           "{}: give either attn_mask or is_causal, not both (as PyTorch)", op);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  // q, k, v read in place from one qkv projection, nothing that needs the probabilities: the
  // backend's flash attention where it has one (the GPU's under "medium" or on bfloat16).
  if (!attn_mask.defined() && dropout_p == 0 && !probs)
    if (Tensor out = flash_parts(q, k, v, is_causal, s); out.defined()) return out;
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), s);  // [..., L, S]
  const double inf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor allowed = [&] {  // [L, S]: key j <= query i
      NoGradGuard no_grad;
      const Tensor i = reshape(arange(0, static_cast<double>(L), 1, kFloat32), {L, 1});
      const Tensor j = reshape(arange(0, static_cast<double>(S), 1, kFloat32), {1, S});
      return le(j, i).to(q.device());
    }();
    scores = where(allowed, scores, full_like(scores, -inf));
  } else if (attn_mask.defined()) {
    if (attn_mask.dtype() == kBool)
      scores = where(attn_mask, scores, full_like(scores, -inf));
    else
      scores = add(scores, attn_mask);
  }
  Tensor p = softmax(scores, -1);
  if (probs) *probs = p;
  return matmul(dropout_p > 0 ? dropout(p, dropout_p, true, gen) : p, v);
}

}  // namespace vitrine::ops
