// Group, instance and RMS normalisation, as torch.nn.functional's group_norm, instance_norm and
// (PyTorch 2.4's) rms_norm (norms.cpp). group_norm runs on layer_norm's fused kernels (forward
// and backward: a group is a row of x viewed as [N G, C / G * spatial]); instance_norm is
// group_norm with one channel a group, or batch_norm on the running statistics; rms_norm is a
// composition of elementwise ops and a mean.
#pragma once
#include <optional>

#include "ops/ops.h"

namespace vitrine::ops {

/// x [N, C, *], the C channels in num_groups groups of C / G consecutive channels; per sample and
/// group, over its channels and every spatial element (biased variance):
///   y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c]
/// weight, bias [C] or undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// x [N, C, *] (at least one spatial dim); use_input_stats: every (sample, channel) normalised by
/// its own statistics over the spatial dims, y = (x - mean) / sqrt(var + eps) * weight[c] +
/// bias[c], and running_mean/var (when defined) updated by the batch's average of them:
///   r = (1 - momentum) r + momentum mean_n(stat[n, c])   (the variance unbiased)
/// else: the running statistics for every sample (batch_norm in eval). weight, bias [C] or
/// undefined; running_mean, running_var [C] or undefined (then use_input_stats must be true).
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(),
                     const Tensor& running_var = Tensor(), const Tensor& weight = Tensor(),
                     const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

/// Over the trailing dims of normalized_shape:
///   y = x / sqrt(mean(x^2) + eps) * weight      (weight of shape normalized_shape, or undefined)
/// eps nullopt: the machine epsilon of x's dtype (torch.finfo(dtype).eps), as PyTorch 2.4.
Tensor rms_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

/// Whether rms_norm and group_norm run on their fused kernels (Backend::rms_norm, and batch
/// norm's statistics and channel_affine for group_norm) or as the compositions of ops they are
/// checked against (layer_norm's kernel and elementwise ops for group_norm). On by default; the
/// environment's VITRINE_FUSED_NORMS=0 turns it off; set_fused_norms overrides both (an A/B).
bool fused_norms();
void set_fused_norms(bool on);

/// torch.finfo(dtype).eps: 2^-23 for float32, 2^-52 for float64, 2^-7 bfloat16, 2^-10 float16.
double finfo_eps(DType dtype);

}  // namespace vitrine::ops
