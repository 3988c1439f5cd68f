// The config's sections as typed options: see options.h.
#include "train/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backends/error.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/zero.h"
#include "train/config.h"

namespace vitrine::train {

using nlohmann::json;

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const OptimOptions& o, const nn::Module& model,
                                                     bool zero) {
  std::vector<std::string> names;
  bool exempt_1d = false;
  for (const std::string& n : o.no_decay) {
    if (n == "ndim<=1")
      exempt_1d = true;
    else
      names.push_back(n);
  }
  auto groups = nn::optim::param_groups_with_decay(model, o.lr, o.weight_decay, names, exempt_1d);
  if (zero) {
    VT_CHECK(o.name == "adamw" || o.name == "adam",
             "trainer: train.zero = 1 shards the state of Adam or AdamW, but optim.name is \"{}\"",
             o.name);
    nn::optim::AdamOptions a;
    a.beta1 = o.betas[0];
    a.beta2 = o.betas[1];
    a.eps = o.eps;
    return std::make_unique<nn::ZeroAdam>(std::move(groups), a, o.name == "adamw", o.grad_clip);
  }
  if (o.name == "sgd") {
    nn::optim::SGDOptions opt;
    opt.momentum = o.momentum;
    opt.nesterov = o.nesterov;
    return std::make_unique<nn::optim::SGD>(std::move(groups), opt);
  }
  if (o.name == "adamw") {
    nn::optim::AdamWOptions w;
    w.beta1 = o.betas[0];
    w.beta2 = o.betas[1];
    w.eps = o.eps;
    return std::make_unique<nn::optim::AdamW>(std::move(groups), w);
  }
  VT_CHECK(o.name == "adam", "trainer: unknown optimizer \"{}\" (adamw, adam, sgd)", o.name);
  nn::optim::AdamOptions a;
  a.beta1 = o.betas[0];
  a.beta2 = o.betas[1];
  a.eps = o.eps;
  return std::make_unique<nn::optim::Adam>(std::move(groups), a);
}

std::unique_ptr<nn::optim::Schedule> make_schedule(const ScheduleOptions& o, int64_t epochs,
                                                   int64_t updates_per_epoch, int64_t run_steps,
                                                   std::vector<std::string>* notes) {
  VT_CHECK(updates_per_epoch >= 1, "make_schedule: updates_per_epoch must be >= 1, got {}",
           updates_per_epoch);
  if (o.name == "constant") return std::make_unique<nn::optim::ConstantSchedule>();
  if (o.name == "step")
    return std::make_unique<nn::optim::StepSchedule>(o.step_epochs * updates_per_epoch, o.gamma);
  VT_CHECK(o.name == "warmup_cosine",
           "make_schedule: unknown schedule \"{}\" (constant, step, warmup_cosine)", o.name);
  const int64_t full = epochs * updates_per_epoch;
  const int64_t total = run_steps > 0 ? std::min(run_steps, full) : full;
  int64_t warmup = std::llround(o.warmup_epochs * static_cast<double>(updates_per_epoch));
  const double share =
      std::min(0.5, epochs > 0 ? o.warmup_epochs / static_cast<double>(epochs) : 0.5);
  if (total < full) {
    // train.max_steps cuts the run: the whole schedule in proportion, as the Hugging Face
    // Trainer's warmup_ratio of max_steps.
    const int64_t fitted = std::llround(static_cast<double>(total) * share);
    if (notes)
      notes->push_back(fmt::format(
          "train.max_steps {}: the schedule spans the {} steps that run, its warm-up {} step{} "
          "({:g}% of them, as schedule.warmup_epochs {:g} of train.epochs {})",
          total, total, fitted, fitted == 1 ? "" : "s", 100 * share, o.warmup_epochs, epochs));
    warmup = fitted;
  } else if (warmup > 0 && warmup >= total) {
    const int64_t shorter = std::llround(static_cast<double>(total) * share);
    if (notes)
      notes->push_back(fmt::format(
          "the warm-up ({} steps, schedule.warmup_epochs {:g}) is as long as the run ({} steps): "
          "shortened to {} step{} ({:g}% of the run, the config's share of its epochs, at most "
          "half)",
          warmup, o.warmup_epochs, total, shorter, shorter == 1 ? "" : "s", 100 * share));
    warmup = shorter;
  }
  return std::make_unique<nn::optim::WarmupCosineSchedule>(warmup, total, o.min_lr_factor);
}

TrainConfig TrainConfig::from_json(const json& config) {
  validate_config(config);
  const json c = without_comments(config);
  TrainConfig r;
  r.model = model_spec(config);
  r.train = c.at("train").get<TrainOptions>();
  r.optim = c.at("optim").get<OptimOptions>();
  r.schedule = c.at("schedule").get<ScheduleOptions>();
  const json& d = c.at("data");
  r.data.dataset = dataset_options(config);
  r.data.validation_fraction = d.at("validation_fraction").get<double>();
  r.data.subset = d.value("subset", int64_t{0});
  r.data.batch_size = d.at("batch_size").get<int64_t>();
  r.data.workers = d.at("workers").get<int64_t>();
  r.data.transforms = d.at("transforms");
  return r;
}

json TrainConfig::to_json() const {
  json d = {{"dataset", data.dataset.name},
            {"path", data.dataset.path},
            {"validation_fraction", data.validation_fraction},
            {"subset", data.subset},
            {"batch_size", data.batch_size},
            {"workers", data.workers},
            {"transforms", data.transforms}};
  if (data.dataset.name == "fashion-mnist-pasted")
    d["pasted"] = nn::data::pasted_options_to_json(data.dataset.pasted);
  return {{"model", model.config},
          {"data", d},
          {"optim", optim},
          {"schedule", schedule},
          {"train", train}};
}

}  // namespace vitrine::train
