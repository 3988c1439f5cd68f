#include "nn/norms.h"

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "nn/batch_norm.h"
#include "ops/norms.h"
#include "ops/ops.h"

namespace vitrine::nn {

namespace {

/// Python's repr of a tuple of ints: "(5,)", "(3, 4)".
std::string tuple_str(const Dims& d) {
  std::string s = "(";
  for (int i = 0; i < d.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

}  // namespace

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups(num_groups), num_channels(num_channels), eps(eps), affine(affine) {
  VT_CHECK(num_groups > 0 && num_channels > 0,
           "GroupNorm: num_groups and num_channels must be positive, got {} and {}", num_groups,
           num_channels);
  VT_CHECK(num_channels % num_groups == 0,
           "GroupNorm: num_channels {} must be divisible by num_groups {}", num_channels,
           num_groups);
  if (affine) {
    weight = register_parameter("weight", ops::ones({num_channels}));
    bias = register_parameter("bias", ops::zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  VT_CHECK(x.dim() >= 2 && x.size(1) == num_channels,
           "GroupNorm({}, {}): expected x [N, {}, *], got shape {}", num_groups, num_channels,
           num_channels, x.shape());
  return ops::group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps, affine);
}

InstanceNorm::InstanceNorm(const char* type, int spatial_dims, int64_t num_features, double eps,
                           double momentum, bool affine, bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats),
      type_(type),
      spatial_dims_(spatial_dims) {
  VT_CHECK(num_features > 0, "{}: num_features must be positive, got {}", type, num_features);
  VT_CHECK(eps > 0, "{}: eps must be positive, got {}", type, eps);
  VT_CHECK(momentum >= 0 && momentum <= 1, "{}: momentum must be in [0, 1], got {}", type,
           momentum);
  std::tie(weight, bias, running_mean, running_var, num_batches_tracked) =
      register_norm_state(*this, num_features, affine, track_running_stats);
}

Tensor InstanceNorm::forward(const Tensor& x) {
  const int unbatched = spatial_dims_ + 1;
  VT_CHECK(x.dim() == unbatched || x.dim() == unbatched + 1,
           "{}: expected {}D (unbatched) or {}D (batched) input, got shape {}", type_, unbatched,
           unbatched + 1, x.shape());
  if (x.dim() == unbatched) return ops::squeeze(forward(ops::unsqueeze(x, 0)), 0);
  // As PyTorch, a channel count other than num_features is only refused where a parameter or a
  // running statistic has num_features entries.
  VT_CHECK(x.size(1) == num_features || (!affine && !track_running_stats),
           "{}({}): expected input's size at dim 1 to match num_features {}, got shape {}", type_,
           num_features, num_features, x.shape());
  return ops::instance_norm(x, running_mean, running_var, weight, bias,
                            is_training() || !track_running_stats, momentum, eps);
}

std::string InstanceNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     eps, momentum, affine, track_running_stats);
}

InstanceNorm1d::InstanceNorm1d(int64_t num_features, double eps, double momentum, bool affine,
                               bool track_running_stats)
    : InstanceNorm("InstanceNorm1d", 1, num_features, eps, momentum, affine, track_running_stats) {}

InstanceNorm2d::InstanceNorm2d(int64_t num_features, double eps, double momentum, bool affine,
                               bool track_running_stats)
    : InstanceNorm("InstanceNorm2d", 2, num_features, eps, momentum, affine, track_running_stats) {}

BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  VT_CHECK(num_features > 0, "BatchNorm1d: num_features must be positive, got {}", num_features);
  VT_CHECK(eps > 0, "BatchNorm1d: eps must be positive, got {}", eps);
  VT_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1),
           "BatchNorm1d: momentum must be in [0, 1], got {}", momentum.value_or(0));
  std::tie(weight, bias, running_mean, running_var, num_batches_tracked) =
      register_norm_state(*this, num_features, affine, track_running_stats);
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  VT_CHECK(x.dim() == 2 || x.dim() == 3,
           "BatchNorm1d: expected x [N, C] or [N, C, L] (2D or 3D input), got shape {}", x.shape());
  VT_CHECK(x.size(1) == num_features, "BatchNorm1d({}): x has {} channels (shape {})", num_features,
           x.size(1), x.shape());
  // As BatchNorm2d: the batch's statistics in training and always without running ones.
  const bool batch_stats = is_training() || !track_running_stats;
  double m = momentum.value_or(0);
  if (is_training() && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
    if (!momentum) m = 1.0 / num_batches_tracked.item<int64_t>();  // the cumulative average
  }
  return ops::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, m, eps);
}

std::string BatchNorm1d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features,
                     eps, momentum ? fmt::format("{}", *momentum) : "None", affine,
                     track_running_stats);
}

RMSNorm::RMSNorm(Dims normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape(std::move(normalized_shape)),
      eps(eps),
      elementwise_affine(elementwise_affine) {
  VT_CHECK(this->normalized_shape.size() >= 1, "RMSNorm: normalized_shape must not be empty");
  for (int i = 0; i < this->normalized_shape.size(); ++i)
    VT_CHECK(this->normalized_shape[i] > 0, "RMSNorm: normalized_shape {} has a size <= 0",
             this->normalized_shape);
  VT_CHECK(!eps || *eps >= 0, "RMSNorm: eps must be >= 0, got {}", eps.value_or(0));
  if (elementwise_affine) weight = register_parameter("weight", ops::ones(this->normalized_shape));
}

RMSNorm::RMSNorm(int64_t normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : RMSNorm(Dims{normalized_shape}, eps, elementwise_affine) {}

Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", tuple_str(normalized_shape),
                     eps ? fmt::format("{}", *eps) : "None", elementwise_affine);
}

}  // namespace vitrine::nn
