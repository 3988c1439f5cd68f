// The convolution layers besides Conv2d (declared in nn/layers.h, defined in conv.cpp), as
// torch.nn: Conv1d, ConvTranspose1d, ConvTranspose2d, and the padding="same" / "valid" and
// padding_mode of Conv1d and Conv2d (ops/conv_transpose.h holds the ops). Arguments in torch.nn's
// order, with its names and defaults; each also has an options class, as the PyTorch C++ API's
// torch::nn::Conv1dOptions.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/layers.h"

namespace vitrine::nn {

/// A convolution's padding along one dim: a size, or "same" / "valid" (nn::kSame / nn::kValid,
/// or the strings; anything else is an Error). "same" pads d (k - 1) in all, the odd one at the
/// right, and needs stride 1; "valid" is 0.
struct ConvPadding {
  ConvPadding(int p) : size(p) {}  // NOLINT: implicit, Conv1d(3, 8, 5, 1, 2)
  ConvPadding(int64_t p) : size(p) {}
  ConvPadding(PaddingKind k) : same(k == PaddingKind::Same) {}
  ConvPadding(std::string_view same_or_valid);
  ConvPadding(const char* same_or_valid) : ConvPadding(std::string_view(same_or_valid)) {}
  int64_t size = 0;
  bool same = false;
};

/// All of Conv1d's arguments (torch::nn::Conv1dOptions):
/// Conv1d(Conv1dOptions(4, 8, 3).padding("same").padding_mode("reflect")).
class Conv1dOptions {
 public:
  Conv1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  Conv1dOptions& stride(int64_t s) { return stride_ = s, *this; }
  Conv1dOptions& padding(ConvPadding p) { return padding_ = p, *this; }
  Conv1dOptions& dilation(int64_t d) { return dilation_ = d, *this; }
  Conv1dOptions& groups(int64_t g) { return groups_ = g, *this; }
  Conv1dOptions& bias(bool b) { return bias_ = b, *this; }
  /// "zeros", "reflect", "replicate" or "circular"
  Conv1dOptions& padding_mode(std::string m) { return padding_mode_ = std::move(m), *this; }
  int64_t in_, out_, kernel_, stride_ = 1;
  ConvPadding padding_ = 0;
  int64_t dilation_ = 1, groups_ = 1;
  bool bias_ = true;
  std::string padding_mode_ = "zeros";
};

/// 1-D convolution (ops::conv1d), x [B, Cin, L] -> [B, Cout, OL], weight [Cout, Cin / groups, k];
/// init as Conv2d (kaiming_uniform a = sqrt(5), bias U(+-1 / sqrt(Cin / groups k))). With
/// padding_mode other than "zeros", or "same" padding, the input is padded first
/// (ops::pad_for_conv) and convolved with padding 0, as torch.nn.Conv1d does.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         ConvPadding padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true,
         std::string padding_mode = "zeros", Generator& gen = default_generator());
  explicit Conv1d(const Conv1dOptions& options, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size, stride, padding, dilation, groups;
  bool same;  // padding="same"
  std::string padding_mode;
};

/// All of ConvTranspose2d's arguments (torch::nn::ConvTranspose2dOptions).
class ConvTranspose2dOptions {
 public:
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, Size2 kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  ConvTranspose2dOptions& stride(Size2 s) { return stride_ = s, *this; }
  ConvTranspose2dOptions& padding(Size2 p) { return padding_ = p, *this; }
  ConvTranspose2dOptions& output_padding(Size2 p) { return output_padding_ = p, *this; }
  ConvTranspose2dOptions& groups(int64_t g) { return groups_ = g, *this; }
  ConvTranspose2dOptions& bias(bool b) { return bias_ = b, *this; }
  ConvTranspose2dOptions& dilation(Size2 d) { return dilation_ = d, *this; }
  int64_t in_, out_;
  Size2 kernel_, stride_ = 1, padding_ = 0, output_padding_ = 0;
  int64_t groups_ = 1;
  bool bias_ = true;
  Size2 dilation_ = 1;
};

/// 2-D transposed convolution (ops::conv_transpose2d: the input gradient of a convolution, on its
/// kernels), x [B, Cin, H, W] -> [B, Cout, OH, OW], OH = (H - 1) stride - 2 padding + dilation
/// (kh - 1) + output_padding + 1; weight [Cin, Cout / groups, kh, kw], init as PyTorch's
/// _ConvNd: kaiming_uniform a = sqrt(5) and bias U(+-1 / sqrt(fan_in)) with fan_in = Cout /
/// groups kh kw (the weight's dim 1 and kernel). Only zero padding, as PyTorch's.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
                  Size2 padding = 0, Size2 output_padding = 0, int64_t groups = 1, bool bias = true,
                  Size2 dilation = 1, Generator& gen = default_generator());
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options,
                           Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, groups;
  std::pair<int64_t, int64_t> kernel, stride, padding, output_padding, dilation;
};

/// All of ConvTranspose1d's arguments (torch::nn::ConvTranspose1dOptions).
class ConvTranspose1dOptions {
 public:
  ConvTranspose1dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  ConvTranspose1dOptions& stride(int64_t s) { return stride_ = s, *this; }
  ConvTranspose1dOptions& padding(int64_t p) { return padding_ = p, *this; }
  ConvTranspose1dOptions& output_padding(int64_t p) { return output_padding_ = p, *this; }
  ConvTranspose1dOptions& groups(int64_t g) { return groups_ = g, *this; }
  ConvTranspose1dOptions& bias(bool b) { return bias_ = b, *this; }
  ConvTranspose1dOptions& dilation(int64_t d) { return dilation_ = d, *this; }
  int64_t in_, out_, kernel_, stride_ = 1, padding_ = 0, output_padding_ = 0, groups_ = 1;
  bool bias_ = true;
  int64_t dilation_ = 1;
};

/// 1-D transposed convolution (ops::conv_transpose1d), x [B, Cin, L] -> [B, Cout, OL], weight
/// [Cin, Cout / groups, k]; init as ConvTranspose2d.
class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                  int64_t groups = 1, bool bias = true, int64_t dilation = 1,
                  Generator& gen = default_generator());
  explicit ConvTranspose1d(const ConvTranspose1dOptions& options,
                           Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose1d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, dilation;
};

/// Conv1d's and Conv2d's forward with a padding mode or "same": x padded per dim as the layer
/// says (pads in F.pad's order, last dim first), then convolved with what padding is left.
/// kernel and dilation per spatial dim (1 or 2 of them, in order), padding likewise.
Tensor padded_convolution(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                          const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                          int64_t groups, bool same, const std::string& padding_mode);

}  // namespace vitrine::nn
