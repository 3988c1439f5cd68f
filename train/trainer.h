// Trainer: vitrine-train's training loop as a library (the program adds the CLI, the progress
// display and the report). A step is one optimizer update: train.accum_steps batches whose mean
// losses are averaged (the last update of an epoch may take fewer batches). eval_every and
// log_every count steps; epochs end when the train loader's batches run out, or the run when
// train.max_steps steps are done. The end of a run is always validated (when there is a validation
// split), even when eval_every did not fall on it.
//
// Randomness, all from train.seed:
//   model init      Generator(seed)
//   dropout/drop-path  the trainer's own Generator(seed + 1), handed to every Dropout/DropPath
//   data            the train loader's seed (shuffle per epoch, random transforms per example)
// so one seed gives the same run bit for bit (single-threaded; OpenMP reductions may reorder).
//
// Data parallel (docs/distributed.md): started by mpirun as N processes, every rank builds the
// same model (rank 0's weights are broadcast), reads its shard of each epoch (the loader's
// distributed sharding) with data.batch_size / N images per batch, so data.batch_size stays the
// global batch, and averages gradients through nn::DistributedDataParallel (or, with
// train.zero = 1, through nn::ZeroAdam's reduce-scatter); a model with BatchNorm2d has it converted
// to nn::SyncBatchNorm first (train.sync_bn, with a note). Printed and logged metrics are summed
// across the ranks (the whole data set's); only rank 0 writes the run folder. A run resumes with
// the world size it was saved with (checkpoints are the same files whatever the size).
//
// The run folder holds:
// Every checkpoint's metadata holds the model config, the class names, mean/std and the data
// section (vitrine.data: what vitrine-train --eval and vitrine-explain --dataset read back).
//   last.safetensors      model + optimizer + resume state, written at each evaluation, on stop
//                         and at the end
//   best.safetensors      the evaluated weights (the EMA ones with train.ema_decay > 0) of the
//                         best validation accuracy
//   last_ema.safetensors  the EMA weights matching last.safetensors (only with EMA), written
//                         just before it
//   metrics.jsonl         one JSON object per line: {"type": "train", ...} every log_every
//                         steps, {"type": "eval", ...} per validation, {"type": "test", ...} at
//                         the end (and at each epoch's end with train.test_each_epoch); every
//                         line has "train_seconds", the time spent in training steps so far
//                         (evaluations and checkpoints not counted); at the end also
//                         {"type": "train_eval", "images": k, ...}: the training split in eval
//                         mode on a seeded sample of k <= kTrainSample images; train lines
//                         also have "images_per_second": the images trained since the last
//                         train line over the training time since it
//   confusion_matrix.json the test set's Evaluation::to_json with the class names
//   events.out.tfevents.<unix seconds>.<hostname>
//                         with train.tensorboard (the default): TensorBoard's event file, every
//                         metrics.jsonl line's numbers as scalars at its global_step and the
//                         confusion matrix as an image at the end (tensorboard.h); one per run,
//                         continued by a resume
// Resume state (vitrine.state): {"epoch", "step" (steps done in that epoch), "global_step",
// "best_accuracy" and "best_loss" (of the best validation by train.early_stopping_metric),
// "bad_evals" (validations since the best), "dropout_generator": {"seed",
// "offset"}, "schedule", "log" (train metrics since the last log line), "train_seconds",
// "metrics_bytes" (metrics.jsonl's size then: a resume truncates what a killed run wrote after it),
// "events_file" and "events_bytes" (the event file's name, "" without one, and its size then: cut
// back the same way), "config"}.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/dist/process_group.h"
#include "backends/generator.h"
#include "models/classifier.h"
#include "nn/data/dataset.h"
#include "nn/data/loader.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/schedule.h"
#include "nn/parallel/ddp.h"
#include "train/metrics.h"
#include "train/options.h"

namespace vitrine::train {

class EventWriter;

/// Where the loop is, passed to TrainerHooks::on_step after each step (and its evaluation).
struct StepInfo {
  int64_t epoch = 0;        // 0-based
  int64_t step = 0;         // steps done in this epoch
  int64_t global_step = 0;  // steps done in the run
  int64_t steps_per_epoch = 0;
  double loss = 0;                       // this step's loss (mean over its batches)
  int64_t correct = 0, examples = 0;     // this step's training predictions
  double lr = 0;                         // the first group's lr of this step
  double step_seconds = 0;               // this step's time (data, forward, backward, update)
  double train_seconds = 0;              // time in training steps so far, this one included
  std::optional<Evaluation> validation;  // set when this step ended with a validation
  std::optional<Evaluation> test;        // set at an epoch's end with train.test_each_epoch
};

/// Metrics of `model` (put in eval mode, no gradients, restored after) on a dataset through the
/// evaluation transforms, in batches on `device`. With hflip_tta (flip test-time augmentation,
/// train.tta_hflip) each image is also classified mirrored left to right, and the prediction is
///     p = (softmax(f(x)) + softmax(f(flip(x)))) / 2,   loss = -log p[label],
/// (log p stands in for the logits: its argmax is p's). With a group of several processes, each
/// evaluates its shard of the dataset (no example twice) and the metrics are summed across the
/// ranks (a collective): every rank returns those of the whole dataset.
Evaluation evaluate(nn::Module& model, const std::shared_ptr<const nn::data::Dataset>& dataset,
                    const nn::data::Compose& transforms, int64_t batch_size, int64_t workers,
                    Device device, bool hflip_tta = false, dist::ProcessGroup* group = nullptr);

/// The config of a fine-tuning run: `config` with its model section replaced by `pretrained`, the
/// architecture of the checkpoint (own or foreign weights, as models::load_vit reads them), with
/// num_classes set to the data set's, and train.finetune = checkpoint, train.freeze_backbone =
/// freeze_backbone. Trainer::run then starts from the checkpoint's weights and a fresh head.
nlohmann::json finetune_config(nlohmann::json config, const models::ViTConfig& pretrained,
                               const std::string& checkpoint, int64_t num_classes,
                               bool freeze_backbone);

struct TrainResult {
  bool stopped = false;        // the stop flag ended the run; resume() continues it
  bool early_stopped = false;  // the validation metric stopped improving
  int64_t epoch = 0, global_step = 0;
  double best_accuracy = -1;       // best.safetensors' validation accuracy; -1 before any
  std::string message;             // what happened, and how to resume when stopped
  std::optional<Evaluation> test;  // the test set's metrics (not when stopped)
  /// The validation of the run's last step, when no step's own validation fell on it (an
  /// eval_every longer than the run, train.max_steps).
  std::optional<Evaluation> end_validation;
  /// The training split's metrics in eval mode on a seeded sample of train_sample_size images
  /// (not when stopped).
  std::optional<Evaluation> train_sample;
  int64_t train_sample_size = 0;
};

/// The most training images finish() evaluates in eval mode (a seeded sample).
inline constexpr int64_t kTrainSample = 2000;

/// Makes the model to train from a Generator (its initialisation's randomness).
using ModelFactory = std::function<std::shared_ptr<nn::Module>(Generator&)>;

class Trainer {
 public:
  /// config: the run's options; with train.freeze_backbone only the head is trained (the others
  /// have requires_grad false and are not given to the optimizer). datasets: the validation one
  /// may be empty or null (no validation: best.safetensors is then never written, nor early
  /// stopping); run_dir is created. build: the model, made from a Generator seeded with
  /// train.seed (and again for the EMA copy); by default config.model.build. Any image
  /// classifier (images [B, C, H, W] -> logits [B, K]) trains: config.model then only says what
  /// the Trainer needs of it (channels for the transforms, num_classes, the head's child name for
  /// fine-tuning and freezing) and what its checkpoints record.
  Trainer(TrainConfig config, std::shared_ptr<const nn::data::Dataset> train_set,
          std::shared_ptr<const nn::data::Dataset> validation_set,
          std::shared_ptr<const nn::data::Dataset> test_set, std::string run_dir,
          ModelFactory build = {});
  /// The same from a config JSON (TrainConfig::from_json validates it).
  Trainer(const nlohmann::json& config, std::shared_ptr<const nn::data::Dataset> train_set,
          std::shared_ptr<const nn::data::Dataset> validation_set,
          std::shared_ptr<const nn::data::Dataset> test_set, std::string run_dir);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Checked at each step boundary; when set, last.safetensors is saved and run() returns.
  void set_stop_flag(std::atomic<bool>* flag) { stop_flag_ = flag; }
  /// Called after each step (a progress display; tests use it to interrupt a run).
  void set_on_step(std::function<void(const StepInfo&)> f) { on_step_ = std::move(f); }

  /// Trains from the start (writes run_dir/config.json), then evaluates on the test set. With
  /// train.finetune, every weight but the head's is first copied from `pretrained`, the model
  /// read from that checkpoint (read here when null); an Error names a tensor whose shape
  /// differs. A resumed run never reads the checkpoint again: its weights are in last.safetensors.
  TrainResult run(const nn::Module* pretrained = nullptr);
  /// Continues the run saved in run_dir/last.safetensors exactly where it was saved: an Error
  /// names the file when it is missing or unreadable, or the key when its config differs from
  /// this trainer's (train.out, train.device, data.path and data.workers may differ).
  TrainResult resume(const std::string& run_dir);

  /// Metrics of `model` (the EMA model when there is one) on a dataset, with the eval pipeline.
  Evaluation evaluate(const std::shared_ptr<const nn::data::Dataset>& dataset);

  /// The model being trained (model.arch's: a VisionTransformer or a ResNet).
  nn::Module& model() { return *model_; }
  /// Its architecture: channels, classes, input size, the head's name, the config JSON.
  const models::ClassifierSpec& spec() const { return cfg_.model; }
  /// The weights evaluated and saved as best: the EMA copy, or the model itself.
  nn::Module& eval_model() { return ema_ ? *ema_ : *model_; }
  nn::optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  /// What the user should know before the first step (an eval_every longer than the run, ...).
  const std::vector<std::string>& notes() const { return notes_; }
  const std::string& run_dir() const { return run_dir_; }
  /// The options it runs with.
  const TrainConfig& config() const { return cfg_; }
  /// The processes training together (a world of one without a launcher).
  dist::ProcessGroup& group() { return *group_; }
  /// The gradient averaging of a data-parallel run without ZeRO (null otherwise).
  nn::DistributedDataParallel* ddp() { return ddp_.get(); }

 private:
  TrainResult loop();
  void train_step(StepInfo& info);
  /// Validation, best/patience bookkeeping and last.safetensors; true when patience ran out.
  bool validate(StepInfo& info);
  /// After an epoch's last step: the test set with test_each_epoch, then the next epoch.
  void end_epoch(StepInfo& info);
  void save_last();
  nlohmann::json resume_state() const;
  nn::Metadata metadata() const;
  /// Appends a line to metrics.jsonl and, with train.tensorboard, its scalars to the event file.
  void log(const nlohmann::json& line);
  /// Opens the event file (rank 0, train.tensorboard): `name` in the run folder, "" for a new one.
  void open_events(const std::string& name);
  TrainResult finish(TrainResult r);
  /// Whether to stop before the next step: the stop flag, or in a data-parallel run whether any
  /// rank's flag was set at the last step (agreed on by the step's metrics reduction).
  bool stop_requested();
  bool is_main() const { return world_->is_main(); }

  TrainConfig cfg_;
  std::shared_ptr<const nn::data::Dataset> train_set_, validation_set_, test_set_;
  std::string run_dir_;
  Device device_;
  Generator init_gen_, dropout_gen_, ema_gen_;
  std::shared_ptr<nn::Module> model_, ema_;
  std::unique_ptr<nn::optim::Optimizer> optimizer_;
  std::unique_ptr<nn::optim::Schedule> schedule_;
  std::unique_ptr<nn::data::DataLoader> train_loader_;
  nn::data::Compose eval_transforms_;
  std::vector<std::string> classes_;

  int64_t batches_per_epoch_ = 0, steps_per_epoch_ = 0;
  int64_t last_eval_step_ = -1;  // global step of the last validation
  std::vector<std::string> notes_;

  // Loop state (saved in vitrine.state).
  int64_t epoch_ = 0, step_ = 0, global_step_ = 0;
  double best_accuracy_ = -1;  // of best.safetensors (the best by early_stopping_metric)
  double best_loss_ = -1;      // its validation loss; -1 before any validation
  int64_t bad_evals_ = 0;
  double train_seconds_ = 0;
  // Running train metrics since the last log line.
  double log_loss_sum_ = 0, log_seconds_ = 0;
  int64_t log_correct_ = 0, log_count_ = 0, log_steps_ = 0;
  std::unique_ptr<EventWriter> events_;  // the TensorBoard event file (rank 0, train.tensorboard)

  dist::ProcessGroup* world_ = nullptr;  // the processes (CPU collectives: metrics, flags)
  dist::ProcessGroup* group_ = nullptr;  // the same, for the model's device (gradients)
  std::shared_ptr<nn::DistributedDataParallel> ddp_;
  std::atomic<bool>* stop_flag_ = nullptr;
  bool stop_agreed_ = false;
  std::function<void(const StepInfo&)> on_step_;
};

}  // namespace vitrine::train
