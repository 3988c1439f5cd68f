// Parameter initialisers, in place and under no-grad, every one drawing from an explicit seeded
// Generator (PyTorch's torch.nn.init names and formulas; the random streams are Vitrine's own).
#pragma once
#include <optional>
#include <string>

#include "autograd/tensor.h"

namespace vitrine::nn {
class Module;
}

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
/// PyTorch's recommended gain for a nonlinearity (torch.nn.init.calculate_gain): 1 for "linear",
/// "conv1d/2d/3d", "conv_transpose1d/2d/3d" and "sigmoid"; 5/3 for "tanh"; sqrt(2) for "relu";
/// sqrt(2 / (1 + slope^2)) for "leaky_relu" (slope = param, default 0.01); 3/4 for "selu".
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);
/// t ~ N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out))
void xavier_normal_(const Tensor& t, double gain = 1, Generator& gen = default_generator());
/// t ~ U(-bound, bound), bound = sqrt(3) gain / sqrt(fan), gain = calculate_gain(nonlinearity, a),
/// fan = fan_in or fan_out by mode ("fan_in" | "fan_out", any case). kaiming_uniform_(t, a) above
/// is this with mode "fan_in" and "leaky_relu".
void kaiming_uniform_(const Tensor& t, double a, const std::string& mode,
                      const std::string& nonlinearity = "leaky_relu",
                      Generator& gen = default_generator());
/// t ~ N(0, std^2), std = gain / sqrt(fan), gain and fan as kaiming_uniform_'s
void kaiming_normal_(const Tensor& t, double a = 0, const std::string& mode = "fan_in",
                     const std::string& nonlinearity = "leaky_relu",
                     Generator& gen = default_generator());
/// A (semi-)orthogonal t (at least 2 dims; the trailing ones flattened: rows = size(0), cols =
/// numel / rows), times gain: as PyTorch, the QR of a [rows, cols] N(0, 1) matrix (transposed when
/// rows < cols), Q's columns multiplied by the signs of R's diagonal, transposed back. Then
/// Q^T Q = I (rows >= cols) or Q Q^T = I (rows < cols).
void orthogonal_(const Tensor& t, double gain = 1, Generator& gen = default_generator());
/// The Q of a = QR by Householder reflections with R's diagonal made non-negative (Q's columns
/// multiplied by sign(diag R), as orthogonal_ does): a [m, n] with m >= n -> Q [m, n], float64 on
/// the CPU. orthogonal_'s core; the same Q as torch.linalg.qr's times sign(diag R).
Tensor householder_q(const Tensor& a);
/// GPT-2's initialisation of a whole model (nanoGPT's _init_weights and its scaled projections):
/// every Linear and Embedding weight ~ N(0, 0.02^2), every Linear bias 0, LayerNorm weight 1 and
/// bias 0; then every parameter whose name ends in "c_proj.weight" (the projections that write
/// into the residual stream) ~ N(0, (0.02 / sqrt(2 n_layer))^2). Modules are visited in
/// registration order (a weight tied to two modules is drawn by each, the last draw kept, as
/// nanoGPT's model.apply does).
void gpt2_(Module& model, int64_t n_layer, Generator& gen = default_generator());
/// The inverse error function (|x| < 1), to double precision.
double erfinv(double x);

}  // namespace vitrine::nn::init
