// Loading the model to explain and fitting images to it (model.h).
#include "explain/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "explain/explain.h"
#include "nn/data/transforms.h"
#include "nn/json.h"
#include "ops/ops.h"

namespace vitrine::explain {

using json = nlohmann::json;

bool is_random_checkpoint(const std::string& checkpoint) {
  return checkpoint.rfind("random:", 0) == 0;
}

namespace {

/// "0", "1", ...: a model's classes when nothing names them (as torchvision numbers them).
std::vector<std::string> numbered_classes(int64_t count) {
  std::vector<std::string> out;
  for (int64_t k = 0; k < count; ++k) out.push_back(std::to_string(k));
  return out;
}

/// l.mean, l.std and l.normalisation: --mean/--std when given, else --normalise's, else
/// fallback() (a models::Normalisation); one value stands for every channel.
template <typename Fallback>
void set_normalisation(LoadedModel& l, const ModelSource& source, int64_t channels,
                       Fallback fallback) {
  const std::string& n = source.normalise;
  VT_CHECK(n.empty() || n == "checkpoint" || n == "imagenet" || n == "none",
           "--normalise: expected checkpoint, imagenet or none, got '{}'", n);
  const bool given = !source.mean.empty() || !source.std.empty();
  VT_CHECK(!given || n.empty() || n == "checkpoint",
           "--normalise {} and --mean/--std say two things: give one of them", n);
  if (given) {
    l.mean = source.mean;
    l.std = source.std;
    l.normalisation = "--mean/--std";
  } else if (n == "none") {
    l.mean = {0.0f};
    l.std = {1.0f};
    l.normalisation = "--normalise none (the pixels in [0, 1] as they are)";
  } else if (n == "imagenet") {
    VT_CHECK(channels == 3,
             "--normalise imagenet: ImageNet's statistics are for 3 channels, the "
             "model takes {}",
             channels);
    l.mean = models::kImageNetMean;
    l.std = models::kImageNetStd;
    l.normalisation = "--normalise imagenet";
  } else {
    models::Normalisation n = fallback();
    l.mean = std::move(n.mean);
    l.std = std::move(n.std);
    l.normalisation = std::move(n.source);
  }
  const auto c = static_cast<size_t>(channels);
  if (l.mean.size() == 1) l.mean.resize(c, l.mean[0]);
  if (l.std.size() == 1) l.std.resize(c, l.std[0]);
  VT_CHECK(l.mean.size() == c && l.std.size() == c,
           "normalisation from {}: {} mean and {} std values for a {}-channel model",
           l.normalisation, l.mean.size(), l.std.size(), channels);
}

/// checkpoint "random:PRESET": the preset's ViT initialised from the seed. It has no file, so no
/// metadata: classes are numbered, and the normalisation is --mean/--std or timm's 0.5 / 0.5.
LoadedModel random_model(const ModelSource& source) {
  const std::string preset = source.checkpoint.substr(7);
  VT_CHECK(source.model_config.empty(),
           "--checkpoint {}: the preset names the architecture; give no --model-config with it",
           source.checkpoint);
  VT_CHECK(source.gradcam_layer.empty(),
           "--gradcam-layer {}: a ViT's Grad-CAM reads a block's tokens; choose the block with "
           "--layer",
           source.gradcam_layer);
  models::ViTConfig config;
  try {
    config = models::ViTConfig::preset(preset);
  } catch (const Error& e) {
    fail("--checkpoint {}: {}", source.checkpoint, e.what());
  }
  if (!source.init.empty()) {
    config.init = source.init;
    try {
      config.validate();
    } catch (const Error& e) {
      fail("--init {}: {}", source.init, e.what());
    }
  }
  LoadedModel l;
  l.checkpoint_name = source.checkpoint;
  l.spec = models::ClassifierSpec::of(config);
  Generator gen(source.seed);
  l.model = l.spec.build(gen);
  l.vit = std::dynamic_pointer_cast<models::VisionTransformer>(l.model);
  l.patch = config.patch;
  l.headless = config.num_classes == 0;
  l.classes = numbered_classes(config.num_classes);
  set_normalisation(l, source, config.channels, [] {
    return models::Normalisation{
        {0.5f}, {0.5f}, "0.5 / 0.5, timm's ViT default (an untrained model has none of its own)"};
  });
  return l;
}

}  // namespace

LoadedModel load_model(const ModelSource& source) {
  if (is_random_checkpoint(source.checkpoint)) return random_model(source);
  VT_CHECK(source.init.empty(),
           "--init {}: the initialisation of an untrained model (--checkpoint random:PRESET); the "
           "weights of {} do not depend on it",
           source.init, source.checkpoint);
  LoadedModel l;
  l.meta = nn::read_safetensors_metadata(source.checkpoint);
  l.checkpoint_name = std::filesystem::path(source.checkpoint).filename().string();
  std::optional<models::ClassifierSpec> given;  // a ViT's architecture
  if (!source.model_config.empty())
    given = models::ClassifierSpec::of(models::resolve_config(source.model_config));
  l.model = models::load_classifier(source.checkpoint, given, &l.spec);
  l.vit = std::dynamic_pointer_cast<models::VisionTransformer>(l.model);
  if (given && given->num_classes != l.spec.num_classes)
    l.notes.push_back(
        models::head_note(source.model_config, given->num_classes, l.spec.num_classes));
  if (l.vit) {
    l.patch = l.vit->config().patch;
    VT_CHECK(source.gradcam_layer.empty(),
             "--gradcam-layer {}: a ViT's Grad-CAM reads a block's tokens; choose the block with "
             "--layer",
             source.gradcam_layer);
  } else {
    l.patch = source.cell;
    l.gradcam_layer = source.gradcam_layer;
    if (l.gradcam_layer.empty() && l.spec.arch == "resnet")  // its last stage: layer3, layer4
      l.gradcam_layer = models::ResNetConfig::from_json(l.spec.config).last_stage();
    if (!l.gradcam_layer.empty()) (void)submodule(*l.model, l.gradcam_layer);  // checked
  }
  const models::ClassifierSpec& c = l.spec;
  l.headless = c.num_classes == 0;
  // Metadata written by another program may hold anything: read with checks, the file named.
  try {
    if (json v = nn::metadata_json(l.meta, nn::kClassesKey); v.is_array())
      l.classes = v.get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: its metadata has a value of the wrong type ({})", source.checkpoint, e.what());
  } catch (const Error& e) {
    fail("{}: {}", source.checkpoint, e.what());
  }
  if (static_cast<int64_t>(l.classes.size()) != c.num_classes)
    l.classes = numbered_classes(c.num_classes);
  set_normalisation(l, source, c.channels, [&] {
    return models::checkpoint_normalisation(source.checkpoint, l.meta, c.channels, !l.headless);
  });
  return l;
}

std::vector<float> black_pixel(const LoadedModel& model) {
  std::vector<float> black;
  for (size_t ch = 0; ch < model.mean.size(); ++ch)
    black.push_back(-model.mean[ch] / model.std[ch]);
  return black;
}

Tensor image_tensor(const nn::data::Image& im) {
  return ops::from_vector(im.pixels, {im.channels, im.height, im.width});
}

const char* const kResizeValues = "model, stretch, none or factor:F";

double resize_factor(const std::string& resize) {
  if (resize.rfind("factor:", 0) != 0) return 0;
  const std::string f = resize.substr(7);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(f, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VT_CHECK(used == f.size() && used > 0 && std::isfinite(x) && x > 0 && x <= 16,
           "--resize {}: expected {} with F a number in (0, 16] (as factor:0.5), got factor "
           "\"{}\"",
           resize, kResizeValues, f);
  return x;
}

bool valid_resize(const std::string& resize) {
  return resize == "model" || resize == "stretch" || resize == "none" || resize_factor(resize) > 0;
}

std::pair<int64_t, int64_t> cover_size(int64_t height, int64_t width, int64_t h, int64_t w) {
  const auto [rh, rw] = nn::data::shorter_side_size(height, width, std::min(h, w));
  if (rh >= h && rw >= w) return {rh, rw};
  // A model not square and of another aspect than the image: the longer side must reach it.
  const double s = std::max(static_cast<double>(h) / static_cast<double>(height),
                            static_cast<double>(w) / static_cast<double>(width));
  return {std::max(h, static_cast<int64_t>(std::ceil(s * static_cast<double>(height) - 1e-9))),
          std::max(w, static_cast<int64_t>(std::ceil(s * static_cast<double>(width) - 1e-9)))};
}

nn::data::Box Fit::map(const nn::data::Box& box, int64_t height, int64_t width) const {
  const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(box.top) * scale_y)) - top;
  const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(box.left) * scale_x)) - left;
  const auto y1 =
      static_cast<int64_t>(std::ceil(static_cast<double>(box.top + box.height) * scale_y)) - top;
  const auto x1 =
      static_cast<int64_t>(std::ceil(static_cast<double>(box.left + box.width) * scale_x)) - left;
  const int64_t t = std::clamp<int64_t>(y0, 0, height), l = std::clamp<int64_t>(x0, 0, width);
  const int64_t b = std::clamp<int64_t>(y1, 0, height), r = std::clamp<int64_t>(x1, 0, width);
  return {t, l, std::max<int64_t>(0, b - t), std::max<int64_t>(0, r - l)};
}

Sample prepare_image(const std::string& name, const nn::data::Image& raw, int64_t label,
                     const InputGeometry& geometry, const LoadedModel& l) {
  const models::ClassifierSpec& c = l.spec;
  const int64_t patch = l.patch;
  VT_CHECK(raw.height >= patch && raw.width >= patch,
           "{}: the image is {}x{}, smaller than one {}x{} patch", name, raw.height, raw.width,
           patch, patch);
  nn::data::Image im = raw;
  Fit fit;
  // Scales as the resize computes them: output side / input side.
  const auto resize_to = [&](int64_t h, int64_t w) {
    if (h == im.height && w == im.width) return;
    fit.scale_y = static_cast<double>(h) / static_cast<double>(im.height);
    fit.scale_x = static_cast<double>(w) / static_cast<double>(im.width);
    im = nn::data::resize(im, h, w, nn::data::Interpolation::Bilinear, true);
  };
  // torchvision's CenterCrop offsets (Python's round, half to even, as center_crop).
  const auto centre_crop = [&](int64_t h, int64_t w) {
    fit.top = static_cast<int64_t>(std::nearbyint(static_cast<double>(im.height - h) / 2));
    fit.left = static_cast<int64_t>(std::nearbyint(static_cast<double>(im.width - w) / 2));
    im = nn::data::center_crop(im, h, w);
  };
  if (geometry.resize == "model") {
    const auto [h, w] = cover_size(im.height, im.width, c.image_h, c.image_w);
    resize_to(h, w);
    if (im.height != c.image_h || im.width != c.image_w) centre_crop(c.image_h, c.image_w);
  } else if (geometry.resize == "stretch") {
    resize_to(c.image_h, c.image_w);
  } else {
    // factor:F makes each side int(side * F), rounded down as Python's int() and DINO's
    // `img.size // 2` for F = 0.5 (a 301 x 203 photo becomes 150 x 101).
    if (const double f = resize_factor(geometry.resize); f > 0)
      resize_to(std::max<int64_t>(1, static_cast<int64_t>(f * static_cast<double>(im.height))),
                std::max<int64_t>(1, static_cast<int64_t>(f * static_cast<double>(im.width))));
    VT_CHECK(im.height >= patch && im.width >= patch,
             "{}: the image is {}x{}{}, smaller than one {}x{} patch", name, im.height, im.width,
             geometry.resize == "none" ? "" : fmt::format(" after --resize {}", geometry.resize),
             patch, patch);
    const int64_t h = im.height / patch * patch, w = im.width / patch * patch;
    if (geometry.crop == "topleft") {
      nn::data::Image out{im.channels, h, w, {}};
      out.pixels.resize(static_cast<size_t>(im.channels * h * w));
      for (int64_t ch = 0; ch < im.channels; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) out.at(ch, y, x) = im.at(ch, y, x);
      im = std::move(out);
    } else if (h != im.height || w != im.width) {
      centre_crop(h, w);
    }
  }
  Sample s{name, image_tensor(nn::data::normalize(im, l.mean, l.std)), image_tensor(im), label, {},
           fit};
  return s;
}

}  // namespace vitrine::explain
