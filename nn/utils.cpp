// parameters_to_vector / vector_to_parameters (see utils.h).
#include "nn/utils.h"

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::nn::utils {

Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  VT_CHECK(!parameters.empty(), "parameters_to_vector: no parameters given");
  std::vector<Tensor> flat;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    VT_CHECK(p.defined(), "parameters_to_vector: parameter {} is undefined", i);
    VT_CHECK(p.device() == parameters[0].device() && p.dtype() == parameters[0].dtype(),
             "parameters_to_vector: parameter {} is {} on {}, parameter 0 {} on {} (expected the "
             "same dtype and device)",
             i, dtype_name(p.dtype()), p.device().str(), dtype_name(parameters[0].dtype()),
             parameters[0].device().str());
    flat.push_back(ops::reshape(p, {-1}));
  }
  return ops::cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  VT_CHECK(vec.defined() && vec.dim() == 1,
           "vector_to_parameters: vec must be a 1-D tensor, got shape {}",
           vec.defined() ? vec.shape() : Dims{});
  int64_t total = 0;
  for (const Tensor& p : parameters) {
    VT_CHECK(p.defined(), "vector_to_parameters: a parameter is undefined");
    VT_CHECK(p.dtype() == vec.dtype() && p.device() == vec.device(),
             "vector_to_parameters: a parameter is {} on {}, vec {} on {} (expected the same)",
             dtype_name(p.dtype()), p.device().str(), dtype_name(vec.dtype()), vec.device().str());
    total += p.numel();
  }
  VT_CHECK(vec.numel() == total,
           "vector_to_parameters: vec has {} elements, the {} parameters hold {}", vec.numel(),
           parameters.size(), total);
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& p : parameters) {
    Tensor slice = ops::reshape(ops::narrow(vec, 0, offset, p.numel()), p.shape());
    Tensor(p).copy_(slice);
    offset += p.numel();
  }
}

}  // namespace vitrine::nn::utils
