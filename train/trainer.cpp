// Trainer: the training loop (construction, the step, validation, the epoch's end, the run's
// end), fine-tuning's start; checkpoints and resuming are trainer_checkpoint.cpp's, evaluation
// evaluate.cpp's. See trainer.h for the step, randomness and run-folder conventions.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <unistd.h>

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "backends/matmul_precision.h"
#include "common/files.h"
#include "nn/data/transforms.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"
#include "nn/parallel/sync_batch_norm.h"
#include "nn/state.h"
#include "ops/batch_invariant.h"
#include "ops/ops.h"
#include "train/config.h"
#include "train/fit.h"
#include "train/tensorboard.h"
#include "train/tfevents.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// Float32 values added pairwise, bottom up: the batch's tree (ops/batch_invariant.h), so that a
/// step's loss is one process's whatever the ranks and micro-batches.
/// Micro-batches' gradients added in the batch's tree, as a binary counter: push() takes the
/// model's gradients (and clears them), adding two partials whenever they cover equal numbers of
/// micro-batches; finish() adds what is left, last first, and sets the model's gradients.
class GradientTree {
 public:
  void push(nn::Module& model) {
    std::vector<Tensor> g;
    for (const Tensor& p : model.parameters()) {
      g.push_back(p.grad());
      p.set_grad(Tensor());
    }
    parts_.push_back({1, std::move(g)});
    while (parts_.size() >= 2 && parts_[parts_.size() - 2].first == parts_.back().first) merge();
  }
  void finish(nn::Module& model) {
    while (parts_.size() >= 2) merge();
    if (parts_.empty()) return;
    const std::vector<Tensor> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(parts_[0].second[i]);
    parts_.clear();
  }

 private:
  void merge() {
    auto b = std::move(parts_.back());
    parts_.pop_back();
    auto& a = parts_.back();
    for (size_t i = 0; i < a.second.size(); ++i) {
      const Tensor &x = a.second[i], &y = b.second[i];
      a.second[i] = !x.defined() ? y : !y.defined() ? x : ops::add(x, y);
    }
    a.first += b.first;
  }
  std::vector<std::pair<int64_t, std::vector<Tensor>>> parts_;  // (micro-batches, gradients)
};

float tree_sum(std::vector<float> v) {
  for (size_t s = 1; s < v.size(); s *= 2)
    for (size_t i = 0; i + s < v.size(); i += 2 * s) v[i] += v[i + s];
  return v.empty() ? 0.0f : v[0];
}

/// Every Dropout and DropPath of the model draws from gen.
void set_dropout_generator(nn::Module& model, Generator& gen) {
  for (auto& [name, m] : model.named_modules()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(m)) d->set_generator(gen);
    if (auto* d = dynamic_cast<nn::DropPath*>(m)) d->set_generator(gen);
  }
}

/// Copies every tensor but the head's from pretrained (read from `checkpoint`) into model.
void copy_backbone(nn::Module& model, const nn::Module& pretrained, const std::string& head,
                   const std::string& checkpoint) {
  const nn::NamedTensors from = pretrained.state_dict();
  std::map<std::string, Tensor> by_name(from.begin(), from.end());
  NoGradGuard no_grad;
  for (auto& [name, t] : model.state_dict()) {
    if (name.rfind(head + ".", 0) == 0) continue;
    auto it = by_name.find(name);
    VT_CHECK(it != by_name.end(), "finetune: {} has no tensor {} (the model section asks for it)",
             checkpoint, name);
    VT_CHECK(it->second.shape() == t.shape(),
             "finetune: {} holds {} with shape {}, the model section gives it shape {}", checkpoint,
             name, it->second.shape().str(), t.shape().str());
    t.copy_(it->second.to(t.dtype()));
  }
}

/// The model's BatchNorm2d modules not yet synchronised across processes.
int64_t unsynced_batch_norms(nn::Module& model) {
  int64_t n = 0;
  for (auto& [name, m] : model.named_modules())
    n += dynamic_cast<nn::BatchNorm2d*>(m) && !dynamic_cast<nn::SyncBatchNorm*>(m);
  return n;
}

int64_t correct_count(const Tensor& logits, const Tensor& labels) {
  const auto pred = ops::argmax(logits.detach(), 1).to(kCPU).to_vector<int64_t>();
  const auto y = labels.to(kCPU).to_vector<int64_t>();
  int64_t n = 0;
  for (size_t i = 0; i < y.size(); ++i) n += pred[i] == y[i];
  return n;
}

}  // namespace

Trainer::Trainer(const json& config, std::shared_ptr<const nn::data::Dataset> train_set,
                 std::shared_ptr<const nn::data::Dataset> validation_set,
                 std::shared_ptr<const nn::data::Dataset> test_set, std::string run_dir)
    : Trainer(TrainConfig::from_json(config), std::move(train_set), std::move(validation_set),
              std::move(test_set), std::move(run_dir)) {}

Trainer::Trainer(TrainConfig config, std::shared_ptr<const nn::data::Dataset> train_set,
                 std::shared_ptr<const nn::data::Dataset> validation_set,
                 std::shared_ptr<const nn::data::Dataset> test_set, std::string run_dir,
                 ModelFactory build)
    : cfg_(std::move(config)),
      train_set_(std::move(train_set)),
      validation_set_(std::move(validation_set)),
      test_set_(std::move(test_set)),
      run_dir_(std::move(run_dir)),
      device_(Device::parse(cfg_.train.device)) {
  VT_CHECK(train_set_ && train_set_->size() > 0, "trainer: the training set is empty");
  VT_CHECK(test_set_ && test_set_->size() > 0, "trainer: the test set is empty");
  const TrainOptions& t = cfg_.train;
  const uint64_t seed = t.seed;
  VT_CHECK(t.accum_steps >= 1, "trainer: accum_steps must be >= 1, got {}", t.accum_steps);
  // The processes: before any use of a GPU (a data-parallel CUDA run picks GPU local_rank here).
  world_ = &dist::world();
  group_ = &dist::group_for(device_);
  const int64_t ranks = world_->size();
  VT_CHECK(cfg_.data.batch_size % ranks == 0,
           "trainer: data.batch_size {} is the global batch and must divide evenly among the {} "
           "processes (each takes batch_size / {} images per batch)",
           cfg_.data.batch_size, ranks, ranks);
  classes_ = train_set_->classes();
  // train.precision: the GPU's float32 products in float32, TF32 or bfloat16 (with float32
  // accumulation and master weights); the CPU computes in float32 whatever it says.
  set_float32_matmul_precision(float32_matmul_precision_for(t.precision));

  const models::ClassifierSpec& spec = cfg_.model;
  if (!build) build = [&spec](Generator& g) { return spec.build(g); };
  init_gen_ = Generator(seed);
  dropout_gen_ = Generator(seed + 1);
  model_ = build(init_gen_);
  VT_CHECK(model_ != nullptr, "trainer: the model factory returned no model");
  VT_CHECK(classes_.empty() || static_cast<int64_t>(classes_.size()) == spec.num_classes,
           "trainer: the training set {} has {} classes, but model.num_classes is {}",
           train_set_->source(), classes_.size(), spec.num_classes);
  if (t.freeze_backbone) {  // before the optimizer takes the parameters
    VT_CHECK(spec.num_classes > 0,
             "finetune: --freeze-backbone needs a head to train (model.num_classes > 0)");
    model_->requires_grad_(false);
    model_->child(spec.head)->requires_grad_(true);
  }
  set_dropout_generator(*model_, dropout_gen_);
  model_->to(device_);
  model_->train();
  if (ranks > 1) {
    if (const int64_t n = unsynced_batch_norms(*model_); n > 0 && t.sync_bn) {
      model_ = nn::convert_sync_batchnorm(model_, group_);  // before DDP and the optimizer
      notes_.push_back(fmt::format(
          "the model's {} BatchNorm2d layer{} became SyncBatchNorm: batch statistics over the "
          "whole batch of the {} processes, as one process's (train.sync_bn false: each "
          "process's own)",
          n, n == 1 ? "" : "s", ranks));
    }
    if (t.zero == 0) {
      nn::DDPOptions o;
      o.bucket_cap_mb = t.bucket_mb;
      ddp_ = std::make_shared<nn::DistributedDataParallel>(model_, o, group_);  // broadcasts
    } else {
      nn::broadcast_state(*model_, 0, group_);
    }
  }
  if (t.ema_decay > 0) {
    ema_gen_ = Generator(seed);
    ema_ = build(ema_gen_);
    ema_->to(device_);
    ema_->eval();
    ema_->requires_grad_(false);
    nn::load_state_dict(*ema_, model_->state_dict());
  }
  optimizer_ = make_optimizer(cfg_.optim, *model_, t.zero == 1);

  const int64_t channels = spec.channels;
  const DataOptions& d = cfg_.data;
  nn::data::LoaderOptions lo;
  lo.batch_size = d.batch_size / ranks;
  lo.shuffle = true;
  lo.seed = seed;
  lo.workers = d.workers;
  lo.num_replicas = ranks;
  lo.rank = world_->rank();
  // Batch-invariant: each rank's batch is a block of the whole batch (not every R-th image), so
  // that the ranks' batches side by side are one process's (docs/distributed.md).
  if (is_batch_invariant()) lo.shard_block = lo.batch_size;
  train_loader_ = std::make_unique<nn::data::DataLoader>(
      train_set_, nn::data::from_config(d.transforms, channels, true), lo);
  eval_transforms_ = nn::data::from_config(d.transforms, channels, false);
  batches_per_epoch_ = train_loader_->batches_per_epoch();
  steps_per_epoch_ = (batches_per_epoch_ + t.accum_steps - 1) / t.accum_steps;
  const int64_t run_steps = t.max_steps > 0 ? std::min(t.max_steps, t.epochs * steps_per_epoch_)
                                            : t.epochs * steps_per_epoch_;
  schedule_ = make_schedule(cfg_.schedule, t.epochs, steps_per_epoch_, run_steps, &notes_);
  if (validation_set_ && validation_set_->size() > 0 && t.eval_every > run_steps)
    notes_.push_back(fmt::format(
        "train.eval_every {} is longer than the run ({} steps): the run validates once, at its "
        "end (best.safetensors and early stopping see that one validation only)",
        t.eval_every, run_steps));
}

Trainer::~Trainer() = default;

void Trainer::log(const json& line) {
  if (!is_main()) return;
  tools::append_line(run_dir_ + "/metrics.jsonl", line.dump());
  if (events_) events_->add_scalars(line.at("global_step").get<int64_t>(), metrics_scalars(line));
}

void Trainer::open_events(const std::string& name) {
  if (!is_main() || !cfg_.train.tensorboard) return;
  std::string file = name;
  if (file.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
      std::strcpy(host, "localhost");
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    file = event_file_name(std::chrono::duration_cast<std::chrono::seconds>(now).count(), host);
  }
  events_ = std::make_unique<EventWriter>(run_dir_ + "/" + file);
}

json finetune_config(json config, const models::ViTConfig& pretrained,
                     const std::string& checkpoint, int64_t num_classes, bool freeze_backbone) {
  models::ViTConfig c = pretrained;
  c.num_classes = num_classes;
  config["model"] = c.to_json();
  config["train"]["finetune"] = checkpoint;
  config["train"]["freeze_backbone"] = freeze_backbone;
  return config;
}

Evaluation Trainer::evaluate(const std::shared_ptr<const nn::data::Dataset>& dataset) {
  // Batch-invariant: every rank evaluates the whole set in batches of a whole step's images (all
  // ranks' and micro-batches'): one process's losses, bit for bit, at the cost of each rank doing
  // all of it.
  const bool invariant = is_batch_invariant();
  return train::evaluate(eval_model(), dataset, eval_transforms_,
                         invariant ? cfg_.data.batch_size * cfg_.train.accum_steps
                                   : train_loader_->options().batch_size,
                         train_loader_->options().workers, device_, cfg_.train.tta_hflip,
                         invariant ? nullptr : world_);
}

void Trainer::train_step(StepInfo& info) {
  const auto start = std::chrono::steady_clock::now();
  schedule_->apply(*optimizer_, global_step_);
  optimizer_->zero_grad();
  const int64_t first = step_ * cfg_.train.accum_steps;
  const int64_t n = std::min(cfg_.train.accum_steps, batches_per_epoch_ - first);
  double loss_sum = 0;
  std::vector<float> losses;  // batch-invariant: the micro-batches' losses, added in a tree
  // Batch-invariant accumulation: each micro-batch's gradients set aside and added in the
  // batch's tree (not one after the other into .grad), then averaged across the ranks.
  const bool tree = is_batch_invariant() && n > 1;
  GradientTree grads;
  for (int64_t i = 0; i < n; ++i) {
    auto b = train_loader_->next();
    VT_CHECK(b.has_value(), "trainer: the loader ended at batch {} of {} in epoch {}", first + i,
             batches_per_epoch_, epoch_);
    Tensor labels = b->labels.to(device_);
    // Data parallel: the batches before the step's last only accumulate their gradients; the
    // last one's backward averages the sum across the ranks.
    std::optional<nn::DistributedDataParallel::NoSync> accumulate_only;
    if (ddp_ && (i + 1 < n || tree)) accumulate_only.emplace(*ddp_);
    Tensor logits =
        ddp_ ? ddp_->forward(b->images.to(device_)) : model_->forward(b->images.to(device_));
    Tensor loss =
        ops::cross_entropy(logits, labels, ops::Reduction::Mean, cfg_.optim.label_smoothing);
    (loss * (1.0 / static_cast<double>(n))).backward();
    loss_sum += loss.item();
    losses.push_back(static_cast<float>(loss.item()));
    if (tree) grads.push(*model_);
    info.correct += correct_count(logits, labels);
    info.examples += labels.numel();
  }
  if (tree) {
    grads.finish(*model_);
    if (ddp_) ddp_->all_reduce_gradients();
  } else if (ddp_) {
    ddp_->synchronize();  // (backward has done it when every parameter had a gradient)
  }
  if (world_->size() > 1) {  // the step's metrics over the whole global batch
    // (with whether any rank's stop flag is set: one small all-reduce per step)
    double m[4] = {loss_sum, static_cast<double>(info.correct), static_cast<double>(info.examples),
                   stop_flag_ && stop_flag_->load() ? 1.0 : 0.0};
    world_->all_reduce({m, 4, kFloat64, kCPU});
    loss_sum = m[0] / static_cast<double>(world_->size());
    if (is_batch_invariant()) {  // the ranks' losses in the batch's tree, in float32
      float mine = tree_sum(losses);
      std::vector<float> all(static_cast<size_t>(world_->size()));
      world_->all_gather({&mine, 1, kFloat32, kCPU}, {all.data(), world_->size(), kFloat32, kCPU});
      loss_sum = static_cast<double>(tree_sum(all)) / static_cast<double>(world_->size());
    }
    info.correct = std::llround(m[1]);
    info.examples = std::llround(m[2]);
    stop_agreed_ = m[3] > 0;
  } else if (is_batch_invariant())
    loss_sum = tree_sum(losses);
  // A non-finite loss (every rank sees the reduced one) stops the run before the update: the
  // weights stay finite and the last checkpoint saved stays the last good one.
  VT_CHECK(std::isfinite(loss_sum),
           "trainer: the loss is {} at epoch {}, step {} (global step {}): training diverged "
           "(a learning rate too high? optim.lr is {}); stopped before updating the weights; the "
           "run folder keeps the last checkpoint saved before it",
           loss_sum / static_cast<double>(n), epoch_, step_, global_step_, cfg_.optim.lr);
  if (cfg_.optim.grad_clip > 0 && cfg_.train.zero == 0)  // ZeroAdam clips itself
    nn::optim::clip_grad_norm_(model_->parameters(), cfg_.optim.grad_clip);
  optimizer_->step();
  if (ema_) {
    NoGradGuard no_grad;
    auto shadow = ema_->state_dict();
    auto live = model_->state_dict();
    for (size_t i = 0; i < shadow.size(); ++i) {
      Tensor& s = shadow[i].second;
      if (!is_floating_point(s.dtype())) {
        s.copy_(live[i].second);
        continue;
      }
      s.mul_(cfg_.train.ema_decay).add_(live[i].second, 1 - cfg_.train.ema_decay);
    }
  }
  ++step_;
  ++global_step_;
  info.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  train_seconds_ += info.step_seconds;
  log_seconds_ += info.step_seconds;
  info.train_seconds = train_seconds_;
  log_correct_ += info.correct;
  log_count_ += info.examples;
  info.loss = loss_sum / static_cast<double>(n);
  info.lr = optimizer_->param_groups().front().lr;
  log_loss_sum_ += info.loss;
  ++log_steps_;
  if (cfg_.train.log_every > 0 && global_step_ % cfg_.train.log_every == 0) {
    json line = {{"type", "train"},
                 {"epoch", epoch_},
                 {"step", step_},
                 {"global_step", global_step_},
                 {"loss", log_loss_sum_ / static_cast<double>(log_steps_)},
                 {"accuracy", static_cast<double>(log_correct_) / static_cast<double>(log_count_)},
                 {"lr", info.lr},
                 {"images_per_second", static_cast<double>(log_count_) / log_seconds_},
                 {"train_seconds", train_seconds_}};
    // Data parallel: the time spent so far waiting for the gradients' all-reduce.
    if (ddp_) line["comm_wait_seconds"] = ddp_->stats().wait_seconds;
    log(line);
    log_loss_sum_ = log_seconds_ = 0;
    log_correct_ = log_count_ = log_steps_ = 0;
  }
}

bool Trainer::validate(StepInfo& info) {
  bool out_of_patience = false;
  if (validation_set_ && validation_set_->size() > 0) {
    Evaluation e = evaluate(validation_set_);
    const bool better = cfg_.train.early_stopping_metric == "val_loss"
                            ? best_loss_ < 0 || e.loss < best_loss_
                            : e.accuracy > best_accuracy_;
    if (better) {
      best_accuracy_ = e.accuracy;
      best_loss_ = e.loss;
      bad_evals_ = 0;
      if (is_main()) nn::save_checkpoint(run_dir_ + "/best.safetensors", eval_model(), metadata());
    } else {
      ++bad_evals_;
      out_of_patience = cfg_.train.early_stopping_patience > 0 &&
                        bad_evals_ >= cfg_.train.early_stopping_patience;
    }
    log({{"type", "eval"},
         {"epoch", epoch_},
         {"step", step_},
         {"global_step", global_step_},
         {"loss", e.loss},
         {"accuracy", e.accuracy},
         {"macro_f1", e.macro_f1},
         {"best_accuracy", best_accuracy_},
         {"train_seconds", train_seconds_}});
    info.validation = std::move(e);
  }
  last_eval_step_ = global_step_;
  if (step_ == steps_per_epoch_) end_epoch(info);
  save_last();
  return out_of_patience;
}

void Trainer::end_epoch(StepInfo& info) {
  if (cfg_.train.test_each_epoch) {
    Evaluation e = evaluate(test_set_);
    log({{"type", "test"},
         {"epoch", epoch_},
         {"global_step", global_step_},
         {"loss", e.loss},
         {"accuracy", e.accuracy},
         {"macro_f1", e.macro_f1},
         {"train_seconds", train_seconds_}});
    info.test = std::move(e);
  }
  ++epoch_;  // saved as the next epoch's start
  step_ = 0;
}

TrainResult Trainer::loop() {
  TrainResult r;
  while (epoch_ < cfg_.train.epochs) {
    train_loader_->start_epoch(epoch_,
                               std::min(step_ * cfg_.train.accum_steps, batches_per_epoch_));
    while (step_ < steps_per_epoch_) {
      if (stop_requested()) {
        save_last();
        r.stopped = true;
        r.message = fmt::format(
            "stopped at epoch {}, step {} of {} (global step {}); saved {}/last.safetensors; "
            "continue with --resume {}",
            epoch_ + 1, step_, steps_per_epoch_, global_step_, run_dir_, run_dir_);
        r.epoch = epoch_;
        r.global_step = global_step_;
        r.best_accuracy = best_accuracy_;
        return r;
      }
      StepInfo info;
      info.epoch = epoch_;
      info.steps_per_epoch = steps_per_epoch_;
      train_step(info);
      info.step = step_;
      info.global_step = global_step_;
      const bool eval_now = cfg_.train.eval_every > 0 ? global_step_ % cfg_.train.eval_every == 0
                                                      : step_ == steps_per_epoch_;
      bool done = false;
      if (eval_now) {
        done = validate(info);
      } else if (step_ == steps_per_epoch_) {
        end_epoch(info);
      }
      if (on_step_) on_step_(info);
      if (done) {
        r.early_stopped = true;
        r.message =
            fmt::format("early stopping: no better validation {} in {} evaluations",
                        cfg_.train.early_stopping_metric == "val_loss" ? "loss" : "accuracy",
                        cfg_.train.early_stopping_patience);
        return finish(std::move(r));
      }
      if (cfg_.train.max_steps > 0 && global_step_ >= cfg_.train.max_steps) {
        r.message = fmt::format("stopped after train.max_steps = {} steps (epoch {}, step {})",
                                cfg_.train.max_steps, epoch_ + (step_ == 0 ? 0 : 1), step_);
        return finish(std::move(r));
      }
      if (step_ == 0) break;  // the epoch ended
    }
  }
  r.message = fmt::format("finished {} epoch{} ({} steps)", cfg_.train.epochs,
                          cfg_.train.epochs == 1 ? "" : "s", global_step_);
  return finish(std::move(r));
}

bool Trainer::stop_requested() {
  if (world_->size() > 1) return stop_agreed_;  // what every rank saw at the last step
  return stop_flag_ && stop_flag_->load();
}

TrainResult Trainer::finish(TrainResult r) {
  if (validation_set_ && validation_set_->size() > 0 && last_eval_step_ != global_step_) {
    StepInfo info;  // the run's end was not validated (eval_every, max_steps): validate it
    validate(info);
    r.end_validation = std::move(info.validation);
  } else {
    save_last();
  }
  // The training split in eval mode (no dropout, no augmentation), on a seeded sample of at most
  // kTrainSample images: set beside the test accuracy, it shows over- or under-fitting.
  {
    const int64_t n = train_set_->size(), k = std::min<int64_t>(n, kTrainSample);
    std::vector<int64_t> order = nn::data::permutation(n, cfg_.train.seed,
                                                       /*stream=*/1u << 20);
    order.resize(static_cast<size_t>(k));
    std::sort(order.begin(), order.end());
    Evaluation e = evaluate(std::make_shared<nn::data::Subset>(train_set_, std::move(order)));
    log({{"type", "train_eval"},
         {"global_step", global_step_},
         {"images", k},
         {"loss", e.loss},
         {"accuracy", e.accuracy},
         {"macro_f1", e.macro_f1},
         {"train_seconds", train_seconds_}});
    r.train_sample_size = k;
    r.train_sample = std::move(e);
  }
  Evaluation test = evaluate(test_set_);
  log({{"type", "test"},
       {"global_step", global_step_},
       {"loss", test.loss},
       {"accuracy", test.accuracy},
       {"macro_f1", test.macro_f1},
       {"train_seconds", train_seconds_}});
  if (is_main()) {
    tools::write_file_atomically(run_dir_ + "/confusion_matrix.json",
                                 test.to_json(classes_).dump(2) + '\n');
    const auto classes = static_cast<int64_t>(test.confusion.size());
    if (events_ && classes > 0 && classes <= kConfusionImageClasses) {
      const EncodedImage image = confusion_matrix_png(test.confusion);
      events_->add_image(global_step_, "test/confusion_matrix", image.png, image.height,
                         image.width, 3);
    }
  }
  r.epoch = epoch_;
  r.global_step = global_step_;
  r.best_accuracy = best_accuracy_;
  r.test = std::move(test);
  return r;
}

TrainResult Trainer::run(const nn::Module* pretrained) {
  const std::string& finetune = cfg_.train.finetune;
  if (!finetune.empty()) {
    std::shared_ptr<nn::Module> loaded;
    if (!pretrained) pretrained = (loaded = models::load_classifier(finetune)).get();
    copy_backbone(*model_, *pretrained, cfg_.model.head, finetune);
    if (ema_) nn::load_state_dict(*ema_, model_->state_dict());
  }
  if (is_main()) {
    fs::create_directories(run_dir_);
    tools::remove_stale_temporaries(run_dir_);
    fs::remove(run_dir_ + "/metrics.jsonl");
    // An earlier run's event files go with its metrics.jsonl (TensorBoard would mix the runs).
    for (const auto& e : fs::directory_iterator(run_dir_))
      if (is_event_file_name(e.path().filename().string())) fs::remove(e.path());
    tools::write_file_atomically(run_dir_ + "/config.json", cfg_.to_json().dump(2) + '\n');
    open_events("");
  }
  return loop();
}

}  // namespace vitrine::train
