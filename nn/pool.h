// Pooling layers and Flatten, as torch.nn names them: MaxPool2d, MaxUnpool2d, AvgPool2d,
// AdaptiveAvgPool2d. Each is its op (ops/pool.cpp) with the sizes kept; none has parameters.
#pragma once
#include <optional>

#include "nn/layers.h"
#include "ops/pool.h"

namespace vitrine::nn {

/// y = max over each kernel window (ops::max_pool2d); stride defaults to the kernel, as PyTorch.
/// x [B, C, H, W] -> [B, C, (H + 2 p - k) / s + 1, ...]
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0);
  Tensor forward(const Tensor& x) override;
  /// PyTorch's MaxPool2d(..., return_indices=True)(x): the maxima and their flat indices per
  /// plane (ops::max_pool2d_with_indices), what MaxUnpool2d takes.
  ops::ValuesIndices forward_with_indices(const Tensor& x);
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  std::pair<int64_t, int64_t> kernel, stride, padding;
};

/// The inverse of MaxPool2d (ops::max_unpool2d): x [B, C, H, W] or [C, H, W] and the indices
/// MaxPool2d::forward_with_indices gave -> zeros of [B, C, OH, OW] with x's values at the indices,
/// OH = (H - 1) s - 2 p + k unless output_size ([OH, OW] or [B, C, OH, OW]) says otherwise.
/// stride defaults to the kernel, as PyTorch's.
class MaxUnpool2d : public Module {
 public:
  explicit MaxUnpool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                       Size2 padding = 0);
  Tensor forward(const Tensor& x, const Tensor& indices, const Dims& output_size = {});
  /// An error: MaxUnpool2d needs the indices (forward(x, indices)).
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxUnpool2d"; }
  std::string extra_repr() const override;
  std::pair<int64_t, int64_t> kernel, stride, padding;
};

/// y = mean over each kernel window (ops::avg_pool2d), zero padding counted unless
/// count_include_pad is false; stride defaults to the kernel.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  std::pair<int64_t, int64_t> kernel, stride, padding;
  bool count_include_pad;
};

/// x [B, C, H, W] -> [B, C, OH, OW], each output the mean of its adaptive bin
/// (ops::adaptive_avg_pool2d); AdaptiveAvgPool2d(1) is the global average pool of a ResNet.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  std::pair<int64_t, int64_t> output_size;
};

/// Flattens dims start_dim..end_dim into one (torch.nn.Flatten: default 1..-1, [B, C, H, W] ->
/// [B, C H W]).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

}  // namespace vitrine::nn
