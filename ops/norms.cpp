// group_norm, instance_norm and rms_norm (see norms.h): compositions of existing ops, so their
// gradients are those ops' rules (layer_norm's fused backward for the group statistics).
#include "ops/norms.h"

#include <cfloat>

#include "ops/helpers.h"

namespace vitrine::ops {

namespace {

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
  // Each (sample, group) is a row of [N G, K]: layer_norm's kernels without its affine.
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
  Dims dims;
  for (int d = nd - k; d < nd; ++d) dims.push_back(d);
  // As PyTorch 2.4: x * rsqrt(mean(x^2) + eps), then the weight.
  Tensor y = mul(x, rsqrt(add(mean(mul(x, x), dims, /*keepdim=*/true), e)));
  return weight.defined() ? mul(y, weight) : y;
}

}  // namespace vitrine::ops
