// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_.
#pragma once
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::nn::optim {

/// Scales the gradients of params together so that their global L2 norm is at most max_norm:
///   total_norm = sqrt(sum over every gradient element of g^2)   (parameters without a grad skip)
///   clip_coef = max_norm / (total_norm + 1e-6); when clip_coef < 1, every g *= clip_coef.
/// Returns total_norm, before clipping (0 when no parameter has a gradient). The sum of squares is
/// accumulated in double. A non-finite norm is returned as is (check it to skip a step); a NaN norm
/// leaves the gradients unscaled.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace vitrine::nn::optim
