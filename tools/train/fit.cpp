// Fitting a config to a model, a data set and a run length: see fit.h.
#include "tools/train/fit.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/error.h"
#include "nn/data/transforms.h"
#include "tools/train/config.h"
#include "tools/train/datasets.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// [h, w] of a size value: a number s or [h, w]; nullopt for anything else.
std::optional<std::pair<int64_t, int64_t>> size_of(const json& v) {
  if (v.is_number()) {
    const auto s = static_cast<int64_t>(std::llround(v.get<double>()));
    return std::pair{s, s};
  }
  if (v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number())
    return std::pair{static_cast<int64_t>(std::llround(v[0].get<double>())),
                     static_cast<int64_t>(std::llround(v[1].get<double>()))};
  return std::nullopt;
}

json hw(int64_t h, int64_t w) { return json::array({h, w}); }

/// The fixed image size of a data set, or {0, 0} for images of any size.
std::pair<int64_t, int64_t> native_size(const json& config) {
  const std::string name = config.at("data").at("dataset").get<std::string>();
  if (name == "fashion-mnist" || name == "mnist") return {28, 28};
  if (name == "cifar10" || name == "cifar100") return {32, 32};
  if (name == "fashion-mnist-pasted") {
    const int64_t c = pasted_options(config).canvas;
    return {c, c};
  }
  return {0, 0};
}

/// Whether the evaluation pipeline of `transforms` yields [C, H, W] from the data set's images.
bool yields_model_size(const json& config) {
  const models::ClassifierSpec m = model_spec(config);
  const auto [nh, nw] = native_size(config);
  try {
    const auto pipeline =
        nn::data::from_config(without_comments(config["data"]["transforms"]), m.channels, false);
    const nn::data::ImageShape want{m.channels, m.image_h, m.image_w};
    if (nh > 0) return pipeline.output_shape({m.channels, nh, nw}) == want;
    for (const nn::data::ImageShape& in :
         {nn::data::ImageShape{m.channels, 2 * m.image_h + 7, 3 * m.image_w + 5},
          nn::data::ImageShape{m.channels, 3 * m.image_h + 5, 2 * m.image_w + 7}})
      if (pipeline.output_shape(in) != want) return false;
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> fit_transforms_to_model(json& config) {
  if (yields_model_size(config)) return {};
  const models::ClassifierSpec m = model_spec(config);
  const int64_t H = m.image_h, W = m.image_w;
  json& t = config["data"]["transforms"];
  VT_CHECK(t.is_object(), "config: data.transforms must be an object, got {}", t.dump());
  const json before = t;
  std::vector<std::string> notes;
  auto note = [&](const std::string& key, const json& old, const json& now) {
    notes.push_back(fmt::format("data.transforms.{} {} -> {}", key,
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
  const auto [nh, nw] = native_size(config);
  const bool native_fits = nh == H && nw == W;
  if (crop_size) {
    const auto crop = size_of(*crop_size);
    if (t.contains("resize") && crop && crop->first > 0 && crop->second > 0) {
      if (const auto r = size_of(t["resize"])) {
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
  if (!yields_model_size(config)) {  // leave it to validate_config to say what is wrong
    t = before;
    return {};
  }
  return notes;
}

std::vector<std::string> fit_classes_to_data(json& config, bool num_classes_given) {
  if (config.at("data").at("dataset").get<std::string>() != "imagefolder") return {};
  const auto test = load_test_set(config);
  const std::vector<std::string> classes = test->classes();
  const auto n = static_cast<int64_t>(classes.size());
  const int64_t configured = model_spec(config).num_classes;
  if (configured == n) return {};
  VT_CHECK(!num_classes_given,
           "config: model.num_classes is {}, but the image folder {} holds {} class folders ({}); "
           "leave model.num_classes out to take the folders' count",
           configured, data_path(config), n, fmt::join(classes, ", "));
  config["model"]["num_classes"] = n;
  return {
      fmt::format("model.num_classes {} from the {} class folders of {}", n, n, data_path(config))};
}

std::vector<std::string> fit_schedule_to_run(json& config, int64_t file_epochs) {
  json& s = config["schedule"];
  const json& epochs_v = config["train"]["epochs"];
  if (!s.is_object() || !s["warmup_epochs"].is_number() || !epochs_v.is_number()) return {};
  const double warmup = s["warmup_epochs"].get<double>();
  const double epochs = epochs_v.get<double>();
  if (!(warmup > epochs) || epochs <= 0) return {};
  double shorter = epochs;
  if (file_epochs > epochs) shorter = std::min(epochs, warmup * epochs / file_epochs);
  s["warmup_epochs"] = shorter;
  return {fmt::format(
      "schedule.warmup_epochs {:g} is longer than the run ({:g} epoch{}): shortened to {:g}{}",
      warmup, epochs, epochs == 1 ? "" : "s", shorter,
      file_epochs > epochs ? fmt::format(" (the config's {:g} of {} epochs, kept in proportion)",
                                         warmup, file_epochs)
                           : "")};
}

json config_for_checkpoint(const std::string& checkpoint, const json& model,
                           const nn::Metadata& meta, std::string* source) {
  const fs::path beside = fs::path(checkpoint).parent_path() / "config.json";
  json config;
  std::string from;
  if (fs::exists(beside)) {
    config = load_config(beside.string());
    from = beside.string();
  } else if (json data = nn::metadata_json(meta, kDataKey); data.is_object()) {
    config = default_config();
    config["data"] = data;
    config = with_defaults(config);
    from = fmt::format("{} (its {} metadata)", checkpoint, kDataKey);
  } else {
    config = default_config();
    from = "the default config (the checkpoint names no data set)";
  }
  config["model"] = model;
  json& transforms = config["data"]["transforms"];
  // The checkpoint's own normalisation wins: it is what its weights were trained with.
  for (const auto& [key, name] : {std::pair{nn::kMeanKey, "mean"}, std::pair{nn::kStdKey, "std"}})
    if (json v = nn::metadata_json(meta, key); !v.is_null()) transforms[name] = v;
  fit_transforms_to_model(config);
  if (source) *source = from;
  return config;
}

}  // namespace vitrine::train
