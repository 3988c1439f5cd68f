// Fused multi-head self-attention: the op nn::MultiheadSelfAttention runs when nothing asks for
// the attention probabilities or their gradients (no capture, no attention dropout). It computes
// what the composition of reshape, permute, matmul, softmax and matmul computes (nn/attention.cpp
// spells it out), in one kernel per direction (backends/cpu/attention.cpp), without the copies.
#include "ops/helpers.h"

namespace vitrine::ops {

using detail::check_float;
using detail::empty_on;
using detail::no_double_backward;
using detail::plain;

namespace {
/// The kernel's view of a contiguous [B, N, 3 D] tensor as [B, N, 3, heads, D / heads].
Strided view5(const Tensor& t, int64_t heads) {
  Strided s = t.strided();
  const int64_t B = t.size(0), N = t.size(1), D = t.size(2) / 3;
  s.shape = {B, N, 3, heads, D / heads};
  s.strides = {N * 3 * D, 3 * D, D, D / heads, 1};
  return s;
}
}  // namespace

Tensor attention(const Tensor& qkv, int64_t heads, double scale, Tensor* probs_out) {
  check_float(qkv, "attention");
  VT_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
           "attention: expected qkv [B, N, 3 * heads * head_dim] with heads = {}, got shape {}",
           heads, qkv.shape());
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  const Tensor x = plain(qkv);
  Tensor probs = empty_on(qkv, {B, heads, N, N}, qkv.dtype());
  Tensor out = empty_on(qkv, {B, N, D}, qkv.dtype());
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

}  // namespace vitrine::ops
