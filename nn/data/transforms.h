// Transforms: functions from one Image (float CHW) to another, as torchvision's transforms on a
// float tensor. Each transform is a pure function of its input and, for the random ones, of an
// Rng made for one example from (seed, epoch, index) by Philox; nothing is drawn from shared
// state, so an example's augmentation is the same on any number of threads and in any order.
// Random transforms draw from the example's Rng in pipeline order, each a fixed number of draws.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/data/dataset.h"

namespace vitrine::nn::data {

/// The random numbers of one example: Philox4x32 under key = seed, at counters
/// (epoch << 40 | index << 8 | block), block = 0, 1, ... (four 32-bit words per block). Requires
/// epoch < 2^24, index < 2^32 and at most 1024 words per example.
class Rng {
 public:
  Rng(uint64_t seed, int64_t epoch, int64_t index);
  /// The next 32 random bits.
  uint32_t next_u32();
  /// U[0, 1) with 53 random bits (two words).
  double uniform();
  /// A uniform integer in [0, n) (two words; bias below 2^-32 for n < 2^32).
  int64_t below(int64_t n);

 private:
  uint64_t seed_, base_;
  uint64_t block_ = 0;
  std::array<uint32_t, 4> words_{};
  int used_ = 4;
};

/// (channels, height, width).
using ImageShape = std::array<int64_t, 3>;

// ---- the operations, as plain functions ----------------------------------------------------

/// How resize computes an output pixel from the input's, as torchvision's InterpolationMode.
enum class Interpolation { Nearest, Bilinear, Bicubic };

/// torchvision's Resize(size: int) rule: the shorter side becomes `size` and the longer
/// int(size * longer / shorter) (truncated, as torchvision computes it); returns (height, width).
std::pair<int64_t, int64_t> shorter_side_size(int64_t height, int64_t width, int64_t size);

/// Resize to (height, width), as torchvision.transforms.functional.resize on a float image
/// (F.interpolate with align_corners=False). For each output row y the source centre is
/// s = (y + 0.5) * H_in / H_out (the same for columns); the output is a weighted sum of the input
/// pixels around it. Without antialias (or when upsampling), bilinear reads the two nearest
/// (sy = max(0, s - 0.5), y0 = floor(sy), y1 = min(y0 + 1, H_in - 1), weights 1 - (sy - y0) and
/// sy - y0) and bicubic the four nearest with Keys' cubic, a = -0.75, clamped at the border.
/// With antialias and a scale H_in / H_out = f > 1 (downsampling), the filter is stretched by f:
/// out[y] = sum_i k((i + 0.5 - s) / f) in[i] / sum_i k((i + 0.5 - s) / f) over the pixels i within
/// f * support of s, with k the triangle (support 1) for bilinear and Keys' cubic with a = -0.5
/// (support 2) for bicubic (PIL's and torchvision's antialias=True). Nearest takes
/// in[floor(y * H_in / H_out)] (PyTorch's "nearest"). Rows first, then columns: separable.
Image resize(const Image& image, int64_t height, int64_t width,
             Interpolation mode = Interpolation::Bilinear, bool antialias = true);
/// The window out[c, y, x] = in[c, top + y, left + x] of size (height, width); pixels outside
/// the image (top or left negative, or the window past the border) are fill.
Image crop(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width,
           float fill = 0);
/// torchvision's CenterCrop: top = round((H - height) / 2), left = round((W - width) / 2), with
/// Python's round (half to even); a crop larger than the image pads with zeros, the extra
/// (size - H) // 2 rows above and the rest below (the same for columns).
Image center_crop(const Image& image, int64_t height, int64_t width);
/// out[c, y, x] = in[c, y, W - 1 - x].
Image hflip(const Image& image);
/// out[c, y, x] = (in[c, y, x] - mean[c]) / std[c]; mean and std must have one value per channel.
Image normalize(const Image& image, const std::vector<float>& mean, const std::vector<float>& std);

// ---- transforms as objects, composed -------------------------------------------------------

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Image apply(Image image, Rng& rng) const = 0;
  /// The shape an input of shape `in` has afterwards (checks what can be checked early).
  virtual ImageShape output_shape(const ImageShape& in) const = 0;
  /// Whether apply draws from the Rng.
  virtual bool random() const { return false; }
  /// Its name and parameters, e.g. "random_crop(28, 28, padding 2)".
  virtual std::string describe() const = 0;
};

/// torchvision's Resize: to an exact (height, width) (Resize([h, w])), the shorter side to a size
/// with the aspect kept (Resize(s): shorter_side_size), or, as DINO's notebooks, every side
/// scaled by a factor (round(f * side), at least 1); then resize(image, ..., mode, antialias).
class Resize : public Transform {
 public:
  /// Resize([height, width]).
  Resize(int64_t height, int64_t width, Interpolation mode = Interpolation::Bilinear,
         bool antialias = true);
  /// Resize(size): the shorter side becomes `size`.
  static Resize shorter_side(int64_t size, Interpolation mode = Interpolation::Bilinear,
                             bool antialias = true);
  /// Every side times factor (> 0).
  static Resize by_factor(double factor, Interpolation mode = Interpolation::Bilinear,
                          bool antialias = true);
  Image apply(Image image, Rng& rng) const override;
  ImageShape output_shape(const ImageShape& in) const override;
  std::string describe() const override;

 private:
  Resize() = default;
  int64_t height_ = 0, width_ = 0, shorter_ = 0;  // exactly one of (height_, width_), shorter_
  double factor_ = 0;                             // or factor_ is set
  Interpolation mode_ = Interpolation::Bilinear;
  bool antialias_ = true;
};

/// center_crop(image, height, width) (see above).
class CenterCrop : public Transform {
 public:
  CenterCrop(int64_t height, int64_t width);
  Image apply(Image image, Rng& rng) const override;
  ImageShape output_shape(const ImageShape& in) const override;
  std::string describe() const override;

 private:
  int64_t height_, width_;
};

/// torchvision's RandomCrop(size, padding, fill=0): the image is padded with `padding` zeros on
/// every side, then a window of (height, width) is taken at top = below(H + 2p - height + 1),
/// left = below(W + 2p - width + 1) (in that order: two draws). A window larger than the padded
/// image is an error.
class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t height, int64_t width, int64_t padding = 0);
  Image apply(Image image, Rng& rng) const override;
  ImageShape output_shape(const ImageShape& in) const override;
  bool random() const override { return true; }
  std::string describe() const override;

 private:
  int64_t height_, width_, padding_;
};

/// torchvision's RandomHorizontalFlip(p): hflip(image) when uniform() < p, else the image; one
/// draw whatever p is.
class RandomHorizontalFlip : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Image apply(Image image, Rng& rng) const override;
  ImageShape output_shape(const ImageShape& in) const override { return in; }
  bool random() const override { return true; }
  std::string describe() const override;

 private:
  double p_;
};

/// normalize(image, mean, std) (see above); std values must be non-zero.
class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  Image apply(Image image, Rng& rng) const override;
  ImageShape output_shape(const ImageShape& in) const override;
  std::string describe() const override;
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& std() const { return std_; }

 private:
  std::vector<float> mean_, std_;
};

/// Transforms applied in order; empty is the identity.
class Compose {
 public:
  Compose() = default;
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms)
      : transforms_(std::move(transforms)) {}
  /// Appends a transform: compose.add(std::make_shared<Resize>(32, 32)).
  Compose& add(std::shared_ptr<const Transform> t);
  /// Applies every transform with the example's Rng.
  Image operator()(Image image, Rng& rng) const;
  /// Applies the pipeline of example `index` in `epoch`: (*this)(image, Rng(seed, epoch, index)).
  Image operator()(Image image, uint64_t seed, int64_t epoch, int64_t index) const;
  /// Applies a pipeline without random transforms (an error otherwise).
  Image operator()(Image image) const;
  ImageShape output_shape(const ImageShape& in) const;
  bool random() const;
  /// "resize(32, 32) -> normalize(mean [0.5], std [0.25])", or "identity".
  std::string describe() const;
  const std::vector<std::shared_ptr<const Transform>>& transforms() const { return transforms_; }
  size_t size() const { return transforms_.size(); }

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

/// The pipeline described by a config section, for images with `channels` channels. Keys (all
/// optional; any other key is an error naming it), applied in this order whatever the JSON order:
///   "resize": [h, w], s, or {"size": [h, w] or s, "factor": f, "interpolation": "bilinear" |
///             "bicubic" | "nearest", "antialias": true | false}
///                                         -> Resize(h, w) (exact), Resize::shorter_side(s) (the
///                                            shorter side, as torchvision's Resize(int)) or
///                                            Resize::by_factor(f); bilinear and antialias by
///                                            default, as torchvision's
///   "center_crop": [h, w] or s            -> CenterCrop(h, w)
///   "random_crop": [h, w], s, or {"size": [h, w] or s, "padding": p}
///                                         -> train: RandomCrop(h, w, p); eval: CenterCrop(h, w)
///   "hflip": p                            -> train: RandomHorizontalFlip(p); eval: nothing
///   "mean": [m...], "std": [s...]         -> Normalize(mean, std), `channels` values each
/// A key whose value is null is absent (so that --set data.transforms.random_crop=null removes a
/// transform). train = false gives the evaluation pipeline: no random transform, and the same
/// output size as the training one (a random crop becomes a centre crop of its size, no padding).
Compose from_config(const nlohmann::json& config, int64_t channels, bool train);

/// The image-size keys of a transforms config (resize, center_crop, random_crop; mean, std and
/// hflip untouched) brought to a model's input [height, width], for images of `channels` channels
/// whose data set has the fixed size `native` ({0, 0}: images of any size):
///   a crop of size S (centre or random) with a resize R before it:  R -> round(R * H / S_h),
///                                                                   S -> [H, W] (padding kept);
///   a crop without a resize:   S -> [H, W], and a resize added before it when the data set's
///                              images are not [H, W] already: [H, W] for images of one size,
///                              the shorter side max(H, W) for images of any size;
///   a resize alone, or neither (when needed): for images of any size, unless the resize is an
///                              exact [h, w], resize max(H, W) (the shorter side) and
///                              center_crop [H, W] (torchvision's evaluation: the aspect kept);
///                              else R -> [H, W].
/// (timm's evaluation resizes to size / 0.875 and centre-crops; a config with resize 72 and crop
/// 64 keeps that ratio at 224: resize 252, crop 224.) Nothing changes when the pipeline already
/// yields [H, W], nor when no change would make it (from_config then says what is wrong). Returns
/// what changed ("resize [72, 72] -> [252, 252]"), empty when nothing did.
std::vector<std::string> fit_to_size(nlohmann::json& transforms, int64_t channels,
                                     std::pair<int64_t, int64_t> native, int64_t height,
                                     int64_t width);

}  // namespace vitrine::nn::data
