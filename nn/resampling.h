// Resampling, padding and reshaping layers of image models, as torch.nn's (PyTorch 1.13's names,
// arguments and defaults): PixelShuffle, PixelUnshuffle, Upsample, ReflectionPad2d,
// ReplicationPad2d, ZeroPad2d, Unflatten, Dropout2d. Shapes: [N, C, H, W] or, where PyTorch
// takes it, an unbatched [C, H, W].
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace vitrine::nn {

/// [*, C r^2, H, W] -> [*, C, H r, W r]: y[..., c, h r + i, w r + j] = x[..., c r^2 + i r + j, h,
/// w]
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
/// The inverse: [*, C, H r, W r] -> [*, C r^2, H, W]
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
/// Training: y = x * mask[n, c] / (1 - p), one mask ~ Bernoulli(1 - p) per channel of x [N, C,
/// H, W] (per channel of [C, H, W]), drawn from gen; otherwise y = x.
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true,
                 Generator& gen = default_generator());

/// nn.PixelShuffle(upscale_factor)
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor); }
  std::string type_name() const override { return "PixelShuffle"; }
  std::string extra_repr() const override;
  int64_t upscale_factor;
};

/// nn.PixelUnshuffle(downscale_factor)
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor); }
  std::string type_name() const override { return "PixelUnshuffle"; }
  std::string extra_repr() const override;
  int64_t downscale_factor;
};

/// nn.Upsample's arguments, set by name as the PyTorch C++ API's UpsampleOptions:
/// Upsample(UpsampleOptions().scale_factor(2).mode("bilinear").align_corners(false)).
/// Exactly one of size and scale_factor; align_corners only with "bilinear" or "bicubic".
class UpsampleOptions {
 public:
  UpsampleOptions& size(int64_t both) { return size_ = std::pair{both, both}, *this; }
  UpsampleOptions& size(int64_t height, int64_t width) {
    return size_ = std::pair{height, width}, *this;
  }
  UpsampleOptions& scale_factor(double both) { return scale_ = std::pair{both, both}, *this; }
  UpsampleOptions& scale_factor(double height, double width) {
    return scale_ = std::pair{height, width}, *this;
  }
  /// "nearest" (default), "bilinear" or "bicubic"
  UpsampleOptions& mode(std::string m) { return mode_ = std::move(m), *this; }
  UpsampleOptions& align_corners(bool on) { return align_corners_ = on, *this; }
  std::optional<std::pair<int64_t, int64_t>> size_;
  std::optional<std::pair<double, double>> scale_;
  std::string mode_ = "nearest";
  std::optional<bool> align_corners_;
};

/// nn.Upsample: ops::interpolate of x [N, C, H, W] to size or by scale_factor (the given scale
/// maps output to input coordinates, recompute_scale_factor unset as in PyTorch's module).
class Upsample : public Module {
 public:
  explicit Upsample(UpsampleOptions options);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  UpsampleOptions options;
};

/// A 2-D padding, one integer for every side or PyTorch's 4-tuple (left, right, top, bottom):
/// 2, {1, 2, 0, 3}.
struct Padding2d {
  Padding2d(int64_t all) : left(all), right(all), top(all), bottom(all) {}  // implicit, as 2
  Padding2d(int64_t left, int64_t right, int64_t top, int64_t bottom)
      : left(left), right(right), top(top), bottom(bottom) {}
  /// {left, right, top, bottom}: ops::pad's order
  std::vector<int64_t> pads() const { return {left, right, top, bottom}; }
  int64_t left, right, top, bottom;
};

/// nn.ReflectionPad2d(padding): x [N, C, H, W] or [C, H, W] padded by its reflection about the
/// edges (ops::reflection_pad); each pad less than the dim it pads, a negative one crops.
class ReflectionPad2d : public Module {
 public:
  explicit ReflectionPad2d(Padding2d padding) : padding(padding) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReflectionPad2d"; }
  std::string extra_repr() const override;
  Padding2d padding;
};

/// nn.ReplicationPad2d(padding): the edge values repeated (ops::replication_pad).
class ReplicationPad2d : public Module {
 public:
  explicit ReplicationPad2d(Padding2d padding) : padding(padding) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReplicationPad2d"; }
  std::string extra_repr() const override;
  Padding2d padding;
};

/// nn.ZeroPad2d(padding): zeros around the last two dims (ops::pad); a negative pad crops.
class ZeroPad2d : public Module {
 public:
  explicit ZeroPad2d(Padding2d padding) : padding(padding) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ZeroPad2d"; }
  std::string extra_repr() const override;
  Padding2d padding;
};

/// nn.Unflatten(dim, unflattened_size): dim of x split into sizes (one of them may be -1, the
/// rest of the dim): [2, 12] with Unflatten(1, {3, 4}) -> [2, 3, 4].
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, std::vector<int64_t> unflattened_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;
  int64_t dim;
  std::vector<int64_t> unflattened_size;
};

/// nn.Dropout2d(p = 0.5): whole channels dropped in training (dropout2d above), the identity in
/// eval.
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override { return dropout2d(x, p, is_training(), *gen_); }
  std::string type_name() const override { return "Dropout2d"; }
  std::string extra_repr() const override;
  void set_generator(Generator& gen) { gen_ = &gen; }
  Generator& generator() const { return *gen_; }
  double p;

 private:
  Generator* gen_;
};

}  // namespace vitrine::nn
