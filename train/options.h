// vitrine-train's config as typed options, read once from the JSON (config.h says what each key
// means). The Trainer and the program read these fields, never the JSON's string keys; a C++
// program can fill them itself and train a model of its own:
//
//   train::TrainConfig cfg;  // each field's default below, or TrainConfig::from_json(json)
//   cfg.train.epochs = 2;
//   cfg.optim.lr = 3e-4;
//   train::Trainer trainer(cfg, data.train, data.validation, data.test, "runs/mine",
//                          [](Generator& g) { return std::make_shared<MyCnn>(g); });
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/classifier.h"
#include "nn/data/open.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/schedule.h"

namespace vitrine::train {

/// The "optim" section.
struct OptimOptions {
  std::string name = "adamw";  // adamw, adam, sgd
  double lr = 1e-3, weight_decay = 0.05;
  std::array<double, 2> betas = {0.9, 0.999};  // adam, adamw
  double eps = 1e-8;                           // adam, adamw
  double momentum = 0.9;                       // sgd
  bool nesterov = false;                       // sgd
  double label_smoothing = 0;
  double grad_clip = 0;  // max global gradient norm, 0 = off
  /// Parameters without weight decay: those whose name contains one of these parts, and with
  /// "ndim<=1" every parameter of fewer than 2 dimensions (biases, norms). timm's default; []
  /// decays every parameter, as torch.optim.Adam(model.parameters(), weight_decay=...) does.
  std::vector<std::string> no_decay = {"ndim<=1", "pos_embed", "cls_token", "register_tokens"};
};

/// The optimizer over the model's trainable parameters in two groups
/// (nn::optim::param_groups_with_decay with o.no_decay: by default timm's, weight decay on
/// matrices and kernels, none on biases, norms, position embedding and class token). With zero, a
/// ZeRO-1 Adam(W) (nn::ZeroAdam) that also clips at o.grad_clip (it alone sees the averaged
/// gradients); an Error for SGD.
std::unique_ptr<nn::optim::Optimizer> make_optimizer(const OptimOptions& o, const nn::Module& model,
                                                     bool zero = false);

/// The "schedule" section; times in epochs (fractions allowed).
struct ScheduleOptions {
  std::string name = "warmup_cosine";  // constant, step, warmup_cosine
  double warmup_epochs = 0.25, min_lr_factor = 0;
  int64_t step_epochs = 1;
  double gamma = 0.1;
};

/// The learning-rate schedule in optimizer steps for `epochs` epochs of updates_per_epoch steps,
/// over the steps that will run: total = min(run_steps, epochs * updates_per_epoch), run_steps
/// being train.max_steps (0: the whole run), as the Hugging Face Trainer's schedule spans
/// max_steps. With share = min(warmup_epochs / epochs, 1/2):
///   constant:       factor 1
///   step:           StepSchedule(step_epochs * updates_per_epoch, gamma)
///   warmup_cosine:  WarmupCosineSchedule(warmup, total, min_lr_factor) with
///                   warmup = round(total * share) when max_steps cuts the run (the schedule in
///                   proportion, as warmup_ratio); else round(warmup_epochs * updates_per_epoch)
///                   (as timm keeps warmup_epochs), or round(total * share) when that is as long
///                   as the run. A note is appended to notes (when given) whenever the warm-up is
///                   not the config's.
std::unique_ptr<nn::optim::Schedule> make_schedule(const ScheduleOptions& o, int64_t epochs,
                                                   int64_t updates_per_epoch, int64_t run_steps = 0,
                                                   std::vector<std::string>* notes = nullptr);

/// The "data" section.
struct DataOptions {
  nn::data::DatasetOptions dataset;  // name, folder ("" = its default), pasted options
  double validation_fraction = 0.1;
  int64_t subset = 0;  // the first N training images only, 0 = all
  int64_t batch_size = 128;
  int64_t workers = -1;  // -1 = a default, 0 = none
  /// nn::data::from_config's object: the training pipeline, and the evaluation one from it.
  nlohmann::json transforms = nlohmann::json::object();
};

/// The "train" section.
struct TrainOptions {
  int64_t epochs = 16;
  uint64_t seed = 0;
  int64_t eval_every = 0, log_every = 50, early_stopping_patience = 0, accum_steps = 1;
  /// What a better validation is, for early stopping and best.safetensors: "val_accuracy"
  /// (higher) or "val_loss" (lower), as Keras' / Lightning's monitor.
  std::string early_stopping_metric = "val_accuracy";
  double ema_decay = 0;
  bool test_each_epoch = false, tta_hflip = false;
  int64_t max_steps = 0;
  std::string finetune;  // "" = from scratch
  bool freeze_backbone = false;
  std::string device = "cpu", precision = "fp32", out = "runs/run";
  /// Under a launcher (mpirun): 1 = ZeRO-1, each rank keeps the Adam(W) state of its slice of
  /// the parameters; 0 = DistributedDataParallel with every rank holding all of it.
  int64_t zero = 0;
  double bucket_mb = 25;  // DistributedDataParallel's gradient bucket size
  /// Under a launcher: every BatchNorm2d becomes a SyncBatchNorm (nn::convert_sync_batchnorm), so
  /// batch statistics are the whole batch's; false: each process's own, as PyTorch's DDP alone.
  bool sync_bn = true;
  /// TensorBoard's event file in the run folder (train/tensorboard.h): every metrics.jsonl
  /// line's numbers as scalars, the test set's confusion matrix as an image.
  bool tensorboard = true;
};

// The sections' fields are their JSON keys: nlohmann's to_json / from_json for each (a key absent
// from the JSON keeps the field's default).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OptimOptions, name, lr, weight_decay, betas, eps,
                                                momentum, nesterov, label_smoothing, grad_clip,
                                                no_decay)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ScheduleOptions, name, warmup_epochs, min_lr_factor,
                                                step_epochs, gamma)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrainOptions, epochs, seed, eval_every, log_every,
                                                early_stopping_patience, early_stopping_metric,
                                                accum_steps, ema_decay, test_each_epoch, tta_hflip,
                                                max_steps, finetune, freeze_backbone, device,
                                                precision, out, zero, bucket_mb, sync_bn,
                                                tensorboard)

/// A whole config, typed.
struct TrainConfig {
  /// The architecture the Trainer builds (or, with a model factory, what it says of the model:
  /// channels, classes, input size, the head's name).
  models::ClassifierSpec model;
  DataOptions data;
  OptimOptions optim;
  ScheduleOptions schedule;
  TrainOptions train;
  /// Validates the config (validate_config) and reads every section.
  static TrainConfig from_json(const nlohmann::json& config);
  /// The fields as a config JSON (the model section is model.config, the architecture's full
  /// config): what the Trainer writes as the run's config.json, compares on resume and stores in
  /// its checkpoints, so a config edited in C++ after from_json is recorded as it ran.
  nlohmann::json to_json() const;
};

}  // namespace vitrine::train
