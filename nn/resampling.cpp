// Resampling, padding and reshaping layers (see resampling.h): reshapes and permutes, ops::
// interpolate, ops::pad and ops/padding.h, and a per-channel dropout mask.
#include "nn/resampling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "ops/padding.h"

namespace vitrine::nn {

namespace {

/// The leading (batch) dims of x: all but the last k.
Dims leading(const Tensor& x, int k) {
  Dims d;
  for (int i = 0; i < x.dim() - k; ++i) d.push_back(x.size(i));
  return d;
}

/// lead followed by tail.
Dims concat(Dims lead, std::initializer_list<int64_t> tail) {
  for (int64_t t : tail) lead.push_back(t);
  return lead;
}

/// 0, 1, .., n - 1 followed by n + each of tail.
Dims order(int n, std::initializer_list<int64_t> tail) {
  Dims d;
  for (int i = 0; i < n; ++i) d.push_back(i);
  for (int64_t t : tail) d.push_back(n + t);
  return d;
}

void check_image(const Tensor& x, const char* op) {
  VT_CHECK(x.defined(), "{}: input is undefined", op);
  VT_CHECK(x.dim() == 3 || x.dim() == 4,
           "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape {}", op, x.shape());
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  VT_CHECK(x.defined(), "pixel_shuffle: input is undefined");
  VT_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got {}", r);
  VT_CHECK(x.dim() >= 3,
           "pixel_shuffle: expected an input of at least 3 dims [*, C r^2, H, W], got shape {}",
           x.shape());
  int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  VT_CHECK(c % (r * r) == 0,
           "pixel_shuffle: the channel dim (-3) of input {} is {}, not divisible by "
           "upscale_factor^2 = {}",
           x.shape(), c, r * r);
  Dims lead = leading(x, 3);
  int nb = lead.size();
  // [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r]
  Tensor y = ops::reshape(x, concat(lead, {c / (r * r), r, r, h, w}));
  y = ops::permute(y, order(nb, {0, 3, 1, 4, 2}));
  return ops::reshape(y, concat(lead, {c / (r * r), h * r, w * r}));
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  VT_CHECK(x.defined(), "pixel_unshuffle: input is undefined");
  VT_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got {}", r);
  VT_CHECK(x.dim() >= 3,
           "pixel_unshuffle: expected an input of at least 3 dims [*, C, H r, W r], got shape {}",
           x.shape());
  int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  VT_CHECK(h % r == 0 && w % r == 0,
           "pixel_unshuffle: height {} and width {} of input {} must be divisible by "
           "downscale_factor {}",
           h, w, x.shape(), r);
  Dims lead = leading(x, 3);
  int nb = lead.size();
  // [*, C, H, r, W, r] -> [*, C, r, r, H, W] -> [*, C r^2, H, W]
  Tensor y = ops::reshape(x, concat(lead, {c, h / r, r, w / r, r}));
  y = ops::permute(y, order(nb, {0, 2, 4, 1, 3}));
  return ops::reshape(y, concat(lead, {c * r * r, h / r, w / r}));
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator& gen) {
  check_image(x, "dropout2d");
  VT_CHECK(p >= 0 && p <= 1, "dropout2d: probability p must be in [0, 1], got {}", p);
  if (!training || p == 0) return x;
  Dims mask_shape = Dims::filled(x.dim(), 1);  // [N, C, 1, 1] or [C, 1, 1]
  for (int i = 0; i < x.dim() - 2; ++i) mask_shape[i] = x.size(i);
  Tensor mask;
  {
    NoGradGuard no_grad;
    if (p == 1) {  // as PyTorch: x * 0, no random numbers drawn
      mask = ops::zeros(mask_shape, x.dtype(), x.device());
    } else {
      Tensor keep = ops::ge(ops::rand(mask_shape, gen, x.dtype(), 0, 1, x.device()),
                            ops::scalar(p, x.dtype(), x.device()));
      mask = ops::to_dtype(keep, x.dtype()) * (1.0 / (1.0 - p));
    }
  }
  return x * mask;
}

PixelShuffle::PixelShuffle(int64_t r) : upscale_factor(r) {
  VT_CHECK(r > 0, "PixelShuffle: upscale_factor must be positive, got {}", r);
}
std::string PixelShuffle::extra_repr() const {
  return fmt::format("upscale_factor={}", upscale_factor);
}

PixelUnshuffle::PixelUnshuffle(int64_t r) : downscale_factor(r) {
  VT_CHECK(r > 0, "PixelUnshuffle: downscale_factor must be positive, got {}", r);
}
std::string PixelUnshuffle::extra_repr() const {
  return fmt::format("downscale_factor={}", downscale_factor);
}

Upsample::Upsample(UpsampleOptions o) : options(std::move(o)) {
  VT_CHECK(options.size_.has_value() != options.scale_.has_value(),
           "Upsample: exactly one of size and scale_factor must be given (got {})",
           options.size_ ? "both" : "neither");
  const std::string& m = options.mode_;
  VT_CHECK(m == "nearest" || m == "bilinear" || m == "bicubic",
           "Upsample: mode '{}' is not supported (expected nearest, bilinear or bicubic)", m);
  VT_CHECK(!options.align_corners_ || m != "nearest",
           "Upsample: align_corners can only be set with the interpolating modes (bilinear, "
           "bicubic), not with mode '{}'",
           m);
}

Tensor Upsample::forward(const Tensor& x) {
  VT_CHECK(x.defined() && x.dim() == 4,
           "Upsample: expected a 4-D input [N, C, H, W] (PyTorch reads a 3-D one as [N, C, L]), "
           "got shape {}",
           x.defined() ? x.shape() : Dims{});
  ops::InterpolateOptions io;
  io.size = options.size_;
  io.scale_factor = options.scale_;
  io.mode = options.mode_;
  io.align_corners = options.align_corners_.value_or(false);
  return ops::interpolate(x, io);
}

std::string Upsample::extra_repr() const {
  std::string s =
      options.size_
          ? fmt::format("size=({}, {})", options.size_->first, options.size_->second)
          : fmt::format("scale_factor=({}, {})", options.scale_->first, options.scale_->second);
  s += fmt::format(", mode='{}'", options.mode_);
  if (options.align_corners_) s += fmt::format(", align_corners={}", *options.align_corners_);
  return s;
}

namespace {
std::string padding_repr(const Padding2d& p) {
  return fmt::format("({}, {}, {}, {})", p.left, p.right, p.top, p.bottom);
}
}  // namespace

Tensor ReflectionPad2d::forward(const Tensor& x) {
  check_image(x, "ReflectionPad2d");
  return ops::reflection_pad(x, padding.pads());
}
std::string ReflectionPad2d::extra_repr() const { return padding_repr(padding); }

Tensor ReplicationPad2d::forward(const Tensor& x) {
  check_image(x, "ReplicationPad2d");
  return ops::replication_pad(x, padding.pads());
}
std::string ReplicationPad2d::extra_repr() const { return padding_repr(padding); }

Tensor ZeroPad2d::forward(const Tensor& x) {
  VT_CHECK(x.defined() && x.dim() >= 2, "ZeroPad2d: expected an input of at least 2 dims, got {}",
           x.defined() ? x.shape() : Dims{});
  // A negative pad crops (narrow), then ops::pad adds the positive ones.
  Tensor y = x;
  std::vector<int64_t> pads = padding.pads(), positive(4, 0);
  for (int k = 0; k < 4; ++k) {
    int d = x.dim() - 1 - k / 2;
    if (pads[k] >= 0) {
      positive[k] = pads[k];
      continue;
    }
    int64_t n = y.size(d);
    VT_CHECK(-pads[k] < n, "ZeroPad2d: padding {} crops all {} elements of dim {} of input {}",
             pads[k], n, d, x.shape());
    y = k % 2 == 0 ? ops::narrow(y, d, -pads[k], n + pads[k]) : ops::narrow(y, d, 0, n + pads[k]);
  }
  return ops::pad(y, positive);
}
std::string ZeroPad2d::extra_repr() const { return padding_repr(padding); }

Unflatten::Unflatten(int64_t d, std::vector<int64_t> sizes)
    : dim(d), unflattened_size(std::move(sizes)) {
  VT_CHECK(!unflattened_size.empty(), "Unflatten: unflattened_size must not be empty");
  int inferred = 0;
  for (int64_t s : unflattened_size) {
    VT_CHECK(s >= 0 || s == -1, "Unflatten: size {} in {} is invalid (expected >= 0, or -1 once)",
             s, unflattened_size);
    inferred += s == -1;
  }
  VT_CHECK(inferred <= 1, "Unflatten: only one size may be -1, got {}", unflattened_size);
}

Tensor Unflatten::forward(const Tensor& x) {
  VT_CHECK(x.defined() && x.dim() >= 1, "Unflatten: expected an input of at least 1 dim");
  VT_CHECK(dim >= -x.dim() && dim < x.dim(), "Unflatten: dim {} is out of range for input {}", dim,
           x.shape());
  int d = static_cast<int>(dim < 0 ? dim + x.dim() : dim);
  int64_t n = x.size(d), known = 1;
  bool infer = false;
  for (int64_t s : unflattened_size) s == -1 ? (void)(infer = true) : (void)(known *= s);
  VT_CHECK(infer ? known > 0 && n % known == 0 : known == n,
           "unflatten: provided sizes {} don't multiply up to the size of dim {} ({}) of input {}",
           unflattened_size, d, n, x.shape());
  Dims shape;
  for (int i = 0; i < x.dim(); ++i) {
    if (i != d) {
      shape.push_back(x.size(i));
      continue;
    }
    for (int64_t s : unflattened_size) shape.push_back(s == -1 ? n / known : s);
  }
  return ops::reshape(x, shape);
}

std::string Unflatten::extra_repr() const {
  return fmt::format("dim={}, unflattened_size={}", dim, unflattened_size);
}

Dropout2d::Dropout2d(double prob, Generator& gen) : p(prob), gen_(&gen) {
  VT_CHECK(p >= 0 && p <= 1, "Dropout2d: p must be in [0, 1], got {}", p);
}
std::string Dropout2d::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace vitrine::nn
