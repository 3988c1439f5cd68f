// Transforms on one float CHW image (formulas on the declarations in transforms.h), their
// composition, and the pipeline built from a config section.
#include "nn/data/transforms.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/generator.h"

namespace vitrine::nn::data {

// ---- Rng -----------------------------------------------------------------------------------

Rng::Rng(uint64_t seed, int64_t epoch, int64_t index) : seed_(seed) {
  VT_CHECK(epoch >= 0 && epoch < (int64_t{1} << 24),
           "transforms: epoch {} is out of range for the per-example generator (0 <= epoch < 2^24)",
           epoch);
  VT_CHECK(index >= 0 && index < (int64_t{1} << 32),
           "transforms: example index {} is out of range for the per-example generator "
           "(0 <= index < 2^32)",
           index);
  base_ = static_cast<uint64_t>(epoch) << 40 | static_cast<uint64_t>(index) << 8;
}

uint32_t Rng::next_u32() {
  if (used_ == 4) {
    VT_ASSERT(block_ < 256);  // 1024 words per example is far more than any pipeline draws
    words_ = philox4x32(base_ | block_++, seed_);
    used_ = 0;
  }
  return words_[used_++];
}

double Rng::uniform() {
  const uint64_t hi = next_u32(), lo = next_u32();
  return static_cast<double>((hi << 32 | lo) >> 11) * 0x1.0p-53;
}

int64_t Rng::below(int64_t n) {
  VT_ASSERT(n > 0);
  const uint64_t hi = next_u32(), lo = next_u32();
  return static_cast<int64_t>((hi << 32 | lo) % static_cast<uint64_t>(n));
}

// ---- the operations ------------------------------------------------------------------------

namespace {

void check_image(const Image& im, const char* what) {
  VT_CHECK(im.channels > 0 && im.height > 0 && im.width > 0,
           "{}: the image is empty ([{}, {}, {}])", what, im.channels, im.height, im.width);
  VT_CHECK(static_cast<int64_t>(im.pixels.size()) == im.channels * im.height * im.width,
           "{}: the image [{}, {}, {}] holds {} pixel values, expected {}", what, im.channels,
           im.height, im.width, im.pixels.size(), im.channels * im.height * im.width);
}

void check_size(int64_t height, int64_t width, const char* what) {
  VT_CHECK(height > 0 && width > 0, "{}: the size must be positive, got ({}, {})", what, height,
           width);
}

Image blank(int64_t c, int64_t h, int64_t w, float fill) {
  Image out;
  out.channels = c;
  out.height = h;
  out.width = w;
  out.pixels.assign(static_cast<size_t>(c * h * w), fill);
  return out;
}

/// The input pixels and weights that make each output pixel along one axis: output o is
/// sum_k weight[o][k] * in[first[o] + k] (bicubic without antialias clamps indices at the border,
/// so it lists them one by one in index).
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<float>> weight;
};

/// Keys' cubic convolution kernel with parameter a (PyTorch: a = -0.75; PIL, antialias: -0.5).
double cubic(double x, double a) {
  x = std::abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

double triangle(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}

Taps axis_taps(int64_t in, int64_t out, Interpolation mode, bool antialias) {
  Taps t;
  t.index.resize(static_cast<size_t>(out));
  t.weight.resize(static_cast<size_t>(out));
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    auto& idx = t.index[static_cast<size_t>(o)];
    auto& w = t.weight[static_cast<size_t>(o)];
    if (mode == Interpolation::Nearest) {  // PyTorch's "nearest": floor(o * scale)
      const auto fscale = static_cast<float>(scale);
      idx.push_back(
          std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * fscale)), in - 1));
      w.push_back(1);
    } else if (antialias) {  // the filter stretched by the scale when downsampling, normalised
      const bool cub = mode == Interpolation::Bicubic;
      const double stretch = std::max(scale, 1.0), support = (cub ? 2.0 : 1.0) * stretch;
      const double centre = scale * (static_cast<double>(o) + 0.5);
      const int64_t lo = std::max<int64_t>(static_cast<int64_t>(centre - support + 0.5), 0);
      const int64_t hi = std::min<int64_t>(static_cast<int64_t>(centre + support + 0.5), in);
      double total = 0;
      std::vector<double> ws;
      for (int64_t i = lo; i < hi; ++i) {
        const double x = (static_cast<double>(i) - centre + 0.5) / stretch;
        ws.push_back(cub ? cubic(x, -0.5) : triangle(x));
        total += ws.back();
      }
      for (size_t k = 0; k < ws.size(); ++k) {
        idx.push_back(lo + static_cast<int64_t>(k));
        w.push_back(total != 0 ? static_cast<float>(ws[k] / total) : 0.0f);
      }
    } else if (mode == Interpolation::Bilinear) {  // as PyTorch computes it, in float
      const auto fscale = static_cast<float>(scale);
      float src = fscale * (static_cast<float>(o) + 0.5f) - 0.5f;
      if (src < 0) src = 0;
      const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
      const float l1 = src - static_cast<float>(i0);
      idx = {i0, std::min(i0 + 1, in - 1)};
      w = {1.0f - l1, l1};
    } else {  // bicubic, a = -0.75, four taps clamped to the image
      const double src = scale * (static_cast<double>(o) + 0.5) - 0.5;
      const double f = std::floor(src), d = src - f;
      for (int k = -1; k <= 2; ++k) {
        idx.push_back(std::clamp(static_cast<int64_t>(f) + k, int64_t{0}, in - 1));
        w.push_back(static_cast<float>(cubic(d - k, -0.75)));
      }
    }
  }
  return t;
}

/// torchvision's centre-crop offset along one axis (negative when the crop pads).
int64_t centre_offset(int64_t in, int64_t out) {
  if (out > in) return -((out - in) / 2);
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
}

}  // namespace

std::pair<int64_t, int64_t> shorter_side_size(int64_t height, int64_t width, int64_t size) {
  VT_CHECK(height > 0 && width > 0 && size > 0,
           "resize: the image ({}, {}) and the shorter side {} must be positive", height, width,
           size);
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  const auto other = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(longer) /
                                          static_cast<double>(shorter));
  return height <= width ? std::pair{size, other} : std::pair{other, size};
}

Image resize(const Image& image, int64_t height, int64_t width, Interpolation mode,
             bool antialias) {
  check_image(image, "resize");
  check_size(height, width, "resize");
  const Taps ty = axis_taps(image.height, height, mode, antialias);
  const Taps tx = axis_taps(image.width, width, mode, antialias);
  // Rows first ([C, H_in, W_in] -> [C, H_out, W_in]), then columns (-> [C, H_out, W_out]).
  Image rows = blank(image.channels, height, image.width, 0);
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const auto& idx = ty.index[static_cast<size_t>(y)];
      const auto& w = ty.weight[static_cast<size_t>(y)];
      float* dst = &rows.at(c, y, 0);
      for (size_t k = 0; k < idx.size(); ++k) {
        const float* src =
            &image.pixels[static_cast<size_t>((c * image.height + idx[k]) * image.width)];
        for (int64_t x = 0; x < image.width; ++x) dst[x] += w[k] * src[x];
      }
    }
  Image out = blank(image.channels, height, width, 0);
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const float* src = &rows.at(c, y, 0);
      for (int64_t x = 0; x < width; ++x) {
        const auto& idx = tx.index[static_cast<size_t>(x)];
        const auto& w = tx.weight[static_cast<size_t>(x)];
        float v = 0;
        for (size_t k = 0; k < idx.size(); ++k) v += w[k] * src[idx[k]];
        out.at(c, y, x) = v;
      }
    }
  return out;
}

Image crop(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width,
           float fill) {
  check_image(image, "crop");
  check_size(height, width, "crop");
  Image out = blank(image.channels, height, width, fill);
  // The rows and columns of the window that fall inside the image.
  const int64_t y_begin = std::max<int64_t>(0, -top), y_end = std::min(height, image.height - top);
  const int64_t x_begin = std::max<int64_t>(0, -left), x_end = std::min(width, image.width - left);
  if (y_begin >= y_end || x_begin >= x_end) return out;
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = y_begin; y < y_end; ++y) {
      const float* src = &image.pixels[static_cast<size_t>(
          (c * image.height + top + y) * image.width + left + x_begin)];
      std::copy(src, src + (x_end - x_begin), &out.at(c, y, x_begin));
    }
  return out;
}

Image center_crop(const Image& image, int64_t height, int64_t width) {
  check_image(image, "center_crop");
  check_size(height, width, "center_crop");
  return crop(image, centre_offset(image.height, height), centre_offset(image.width, width), height,
              width);
}

Image hflip(const Image& image) {
  check_image(image, "hflip");
  Image out = image;
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < image.height; ++y)
      for (int64_t x = 0; x < image.width; ++x)
        out.at(c, y, x) = image.at(c, y, image.width - 1 - x);
  return out;
}

Image normalize(const Image& image, const std::vector<float>& mean, const std::vector<float>& std) {
  check_image(image, "normalize");
  VT_CHECK(mean.size() == std.size(), "normalize: mean has {} values but std has {}", mean.size(),
           std.size());
  VT_CHECK(static_cast<int64_t>(mean.size()) == image.channels,
           "normalize: mean and std have {} values (one per channel) but the image has {} "
           "channels",
           mean.size(), image.channels);
  Image out = image;
  const int64_t plane = image.height * image.width;
  for (int64_t c = 0; c < image.channels; ++c) {
    const float m = mean[static_cast<size_t>(c)], s = std[static_cast<size_t>(c)];
    float* p = &out.pixels[static_cast<size_t>(c * plane)];
    for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - m) / s;
  }
  return out;
}

// ---- transform objects ---------------------------------------------------------------------

namespace {
const char* interpolation_name(Interpolation m) {
  switch (m) {
    case Interpolation::Nearest:
      return "nearest";
    case Interpolation::Bicubic:
      return "bicubic";
    default:
      return "bilinear";
  }
}
}  // namespace

Resize::Resize(int64_t height, int64_t width, Interpolation mode, bool antialias)
    : height_(height), width_(width), mode_(mode), antialias_(antialias) {
  check_size(height, width, "Resize");
}
Resize Resize::shorter_side(int64_t size, Interpolation mode, bool antialias) {
  VT_CHECK(size > 0, "Resize: the shorter side must be positive, got {}", size);
  Resize r;
  r.shorter_ = size, r.mode_ = mode, r.antialias_ = antialias;
  return r;
}
Resize Resize::by_factor(double factor, Interpolation mode, bool antialias) {
  VT_CHECK(factor > 0 && std::isfinite(factor), "Resize: the factor must be positive, got {}",
           factor);
  Resize r;
  r.factor_ = factor, r.mode_ = mode, r.antialias_ = antialias;
  return r;
}
Image Resize::apply(Image image, Rng&) const {
  const ImageShape s = output_shape({image.channels, image.height, image.width});
  return resize(image, s[1], s[2], mode_, antialias_);
}
ImageShape Resize::output_shape(const ImageShape& in) const {
  if (shorter_ > 0) {
    const auto [h, w] = shorter_side_size(in[1], in[2], shorter_);
    return {in[0], h, w};
  }
  if (factor_ > 0)
    return {in[0], std::max<int64_t>(1, std::llround(factor_ * static_cast<double>(in[1]))),
            std::max<int64_t>(1, std::llround(factor_ * static_cast<double>(in[2])))};
  return {in[0], height_, width_};
}
std::string Resize::describe() const {
  std::string extra;
  if (mode_ != Interpolation::Bilinear) extra += fmt::format(", {}", interpolation_name(mode_));
  if (!antialias_ && mode_ != Interpolation::Nearest) extra += ", no antialias";
  if (shorter_ > 0) return fmt::format("resize(shorter side {}{})", shorter_, extra);
  if (factor_ > 0) return fmt::format("resize(factor {:g}{})", factor_, extra);
  return fmt::format("resize({}, {}{})", height_, width_, extra);
}

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  check_size(height, width, "CenterCrop");
}
Image CenterCrop::apply(Image image, Rng&) const { return center_crop(image, height_, width_); }
ImageShape CenterCrop::output_shape(const ImageShape& in) const { return {in[0], height_, width_}; }
std::string CenterCrop::describe() const {
  return fmt::format("center_crop({}, {})", height_, width_);
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  check_size(height, width, "RandomCrop");
  VT_CHECK(padding >= 0, "RandomCrop: padding must be >= 0, got {}", padding);
}
Image RandomCrop::apply(Image image, Rng& rng) const {
  check_image(image, "random_crop");
  output_shape({image.channels, image.height, image.width});
  const int64_t top = rng.below(image.height + 2 * padding_ - height_ + 1);
  const int64_t left = rng.below(image.width + 2 * padding_ - width_ + 1);
  return crop(image, top - padding_, left - padding_, height_, width_, 0);
}
ImageShape RandomCrop::output_shape(const ImageShape& in) const {
  VT_CHECK(height_ <= in[1] + 2 * padding_ && width_ <= in[2] + 2 * padding_,
           "random_crop: the crop size ({}, {}) is larger than the image ({}, {}) with padding {}",
           height_, width_, in[1], in[2], padding_);
  return {in[0], height_, width_};
}
std::string RandomCrop::describe() const {
  return fmt::format("random_crop({}, {}, padding {})", height_, width_, padding_);
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  VT_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p must be in [0, 1], got {}", p);
}
Image RandomHorizontalFlip::apply(Image image, Rng& rng) const {
  return rng.uniform() < p_ ? hflip(image) : image;
}
std::string RandomHorizontalFlip::describe() const { return fmt::format("hflip(p {})", p_); }

Normalize::Normalize(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  VT_CHECK(!mean_.empty() && mean_.size() == std_.size(),
           "Normalize: mean and std need one value per channel each, got {} and {}", mean_.size(),
           std_.size());
  for (float s : std_)
    VT_CHECK(s != 0 && std::isfinite(s),
             "Normalize: std values must be finite and non-zero, got {}", fmt::join(std_, ", "));
}
Image Normalize::apply(Image image, Rng&) const { return normalize(image, mean_, std_); }
ImageShape Normalize::output_shape(const ImageShape& in) const {
  VT_CHECK(static_cast<int64_t>(mean_.size()) == in[0],
           "normalize: mean and std have {} values (one per channel) but the image has {} "
           "channels",
           mean_.size(), in[0]);
  return in;
}
std::string Normalize::describe() const {
  return fmt::format("normalize(mean [{}], std [{}])", fmt::join(mean_, ", "),
                     fmt::join(std_, ", "));
}

// ---- Compose -------------------------------------------------------------------------------

Compose& Compose::add(std::shared_ptr<const Transform> t) {
  VT_CHECK(t != nullptr, "Compose: cannot add a null transform");
  transforms_.push_back(std::move(t));
  return *this;
}

Image Compose::operator()(Image image, Rng& rng) const {
  for (const auto& t : transforms_) image = t->apply(std::move(image), rng);
  return image;
}

Image Compose::operator()(Image image, uint64_t seed, int64_t epoch, int64_t index) const {
  Rng rng(seed, epoch, index);
  return (*this)(std::move(image), rng);
}

Image Compose::operator()(Image image) const {
  for (const auto& t : transforms_)
    VT_CHECK(!t->random(),
             "Compose: {} is random; apply the pipeline with an Rng (seed, epoch, index)",
             t->describe());
  Rng unused(0, 0, 0);
  return (*this)(std::move(image), unused);
}

ImageShape Compose::output_shape(const ImageShape& in) const {
  ImageShape s = in;
  for (const auto& t : transforms_) s = t->output_shape(s);
  return s;
}

bool Compose::random() const {
  for (const auto& t : transforms_)
    if (t->random()) return true;
  return false;
}

std::string Compose::describe() const {
  if (transforms_.empty()) return "identity";
  std::vector<std::string> parts;
  for (const auto& t : transforms_) parts.push_back(t->describe());
  return fmt::format("{}", fmt::join(parts, " -> "));
}

// ---- from_config ---------------------------------------------------------------------------

namespace {

constexpr const char* kKnownKeys = "resize, center_crop, random_crop, hflip, mean, std";

int64_t positive_int(const nlohmann::json& v, const std::string& key) {
  VT_CHECK(v.is_number_integer() && v.get<int64_t>() > 0,
           "transforms config: \"{}\" must hold positive integers, got {}", key, v.dump());
  return v.get<int64_t>();
}

/// [h, w] or a single size s (= [s, s]).
std::pair<int64_t, int64_t> size_pair(const nlohmann::json& v, const std::string& key) {
  if (v.is_array()) {
    VT_CHECK(v.size() == 2, "transforms config: \"{}\" must be [height, width] or one size, got {}",
             key, v.dump());
    return {positive_int(v[0], key), positive_int(v[1], key)};
  }
  VT_CHECK(v.is_number_integer(),
           "transforms config: \"{}\" must be [height, width] or one size, got {}", key, v.dump());
  const int64_t s = positive_int(v, key);
  return {s, s};
}

std::vector<float> channel_values(const nlohmann::json& v, const std::string& key,
                                  int64_t channels) {
  VT_CHECK(v.is_array() && !v.empty(),
           "transforms config: \"{}\" must be a list of numbers (one per channel), got {}", key,
           v.dump());
  std::vector<float> out;
  for (const auto& x : v) {
    VT_CHECK(x.is_number(), "transforms config: \"{}\" must be a list of numbers, got {}", key,
             v.dump());
    out.push_back(x.get<float>());
  }
  VT_CHECK(static_cast<int64_t>(out.size()) == channels,
           "transforms config: \"{}\" has {} values but the images have {} channels", key,
           out.size(), channels);
  return out;
}

/// The resize transform of a "resize" value (see from_config).
Resize resize_of(const nlohmann::json& v) {
  if (!v.is_object()) {
    if (v.is_array()) {
      auto [h, w] = size_pair(v, "resize");
      return Resize(h, w);
    }
    return Resize::shorter_side(positive_int(v, "resize"));
  }
  for (const auto& [key, value] : v.items()) {
    (void)value;
    VT_CHECK(key == "size" || key == "factor" || key == "interpolation" || key == "antialias",
             "transforms config: unknown key \"resize.{}\" (known: size, factor, interpolation, "
             "antialias)",
             key);
  }
  Interpolation mode = Interpolation::Bilinear;
  if (v.contains("interpolation")) {
    const auto& m = v["interpolation"];
    const std::string name = m.is_string() ? m.get<std::string>() : "";
    VT_CHECK(name == "bilinear" || name == "bicubic" || name == "nearest",
             "transforms config: \"resize.interpolation\" must be \"bilinear\", \"bicubic\" or "
             "\"nearest\", got {}",
             m.dump());
    mode = name == "bicubic"   ? Interpolation::Bicubic
           : name == "nearest" ? Interpolation::Nearest
                               : Interpolation::Bilinear;
  }
  bool antialias = true;
  if (v.contains("antialias")) {
    VT_CHECK(v["antialias"].is_boolean(),
             "transforms config: \"resize.antialias\" must be true or false, got {}",
             v["antialias"].dump());
    antialias = v["antialias"].get<bool>();
  }
  VT_CHECK(v.contains("size") != v.contains("factor"),
           "transforms config: \"resize\" needs exactly one of \"size\" and \"factor\", got {}",
           v.dump());
  if (v.contains("factor")) {
    const auto& f = v["factor"];
    VT_CHECK(f.is_number() && f.get<double>() > 0 && f.get<double>() <= 16,
             "transforms config: \"resize.factor\" must be a number in (0, 16], got {}", f.dump());
    return Resize::by_factor(f.get<double>(), mode, antialias);
  }
  const auto& size = v["size"];
  if (size.is_array()) {
    auto [h, w] = size_pair(size, "resize.size");
    return Resize(h, w, mode, antialias);
  }
  return Resize::shorter_side(positive_int(size, "resize.size"), mode, antialias);
}

}  // namespace

Compose from_config(const nlohmann::json& config_in, int64_t channels, bool train) {
  VT_CHECK(channels > 0, "transforms config: channels must be positive, got {}", channels);
  if (config_in.is_null()) return {};
  VT_CHECK(config_in.is_object(),
           "transforms config: expected an object with keys from ({}), got {}", kKnownKeys,
           config_in.dump());
  // A key set to null is absent: --set data.transforms.random_crop=null removes the transform.
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [key, value] : config_in.items())
    if (!value.is_null()) config[key] = value;
  Compose out;
  for (const auto& [key, value] : config.items()) {
    (void)value;
    if (!key.empty() && key[0] == '_') continue;  // a comment ("_comment")
    VT_CHECK(key == "resize" || key == "center_crop" || key == "random_crop" || key == "hflip" ||
                 key == "mean" || key == "std",
             "transforms config: unknown key \"{}\" (known: {})", key, kKnownKeys);
  }
  if (config.contains("resize")) out.add(std::make_shared<Resize>(resize_of(config["resize"])));
  if (config.contains("center_crop")) {
    auto [h, w] = size_pair(config["center_crop"], "center_crop");
    out.add(std::make_shared<CenterCrop>(h, w));
  }
  if (config.contains("random_crop")) {
    const auto& rc = config["random_crop"];
    std::pair<int64_t, int64_t> size;
    int64_t padding = 0;
    if (rc.is_object()) {
      for (const auto& [key, value] : rc.items()) {
        (void)value;
        VT_CHECK(key == "size" || key == "padding",
                 "transforms config: unknown key \"random_crop.{}\" (known: size, padding)", key);
      }
      VT_CHECK(rc.contains("size"), "transforms config: \"random_crop\" needs a \"size\", got {}",
               rc.dump());
      size = size_pair(rc["size"], "random_crop.size");
      if (rc.contains("padding")) {
        const auto& p = rc["padding"];
        VT_CHECK(p.is_number_integer() && p.get<int64_t>() >= 0,
                 "transforms config: \"random_crop.padding\" must be an integer >= 0, got {}",
                 p.dump());
        padding = p.get<int64_t>();
      }
    } else {
      size = size_pair(rc, "random_crop");
    }
    if (train)
      out.add(std::make_shared<RandomCrop>(size.first, size.second, padding));
    else
      out.add(std::make_shared<CenterCrop>(size.first, size.second));
  }
  if (config.contains("hflip")) {
    const auto& p = config["hflip"];
    VT_CHECK(p.is_number() && p.get<double>() >= 0 && p.get<double>() <= 1,
             "transforms config: \"hflip\" must be a probability in [0, 1], got {}", p.dump());
    if (train) out.add(std::make_shared<RandomHorizontalFlip>(p.get<double>()));
  }
  VT_CHECK(config.contains("mean") == config.contains("std"),
           "transforms config: \"mean\" and \"std\" go together; only \"{}\" is given",
           config.contains("mean") ? "mean" : "std");
  if (config.contains("mean")) {
    std::vector<float> mean = channel_values(config["mean"], "mean", channels);
    std::vector<float> std = channel_values(config["std"], "std", channels);
    out.add(std::make_shared<Normalize>(std::move(mean), std::move(std)));
  }
  return out;
}

// ---- fitting a pipeline to a model's input size -------------------------------------------------

namespace {

/// [h, w] of a size value as from_config reads it; nullopt for a value it refuses.
std::optional<std::pair<int64_t, int64_t>> size_value(const nlohmann::json& v) {
  try {
    return size_pair(v, "size");
  } catch (const Error&) {
    return std::nullopt;
  }
}

/// Whether the evaluation pipeline of `t` yields [C, H, W] from the data set's images (native
/// {0, 0}: from images of two unrelated sizes).
bool yields_size(const nlohmann::json& t, int64_t C, std::pair<int64_t, int64_t> native, int64_t H,
                 int64_t W) {
  try {
    const Compose pipeline = from_config(t, C, false);
    const ImageShape want{C, H, W};
    if (native.first > 0) return pipeline.output_shape({C, native.first, native.second}) == want;
    for (const ImageShape& in :
         {ImageShape{C, 2 * H + 7, 3 * W + 5}, ImageShape{C, 3 * H + 5, 2 * W + 7}})
      if (pipeline.output_shape(in) != want) return false;
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> fit_to_size(nlohmann::json& t, int64_t channels,
                                     std::pair<int64_t, int64_t> native, int64_t H, int64_t W) {
  using nlohmann::json;
  if (yields_size(t, channels, native, H, W)) return {};
  VT_CHECK(t.is_object(), "transforms config: expected an object, got {}", t.dump());
  const json before = t;
  for (const char* key : {"resize", "center_crop", "random_crop"})  // null: no such transform
    if (t.contains(key) && t[key].is_null()) t.erase(key);
  std::vector<std::string> notes;
  auto hw = [](int64_t h, int64_t w) { return json::array({h, w}); };
  auto note = [&](const std::string& key, const json& old, const json& now) {
    notes.push_back(fmt::format("{} {} -> {}", key,
                                old.is_null() ? std::string("(none)") : old.dump(), now.dump()));
  };
  // The crop: its key and its [h, w].
  std::string crop_key;
  json* crop_size = nullptr;
  if (t.contains("random_crop")) {
    crop_key = "random_crop";
    crop_size = t["random_crop"].is_object() ? &t["random_crop"]["size"] : &t["random_crop"];
  } else if (t.contains("center_crop")) {
    crop_key = "center_crop";
    crop_size = &t["center_crop"];
  }
  const bool native_fits = native.first == H && native.second == W;
  if (crop_size) {
    const auto crop = size_value(*crop_size);
    if (t.contains("resize") && crop && crop->first > 0 && crop->second > 0) {
      // The resize keeps its kind: a shorter side stays one ("size" of an object form too).
      const bool object = t["resize"].is_object();
      json& r_json = object ? t["resize"]["size"] : t["resize"];
      if (const auto r =
              object && !t["resize"].contains("size") ? std::nullopt : size_value(r_json)) {
        const json now = r_json.is_array()
                             ? hw(std::llround(static_cast<double>(r->first) * H / crop->first),
                                  std::llround(static_cast<double>(r->second) * W / crop->second))
                             : json(std::llround(static_cast<double>(r->first) * H / crop->first));
        note(object ? "resize.size" : "resize", r_json, now);
        r_json = now;
      }
    } else if (!native_fits) {
      // Images of any size: the shorter side, so that the crop keeps their aspect.
      const json now = native.first == 0 ? json(std::max(H, W)) : hw(H, W);
      note("resize", nullptr, now);
      t["resize"] = now;
    }
    note(crop_key == "random_crop" && t["random_crop"].is_object() ? "random_crop.size" : crop_key,
         *crop_size, hw(H, W));
    *crop_size = hw(H, W);
  } else if (t.contains("resize") || !native_fits) {
    const json old = t.contains("resize") ? t["resize"] : json(nullptr);
    if (native.first == 0 && !old.is_array()) {
      // Images of any size, no exact size asked for: torchvision's evaluation, the shorter side
      // to the model's size and a centre crop (the aspect kept, nothing squashed).
      const json side = std::max(H, W);
      if (old.is_object() && old.contains("size")) {
        note("resize.size", old["size"], side);
        t["resize"]["size"] = side;
      } else {
        note("resize", old, side);
        t["resize"] = side;
      }
      note("center_crop", nullptr, hw(H, W));
      t["center_crop"] = hw(H, W);
    } else {
      note("resize", old, hw(H, W));
      t["resize"] = hw(H, W);
    }
  }
  if (!yields_size(t, channels, native, H, W)) {  // leave it to the caller to say what is wrong
    t = before;
    return {};
  }
  return notes;
}

}  // namespace vitrine::nn::data
