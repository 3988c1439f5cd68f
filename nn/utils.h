// Flattening a model's parameters into one vector and back, as torch.nn.utils'
// parameters_to_vector / vector_to_parameters (what second-order and evolutionary methods, and
// weight averaging, work on).
#pragma once
#include <vector>

#include "autograd/tensor.h"

namespace vitrine::nn::utils {

/// cat(p_0.flatten(), p_1.flatten(), ...): one 1-D tensor of every parameter's values in order
/// (differentiable: a gradient of the vector flows back to the parameters). The parameters must
/// share a dtype and a device.
Tensor parameters_to_vector(const std::vector<Tensor>& parameters);
/// Copies consecutive slices of vec (1-D, as many elements as the parameters hold together) into
/// the parameters, in order, under no-grad (vec of their dtype and device). (PyTorch rebinds each
/// parameter's data to a view of vec; here the values are copied, so the parameters keep their own
/// storage.)
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters);

}  // namespace vitrine::nn::utils
