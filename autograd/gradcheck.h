// gradcheck: compares the analytic Jacobian (from backward) with central finite differences, in
// float64, as torch.autograd.gradcheck does. Public: use it on your own ops.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace vitrine {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // on failure: the worst element (input, index, output, both values)
  double max_abs_error = 0;
};

/// inputs: float64 tensors (those with requires_grad are checked). fn may return any shape.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});

}  // namespace vitrine
