// Loading the model to explain and fitting images to it (model.h).
#include "tools/explain/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "nn/data/transforms.h"
#include "nn/json.h"
#include "ops/ops.h"
#include "tools/explain/explain.h"

namespace vitrine::explain {

using json = nlohmann::json;

LoadedModel load_model(const ModelSource& source) {
  LoadedModel l;
  l.meta = nn::read_safetensors_metadata(source.checkpoint);
  l.checkpoint_name = std::filesystem::path(source.checkpoint).filename().string();
  std::optional<models::ClassifierSpec> given;  // a ViT's architecture
  if (!source.model_config.empty())
    given = models::ClassifierSpec::of(models::resolve_config(source.model_config));
  l.model = models::load_classifier(source.checkpoint, given, &l.spec);
  l.vit = std::dynamic_pointer_cast<models::VisionTransformer>(l.model);
  if (l.vit) {
    l.patch = l.vit->config().patch;
    VT_CHECK(source.gradcam_layer.empty(),
             "--gradcam-layer {}: a ViT's Grad-CAM reads a block's tokens; choose the block with "
             "--layer",
             source.gradcam_layer);
  } else {
    l.patch = source.cell;
    l.gradcam_layer =
        source.gradcam_layer.empty() && l.spec.arch == "resnet" ? "layer3" : source.gradcam_layer;
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
  if (static_cast<int64_t>(l.classes.size()) != c.num_classes) {  // "0", "1", ... as torchvision
    l.classes.clear();
    for (int64_t k = 0; k < c.num_classes; ++k) l.classes.push_back(std::to_string(k));
  }
  if (!source.mean.empty() || !source.std.empty()) {
    l.mean = source.mean;
    l.std = source.std;
    l.normalisation = "--mean/--std";
  } else {
    models::Normalisation n =
        models::checkpoint_normalisation(source.checkpoint, c.channels, !l.headless);
    l.mean = std::move(n.mean);
    l.std = std::move(n.std);
    l.normalisation = n.source;
  }
  if (l.mean.size() == 1) l.mean.resize(static_cast<size_t>(c.channels), l.mean[0]);
  if (l.std.size() == 1) l.std.resize(static_cast<size_t>(c.channels), l.std[0]);
  VT_CHECK(static_cast<int64_t>(l.mean.size()) == c.channels &&
               static_cast<int64_t>(l.std.size()) == c.channels,
           "normalisation from {}: {} mean and {} std values for a {}-channel model",
           l.normalisation, l.mean.size(), l.std.size(), c.channels);
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
           "--resize {}: expected model, none or factor:F with F a number in (0, 16] (as "
           "factor:0.5), got factor \"{}\"",
           resize, f);
  return x;
}

Sample prepare_image(const std::string& name, const nn::data::Image& raw, int64_t label,
                     const InputGeometry& geometry, const LoadedModel& l) {
  const models::ClassifierSpec& c = l.spec;
  const int64_t patch = l.patch;
  VT_CHECK(raw.height >= patch && raw.width >= patch,
           "{}: the image is {}x{}, smaller than one {}x{} patch", name, raw.height, raw.width,
           patch, patch);
  nn::data::Image im = raw;
  if (geometry.resize == "model") {
    if (im.height != c.image_h || im.width != c.image_w)
      im = nn::data::resize(im, c.image_h, c.image_w);
  } else {
    if (const double f = resize_factor(geometry.resize); f > 0)
      im = nn::data::resize(im, std::max<int64_t>(1, std::llround(f * im.height)),
                            std::max<int64_t>(1, std::llround(f * im.width)));
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
    } else {
      im = nn::data::center_crop(im, h, w);
    }
  }
  return {name, image_tensor(nn::data::normalize(im, l.mean, l.std)), image_tensor(im), label, {}};
}

}  // namespace vitrine::explain
