// GroupNorm, InstanceNorm1d/2d, BatchNorm1d and RMSNorm, as torch.nn names them (RMSNorm as
// PyTorch 2.4's), with PyTorch's argument order, defaults, parameter and buffer names (weight,
// bias, running_mean, running_var, num_batches_tracked). nn::LayerNorm over several trailing dims
// is in nn/layers.h; BatchNorm2d in nn/batch_norm.h.
#pragma once
#include <optional>
#include <string>

#include "nn/module.h"

namespace vitrine::nn {

/// x [N, C, *] -> same shape (ops::group_norm): per sample and group of C / num_groups channels
///   y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c]      (weight 1, bias 0 at start)
/// the same in training and eval.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor weight, bias;  // [C], undefined without affine
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
};

/// InstanceNorm1d / 2d (ops::instance_norm): x [N, C, *spatial] or unbatched [C, *spatial]; per
/// sample and channel over the spatial dims, y = (x - mean) / sqrt(var + eps) * weight + bias.
/// track_running_stats: training updates running_mean/var by momentum with the batch's average
/// of the instance statistics (num_batches_tracked stays 0, as PyTorch's), and eval normalises by
/// them; without it, training and eval both use the instance statistics.
class InstanceNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return type_; }
  std::string extra_repr() const override;
  Tensor weight, bias;                                    // [C], undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // [C], [C], int64 []; when tracking
  int64_t num_features;
  double eps, momentum;
  bool affine, track_running_stats;

 protected:
  /// spatial_dims: 1 (InstanceNorm1d) or 2 (InstanceNorm2d); type names the class.
  InstanceNorm(const char* type, int spatial_dims, int64_t num_features, double eps,
               double momentum, bool affine, bool track_running_stats);

 private:
  const char* type_;
  int spatial_dims_;
};

/// x [N, C, L] or [C, L].
class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                          bool affine = false, bool track_running_stats = false);
};

/// x [N, C, H, W] or [C, H, W].
class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                          bool affine = false, bool track_running_stats = false);
};

/// Per-channel normalisation of x [N, C] or [N, C, L] (ops::batch_norm), as BatchNorm2d:
///   training: the batch's statistics (over N, or N and L), and running = (1 - momentum) running
///             + momentum batch (the variance unbiased; momentum nullopt: the cumulative
///             average, momentum = 1 / num_batches_tracked)
///   eval:     the running statistics
///   y = (x - mean) / sqrt(var + eps) * weight + bias        (weight 1, bias 0 at start)
/// track_running_stats = false: always the batch's statistics, no buffers.
class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;
  Tensor weight, bias;                                    // [C], undefined without affine
  Tensor running_mean, running_var, num_batches_tracked;  // [C], [C], int64 []
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
};

/// PyTorch 2.4's nn.RMSNorm (ops::rms_norm) over the trailing dims of normalized_shape:
///   y = x / sqrt(mean(x^2) + eps) * weight       (weight [normalized_shape], 1 at start)
/// eps nullopt: torch.finfo(x.dtype).eps.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Dims normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  /// normalized_shape {normalized_shape}
  explicit RMSNorm(int64_t normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Tensor weight;  // [normalized_shape], undefined without elementwise_affine
  Dims normalized_shape;
  std::optional<double> eps;
  bool elementwise_affine;
};

}  // namespace vitrine::nn
