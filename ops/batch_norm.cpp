// Batch normalisation (PyTorch's F.batch_norm) as a composition of reductions and elementwise
// ops, so that every backend runs it and autograd differentiates it. x [B, C, *]: one mean and
// variance per channel c, over the batch and every position:
//   training: mu = mean(x[:, c]), s2 = mean((x[:, c] - mu)^2)       (the biased variance)
//             running_mean = (1 - m) running_mean + m mu
//             running_var  = (1 - m) running_var  + m s2 n / (n - 1)   (the unbiased one)
//   eval:     mu, s2 = running_mean, running_var
//   y = (x - mu) / sqrt(s2 + eps) * weight[c] + bias[c]
#include "ops/helpers.h"

namespace vitrine::ops {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  detail::check_defined(x, "batch_norm", "x");
  detail::check_float(x, "batch_norm");
  VT_CHECK(x.dim() >= 2, "batch_norm: expected x [B, C, ...], got shape {}", x.shape());
  const int64_t C = x.size(1);
  auto check_channel = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return;
    VT_CHECK(t.dim() == 1 && t.size(0) == C,
             "batch_norm: {} must have shape [{}] (x has {} channels), got {}", name, C, C,
             t.shape());
  };
  check_channel(running_mean, "running_mean");
  check_channel(running_var, "running_var");
  check_channel(weight, "weight");
  check_channel(bias, "bias");
  VT_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var go together (one of them is undefined)");
  VT_CHECK(training || running_mean.defined(),
           "batch_norm: eval mode needs running_mean and running_var");
  Dims reduce;  // every dim but the channels'
  Dims stat_shape(std::vector<int64_t>(static_cast<size_t>(x.dim()), 1));
  stat_shape[1] = C;
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) {
      reduce.push_back(d);
      n *= x.size(d);
    }

  // The statistics are per channel ([1, C, 1, ...]); weight is folded into the per-channel
  // scale first, so the full-size work is a subtraction, a multiplication and an addition.
  Tensor centered, s2;
  if (training) {
    VT_CHECK(n > 1,
             "batch_norm: expected more than 1 value per channel when training, got input shape "
             "{}",
             x.shape());
    const Tensor mu = mean(x, reduce, true);
    centered = sub(x, mu);
    s2 = mean(mul(centered, centered), reduce, true);  // the biased variance
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      Tensor rm = running_mean, rv = running_var;
      rm.mul_(1 - momentum).add_(reshape(mu.detach(), {C}), momentum);
      rv.mul_(1 - momentum)
          .add_(reshape(s2.detach(), {C}),
                momentum * static_cast<double>(n) / static_cast<double>(n - 1));
    }
  } else {
    centered = sub(x, reshape(running_mean, stat_shape));
    s2 = reshape(running_var, stat_shape);
  }
  Tensor scale = rsqrt(add(s2, eps));
  if (weight.defined()) scale = mul(scale, reshape(weight, stat_shape));
  Tensor y = mul(centered, scale);
  if (bias.defined()) y = add(y, reshape(bias, stat_shape));
  return y;
}

}  // namespace vitrine::ops
