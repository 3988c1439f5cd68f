// Activations composed of ops (formulas in activations.h). Where a function has pieces, it is a
// chain of where() over the pieces, the comparison chosen so that a kink takes PyTorch's gradient;
// a branch that is not taken still runs, so it is fed values that keep its gradient finite.
#include "nn/activations.h"

#include <fmt/format.h>

#include "ops/ops.h"
#include "ops/sequence.h"

namespace vitrine::nn {

namespace {

void check_input(const Tensor& x, const char* op) {
  VT_CHECK(x.defined(), "{}: input is undefined", op);
  VT_CHECK(is_float(x.dtype()), "{}: input must be float32 or float64, got {}", op,
           dtype_name(x.dtype()));
}

/// A 0-dim tensor of x's dtype and device.
Tensor constant(double v, const Tensor& x) { return ops::scalar(v, x.dtype(), x.device()); }

}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_input(x, "leaky_relu");
  return ops::where(ops::gt(x, constant(0, x)), x, x * negative_slope);
}

Tensor elu(const Tensor& x, double alpha) {
  check_input(x, "elu");
  // expm1 of min(x, 0): the branch not taken (x > 0) sees 0, so e^x never overflows into the
  // gradient; clamp's gradient is 1 at 0 itself, where the gradient is alpha.
  Tensor negative = ops::expm1(ops::clamp(x, std::nullopt, 0.0)) * alpha;
  return ops::where(ops::gt(x, constant(0, x)), x, negative);
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check_input(x, "prelu");
  VT_CHECK(weight.defined() && weight.dim() <= 1,
           "prelu: weight must be a 1-D tensor [num_parameters], got shape {}",
           weight.defined() ? weight.shape() : Dims{});
  VT_CHECK(weight.dtype() == x.dtype() && weight.device() == x.device(),
           "prelu: weight is {} on {}, input {} on {} (expected the same)",
           dtype_name(weight.dtype()), weight.device().str(), dtype_name(x.dtype()),
           x.device().str());
  int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  VT_CHECK(weight.numel() == 1 || weight.numel() == channels,
           "prelu: weight has {} parameters but the input {} has {} channels (dim 1); expected 1 "
           "or {}",
           weight.numel(), x.shape(), channels, channels);
  Tensor w;
  if (weight.numel() == 1) {
    w = ops::reshape(weight, {});
  } else {  // [C] -> [C, 1, ..., 1] against x [N, C, ...]
    Dims shape = Dims::filled(x.dim() - 1, 1);
    shape[0] = channels;
    w = ops::reshape(weight, shape);
  }
  return ops::where(ops::gt(x, constant(0, x)), x, w * x);
}

Tensor relu6(const Tensor& x) {
  check_input(x, "relu6");
  // x itself only strictly inside (0, 6): gradient 0 at both ends, as PyTorch's hardtanh.
  return ops::where(ops::le(x, constant(0, x)), constant(0, x),
                    ops::where(ops::ge(x, constant(6, x)), constant(6, x), x));
}

Tensor hardswish(const Tensor& x) {
  check_input(x, "hardswish");
  // Pieces: 0 below -3, x (x + 3) / 6 on [-3, 3) (gradient -1/2 at -3), x from 3 on.
  Tensor middle = x * (x + 3.0) / 6.0;
  return ops::where(ops::lt(x, constant(-3, x)), constant(0, x),
                    ops::where(ops::lt(x, constant(3, x)), middle, x));
}

Tensor hardsigmoid(const Tensor& x) {
  check_input(x, "hardsigmoid");
  // The value (x + 3) / 6; the gradient PyTorch's backward gives, the float 1/6 (it differs from
  // the double 1/6 by 5e-9): slope - slope.detach() is 0 with that gradient.
  const double sixth = static_cast<double>(1.0f / 6.0f);
  Tensor slope = x * sixth;
  Tensor middle = (x.detach() + 3.0) / 6.0 + (slope - slope.detach());
  return ops::where(ops::le(x, constant(-3, x)), constant(0, x),
                    ops::where(ops::ge(x, constant(3, x)), constant(1, x), middle));
}

Tensor mish(const Tensor& x) {
  check_input(x, "mish");
  return x * ops::tanh(ops::softplus(x));
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_input(x, "softplus");
  Tensor z = x * beta;
  // log1p(e^z) of z clamped to the threshold: the same values where this branch is taken
  // (z <= threshold), and no overflow in e^z where it is not.
  Tensor smooth = ops::log1p(ops::exp(ops::clamp(z, std::nullopt, threshold))) / beta;
  return ops::where(ops::gt(z, constant(threshold, x)), x, smooth);
}

std::string LeakyReLU::extra_repr() const {
  return fmt::format("negative_slope={}", negative_slope);
}

std::string ELU::extra_repr() const { return fmt::format("alpha={}", alpha); }

PReLU::PReLU(int64_t n, double init) : num_parameters(n) {
  VT_CHECK(n >= 1, "PReLU: num_parameters must be at least 1, got {}", n);
  weight = register_parameter("weight", ops::full({n}, init));
}

std::string PReLU::extra_repr() const { return fmt::format("num_parameters={}", num_parameters); }

std::string Softplus::extra_repr() const {
  return fmt::format("beta={}, threshold={}", beta, threshold);
}

Tensor Softmax::forward(const Tensor& x) { return ops::softmax(x, dim); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim); }

Tensor LogSoftmax::forward(const Tensor& x) { return ops::log_softmax(x, dim); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim); }

}  // namespace vitrine::nn
