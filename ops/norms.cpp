// group_norm, instance_norm and rms_norm (see norms.h).
// - rms_norm runs on Backend::rms_norm / rms_norm_backward (the CPU's fused row kernels,
//   backends/cpu/rms_norm.cpp; a composed default elsewhere).
// - group_norm runs on batch norm's kernels, x [N, C, S] read as [1, N G, K] for the statistics
//   (K = C / G * S) and as [1, N C, S] for one pass y = x a[n, c] + d[n, c] with
//   a = rstd[n, g] w[c], d = b[c] - mean[n, g] a: PyTorch's CPU group norm. Its backward is two
//   passes too: the per-(n, c) sums of dy and dy (x - mean), then dx = dy a + x zc + dd per (n, c).
// - instance_norm is group_norm with one channel a group (or batch_norm on running statistics).
// Under create_graph their backward rules are compositions of ops, so a second derivative (a
// gradient penalty through GroupNorm) works; fused_norms() off gives the compositions of ops they
// are checked against, forward and backward.
#include "ops/norms.h"

#include <atomic>
#include <cfloat>

#include "backends/env_switch.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using detail::empty_on;
using detail::plain;

namespace {

/// -1: not read yet; else whether the fused kernels run (VITRINE_FUSED_NORMS, set_fused_norms).
std::atomic<int> g_fused_norms{-1};

/// The kernel view of a contiguous tensor as the given shape (its numel).
Strided view_as(const Tensor& t, const Dims& shape) {
  VT_ASSERT(t.is_contiguous() && t.numel() == shape.numel());
  Strided s = t.strided();
  s.shape = shape;
  s.strides = contiguous_strides(shape);
  return s;
}

/// The kernel view of an optional operand, flat (data == nullptr when t is undefined).
Strided optional_flat(const Tensor& t) { return t.defined() ? view_as(t, {t.numel()}) : Strided(); }

/// weight or bias [C] (when defined) checked against x [N, C, *].
void check_channel_param(const Tensor& x, const Tensor& p, const char* op, const char* name,
                         int64_t C) {
  if (!p.defined()) return;
  detail::check_same(x, p, op);
  VT_CHECK(p.dim() == 1 && p.size(0) == C, "{}: {} has shape {}, expected [{}] (input shape {})",
           op, name, p.shape(), C, x.shape());
}

/// p [C] viewed as [C, 1, ...] to broadcast against x [N, C, *].
Tensor per_channel(const Tensor& p, int nd) {
  Dims shape = Dims::filled(nd - 1, 1);
  shape[0] = p.size(0);
  return reshape(p, shape);
}

/// y * weight + bias per channel (either undefined: skipped).
Tensor channel_affine(Tensor y, const Tensor& weight, const Tensor& bias) {
  if (weight.defined()) y = mul(y, per_channel(weight, y.dim()));
  if (bias.defined()) y = add(y, per_channel(bias, y.dim()));
  return y;
}

/// [N, G, C / G] viewed flat as [N C], contiguous (a per-(sample, channel) operand).
Tensor per_sample_channel(const Tensor& t, int64_t N, int64_t G, int64_t C) {
  return reshape(contiguous(expand(t, {N, G, C / G})), {N * C});
}

/// group_norm's input, weight and bias gradients as ops (differentiable again: create_graph).
/// x [N, C, *] in groups [N, G, K]:  xhat = (x - mean) rstd, g = dy w[c],
///   dx = rstd (g - mean_K(g) - xhat mean_K(g xhat)),  dw = sum_{n, *} dy xhat,  db = sum dy
Grads group_norm_grads(const Tensor& x, const Tensor& w, const Tensor& dy, int64_t G, double eps,
                       const Needs& needs) {
  const int64_t N = x.size(0);
  const Tensor x3 = reshape(x, {N, G, -1});
  const Tensor xc = sub(x3, mean(x3, {2}, true));
  const Tensor rstd = rsqrt(add(mean(mul(xc, xc), {2}, true), eps));
  const Tensor xhat3 = mul(xc, rstd);
  Grads out(3);
  if (needs[0]) {
    const Tensor g3 = reshape(w.defined() ? mul(dy, per_channel(w, x.dim())) : dy, {N, G, -1});
    const Tensor inner =
        sub(sub(g3, mean(g3, {2}, true)), mul(xhat3, mean(mul(g3, xhat3), {2}, true)));
    out[0] = reshape(mul(rstd, inner), x.shape());
  }
  Dims others{0};  // every dim but the channels'
  for (int d = 2; d < x.dim(); ++d) others.push_back(d);
  if (needs[1]) out[1] = sum(mul(dy, reshape(xhat3, x.shape())), others);
  if (needs[2]) out[2] = sum(dy, others);
  return out;
}

/// group_norm on batch norm's kernels (see the file's comment); x [N, C, *] not empty.
Tensor group_norm_fused(const Tensor& x, int64_t G, const Tensor& weight, const Tensor& bias,
                        double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C), K = C / G * S;
  Backend& be = x.backend();
  const Tensor xc = plain(x);
  // mean, rstd: [N G]; a, d: [N C]
  Tensor mean = empty_on(x, {N * G}, x.dtype()), var = empty_on(x, {N * G}, x.dtype());
  be.batch_norm_stats(view_as(xc, {1, N * G, K}), mean.strided(), var.strided());
  Tensor rstd, a, d;
  {
    NoGradGuard no_grad;
    rstd = rsqrt(add(var, eps));
    const Tensor r3 = reshape(rstd, {N, G, 1}), m3 = reshape(mean, {N, G, 1});
    const Tensor a3 = weight.defined() ? mul(r3, reshape(weight.detach(), {1, G, C / G})) : r3;
    Tensor d3 = neg(mul(m3, a3));
    if (bias.defined()) d3 = add(d3, reshape(bias.detach(), {1, G, C / G}));
    a = per_sample_channel(a3, N, G, C);
    d = per_sample_channel(d3, N, G, C);
  }
  Tensor y = empty_on(x, x.shape(), x.dtype());
  be.channel_affine(view_as(xc, {1, N * C, S}), a.strided(), Strided(), Strided(), d.strided(),
                    view_as(y, {1, N * C, S}));
  return record(
      y, "group_norm", {x, weight, bias},
      [sx = save(x), sw = save(weight), mean, rstd, G, eps](const Tensor& dy,
                                                            const Needs& needs) -> Grads {
        const Tensor& x = sx.get();
        const Tensor& w = sw.get();
        if (GradMode::is_enabled()) return group_norm_grads(x, w, dy, G, eps, needs);
        const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
        const double K = static_cast<double>(C / G * S);
        Backend& be = x.backend();
        const Tensor xc = plain(x), dyc = plain(dy);
        // The per-(n, c) sums: sdy = sum_s dy, sdx = sum_s dy (x - mean[n, g]).
        const Tensor r3 = reshape(rstd, {N, G, 1}), m3 = reshape(mean, {N, G, 1});
        const Tensor mean_nc = per_sample_channel(m3, N, G, C);
        Tensor sdy = empty_on(x, {N * C}, x.dtype()), sdx = empty_on(x, {N * C}, x.dtype());
        be.batch_norm_backward_reduce(view_as(xc, {1, N * C, S}), mean_nc.strided(),
                                      view_as(dyc, {1, N * C, S}), sdy.strided(), sdx.strided());
        const Tensor sdy3 = reshape(sdy, {N, G, C / G}), sdx3 = reshape(sdx, {N, G, C / G});
        Grads out(3);
        if (needs[1]) out[1] = reshape(sum(mul(sdx3, r3), {0}), {C});  // sum dy xhat
        if (needs[2]) out[2] = reshape(sum(sdy3, {0}), {C});
        if (needs[0]) {
          const Tensor w3 = w.defined() ? reshape(w.detach(), {1, G, C / G}) : Tensor();
          // per group: A = mean(g), B = mean(g xhat) = rstd sum(g (x - mean)) / K
          const Tensor A = mul(sum(w3.defined() ? mul(sdy3, w3) : sdy3, {2}, true), 1.0 / K);
          const Tensor B =
              mul(mul(sum(w3.defined() ? mul(sdx3, w3) : sdx3, {2}, true), r3), 1.0 / K);
          // dx = rstd (g - A - (x - mean) rstd B) = dy (rstd w) + x (-rstd^2 B) + (rstd^2 B mean
          // - rstd A)
          const Tensor rb = mul(mul(r3, r3), B);
          const Tensor a3 = w3.defined() ? mul(r3, w3) : r3;
          const Tensor a = per_sample_channel(a3, N, G, C);
          const Tensor zc = per_sample_channel(neg(rb), N, G, C);
          const Tensor dd = per_sample_channel(sub(mul(rb, m3), mul(r3, A)), N, G, C);
          Tensor dx = empty_on(x, x.shape(), x.dtype());
          be.channel_affine(view_as(dyc, {1, N * C, S}), a.strided(), view_as(xc, {1, N * C, S}),
                            zc.strided(), dd.strided(), view_as(dx, {1, N * C, S}));
          out[0] = dx;
        }
        return out;
      });
}

/// rms_norm's input and weight gradients as ops (differentiable again: create_graph), x and dy
/// viewed as [R, C]:  xhat = x rstd, g = dy w,  dx = rstd (g - xhat mean_C(g xhat)),
///   dw = sum_R dy xhat
Grads rms_norm_grads(const Tensor& x, const Tensor& w, const Tensor& dy, int64_t rows, int64_t cols,
                     const Dims& normalized_shape, double eps, const Needs& needs) {
  const Tensor x2 = reshape(x, {rows, cols}), dy2 = reshape(dy, {rows, cols});
  const Tensor rstd = rsqrt(add(mean(mul(x2, x2), {1}, true), eps));
  const Tensor xhat = mul(x2, rstd);
  Grads out(2);
  if (needs[0]) {
    const Tensor g = w.defined() ? mul(dy2, reshape(w, {cols})) : dy2;
    out[0] = reshape(mul(rstd, sub(g, mul(xhat, mean(mul(g, xhat), {1}, true)))), x.shape());
  }
  if (needs[1]) out[1] = reshape(sum(mul(dy2, xhat), {0}), normalized_shape);
  return out;
}

}  // namespace

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  detail::check_defined(x, "group_norm", "x");
  detail::check_float(x, "group_norm");
  VT_CHECK(x.dim() >= 2, "group_norm: expected x [N, C, *], got shape {}", x.shape());
  const int64_t N = x.size(0), C = x.size(1);
  VT_CHECK(num_groups > 0 && C % num_groups == 0,
           "group_norm: expected the number of channels {} to be divisible by num_groups {} "
           "(input shape {})",
           C, num_groups, x.shape());
  check_channel_param(x, weight, "group_norm", "weight", C);
  check_channel_param(x, bias, "group_norm", "bias", C);
  VT_CHECK(eps >= 0, "group_norm: eps must be >= 0, got {}", eps);
  if (x.numel() == 0) return channel_affine(mul(x, 1.0), weight, bias);
  if (fused_norms()) return group_norm_fused(x, num_groups, weight, bias, eps);
  // The reference composition: each (sample, group) a row of [N G, K] through layer_norm's
  // kernels without its affine, then the per-channel affine.
  const int64_t K = x.numel() / (N * num_groups);
  Tensor rows = layer_norm(reshape(x, {N * num_groups, K}), {K}, Tensor(), Tensor(), eps);
  return channel_affine(reshape(rows, x.shape()), weight, bias);
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  detail::check_defined(x, "instance_norm", "x");
  detail::check_float(x, "instance_norm");
  VT_CHECK(x.dim() >= 3, "instance_norm: expected x [N, C, *] with a spatial dim, got shape {}",
           x.shape());
  const int64_t C = x.size(1);
  check_channel_param(x, weight, "instance_norm", "weight", C);
  check_channel_param(x, bias, "instance_norm", "bias", C);
  check_channel_param(x, running_mean, "instance_norm", "running_mean", C);
  check_channel_param(x, running_var, "instance_norm", "running_var", C);
  VT_CHECK(running_mean.defined() == running_var.defined(),
           "instance_norm: running_mean and running_var must both be given or both undefined");
  VT_CHECK(use_input_stats || running_mean.defined(),
           "instance_norm: use_input_stats is false but no running statistics were given");
  if (!use_input_stats)
    return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);

  const int64_t spatial = x.size(0) * C == 0 ? 0 : x.numel() / (x.size(0) * C);
  VT_CHECK(spatial > 1,
           "instance_norm: expected more than 1 spatial element when training, got input shape {}",
           x.shape());
  if (running_mean.defined()) {
    NoGradGuard no_grad;
    Dims spatial_dims;
    for (int d = 2; d < x.dim(); ++d) spatial_dims.push_back(d);
    const Tensor xv = x.detach();
    const Tensor mu = mean(mean(xv, spatial_dims), {0});                    // [C]
    const Tensor s2 = mean(var(xv, spatial_dims, /*unbiased=*/true), {0});  // [C]
    Tensor rm = running_mean, rv = running_var;  // handles on the caller's buffers
    rm.copy_(add(mul(running_mean, 1.0 - momentum), mul(mu, momentum)));
    rv.copy_(add(mul(running_var, 1.0 - momentum), mul(s2, momentum)));
  }
  return group_norm(x, C, weight, bias, eps);
}

double finfo_eps(DType dtype) {
  switch (dtype) {
    case DType::Float64:
      return DBL_EPSILON;
    case DType::BFloat16:
      return 0.0078125;  // 2^-7
    case DType::Float16:
      return 0.0009765625;  // 2^-10
    default:
      return FLT_EPSILON;
  }
}

Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  detail::check_defined(x, "rms_norm", "x");
  detail::check_float(x, "rms_norm");
  const int k = normalized_shape.size(), nd = x.dim();
  bool match = k >= 1 && k <= nd;
  for (int i = 0; match && i < k; ++i) match = x.shape()[nd - k + i] == normalized_shape[i];
  VT_CHECK(match,
           "rms_norm: normalized_shape {} does not match the trailing dims of input shape {}",
           normalized_shape, x.shape());
  if (weight.defined()) {
    detail::check_same(x, weight, "rms_norm");
    VT_CHECK(weight.shape() == normalized_shape,
             "rms_norm: weight has shape {}, expected normalized_shape {}", weight.shape(),
             normalized_shape);
  }
  const double e = eps.value_or(finfo_eps(x.dtype()));
  VT_CHECK(e >= 0, "rms_norm: eps must be >= 0, got {}", e);
  if (!fused_norms() || x.numel() == 0) {
    Dims dims;
    for (int d = nd - k; d < nd; ++d) dims.push_back(d);
    // As PyTorch 2.4: x * rsqrt(mean(x^2) + eps), then the weight.
    Tensor y = mul(x, rsqrt(add(mean(mul(x, x), dims, /*keepdim=*/true), e)));
    return weight.defined() ? mul(y, weight) : y;
  }
  // x, y: [R, C]; w: [C]; rstd: [R]
  const int64_t cols = normalized_shape.numel(), rows = x.numel() / cols;
  const Tensor xc = plain(x), wc = plain(weight);
  Tensor y = empty_on(x, x.shape(), x.dtype()), rstd = empty_on(x, {rows}, x.dtype());
  x.backend().rms_norm(view_as(xc, {rows, cols}), optional_flat(wc), e, view_as(y, {rows, cols}),
                       rstd.strided());
  return record(y, "rms_norm", {x, weight},
                [sx = save(x), sw = save(weight), rstd, rows, cols, normalized_shape, e](
                    const Tensor& dy, const Needs& needs) -> Grads {
                  const Tensor& x = sx.get();
                  const Tensor& w = sw.get();
                  if (GradMode::is_enabled())
                    return rms_norm_grads(x, w, dy, rows, cols, normalized_shape, e, needs);
                  const Tensor xc = plain(x), wc = plain(w), dyc = plain(dy);
                  Tensor dx = needs[0] ? empty_on(x, x.shape(), x.dtype()) : Tensor();
                  Tensor dw = needs[1] ? empty_on(x, normalized_shape, x.dtype()) : Tensor();
                  x.backend().rms_norm_backward(
                      view_as(xc, {rows, cols}), optional_flat(wc), rstd.strided(),
                      view_as(dyc, {rows, cols}),
                      dx.defined() ? view_as(dx, {rows, cols}) : Strided(), optional_flat(dw));
                  return {dx, dw};
                });
}

bool fused_norms() {
  int v = g_fused_norms.load(std::memory_order_relaxed);
  if (v < 0) {
    v = env_switch_on("VITRINE_FUSED_NORMS") ? 1 : 0;
    g_fused_norms.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_fused_norms(bool on) { g_fused_norms.store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace vitrine::ops
