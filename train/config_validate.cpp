// vitrine-train's validate_config: every section's keys, types and ranges, and that the model,
// the data set and the transforms fit together (see config.h).
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "backends/device.h"
#include "backends/error.h"
#include "nn/data/transforms.h"
#include "train/config.h"
#include "train/config_schema.h"

namespace vitrine::train {

using nlohmann::json;
using namespace schema;

namespace {

/// "1x28x28"
std::string shape_str(const nn::data::ImageShape& s) {
  return fmt::format("{}x{}x{}", s[0], s[1], s[2]);
}

void validate_model(const json& config, const DatasetSpec& dataset, models::ClassifierSpec& vit) {
  Section model(config, "model");
  std::string arch;
  try {
    arch = models::arch_of(model.json_value());
  } catch (const Error& e) {
    fail("config: {}", e.what());
  }
  model.check_keys({}, model_keys(arch));  // every key of the architecture optional
  vit = model_spec(config);
  VT_CHECK(vit.num_classes >= 1,
           "config: model.num_classes must be >= 1 to train a classifier, got {}", vit.num_classes);
  if (dataset.channels > 0)
    VT_CHECK(vit.channels == dataset.channels,
             "config: model.channels is {}, but {} images have {} channel{}", vit.channels,
             dataset.name, dataset.channels, dataset.channels == 1 ? "" : "s");
  else
    VT_CHECK(vit.channels == 1 || vit.channels == 3,
             "config: model.channels must be 1 (grey) or 3 (RGB) for {}, got {}", dataset.name,
             vit.channels);
  if (dataset.classes > 0)
    VT_CHECK(vit.num_classes == dataset.classes,
             "config: model.num_classes is {}, but {} has {} classes", vit.num_classes,
             dataset.name, dataset.classes);
}

void validate_transforms(const Section& data, const DatasetSpec& dataset,
                         const models::ClassifierSpec& vit) {
  const json& t = data.at("transforms");
  VT_CHECK(t.is_object(),
           "config: data.transforms must be an object (as {{\"resize\": [h, w], \"mean\": [...], "
           "\"std\": [...]}}; {{}} for none), got {}",
           nn::json_a_type(t));
  const json clean = without_comments(t);
  const nn::data::ImageShape want{vit.channels, vit.image_h, vit.image_w};
  for (bool train : {true, false}) {
    nn::data::Compose pipeline;
    try {
      pipeline = nn::data::from_config(clean, vit.channels, train);
    } catch (const Error& e) {
      fail("config: data.transforms: {}", e.what());
    }
    const char* which = train ? "training" : "evaluation";
    if (dataset.height > 0) {
      const nn::data::ImageShape in{dataset.channels, dataset.height, dataset.width};
      nn::data::ImageShape out{};
      try {
        out = pipeline.output_shape(in);
      } catch (const Error& e) {
        fail("config: data.transforms: on {}'s {} images: {}", dataset.name, shape_str(in),
             e.what());
      }
      VT_CHECK(out == want,
               "config: data.transforms turn {}'s {} images into {} ({} pipeline: {}), but the "
               "model takes {} (model.channels x model.image_size); add a \"resize\" to "
               "data.transforms or change model.image_size",
               dataset.name, shape_str(in), shape_str(out), which, pipeline.describe(),
               shape_str(want));
    } else {
      // Images of any size: the pipeline must bring two differently shaped probes to the model's.
      for (const nn::data::ImageShape& in :
           {nn::data::ImageShape{vit.channels, 2 * vit.image_h + 7, 3 * vit.image_w + 5},
            nn::data::ImageShape{vit.channels, 3 * vit.image_h + 5, 2 * vit.image_w + 7}}) {
        std::optional<nn::data::ImageShape> out;
        try {
          out = pipeline.output_shape(in);
        } catch (const Error&) {
          out.reset();  // reported below with the advice
        }
        VT_CHECK(out && *out == want,
                 "config: {} images come in any size, and the {} pipeline ({}) does not bring "
                 "them to the model's {}: data.transforms needs a \"resize\" (and may crop) to "
                 "model.image_size [{}, {}]",
                 dataset.name, which, pipeline.describe(), shape_str(want), vit.image_h,
                 vit.image_w);
      }
    }
  }
}

void validate_optim(const json& config) {
  Section optim(config, "optim");
  optim.check_keys(kSectionKeys.at("optim"), {"no_decay"});
  const std::string name = optim.choice("name", {"adamw", "adam", "sgd"});
  optim.number("lr", 0, true);
  optim.number("weight_decay", 0, false);
  const json& betas = optim.at("betas");
  VT_CHECK(betas.is_array() && betas.size() == 2 && betas[0].is_number() && betas[1].is_number(),
           "config: optim.betas must be [beta1, beta2], got {}", betas.dump());
  for (const json& b : betas)
    VT_CHECK(b.get<double>() >= 0 && b.get<double>() < 1,
             "config: optim.betas must be in [0, 1), got {}", betas.dump());
  optim.number("eps", 0, true);
  const double momentum = optim.number("momentum", 0, false, 1, true);
  const bool nesterov = optim.boolean("nesterov");
  VT_CHECK(!(name == "sgd" && nesterov && momentum == 0),
           "config: optim.nesterov needs optim.momentum > 0, got momentum 0");
  optim.number("label_smoothing", 0, false, 1, true);
  optim.number("grad_clip", 0, false);
  if (optim.has("no_decay")) {
    const json& nd = optim.at("no_decay");
    VT_CHECK(nd.is_array(),
             "config: optim.no_decay must be a list of parameter-name parts (and \"ndim<=1\" for "
             "every bias and norm), got {}",
             nd.dump());
    for (const json& n : nd)
      VT_CHECK(n.is_string() && !n.get<std::string>().empty(),
               "config: optim.no_decay must hold non-empty strings, got {}", nd.dump());
  }
}

void validate_schedule(const json& config, int64_t epochs) {
  Section schedule(config, "schedule");
  schedule.check_keys(kSectionKeys.at("schedule"));
  schedule.choice("name", {"constant", "step", "warmup_cosine"});
  const double warmup = schedule.number("warmup_epochs", 0, false);
  VT_CHECK(warmup <= static_cast<double>(epochs),
           "config: schedule.warmup_epochs ({}) must not exceed train.epochs ({})", warmup, epochs);
  schedule.number("min_lr_factor", 0, false, 1, false);
  schedule.integer("step_epochs", 1);
  schedule.number("gamma", 0, true, 1, false);
}

int64_t validate_train(const json& config, double validation_fraction) {
  Section train(config, "train");
  train.check_keys(
      kSectionKeys.at("train"),
      {"zero", "bucket_mb", "sync_bn", "early_stopping_metric", "tensorboard"});  // (optional keys)
  const int64_t epochs = train.integer("epochs", 1);
  train.integer("seed", 0);
  train.integer("eval_every", 0);
  train.integer("log_every", 1);
  const int64_t patience = train.integer("early_stopping_patience", 0);
  VT_CHECK(patience == 0 || validation_fraction > 0,
           "config: train.early_stopping_patience {} needs a validation split "
           "(data.validation_fraction > 0), got data.validation_fraction 0",
           patience);
  if (train.has("early_stopping_metric"))
    train.choice("early_stopping_metric", {"val_accuracy", "val_loss"});
  train.integer("accum_steps", 1);
  train.number("ema_decay", 0, false, 1, true);
  train.boolean("test_each_epoch");
  train.boolean("tta_hflip");
  train.integer("max_steps", 0);
  const std::string finetune = train.string("finetune");
  VT_CHECK(!train.boolean("freeze_backbone") || !finetune.empty(),
           "config: train.freeze_backbone needs train.finetune (the checkpoint whose backbone to "
           "freeze), got train.finetune \"\"");
  const std::string device = train.string("device");
  try {
    (void)Device::parse(device);
  } catch (const Error& e) {
    fail("config: train.device: {}", e.what());
  }
  train.choice("precision", {"fp32", "tf32", "bf16"});
  VT_CHECK(!train.string("out").empty(), "config: train.out must name the run folder, got \"\"");
  if (train.has("zero")) train.integer("zero", 0, 1);  // 1 = ZeRO-1
  if (train.has("bucket_mb")) train.number("bucket_mb", 0, true, 1e6);
  if (train.has("sync_bn")) train.boolean("sync_bn");
  if (train.has("tensorboard")) train.boolean("tensorboard");
  return epochs;
}

}  // namespace

void validate_config(const json& config) {
  VT_CHECK(config.is_object(), "config: expected a JSON object with the sections {}, got {}",
           join(kSections), nn::json_a_type(config));
  nn::JsonSection(config, "", "config: ").check_keys({}, kSections);
  Section data(config, "data");
  data.check_keys(kSectionKeys.at("data"), {"pasted"});
  const DatasetSpec dataset = dataset_spec(data);
  VT_CHECK(dataset.name == kPastedDataset || !data.has("pasted"),
           "config: data.pasted is read by data.dataset \"{}\" only, got data.dataset \"{}\" "
           "(remove data.pasted)",
           kPastedDataset, dataset.name);
  data.string("path");
  const double validation_fraction = data.number("validation_fraction", 0, false, 1, true);
  data.integer("subset", 0);
  data.integer("batch_size", 1);
  data.integer("workers", -1);

  models::ClassifierSpec vit;
  validate_model(config, dataset, vit);
  validate_transforms(data, dataset, vit);
  validate_optim(config);
  const int64_t epochs = validate_train(config, validation_fraction);
  validate_schedule(config, epochs);
}

}  // namespace vitrine::train
