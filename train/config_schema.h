// vitrine-train's config schema, shared by the files that read a config: config.cpp (the
// default, files, the values derived from a config), config_validate.cpp (validate_config) and
// config_set.cpp (--set). The sections and their keys, and Section, a section whose errors start
// with "config: ". Internal to vitrine_train_lib: not installed.
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "nn/data/open.h"
#include "nn/json_section.h"

namespace vitrine::train::schema {

inline const std::vector<std::string> kSections = {"model", "data", "optim", "schedule", "train"};

// The keys of every section but "model" (whose keys are "preset" and ViTConfig's fields).
inline const std::map<std::string, std::vector<std::string>> kSectionKeys = {
    {"data",
     {"dataset", "path", "validation_fraction", "subset", "batch_size", "workers", "transforms"}},
    {"optim",
     {"name", "lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "label_smoothing",
      "grad_clip"}},
    {"schedule", {"name", "warmup_epochs", "min_lr_factor", "step_epochs", "gamma"}},
    {"train",
     {"epochs", "seed", "eval_every", "log_every", "early_stopping_patience", "accum_steps",
      "ema_decay", "test_each_epoch", "tta_hflip", "max_steps", "finetune", "freeze_backbone",
      "device", "precision", "out"}},
};

// What from_config knows (data.transforms) and what a random_crop object holds.
inline const std::vector<std::string> kTransformKeys = {"resize", "center_crop", "random_crop",
                                                        "hflip",  "mean",        "std"};
inline const std::vector<std::string> kRandomCropKeys = {"size", "padding"};

// data.pasted: optional, read by fashion-mnist-pasted only (nn::data::pasted_options_from_json).
inline const std::string kPastedDataset = "fashion-mnist-pasted";

// Keys that hold an image size: a number or [h, w] (random_crop also {"size", "padding"}).
inline const std::vector<std::string> kSizeKeys = {
    "model.image_size", "data.transforms.resize", "data.transforms.center_crop",
    "data.transforms.random_crop", "data.transforms.random_crop.size"};

using DatasetSpec = nn::data::DatasetInfo;

/// The model section's keys for its architecture (model.arch, "vit" when absent).
std::vector<std::string> model_keys(const std::string& arch);

inline bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

inline std::string join(const std::vector<std::string>& v) {
  return fmt::format("{}", fmt::join(v, ", "));
}

inline std::string dotted(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

/// One section of a config ("model", "data", ...), with typed, range-checked reads whose errors
/// start with "config: " and name "section.key".
class Section : public nn::JsonSection {
 public:
  Section(const nlohmann::json& config, const std::string& name);
};

/// data.pasted as PastedOptions (nn::data::pasted_options_from_json, its errors starting with
/// "config: "); PastedOptions' defaults when the section is absent.
nn::data::PastedOptions read_pasted(const Section& data);

/// The data set's spec; fashion-mnist-pasted's image size is data.pasted.canvas.
DatasetSpec dataset_spec(const Section& data);

}  // namespace vitrine::train::schema
