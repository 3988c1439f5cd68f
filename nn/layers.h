// The basic layers, as torch.nn: Linear, LayerNorm, Dropout, DropPath, GELU, Conv2d, Identity.
// Parameter names follow PyTorch/timm ("weight", "bias") so foreign checkpoints map directly.
#pragma once
#include <concepts>
#include <optional>
#include <string>
#include <utility>

#include "nn/module.h"

namespace vitrine::nn {

/// y = x W^T + b, W: [out, in]; init as PyTorch (U(-1/sqrt(in), 1/sqrt(in)) for W and b)
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;  // x: [..., in] -> [..., out]
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // bias undefined when disabled
  int64_t in_features, out_features;
};

/// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim, or over the trailing dims
/// of normalized_shape (weight, bias of that shape: 1 and 0)
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true);
  explicit LayerNorm(Dims normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t dim;  // normalized_shape's last size
  double eps;
  Dims normalized_shape;  // {dim} for the first constructor
};

/// Training: zeroes each element with probability p and scales the rest by 1 / (1 - p).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  void set_generator(Generator& gen) { gen_ = &gen; }
  Generator& generator() const { return *gen_; }
  /// Whether forward changes its input: p > 0 in training mode.
  bool active() const { return p > 0 && is_training(); }
  double p;

 private:
  Generator* gen_;
};

/// Stochastic depth (timm's DropPath): training drops a whole sample's branch with probability p
/// and scales kept samples by 1 / (1 - p): y = x * mask[b] / (1 - p), mask[b] ~ Bernoulli(1 - p).
class DropPath : public Module {
 public:
  explicit DropPath(double p = 0, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DropPath"; }
  std::string extra_repr() const override;
  void set_generator(Generator& gen) { gen_ = &gen; }
  /// Whether forward changes its input: p > 0 in training mode.
  bool active() const { return p > 0 && is_training(); }
  double p;

 private:
  Generator* gen_;
};

/// y = gelu(x) (exact erf form, or the tanh approximation)
class GELU : public Module {
 public:
  explicit GELU(bool tanh_approx = false) : tanh_approx(tanh_approx) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  bool tanh_approx;
};

/// y = max(0, x)   (PyTorch's nn.ReLU)
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

/// y = tanh(x)   (nn.Tanh)
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

/// y = 1 / (1 + exp(-x))   (nn.Sigmoid)
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

/// y = x * sigmoid(x)   (nn.SiLU, "swish"; its gradient through the two ops it is made of)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SiLU"; }
};

/// y = x
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

/// A 2-D size (kernel, stride, padding) given as one integer for both dimensions or as a
/// (height, width) pair, as PyTorch's int-or-tuple arguments: 3, {3, 5}, std::pair{k, k}.
struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}  // implicit: Conv2d(3, 64, 3, 1, 1)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  template <std::integral A, std::integral B>
  Size2(std::pair<A, B> p) : h(p.first), w(p.second) {}
  std::pair<int64_t, int64_t> pair() const { return {h, w}; }
  int64_t h, w;
};

/// torch.nn.Conv*d's padding strings, as the PyTorch C++ API's torch::kSame and torch::kValid.
enum class PaddingKind : unsigned char { Same, Valid };
inline constexpr PaddingKind kSame = PaddingKind::Same, kValid = PaddingKind::Valid;

/// All of Conv2d's arguments, as the PyTorch C++ API's torch::nn::Conv2dOptions, with
/// torch.nn.Conv2d's names and defaults: Conv2d(Conv2dOptions(32, 32, 3).padding(1).groups(32))
/// is PyTorch's Conv2d(32, 32, 3, padding=1, groups=32) (a depthwise convolution), and
/// Conv2dOptions(3, 8, 3).padding("same").padding_mode("reflect") its Conv2d(3, 8, 3,
/// padding="same", padding_mode="reflect").
class Conv2dOptions {
 public:
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Size2 kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  Conv2dOptions& stride(Size2 s) { return stride_ = s, *this; }
  Conv2dOptions& padding(Size2 p) { return padding_ = p, padding_kind_.reset(), *this; }
  /// "same" (d (k - 1) in all per dim, the odd one at the right; stride 1 only) or "valid" (0).
  Conv2dOptions& padding(PaddingKind k) { return padding_ = 0, padding_kind_ = k, *this; }
  /// "same" or "valid"; any other string is an Error.
  Conv2dOptions& padding(const char* same_or_valid);
  /// "zeros", "reflect", "replicate" or "circular" (how the padding is filled)
  Conv2dOptions& padding_mode(std::string m) { return padding_mode_ = std::move(m), *this; }
  Conv2dOptions& dilation(Size2 d) { return dilation_ = d, *this; }
  Conv2dOptions& groups(int64_t g) { return groups_ = g, *this; }
  Conv2dOptions& bias(bool b) { return bias_ = b, *this; }
  int64_t in_, out_;
  Size2 kernel_, stride_ = 1, padding_ = 0, dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
  std::optional<PaddingKind> padding_kind_;
  std::string padding_mode_ = "zeros";
};

/// 2-D convolution (ops::conv2d), x [B, Cin, H, W] -> [B, Cout, OH, OW], weight [Cout, Cin /
/// groups, kh, kw]; init as PyTorch (kaiming_uniform a = sqrt(5), bias U(-1/sqrt(fan_in), ..)
/// with fan_in = Cin / groups kh kw). Arguments in torch.nn.Conv2d's order and with its
/// defaults, each size an integer or a pair: Conv2d(3, 64, 3, 1, 1) is Conv2d(3, 64, {3, 3},
/// {1, 1}, {1, 1}); dilation, groups, padding "same"/"valid" and padding_mode through
/// Conv2dOptions. (Unlike torch.nn.Conv2d, the sixth positional argument is bias, not dilation.)
/// With a padding_mode other than "zeros", or "same" padding, the input is padded first
/// (padded_convolution, nn/conv.h) and convolved with padding 0, as torch.nn.Conv2d does.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
         Size2 padding = 0, bool bias = true, Generator& gen = default_generator());
  explicit Conv2d(const Conv2dOptions& options, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, groups = 1;
  std::pair<int64_t, int64_t> kernel, stride, padding, dilation{1, 1};  // (height, width)
  bool same = false;                                                    // padding="same"
  std::string padding_mode = "zeros";  // "zeros", "reflect", "replicate" or "circular"
};

}  // namespace vitrine::nn
