#include "nn/layers.h"

#include <cmath>

#include "nn/init.h"
#include "ops/ops.h"

namespace vitrine::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen)
    : in_features(in), out_features(out) {
  VT_CHECK(in > 0 && out > 0, "Linear: sizes must be positive (got in={}, out={})", in, out);
  weight = register_parameter("weight", ops::empty({out, in}));
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (with_bias) {
    bias = register_parameter("bias", ops::empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  VT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features,
           "Linear: input shape {} does not end in in_features = {}",
           x.defined() ? x.shape() : Dims{}, in_features);
  return ops::linear(x, weight, bias);  // leading dims flattened: one GEMM
}

std::string Linear::extra_repr() const {
  return fmt::format("in={}, out={}, bias={}", in_features, out_features, bias.defined());
}

LayerNorm::LayerNorm(int64_t d, double e, bool affine) : LayerNorm(Dims{d}, e, affine) {}

LayerNorm::LayerNorm(Dims shape, double e, bool affine)
    : dim(shape.size() ? shape.back() : 0), eps(e), normalized_shape(shape) {
  VT_CHECK(shape.size() >= 1, "LayerNorm: normalized_shape must not be empty");
  if (affine) {
    weight = register_parameter("weight", ops::ones(shape));
    bias = register_parameter("bias", ops::zeros(shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return ops::layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  if (normalized_shape.size() == 1) return fmt::format("{}, eps={}", dim, eps);
  return fmt::format("{}, eps={}", normalized_shape, eps);
}

Dropout::Dropout(double prob, Generator& gen) : p(prob), gen_(&gen) {
  VT_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, p, is_training(), *gen_); }

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

DropPath::DropPath(double prob, Generator& gen) : p(prob), gen_(&gen) {
  VT_CHECK(p >= 0 && p < 1, "DropPath: p must be in [0, 1), got {}", p);
}

Tensor DropPath::forward(const Tensor& x) {
  if (!active()) return x;
  Dims mask_shape = Dims::filled(x.dim(), 1);
  mask_shape[0] = x.size(0);
  Tensor keep = ops::ge(ops::rand(mask_shape, *gen_, x.dtype(), 0, 1, x.device()),
                        ops::scalar(p, x.dtype(), x.device()));
  Tensor mask = keep.to(x.dtype()) * (1.0 / (1.0 - p));
  return x * mask;
}

std::string DropPath::extra_repr() const { return fmt::format("p={}", p); }

Tensor GELU::forward(const Tensor& x) { return ops::gelu(x, tanh_approx); }
Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }
Tensor Tanh::forward(const Tensor& x) { return ops::tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return ops::sigmoid(x); }
Tensor SiLU::forward(const Tensor& x) { return x * ops::sigmoid(x); }

}  // namespace vitrine::nn
