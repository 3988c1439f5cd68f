// The config's sections as typed options: see options.h.
#include "tools/train/options.h"

#include <cmath>

#include "backends/error.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "tools/train/config.h"

namespace vitrine::train {

using nlohmann::json;

namespace {
/// The value of key in j when it is there, else `fallback`.
template <class T>
T get_or(const json& j, const char* key, T fallback) {
  return j.contains(key) ? j.at(key).get<T>() : fallback;
}
}  // namespace

OptimOptions OptimOptions::from_json(const json& o) {
  OptimOptions r;
  r.name = o.at("name").get<std::string>();
  r.lr = o.at("lr").get<double>();
  r.weight_decay = o.at("weight_decay").get<double>();
  r.beta1 = o.at("betas").at(0).get<double>();
  r.beta2 = o.at("betas").at(1).get<double>();
  r.eps = o.at("eps").get<double>();
  r.momentum = o.at("momentum").get<double>();
  r.nesterov = o.at("nesterov").get<bool>();
  r.label_smoothing = o.at("label_smoothing").get<double>();
  r.grad_clip = o.at("grad_clip").get<double>();
  return r;
}

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const OptimOptions& o,
                                                     const nn::Module& model) {
  auto groups = nn::optim::param_groups_with_decay(model, o.lr, o.weight_decay);
  if (o.name == "sgd") {
    nn::optim::SGDOptions opt;
    opt.momentum = o.momentum;
    opt.nesterov = o.nesterov;
    return std::make_unique<nn::optim::SGD>(std::move(groups), opt);
  }
  if (o.name == "adamw") {
    nn::optim::AdamWOptions w;
    w.beta1 = o.beta1;
    w.beta2 = o.beta2;
    w.eps = o.eps;
    return std::make_unique<nn::optim::AdamW>(std::move(groups), w);
  }
  VT_CHECK(o.name == "adam", "trainer: unknown optimizer \"{}\" (adamw, adam, sgd)", o.name);
  nn::optim::AdamOptions a;
  a.beta1 = o.beta1;
  a.beta2 = o.beta2;
  a.eps = o.eps;
  return std::make_unique<nn::optim::Adam>(std::move(groups), a);
}

ScheduleOptions ScheduleOptions::from_json(const json& s) {
  ScheduleOptions r;
  r.name = s.at("name").get<std::string>();
  r.warmup_epochs = get_or(s, "warmup_epochs", r.warmup_epochs);
  r.min_lr_factor = get_or(s, "min_lr_factor", r.min_lr_factor);
  r.step_epochs = get_or(s, "step_epochs", r.step_epochs);
  r.gamma = get_or(s, "gamma", r.gamma);
  return r;
}

std::unique_ptr<nn::optim::Schedule> make_schedule(const ScheduleOptions& o, int64_t epochs,
                                                   int64_t updates_per_epoch) {
  VT_CHECK(updates_per_epoch >= 1, "make_schedule: updates_per_epoch must be >= 1, got {}",
           updates_per_epoch);
  if (o.name == "constant") return std::make_unique<nn::optim::ConstantSchedule>();
  if (o.name == "step")
    return std::make_unique<nn::optim::StepSchedule>(o.step_epochs * updates_per_epoch, o.gamma);
  VT_CHECK(o.name == "warmup_cosine",
           "make_schedule: unknown schedule \"{}\" (constant, step, warmup_cosine)", o.name);
  return std::make_unique<nn::optim::WarmupCosineSchedule>(
      std::llround(o.warmup_epochs * static_cast<double>(updates_per_epoch)),
      epochs * updates_per_epoch, o.min_lr_factor);
}

TrainConfig TrainConfig::from_json(const json& config) {
  validate_config(config);
  TrainConfig c;
  c.config_json = without_comments(config);
  c.model = model_spec(config);
  const json& t = c.config_json.at("train");
  TrainOptions& r = c.train;
  r.epochs = t.at("epochs").get<int64_t>();
  r.seed = t.at("seed").get<uint64_t>();
  r.eval_every = t.at("eval_every").get<int64_t>();
  r.log_every = t.at("log_every").get<int64_t>();
  r.early_stopping_patience = t.at("early_stopping_patience").get<int64_t>();
  r.accum_steps = t.at("accum_steps").get<int64_t>();
  r.ema_decay = t.at("ema_decay").get<double>();
  r.test_each_epoch = t.at("test_each_epoch").get<bool>();
  r.tta_hflip = t.at("tta_hflip").get<bool>();
  r.max_steps = get_or(t, "max_steps", int64_t{0});
  r.finetune = t.at("finetune").get<std::string>();
  r.freeze_backbone = t.at("freeze_backbone").get<bool>();
  r.device = t.at("device").get<std::string>();
  r.precision = get_or(t, "precision", std::string("fp32"));
  r.out = t.at("out").get<std::string>();

  const json& d = c.config_json.at("data");
  DataOptions& data = c.data;
  data.dataset.name = d.at("dataset").get<std::string>();
  data.dataset.path = d.at("path").get<std::string>();  // "" = the default folder
  if (data.dataset.name == "fashion-mnist-pasted") data.dataset.pasted = pasted_options(config);
  if (data.dataset.name == "imagefolder") data.dataset.channels = c.model.channels;
  data.dataset.split_seed = r.seed + 1;
  data.validation_fraction = d.at("validation_fraction").get<double>();
  data.subset = get_or(d, "subset", int64_t{0});
  data.batch_size = d.at("batch_size").get<int64_t>();
  data.workers = d.at("workers").get<int64_t>();
  data.transforms = d.at("transforms");

  c.optim = OptimOptions::from_json(c.config_json.at("optim"));
  c.schedule = ScheduleOptions::from_json(c.config_json.at("schedule"));
  return c;
}

json TrainConfig::to_json() const {
  json j;
  j["model"] = model.config;
  json d = {{"dataset", data.dataset.name},
            {"path", data.dataset.path},
            {"validation_fraction", data.validation_fraction},
            {"subset", data.subset},
            {"batch_size", data.batch_size},
            {"workers", data.workers},
            {"transforms", data.transforms}};
  if (data.dataset.name == "fashion-mnist-pasted") {
    const nn::data::PastedOptions& p = data.dataset.pasted;
    d["pasted"] = {{"canvas", p.canvas},
                   {"min_scale", p.min_scale},
                   {"max_scale", p.max_scale},
                   {"distractors", p.distractors},
                   {"count", p.count},
                   {"noise", p.noise},
                   {"seed", p.seed}};
  }
  j["data"] = d;
  j["optim"] = {{"name", optim.name},
                {"lr", optim.lr},
                {"weight_decay", optim.weight_decay},
                {"betas", {optim.beta1, optim.beta2}},
                {"eps", optim.eps},
                {"momentum", optim.momentum},
                {"nesterov", optim.nesterov},
                {"label_smoothing", optim.label_smoothing},
                {"grad_clip", optim.grad_clip}};
  j["schedule"] = {{"name", schedule.name},
                   {"warmup_epochs", schedule.warmup_epochs},
                   {"min_lr_factor", schedule.min_lr_factor},
                   {"step_epochs", schedule.step_epochs},
                   {"gamma", schedule.gamma}};
  j["train"] = {{"epochs", train.epochs},
                {"seed", train.seed},
                {"eval_every", train.eval_every},
                {"log_every", train.log_every},
                {"early_stopping_patience", train.early_stopping_patience},
                {"accum_steps", train.accum_steps},
                {"ema_decay", train.ema_decay},
                {"test_each_epoch", train.test_each_epoch},
                {"tta_hflip", train.tta_hflip},
                {"max_steps", train.max_steps},
                {"finetune", train.finetune},
                {"freeze_backbone", train.freeze_backbone},
                {"device", train.device},
                {"precision", train.precision},
                {"out", train.out}};
  return j;
}

}  // namespace vitrine::train
