// Parameter initialisers, in place and under no-grad, every one drawing from an explicit seeded
// Generator (PyTorch's torch.nn.init names and formulas; the random streams are Vitrine's own).
#pragma once
#include "autograd/tensor.h"

namespace vitrine::nn::init {

/// t ~ U(a, b)
void uniform_(const Tensor& t, double a, double b, Generator& gen = default_generator());
/// t ~ N(mean, std^2)
void normal_(const Tensor& t, double mean, double std, Generator& gen = default_generator());
/// t ~ N(mean, std^2) truncated to [a, b], by inverse-CDF sampling (PyTorch's / timm's method)
void trunc_normal_(const Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                   Generator& gen = default_generator());
/// t ~ U(-g sqrt(6 / (fan_in + fan_out)), +...)
void xavier_uniform_(const Tensor& t, double gain = 1, Generator& gen = default_generator());
/// t ~ U(-bound, bound), bound = gain sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))
/// (a = sqrt(5) gives PyTorch's default Linear/Conv2d weight init, bound = 1 / sqrt(fan_in))
void kaiming_uniform_(const Tensor& t, double a = 0, Generator& gen = default_generator());
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
/// (fan_in, fan_out) of a weight: [out, in] for Linear, [out, in, kh, kw] for Conv2d.
std::pair<int64_t, int64_t> fan_in_out(const Tensor& t);
/// The inverse error function (|x| < 1), to double precision.
double erfinv(double x);

}  // namespace vitrine::nn::init
