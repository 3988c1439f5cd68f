// Fitting a config to a model, a data set and a run length: see fit.h.
#include "train/fit.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/error.h"
#include "nn/data/open.h"
#include "nn/data/transforms.h"
#include "train/config.h"
#include "train/datasets.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> fit_transforms_to_model(json& config) {
  const models::ClassifierSpec m = model_spec(config);
  nn::data::DatasetOptions o;
  o.name = config.at("data").at("dataset").get<std::string>();
  if (o.name == "fashion-mnist-pasted") o.pasted = pasted_options(config);
  std::vector<std::string> notes = nn::data::fit_to_size(
      config["data"]["transforms"], m.channels, nn::data::image_size(o), m.image_h, m.image_w);
  for (std::string& n : notes) n = "data.transforms." + n;
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
  if (!(warmup >= epochs) || epochs <= 0 || warmup <= 0) return {};
  // The config's share of its own epochs when the command line shortened the run, at most half.
  const bool shortened = file_epochs > epochs;
  const double share = shortened ? std::min(0.5, warmup / static_cast<double>(file_epochs)) : 0.5;
  const double shorter = epochs * share;
  s["warmup_epochs"] = shorter;
  return {fmt::format(
      "schedule.warmup_epochs {:g} is as long as the run ({:g} epoch{}) or longer: shortened to "
      "{:g}{}",
      warmup, epochs, epochs == 1 ? "" : "s", shorter,
      shortened && share < 0.5
          ? fmt::format(" (the config's {:g} of {} epochs, kept in proportion)", warmup,
                        file_epochs)
          : std::string(" (half the run)"))};
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
