// vitrine-train's configuration: one JSON object with five sections, every key always present
// (configs/fashion_mnist.json is the default and the reference for every key):
//   "model":    a ViTConfig JSON (models/vit.h), or {"preset": "fmnist", ...fields overriding it}
//   "data":     dataset ("fashion-mnist", "fashion-mnist-pasted", "mnist", "cifar10",
//               "cifar100", "imagefolder"), path ("" = the data set's default folder; only the
//               two Fashion-MNIST ones have one), validation_fraction in [0, 1), subset (the
//               first N images of the training split only, 0 = all), batch_size,
//               workers (-1 = a default, 0 = none), transforms (one object as
//               nn::data::from_config takes: the training pipeline, and from the same object the
//               evaluation one, random crops becoming centre crops); and, optional, read by
//               fashion-mnist-pasted only (an error with any other data set), pasted: {canvas,
//               min_scale, max_scale, distractors, count, noise, seed}, nn::data::PastedOptions'
//               fields, each optional with PastedOptions' default
//   "optim":    name ("adamw", "adam", "sgd"), lr, weight_decay, betas [b1, b2], eps (Adam/AdamW),
//               momentum, nesterov (SGD), label_smoothing, grad_clip (max global norm, 0 = off)
//   "schedule": name ("constant", "step", "warmup_cosine"); warmup_epochs and min_lr_factor
//               (warmup_cosine), step_epochs and gamma (step). Times are in epochs, fractions
//               allowed, so a config keeps its meaning whatever the batch size and data set size;
//               make_schedule turns them into optimizer steps.
//   "train":    epochs, seed, eval_every (optimizer steps between validations, 0 = each epoch's
//               end), log_every (steps), early_stopping_patience (validations without a better
//               validation accuracy before stopping, 0 = off), accum_steps (batches per optimizer
//               step), ema_decay (0 = no weight average), test_each_epoch (also evaluate the
//               test set at each epoch's end: learning curves, benchmarks), tta_hflip (every
//               evaluation, validation and test, averages the class probabilities of each image
//               and of its mirror image: flip test-time augmentation), max_steps (stop after N
//               optimizer steps, 0 = when the epochs are done: a smoke run), finetune (a
//               checkpoint whose weights start the run, with a new head; "" = from scratch),
//               freeze_backbone (train the head only; needs finetune), device ("cpu", "cuda",
//               "cuda:N"), out (the run folder); under mpirun (docs/distributed.md): zero (1 =
//               ZeRO-1: each process keeps the Adam(W) state of its slice of the parameters) and
//               bucket_mb (the size of DistributedDataParallel's gradient buckets, 25);
//               optional: tensorboard (true when absent: TensorBoard's event file in the run
//               folder, train/tensorboard.h)
// Keys starting with "_" ("_comment") are comments, at any level: validation skips them and
// without_comments() drops them. Sections missing from a config file take the defaults; a
// section given in part has its missing keys filled from the defaults, each key's value
// replacing the default whole (the "model" section, a value of its own, is never merged).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "models/classifier.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "nn/optim/schedule.h"

namespace vitrine::train {

/// configs/fashion_mnist.json, built into the library.
nlohmann::json default_config();

/// Reads a config file and fills what it leaves out from default_config() (see above). Errors
/// name the file: missing or unreadable, invalid JSON (with line and column), not an object.
/// The result is not validated (overrides may follow): call validate_config.
nlohmann::json load_config(const std::string& path);

/// `config` with its missing sections and keys taken from default_config().
nlohmann::json with_defaults(const nlohmann::json& config);

/// Applies one "--set" assignment "section.key=value" (dotted path of any depth). The value is
/// JSON when it parses as JSON (4, 5e-4, true, [32, 32], {"hflip": 0.5}), else the text as a
/// string; a key holding a string takes the text as it is unless it is a quoted JSON string.
/// The path must exist in the config (an Error names it, suggests the closest key and lists the
/// keys valid at that level), except model fields absent under a preset (any ViTConfig field)
/// and transforms absent from data.transforms (any key from_config knows). The value must have
/// the old value's JSON type (all numbers are one type; a size, model.image_size or a crop or
/// resize size, may be a number or [h, w]), else an Error names the key, its type and the value.
void apply_override(nlohmann::json& config, const std::string& assignment);

/// Checks every section: no unknown or missing key, every value's type and range, the model
/// (ViTConfig::validate), the transforms (from_config), and that they fit together (the
/// dataset's channels and classes against the model's, the transforms' output size against the
/// model's image size). Errors start with "config: " and name the dotted key.
void validate_config(const nlohmann::json& config);

/// A copy without the keys starting with "_", at any depth.
nlohmann::json without_comments(const nlohmann::json& j);

/// The model section as the architecture model.arch names ("vit" when absent, or "resnet"): the
/// preset (the architecture's defaults without one), then the section's other fields. Errors
/// start with "config: model: ".
models::ClassifierSpec model_spec(const nlohmann::json& config);
/// The model section as a ViTConfig (model_spec's; an Error for another architecture).
models::ViTConfig model_config(const nlohmann::json& config);

/// The data section as nn::data::open_dataset takes it: data.dataset, data.path ("" = the data
/// set's default folder), data.pasted (checked as validate_config checks it), the model's channels
/// for an image folder and train.seed + 1 for its test split.
nn::data::DatasetOptions dataset_options(const nlohmann::json& config);
/// data.path, or the data set's default folder when it is "" (Fashion-MNIST:
/// nn::data::fashion_mnist_dir()); an Error for an empty path of a data set without a default.
std::string data_path(const nlohmann::json& config);

/// data.pasted as PastedOptions, absent keys taking PastedOptions' defaults (all of them when
/// the section is absent). Checks what validate_config checks of it; errors name the key
/// ("config: data.pasted.count must be ...").
nn::data::PastedOptions pasted_options(const nlohmann::json& config);

}  // namespace vitrine::train
