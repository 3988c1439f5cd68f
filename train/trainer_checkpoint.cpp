// Trainer's checkpoints: the metadata and training state written with the weights
// (last.safetensors, last_ema.safetensors) and resuming a run from them exactly. See trainer.h.
#include <filesystem>

#include <fmt/format.h>

#include "common/files.h"
#include "nn/json.h"
#include "nn/state.h"
#include "train/config.h"
#include "train/tfevents.h"
#include "train/trainer.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// The config without the keys a resumed run may change.
json resumable_part(json c) {
  c["train"].erase("out");
  c["train"].erase("device");
  c["data"].erase("path");
  c["data"].erase("workers");
  c["train"].erase("zero");  // the checkpoints hold whole optimizer states either way
  c["train"].erase("bucket_mb");
  c["train"].erase("tensorboard");  // the event file only records what the run does
  // Keys added since a run may have been saved, at their defaults (0: off; sync_bn true), compare
  // as absent.
  if (c["data"].value("subset", json(0)) == json(0)) c["data"].erase("subset");
  if (c["train"].value("max_steps", json(0)) == json(0)) c["train"].erase("max_steps");
  if (c["train"].value("sync_bn", json(true)) == json(true)) c["train"].erase("sync_bn");
  return without_comments(c);
}

}  // namespace

nn::Metadata Trainer::metadata() const {
  nn::Metadata m;
  nn::set_metadata_json(m, nn::kConfigKey, cfg_.model.config);
  nn::set_metadata_json(m, nn::kClassesKey, classes_);
  nn::set_metadata_json(m, nn::kDataKey, cfg_.to_json().at("data"));
  const json& tr = cfg_.data.transforms;
  if (tr.contains("mean")) nn::set_metadata_json(m, nn::kMeanKey, tr.at("mean"));
  if (tr.contains("std")) nn::set_metadata_json(m, nn::kStdKey, tr.at("std"));
  return m;
}

json Trainer::resume_state() const {
  const std::string metrics = run_dir_ + "/metrics.jsonl";
  return {{"epoch", epoch_},
          {"step", step_},
          {"global_step", global_step_},
          {"best_accuracy", best_accuracy_},
          {"best_loss", best_loss_},
          {"bad_evals", bad_evals_},
          {"dropout_generator", {{"seed", dropout_gen_.seed()}, {"offset", dropout_gen_.offset()}}},
          {"schedule", schedule_->state_json()},
          {"train_seconds", train_seconds_},
          {"log",
           {{"loss_sum", log_loss_sum_},
            {"correct", log_correct_},
            {"count", log_count_},
            {"steps", log_steps_},
            {"seconds", log_seconds_}}},
          {"metrics_bytes", fs::exists(metrics) ? fs::file_size(metrics) : 0},
          {"events_file", events_ ? fs::path(events_->path()).filename().string() : std::string()},
          {"events_bytes", events_ ? events_->size() : 0},
          {"world_size", world_->size()},
          {"config", cfg_.to_json()}};
}

void Trainer::save_last() {
  if (!is_main()) {
    // ZeRO-1 gathers the optimizer's slices to write them: the others take part.
    if (cfg_.train.zero == 1) (void)optimizer_->state_tensors();
    return;
  }
  if (ema_) nn::save_checkpoint(run_dir_ + "/last_ema.safetensors", *ema_, metadata());
  nn::save_checkpoint(run_dir_ + "/last.safetensors", *model_, metadata(), optimizer_.get(),
                      resume_state());
}

TrainResult Trainer::resume(const std::string& run_dir) {
  const std::string path = run_dir + "/last.safetensors";
  VT_CHECK(fs::exists(path), "trainer: cannot resume: {} does not exist (no run was saved there)",
           path);
  nn::Metadata meta;
  nn::load_checkpoint(path, *model_, optimizer_.get(), true, &meta);
  const json state = nn::metadata_json(meta, nn::kStateKey);
  VT_CHECK(state.is_object() && state.contains("global_step"),
           "trainer: cannot resume: {} holds no training state (vitrine.state)", path);
  const json diff = json::diff(resumable_part(state.at("config")), resumable_part(cfg_.to_json()));
  VT_CHECK(diff.empty(), "trainer: cannot resume {}: config key {} differs from the saved run's",
           path, diff.empty() ? "" : diff.at(0).at("path").get<std::string>());
  const int64_t saved_size = state.value("world_size", int64_t{1});
  VT_CHECK(saved_size == world_->size(),
           "trainer: cannot resume {}: it was saved by a run of {} process{} and this one has {}: "
           "the data shards and the steps of an epoch depend on the number of processes; "
           "resume with {} (or start a new run from its weights with train.finetune)",
           path, saved_size, saved_size == 1 ? "" : "es", world_->size(),
           saved_size == 1 ? std::string("one process, without mpirun")
                           : fmt::format("mpirun -np {}", saved_size));
  if (ema_) {
    const std::string ema_path = run_dir + "/last_ema.safetensors";
    VT_CHECK(fs::exists(ema_path), "trainer: cannot resume: {} does not exist", ema_path);
    nn::load_checkpoint(ema_path, *ema_);
  }
  run_dir_ = run_dir;
  if (is_main()) tools::remove_stale_temporaries(run_dir_);
  // The saved state comes from a file: every value is checked (a damaged or edited checkpoint is
  // an Error naming it, never a raw JSON exception or an out-of-range conversion).
  try {
    const auto integer = [&](const json& j, const char* key) {
      return nn::json_integer(j.at(key), fmt::format("{}: saved state '{}'", path, key));
    };
    const auto number = [&](const json& j, const char* key) {
      return nn::json_number(j.at(key), fmt::format("{}: saved state '{}'", path, key));
    };
    epoch_ = integer(state, "epoch");
    step_ = integer(state, "step");
    global_step_ = integer(state, "global_step");
    best_accuracy_ = number(state, "best_accuracy");
    // (a run saved before early_stopping_metric kept no loss)
    best_loss_ = state.contains("best_loss") ? number(state, "best_loss") : -1;
    bad_evals_ = integer(state, "bad_evals");
    train_seconds_ = number(state, "train_seconds");
    const json& g = state.at("dropout_generator");
    dropout_gen_.manual_seed(g.at("seed").get<uint64_t>());
    dropout_gen_.set_offset(g.at("offset").get<uint64_t>());
    schedule_ = nn::optim::schedule_from_json(state.at("schedule"));
    const json& l = state.at("log");
    log_loss_sum_ = number(l, "loss_sum");
    log_correct_ = integer(l, "correct");
    log_count_ = integer(l, "count");
    log_steps_ = integer(l, "steps");
    log_seconds_ = l.contains("seconds") ? number(l, "seconds") : 0;  // (saved since)
  } catch (const json::exception& e) {
    fail("trainer: cannot resume {}: its saved state (metadata '{}') is damaged: {}", path,
         nn::kStateKey, e.what());
  }
  const std::string metrics = run_dir_ + "/metrics.jsonl";
  const auto bytes = static_cast<uintmax_t>(nn::json_integer(
      state.value("metrics_bytes", json(0)), fmt::format("{}: saved state 'metrics_bytes'", path)));
  if (is_main() && fs::exists(metrics) && fs::file_size(metrics) > bytes)
    fs::resize_file(metrics, bytes);
  // The event file likewise: cut back to its size at the checkpoint and continued, so that its
  // steps are metrics.jsonl's, none twice (a run saved without one starts one).
  std::string events_file;
  try {
    events_file = state.value("events_file", std::string());
  } catch (const json::exception& e) {
    fail("trainer: cannot resume {}: its saved state 'events_file' is not a file name: {}", path,
         e.what());
  }
  VT_CHECK(events_file.empty() ||
               (is_event_file_name(events_file) && events_file.find('/') == std::string::npos),
           "trainer: cannot resume {}: its saved state 'events_file' \"{}\" is not an event file's "
           "name",
           path, events_file);
  const std::string events = run_dir_ + "/" + events_file;
  if (is_main() && !events_file.empty() && fs::exists(events)) {
    const auto events_bytes = static_cast<uintmax_t>(nn::json_integer(
        state.value("events_bytes", json(0)), fmt::format("{}: saved state 'events_bytes'", path)));
    if (fs::file_size(events) > events_bytes) fs::resize_file(events, events_bytes);
  }
  open_events(events_file.empty() || !fs::exists(events) ? std::string() : events_file);
  return loop();
}

}  // namespace vitrine::train
