// Transforms on one float CHW image (formulas on the declarations in transforms.h), their
// composition, and the pipeline built from a config section.
#include "nn/data/transforms.h"

#include <fmt/format.h>

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

/// Bilinear source indices and weights along one axis, as PyTorch computes them (in float).
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps linear_taps(int64_t in, int64_t out) {
  Taps t;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    const float l1 = src - static_cast<float>(i0);
    t.i0.push_back(i0);
    t.i1.push_back(std::min(i0 + 1, in - 1));
    t.w0.push_back(1.0f - l1);
    t.w1.push_back(l1);
  }
  return t;
}

/// torchvision's centre-crop offset along one axis (negative when the crop pads).
int64_t centre_offset(int64_t in, int64_t out) {
  if (out > in) return -((out - in) / 2);
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
}

}  // namespace

Image resize(const Image& image, int64_t height, int64_t width) {
  check_image(image, "resize");
  check_size(height, width, "resize");
  const Taps ty = linear_taps(image.height, height), tx = linear_taps(image.width, width);
  Image out = blank(image.channels, height, width, 0);
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < height; ++y) {
      const auto yi = static_cast<size_t>(y);
      for (int64_t x = 0; x < width; ++x) {
        const auto xi = static_cast<size_t>(x);
        const float top = tx.w0[xi] * image.at(c, ty.i0[yi], tx.i0[xi]) +
                          tx.w1[xi] * image.at(c, ty.i0[yi], tx.i1[xi]);
        const float bottom = tx.w0[xi] * image.at(c, ty.i1[yi], tx.i0[xi]) +
                             tx.w1[xi] * image.at(c, ty.i1[yi], tx.i1[xi]);
        out.at(c, y, x) = ty.w0[yi] * top + ty.w1[yi] * bottom;
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

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  check_size(height, width, "Resize");
}
Image Resize::apply(Image image, Rng&) const { return resize(image, height_, width_); }
ImageShape Resize::output_shape(const ImageShape& in) const { return {in[0], height_, width_}; }
std::string Resize::describe() const { return fmt::format("resize({}, {})", height_, width_); }

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

}  // namespace

Compose from_config(const nlohmann::json& config, int64_t channels, bool train) {
  VT_CHECK(channels > 0, "transforms config: channels must be positive, got {}", channels);
  Compose out;
  if (config.is_null()) return out;
  VT_CHECK(config.is_object(), "transforms config: expected an object with keys from ({}), got {}",
           kKnownKeys, config.dump());
  for (const auto& [key, value] : config.items()) {
    (void)value;
    if (!key.empty() && key[0] == '_') continue;  // a comment ("_comment")
    VT_CHECK(key == "resize" || key == "center_crop" || key == "random_crop" || key == "hflip" ||
                 key == "mean" || key == "std",
             "transforms config: unknown key \"{}\" (known: {})", key, kKnownKeys);
  }
  if (config.contains("resize")) {
    auto [h, w] = size_pair(config["resize"], "resize");
    out.add(std::make_shared<Resize>(h, w));
  }
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
      if (const auto r = size_value(t["resize"])) {
        const json now = hw(std::llround(static_cast<double>(r->first) * H / crop->first),
                            std::llround(static_cast<double>(r->second) * W / crop->second));
        note("resize", t["resize"], now);
        t["resize"] = now;
      }
    } else if (!native_fits) {
      note("resize", nullptr, hw(H, W));
      t["resize"] = hw(H, W);
    }
    note(crop_key == "random_crop" && t["random_crop"].is_object() ? "random_crop.size" : crop_key,
         *crop_size, hw(H, W));
    *crop_size = hw(H, W);
  } else if (t.contains("resize") || !native_fits) {
    note("resize", t.contains("resize") ? t["resize"] : json(nullptr), hw(H, W));
    t["resize"] = hw(H, W);
  }
  if (!yields_size(t, channels, native, H, W)) {  // leave it to the caller to say what is wrong
    t = before;
    return {};
  }
  return notes;
}

}  // namespace vitrine::nn::data
