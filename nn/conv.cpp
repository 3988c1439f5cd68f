#include "nn/conv.h"

#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "nn/init.h"
#include "ops/conv_transpose.h"

namespace vitrine::nn {

namespace {

/// The checks torch.nn's _ConvNd makes of its arguments, with the layer's name.
void check_conv_args(const char* layer, int64_t in, int64_t out, int64_t groups,
                     const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                     const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                     bool same, const std::string& padding_mode) {
  VT_CHECK(in > 0 && out > 0, "{}: in_channels and out_channels must be positive, got {} and {}",
           layer, in, out);
  VT_CHECK(groups > 0, "{}: groups must be positive, got {}", layer, groups);
  VT_CHECK(in % groups == 0, "{}: in_channels ({}) must be divisible by groups ({})", layer, in,
           groups);
  VT_CHECK(out % groups == 0, "{}: out_channels ({}) must be divisible by groups ({})", layer, out,
           groups);
  for (size_t i = 0; i < kernel.size(); ++i)
    VT_CHECK(kernel[i] > 0 && stride[i] > 0 && padding[i] >= 0 && dilation[i] > 0,
             "{}: kernel_size, stride and dilation must be positive and padding non-negative, "
             "got kernel_size {}, stride {}, padding {}, dilation {}",
             layer, kernel, stride, padding, dilation);
  if (same)
    for (int64_t s : stride)
      VT_CHECK(s == 1,
               "{}: padding='same' is not supported for strided convolutions (stride {}): "
               "use stride 1 or explicit padding",
               layer, stride);
  VT_CHECK(padding_mode == "zeros" || padding_mode == "reflect" || padding_mode == "replicate" ||
               padding_mode == "circular",
           "{}: padding_mode must be one of 'zeros', 'reflect', 'replicate' or 'circular', got "
           "'{}'",
           layer, padding_mode);
}

/// kaiming_uniform a = sqrt(5) for the weight, U(+-1 / sqrt(fan_in)) for the bias, fan_in the
/// weight's dim 1 times its kernel (PyTorch's _ConvNd.reset_parameters, transposed or not).
void init_conv(Tensor& weight, Tensor& bias, Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (!bias.defined()) return;
  int64_t fan_in = 1;
  for (int i = 1; i < weight.dim(); ++i) fan_in *= weight.size(i);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  init::uniform_(bias, -bound, bound, gen);
}

std::string mode_repr(bool same, const std::string& mode) {
  std::string s;
  if (same) s += ", padding=same";
  if (mode != "zeros") s += fmt::format(", padding_mode={}", mode);
  return s;
}

}  // namespace

Conv2dOptions& Conv2dOptions::padding(const char* same_or_valid) {
  const ConvPadding p{std::string_view(same_or_valid)};
  return padding(p.same ? kSame : kValid);
}

ConvPadding::ConvPadding(std::string_view s) {
  VT_CHECK(s == "same" || s == "valid",
           "Conv: invalid padding string '{}', should be one of 'valid' or 'same'", s);
  same = s == "same";
}

Tensor padded_convolution(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                          const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                          int64_t groups, bool same, const std::string& padding_mode) {
  const size_t nd = kernel.size();
  // Per dim, the padding before and after; F.pad's order lists the last dim first.
  std::vector<int64_t> lo(nd), hi(nd), pads;
  for (size_t i = 0; i < nd; ++i)
    std::tie(lo[i], hi[i]) = same ? ops::same_padding(kernel[i], dilation[i])
                                  : std::pair<int64_t, int64_t>{padding[i], padding[i]};
  std::vector<int64_t> conv_pad(nd, 0);
  Tensor xp = x;
  if (padding_mode == "zeros") {
    // The convolution pads lo on both sides; only the odd extra of "same" comes first.
    bool extra = false;
    for (size_t i = nd; i-- > 0;) {
      pads.insert(pads.end(), {0, hi[i] - lo[i]});
      extra = extra || hi[i] != lo[i];
      conv_pad[i] = lo[i];
    }
    if (extra) xp = ops::pad(x, pads);
  } else {
    for (size_t i = nd; i-- > 0;) pads.insert(pads.end(), {lo[i], hi[i]});
    xp = ops::pad_for_conv(x, pads, padding_mode);
  }
  if (nd == 1) return ops::conv1d(xp, weight, bias, stride[0], conv_pad[0], dilation[0], groups);
  return ops::conv2d(xp, weight, bias, {stride[0], stride[1]}, {conv_pad[0], conv_pad[1]},
                     {dilation[0], dilation[1]}, groups);
}

// ---- Conv1d ----------------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t s, ConvPadding p, int64_t d, int64_t g,
               bool with_bias, std::string mode, Generator& gen)
    : Conv1d(Conv1dOptions(in, out, k)
                 .stride(s)
                 .padding(p)
                 .dilation(d)
                 .groups(g)
                 .bias(with_bias)
                 .padding_mode(std::move(mode)),
             gen) {}

Conv1d::Conv1d(const Conv1dOptions& o, Generator& gen)
    : in_channels(o.in_),
      out_channels(o.out_),
      kernel_size(o.kernel_),
      stride(o.stride_),
      padding(o.padding_.size),
      dilation(o.dilation_),
      groups(o.groups_),
      same(o.padding_.same),
      padding_mode(o.padding_mode_) {
  check_conv_args("Conv1d", in_channels, out_channels, groups, {kernel_size}, {stride}, {padding},
                  {dilation}, same, padding_mode);
  weight =
      register_parameter("weight", ops::empty({out_channels, in_channels / groups, kernel_size}));
  if (o.bias_) bias = register_parameter("bias", ops::empty({out_channels}));
  init_conv(weight, bias, gen);
}

Tensor Conv1d::forward(const Tensor& x) {
  if (!same && padding_mode == "zeros")
    return ops::conv1d(x, weight, bias, stride, padding, dilation, groups);
  return padded_convolution(x, weight, bias, {kernel_size}, {stride}, {padding}, {dilation}, groups,
                            same, padding_mode);
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels,
                              kernel_size, stride);
  if (!same) s += fmt::format(", padding={}", padding);
  if (dilation != 1) s += fmt::format(", dilation={}", dilation);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  return s + mode_repr(same, padding_mode);
}

// ---- Conv2d (declared in nn/layers.h) -------------------------------------------------------

Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, Size2 s, Size2 pad, bool with_bias, Generator& gen)
    : Conv2d(Conv2dOptions(in, out, k).stride(s).padding(pad).bias(with_bias), gen) {}

Conv2d::Conv2d(const Conv2dOptions& o, Generator& gen)
    : in_channels(o.in_),
      out_channels(o.out_),
      groups(o.groups_),
      kernel(o.kernel_.pair()),
      stride(o.stride_.pair()),
      padding(o.padding_.pair()),
      dilation(o.dilation_.pair()),
      same(o.padding_kind_ == PaddingKind::Same),
      padding_mode(o.padding_mode_) {
  const int64_t in = in_channels, out = out_channels;
  const Size2 k = o.kernel_;
  VT_CHECK(in > 0 && out > 0 && k.h > 0 && k.w > 0,
           "Conv2d: channels and kernel sizes must be positive (got {}, {}, {}x{})", in, out, k.h,
           k.w);
  VT_CHECK(stride.first > 0 && stride.second > 0 && padding.first >= 0 && padding.second >= 0 &&
               dilation.first > 0 && dilation.second > 0,
           "Conv2d: stride must be positive, padding non-negative and dilation positive (got "
           "stride {}x{}, padding {}x{}, dilation {}x{})",
           stride.first, stride.second, padding.first, padding.second, dilation.first,
           dilation.second);
  VT_CHECK(groups > 0 && in % groups == 0 && out % groups == 0,
           "Conv2d: groups must be positive and divide in_channels and out_channels (got groups "
           "{}, {} in, {} out)",
           groups, in, out);
  check_conv_args("Conv2d", in, out, groups, {kernel.first, kernel.second},
                  {stride.first, stride.second}, {padding.first, padding.second},
                  {dilation.first, dilation.second}, same, padding_mode);
  weight = register_parameter("weight", ops::empty({out, in / groups, k.h, k.w}));
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (o.bias_) {
    bias = register_parameter("bias", ops::empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(in / groups * k.h * k.w));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  if (!same && padding_mode == "zeros")
    return ops::conv2d(x, weight, bias, stride, padding, dilation, groups);
  return padded_convolution(x, weight, bias, {kernel.first, kernel.second},
                            {stride.first, stride.second}, {padding.first, padding.second},
                            {dilation.first, dilation.second}, groups, same, padding_mode);
}

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel={}x{}, stride={}x{}, padding={}x{}", in_channels,
                              out_channels, kernel.first, kernel.second, stride.first,
                              stride.second, padding.first, padding.second);
  if (dilation != std::pair<int64_t, int64_t>{1, 1})
    s += fmt::format(", dilation={}x{}", dilation.first, dilation.second);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  return s + mode_repr(same, padding_mode);
}

// ---- ConvTranspose2d -------------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Size2 k, Size2 s, Size2 p, Size2 op,
                                 int64_t g, bool with_bias, Size2 d, Generator& gen)
    : ConvTranspose2d(ConvTranspose2dOptions(in, out, k)
                          .stride(s)
                          .padding(p)
                          .output_padding(op)
                          .groups(g)
                          .bias(with_bias)
                          .dilation(d),
                      gen) {}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o, Generator& gen)
    : in_channels(o.in_),
      out_channels(o.out_),
      groups(o.groups_),
      kernel(o.kernel_.pair()),
      stride(o.stride_.pair()),
      padding(o.padding_.pair()),
      output_padding(o.output_padding_.pair()),
      dilation(o.dilation_.pair()) {
  check_conv_args("ConvTranspose2d", in_channels, out_channels, groups,
                  {kernel.first, kernel.second}, {stride.first, stride.second},
                  {padding.first, padding.second}, {dilation.first, dilation.second}, false,
                  "zeros");
  const auto [oph, opw] = output_padding;
  VT_CHECK(oph >= 0 && opw >= 0 && (oph < stride.first || oph < dilation.first) &&
               (opw < stride.second || opw < dilation.second),
           "ConvTranspose2d: output_padding ({}, {}) must be non-negative and smaller than "
           "either stride ({}, {}) or dilation ({}, {})",
           oph, opw, stride.first, stride.second, dilation.first, dilation.second);
  weight = register_parameter(
      "weight", ops::empty({in_channels, out_channels / groups, kernel.first, kernel.second}));
  if (o.bias_) bias = register_parameter("bias", ops::empty({out_channels}));
  init_conv(weight, bias, gen);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return ops::conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}x{}, stride={}x{}, padding={}x{}", in_channels,
                              out_channels, kernel.first, kernel.second, stride.first,
                              stride.second, padding.first, padding.second);
  if (output_padding != std::pair<int64_t, int64_t>{0, 0})
    s += fmt::format(", output_padding={}x{}", output_padding.first, output_padding.second);
  if (dilation != std::pair<int64_t, int64_t>{1, 1})
    s += fmt::format(", dilation={}x{}", dilation.first, dilation.second);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- ConvTranspose1d -------------------------------------------------------------------------

ConvTranspose1d::ConvTranspose1d(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
                                 int64_t op, int64_t g, bool with_bias, int64_t d, Generator& gen)
    : ConvTranspose1d(ConvTranspose1dOptions(in, out, k)
                          .stride(s)
                          .padding(p)
                          .output_padding(op)
                          .groups(g)
                          .bias(with_bias)
                          .dilation(d),
                      gen) {}

ConvTranspose1d::ConvTranspose1d(const ConvTranspose1dOptions& o, Generator& gen)
    : in_channels(o.in_),
      out_channels(o.out_),
      kernel_size(o.kernel_),
      stride(o.stride_),
      padding(o.padding_),
      output_padding(o.output_padding_),
      groups(o.groups_),
      dilation(o.dilation_) {
  check_conv_args("ConvTranspose1d", in_channels, out_channels, groups, {kernel_size}, {stride},
                  {padding}, {dilation}, false, "zeros");
  VT_CHECK(output_padding >= 0 && (output_padding < stride || output_padding < dilation),
           "ConvTranspose1d: output_padding ({}) must be non-negative and smaller than either "
           "stride ({}) or dilation ({})",
           output_padding, stride, dilation);
  weight =
      register_parameter("weight", ops::empty({in_channels, out_channels / groups, kernel_size}));
  if (o.bias_) bias = register_parameter("bias", ops::empty({out_channels}));
  init_conv(weight, bias, gen);
}

Tensor ConvTranspose1d::forward(const Tensor& x) {
  return ops::conv_transpose1d(x, weight, bias, stride, padding, output_padding, groups, dilation);
}

std::string ConvTranspose1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}, padding={}", in_channels,
                              out_channels, kernel_size, stride, padding);
  if (output_padding != 0) s += fmt::format(", output_padding={}", output_padding);
  if (dilation != 1) s += fmt::format(", dilation={}", dilation);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace vitrine::nn
