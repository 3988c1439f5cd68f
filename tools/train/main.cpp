// vitrine-train: train a ViT from scratch or fine-tune one, from the command line.
//   vitrine-train                                   the default Fashion-MNIST ViT (configs/)
//   vitrine-train --set model.depth=4 --set optim.lr=5e-4
//   vitrine-train --config configs/cifar10.json --data ~/data/cifar-10-batches-bin
//   vitrine-train --resume runs/fashion_mnist       continue a stopped or killed run exactly
//   vitrine-train --eval runs/fashion_mnist/best.safetensors
//   vitrine-train --finetune vit.safetensors --model-config vit_base_patch16_224 --freeze-backbone
//                 --config configs/imagefolder.json --data DIR
//   vitrine-train --summary --model vit_small_patch16_224   every module's output and parameters
//   vitrine-train --max-steps 20 --subset 512      a smoke run
// Exit status: 0 done, 1 an error (the message names the file or key), 2 a bad command line,
// 130 stopped by Ctrl-C (the run can be resumed).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "nn/data/transforms.h"
#include "nn/parallel/collectives.h"
#include "nn/parallel/zero.h"
#include "nn/state.h"
#include "nn/summary.h"
#include "train/config.h"
#include "train/datasets.h"
#include "train/fit.h"
#include "train/progress.h"
#include "train/report.h"
#include "train/trainer.h"
#include "vitrine.h"  // the public API: Error, set_float32_matmul_precision, ...

using nlohmann::json;
using namespace vitrine;
namespace fs = std::filesystem;
namespace tr = vitrine::train;

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) {
  if (g_stop.exchange(true)) _exit(130);  // a second Ctrl-C: stop at once
  const char msg[] =
      "\nvitrine-train: stopping after this step (Ctrl-C again to quit without saving)\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

struct Options {
  std::string config_path, data, out, device, resume, eval, finetune, model, model_config;
  std::string split = "test";  // --eval's
  std::vector<std::string> sets;
  int64_t epochs = 0, batch_size = 0, max_steps = 0, subset = 0;
  double lr = 0, weight_decay = -1;
  bool freeze_backbone = false, summary = false, print_config = false;
};

/// The config the command line describes: `base` (a file, the default, a run's or a
/// checkpoint's), then --model / --model-config, then --set in order, then the flags that name
/// one key each. notes: what was fitted (a schedule longer than the run).
json build_config(const Options& o, json c, std::vector<std::string>& notes) {
  const int64_t file_epochs =
      c["train"]["epochs"].is_number_integer() ? c["train"]["epochs"].get<int64_t>() : 0;
  if (!o.model.empty()) {
    c["model"] = {{"preset", o.model}};
    const std::vector<std::string> resnets = models::ResNetConfig::preset_names();
    if (std::find(resnets.begin(), resnets.end(), o.model) != resnets.end())
      c["model"]["arch"] = "resnet";
  }
  if (!o.model_config.empty() && o.finetune.empty() && o.eval.empty()) {
    json m = models::resolve_config(o.model_config).to_json();
    m.erase("num_classes");  // the architecture; the classes are the data set's
    c["model"] = m;
  }
  for (const std::string& s : o.sets) tr::apply_override(c, s);
  if (!o.data.empty()) c["data"]["path"] = o.data;
  if (!o.out.empty()) c["train"]["out"] = o.out;
  if (!o.resume.empty()) c["train"]["out"] = o.resume;
  if (!o.device.empty()) c["train"]["device"] = o.device;
  if (o.epochs > 0) c["train"]["epochs"] = o.epochs;
  if (o.batch_size > 0) c["data"]["batch_size"] = o.batch_size;
  if (o.lr > 0) c["optim"]["lr"] = o.lr;
  if (o.weight_decay >= 0) c["optim"]["weight_decay"] = o.weight_decay;
  if (o.max_steps > 0) c["train"]["max_steps"] = o.max_steps;
  if (o.subset > 0) c["data"]["subset"] = o.subset;
  if (o.resume.empty())
    for (std::string& n : tr::fit_schedule_to_run(c, file_epochs)) notes.push_back(n);
  return c;
}

/// The config file (or the default) the command line starts from.
json base_config(const Options& o) {
  if (!o.resume.empty()) {
    const std::string saved = o.resume + "/config.json";
    VT_CHECK(fs::exists(saved), "--resume {}: {} does not exist (not a vitrine-train run folder)",
             o.resume, saved);
    return tr::load_config(saved);
  }
  return o.config_path.empty() ? tr::default_config() : tr::load_config(o.config_path);
}

/// Whether the user's config or --set names model.num_classes (else the data set decides it).
bool num_classes_given(const Options& o, const json& base) {
  if (!o.model.empty() || !o.model_config.empty()) return false;
  for (const std::string& s : o.sets)
    if (s.rfind("model.num_classes", 0) == 0) return true;
  return base.contains("model") && base["model"].is_object() &&
         base["model"].contains("num_classes");
}

/// Whether --set names an image-size transform (then the transforms are the user's, not fitted
/// to the model).
bool sizes_set(const Options& o) {
  for (const std::string& s : o.sets)
    for (const char* key : {"data.transforms=", "data.transforms.resize",
                            "data.transforms.center_crop", "data.transforms.random_crop"})
      if (s.rfind(key, 0) == 0) return true;
  return false;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) fmt::print("note: {}\n", n);
  std::fflush(stdout);
}

/// The checkpoint's file size in MB, and a line first when reading it takes a while.
void say_loading(const std::string& path) {
  const double mb = static_cast<double>(fs::file_size(path)) / 1e6;
  if (mb >= 100) {
    fmt::print("reading {} ({:.0f} MB) ...\n", path, mb);
    std::fflush(stdout);
  }
}

/// The architecture of a checkpoint: --model-config when given, else its vitrine.config metadata
/// (read from the header only); an Error that names --model-config otherwise.
models::ViTConfig checkpoint_architecture(const std::string& flag, const std::string& path,
                                          const std::string& model_config) {
  if (!model_config.empty()) return models::resolve_config(model_config);
  const json stored = nn::metadata_json(nn::read_safetensors_metadata(path), nn::kConfigKey);
  VT_CHECK(!stored.is_null(),
           "{} {}: the checkpoint holds no Vitrine config (a timm, torchvision, DINO or Hugging "
           "Face file); name its architecture with --model-config PRESET|FILE (a preset: {}; or "
           "a JSON file: Vitrine's model config or training config, or a Hugging Face config.json)",
           flag, path, fmt::join(models::ViTConfig::preset_names(), ", "));
  try {
    return models::ViTConfig::from_json(stored);
  } catch (const Error& e) {
    fail("{} {}: metadata {}: {}", flag, path, nn::kConfigKey, e.what());
  }
}

models::ClassifierSpec checkpoint_spec(const std::string& flag, const std::string& path,
                                       const std::string& model_config) {
  if (!model_config.empty())
    return models::ClassifierSpec::of(models::resolve_config(model_config));
  const json stored = nn::metadata_json(nn::read_safetensors_metadata(path), nn::kConfigKey);
  if (!stored.is_null() && models::arch_of(stored) != "vit") try {
      return models::ClassifierSpec::from_json(stored);
    } catch (const Error& e) {
      fail("{} {}: metadata {}: {}", flag, path, nn::kConfigKey, e.what());
    }
  return models::ClassifierSpec::of(checkpoint_architecture(flag, path, model_config));
}

/// A run folder that holds no earlier run: `out` itself, or out-2, out-3, ...
std::string fresh_run_dir(const std::string& out) {
  auto used = [](const fs::path& p) { return fs::exists(p) && !fs::is_empty(p); };
  if (!used(out)) return out;
  for (int i = 2;; ++i) {
    const std::string candidate = fmt::format("{}-{}", out, i);
    if (!used(candidate)) return candidate;
  }
}

int summary(const json& config) {
  // The model section alone: a summary needs no data set, so a preset is shown as it is.
  const models::ClassifierSpec spec = tr::model_spec(config);
  Generator gen(0);
  const auto model = spec.build(gen);
  fmt::print("{}\n\n{}\n", spec.describe(),
             nn::summary(*model, {1, spec.channels, spec.image_h, spec.image_w}));
  return 0;
}

int evaluate_checkpoint(const Options& o) {
  const models::ClassifierSpec arch = checkpoint_spec("--eval", o.eval, o.model_config);
  const nn::Metadata meta = nn::read_safetensors_metadata(o.eval);
  // The config: the file given, else the run's (config.json beside the checkpoint) or the
  // checkpoint's own data section; the model is always the checkpoint's.
  std::string source = o.config_path;
  json base = o.config_path.empty() ? tr::config_for_checkpoint(o.eval, arch.config, meta, &source)
                                    : tr::load_config(o.config_path);
  std::vector<std::string> notes;
  json config = build_config(o, base, notes);
  say_loading(o.eval);
  models::ClassifierSpec spec;
  auto model = models::load_classifier(
      o.eval, o.model_config.empty() ? std::nullopt : std::optional<models::ClassifierSpec>(arch),
      &spec);
  model->eval();
  if (!o.model_config.empty() && arch.num_classes != spec.num_classes)
    fmt::print("note: {}\n", models::head_note(o.model_config, arch.num_classes, spec.num_classes));
  VT_CHECK(spec.num_classes > 0,
           "--eval {}: the model has no classification head (a feature extractor); fine-tune a "
           "head first: vitrine-train --finetune {} --model-config ...",
           o.eval, o.eval);
  config["model"] = spec.config;
  json& transforms = config["data"]["transforms"];
  // The normalisation: --set's when given; else the checkpoint's own (metadata); else a config
  // file's when given; else the rule every tool follows for a foreign checkpoint
  // (models::checkpoint_normalisation: vitrine-explain's too).
  const bool set_norm = std::any_of(o.sets.begin(), o.sets.end(), [](const std::string& s) {
    return s.starts_with("data.transforms.mean") || s.starts_with("data.transforms.std");
  });
  const models::Normalisation norm =
      models::checkpoint_normalisation(o.eval, meta, spec.channels, spec.num_classes > 0);
  const bool own = norm.source == "the checkpoint";
  if (!set_norm && (own || o.config_path.empty())) {
    transforms["mean"] = norm.mean;
    transforms["std"] = norm.std;
    if (!own) notes.push_back(fmt::format("normalisation: {}", norm.source));
  }
  if (!sizes_set(o))
    for (std::string& n : tr::fit_transforms_to_model(config)) notes.push_back(n);
  print_notes(notes);
  tr::validate_config(config);
  std::shared_ptr<const nn::data::Dataset> test;
  if (o.split == "test") {
    test = tr::load_test_set(config);
  } else {
    const tr::Datasets d = tr::load_datasets(config);
    test = o.split == "train" ? d.train : d.validation;
    VT_CHECK(test,
             "--eval --split validation: the config holds out no validation split "
             "(data.validation_fraction is 0; --set data.validation_fraction=0.1)");
  }
  std::vector<std::string> classes = test->classes();
  VT_CHECK(static_cast<int64_t>(classes.size()) == spec.num_classes,
           "--eval {}: the model has {} classes, the {} split of {} has {}", o.eval,
           spec.num_classes, o.split, test->source(), classes.size());
  const tr::TrainConfig cfg = tr::TrainConfig::from_json(config);
  const Device device = Device::parse(cfg.train.device);
  model->to(device);
  // As the trainer: the run's own test pass computed under its train.precision.
  set_float32_matmul_precision(float32_matmul_precision_for(cfg.train.precision));
  const bool tta = cfg.train.tta_hflip;
  fmt::print("evaluating {} ({}) on the {} split of {} ({} images{}{}; config from {})\n", o.eval,
             spec.describe(), o.split, test->source(), test->size(),
             tta ? ", with flip test-time augmentation" : "",
             cfg.train.precision == "fp32" ? "" : ", train.precision " + cfg.train.precision,
             source);
  tr::Evaluation e =
      tr::evaluate(*model, test, nn::data::from_config(cfg.data.transforms, spec.channels, false),
                   cfg.data.batch_size, cfg.data.workers, device, tta);
  fmt::print("\n{}\n", e.table(classes));
  return 0;
}

/// The run's config, fitted to the data set and (fine-tuning) to the checkpoint's model, and
/// validated before the first step. pretrained: the checkpoint read for fine-tuning.
json training_config(const Options& o, std::shared_ptr<nn::Module>& pretrained) {
  const json base = base_config(o);
  std::vector<std::string> notes;
  json config = build_config(o, base, notes);
  if (!o.resume.empty()) {
    tr::validate_config(config);
    return config;
  }
  const bool given = num_classes_given(o, base);
  if (!o.finetune.empty()) {
    // The checkpoint's architecture decides the model and its input size; the data set its
    // classes; the transforms follow the model's size unless --set names them.
    models::ViTConfig arch = checkpoint_architecture("--finetune", o.finetune, o.model_config);
    // The config's model.init, when it names one, draws the new head (seed 004's
    // nn.Linear(768, 3) is PyTorch's default: init vit-pytorch); else the checkpoint's scheme.
    if (config["model"].contains("init")) {
      arch.init = config["model"]["init"].get<std::string>();
      arch.validate();
      notes.push_back(
          fmt::format("model.init {}: the new head is drawn as {}'s", arch.init, arch.init));
    }
    json probe = config;
    probe["model"] = arch.to_json();
    const auto test = tr::load_test_set(probe);
    const auto classes = static_cast<int64_t>(test->classes().size());
    if (given) {
      const int64_t want = tr::model_config(config).num_classes;
      VT_CHECK(want == classes,
               "config: model.num_classes is {}, but the data set {} has {} classes; leave "
               "model.num_classes out when fine-tuning (the head is made for the data set)",
               want, test->source(), classes);
    }
    // --freeze-backbone, or the config's train.freeze_backbone (seed 004's config sets it).
    const bool freeze = o.freeze_backbone || config["train"].value("freeze_backbone", false);
    config = tr::finetune_config(config, arch, o.finetune, classes, freeze);
    if (!sizes_set(o))
      for (std::string& n : tr::fit_transforms_to_model(config)) notes.push_back(n);
  } else {
    for (std::string& n : tr::fit_classes_to_data(config, given)) notes.push_back(n);
  }
  print_notes(notes);
  tr::validate_config(config);
  if (!o.finetune.empty()) {
    say_loading(o.finetune);
    pretrained = models::load_vit(
        o.finetune, o.model_config.empty()
                        ? std::nullopt
                        : std::optional<models::ViTConfig>(models::resolve_config(o.model_config)));
    if (nn::metadata_json(nn::read_safetensors_metadata(o.finetune), nn::kMeanKey).is_null())
      fmt::print(
          "note: {} names no normalisation; the images are normalised with the config's mean {} "
          "std {} (torchvision's and timm's ImageNet ViTs expect ImageNet's mean [0.485, 0.456, "
          "0.406] std [0.229, 0.224, 0.225]; DINO's too; many timm ViTs 0.5)\n",
          o.finetune, config["data"]["transforms"].value("mean", json::array()).dump(),
          config["data"]["transforms"].value("std", json::array()).dump());
  }
  return config;
}

/// What ZeRO-1 saves: the optimizer's state held by this process against all of it.
std::string zero_line(tr::Trainer& trainer) {
  const auto* z = dynamic_cast<const nn::ZeroAdam*>(&trainer.optimizer());
  if (!z) return "ZeRO-1";
  const double mb = 1024.0 * 1024.0, whole = static_cast<double>(z->state_bytes()) *
                                             static_cast<double>(z->total_size()) /
                                             static_cast<double>(z->shard_size());
  return fmt::format(
      "ZeRO-1: each process updates its slice of the weights and holds {:.2f} MB of AdamW state "
      "instead of {:.2f} MB",
      static_cast<double>(z->state_bytes()) / mb, whole / mb);
}

int run_training(const Options& o) {
  std::shared_ptr<nn::Module> pretrained;  // read once, for config and weights
  json config = training_config(o, pretrained);
  const bool resuming = !o.resume.empty();
  const std::string run_dir =
      resuming ? o.resume
               : dist::broadcast_string(fresh_run_dir(config["train"]["out"].get<std::string>()));
  config["train"]["out"] = run_dir;

  const tr::TrainConfig cfg = tr::TrainConfig::from_json(config);
  tr::Datasets data = tr::load_datasets(cfg.data, cfg.train.seed);
  tr::Trainer trainer(cfg, data.train, data.validation, data.test, run_dir);
  const models::ClassifierSpec& mc = trainer.spec();
  const tr::TrainOptions& t = trainer.config().train;
  const tr::OptimOptions& op = trainer.config().optim;
  const int64_t trainable = trainer.model().num_parameters(true);
  fmt::print("vitrine-train: {} ({:.2f}M parameters{})\n", mc.describe(),
             static_cast<double>(trainer.model().num_parameters()) / 1e6,
             t.freeze_backbone ? fmt::format(", {} trainable", trainable) : "");
  fmt::print("  data:  {} from {}: {} train, {} validation, {} test images, {} classes\n",
             trainer.config().data.dataset.name, data.path, data.train->size(),
             data.validation ? data.validation->size() : 0, data.test->size(), mc.num_classes);
  fmt::print(
      "  train: {} epochs of {} steps (batch {}), {} lr {:g} weight decay {:g}, {} on {}{}\n",
      t.epochs, trainer.steps_per_epoch(), trainer.config().data.batch_size * t.accum_steps,
      op.name, op.lr, op.weight_decay, trainer.config().schedule.name, t.device,
      t.max_steps > 0 ? fmt::format(", at most {} steps", t.max_steps) : "");
  if (trainer.group().size() > 1) {
    const int64_t n = trainer.group().size();
    fmt::print("  data parallel: {} processes ({}), {} images per process per batch, {}\n", n,
               trainer.group().backend(), trainer.config().data.batch_size / n,
               t.zero == 1 ? zero_line(trainer)
                           : fmt::format("gradients averaged in {} bucket(s)",
                                         trainer.ddp() ? trainer.ddp()->buckets().size() : 0));
  }
  if (t.tta_hflip)
    fmt::print("  eval:  flip test-time augmentation (each image and its mirror image)\n");
  if (!t.finetune.empty())
    fmt::print("  from:  {}{}\n", t.finetune,
               t.freeze_backbone
                   ? fmt::format(" (backbone frozen: {} parameters of the head train)", trainable)
                   : "");
  fmt::print("  run folder: {}{}\n", run_dir, resuming ? " (resuming)" : "");
  print_notes(trainer.notes());
  std::fflush(stdout);

  tr::Progress progress(stdout, isatty(STDOUT_FILENO) != 0, t.epochs, t.log_every);
  trainer.set_on_step([&](const tr::StepInfo& info) { progress.on_step(info); });
  trainer.set_stop_flag(&g_stop);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  tr::TrainResult r;
  try {
    r = resuming ? trainer.resume(run_dir) : trainer.run(pretrained.get());
  } catch (...) {
    progress.close();
    throw;
  }
  progress.close();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  // (rank 0 writes the run folder; the other ranks' output goes nowhere)
  const std::string report = trainer.group().is_main() ? tr::write_report(run_dir) : run_dir;
  if (r.end_validation)
    fmt::print("  validation: loss {:.4f} accuracy {:.2f}% macro F1 {:.4f} (the end of the run)\n",
               r.end_validation->loss, 100 * r.end_validation->accuracy,
               r.end_validation->macro_f1);
  fmt::print("{}\n", r.message);
  if (r.stopped) {
    fmt::print("report so far: {}\n", report);
    return 130;
  }
  if (r.train_sample)
    fmt::print("training split in eval mode ({} images): loss {:.4f} accuracy {:.2f}%\n",
               r.train_sample_size, r.train_sample->loss, 100 * r.train_sample->accuracy);
  fmt::print("\ntest set ({} images):\n{}\n", r.test->count, r.test->table(data.test->classes()));
  fmt::print("run folder: {}\n", run_dir);
  if (r.best_accuracy >= 0)
    fmt::print("  best.safetensors   the {}, {:.2f}%\n",
               trainer.config().train.early_stopping_metric == "val_loss"
                   ? "lowest validation loss; its accuracy"
                   : "best validation accuracy",
               100 * r.best_accuracy);
  fmt::print("  last.safetensors   the final weights (test accuracy {:.2f}%)\n",
             100 * r.test->accuracy);
  fmt::print("  metrics.jsonl, confusion_matrix.json, config.json\n");
  if (trainer.config().train.tensorboard) {
    const std::string runs = fs::path(run_dir).parent_path().string();
    fmt::print("  events.out.tfevents.*  TensorBoard's: tensorboard --logdir {}\n",
               runs.empty() ? "." : runs);
  }
  fmt::print("  report.html        curves and confusion matrix: {}\n", report);
  fmt::print("evaluate again with: vitrine-train --eval {}/{}.safetensors\n", run_dir,
             r.best_accuracy >= 0 ? "best" : "last");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vitrine-train: train a Vision Transformer, or fine-tune one, and evaluate it.\n"
      "With no arguments it trains the default Fashion-MNIST ViT (configs/fashion_mnist.json).",
      "vitrine-train"};
  Options o;
  // A repeated option: the last one wins, as argparse does (--set alone accumulates).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", o.config_path,
                 "JSON config (configs/*.json); keys it leaves out take the defaults")
      ->check(CLI::ExistingFile);
  app.add_option("--set", o.sets,
                 "override one key: --set model.depth=4 --set optim.lr=5e-4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--data", o.data, "the data set's folder (data.path)")->type_name("DIR");
  app.add_option("--out", o.out, "the run folder (train.out); a used one gets a -2, -3 suffix")
      ->type_name("DIR");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N (train.device)");
  app.add_option("--epochs", o.epochs, "train.epochs")->check(CLI::Range(1, 1000000));
  app.add_option("--resume", o.resume, "continue the run saved in this run folder exactly")
      ->type_name("RUN_DIR");
  app.add_flag("--summary", o.summary, "print the model's layers, shapes and sizes and exit");
  app.add_flag("--print-config", o.print_config, "print the full config and exit");
  app.add_option("--eval", o.eval, "evaluate a checkpoint on the test set (--split) and exit")
      ->type_name("CHECKPOINT")
      ->check(CLI::ExistingFile);
  app.add_option("--split", o.split,
                 "--eval: the split to evaluate: test, train (the training split, without the "
                 "validation images) or validation (data.validation_fraction of the training file)")
      ->check(CLI::IsMember({"test", "train", "validation"}))
      ->capture_default_str();
  auto* ft = app.add_option("--finetune", o.finetune,
                            "start from this checkpoint's weights (Vitrine, timm, Hugging Face) "
                            "with a new head for the data set's classes")
                 ->type_name("CHECKPOINT")
                 ->check(CLI::ExistingFile);
  app.add_flag("--freeze-backbone", o.freeze_backbone, "with --finetune: train the head only")
      ->needs(ft);
  app.add_option("--model-config", o.model_config,
                 "the model's architecture: a preset (vit_base_patch16_224, fmnist, ...) or a "
                 "JSON file (Vitrine's model config or training config, or a Hugging Face "
                 "config.json); needed by --finetune and "
                 "--eval for a checkpoint without Vitrine's metadata (timm, torchvision, DINO)")
      ->type_name("PRESET|FILE");
  app.add_option("--model", o.model,
                 "model.preset: train this preset's architecture (a ResNet's, as resnet18, sets "
                 "model.arch=resnet too)")
      ->type_name("PRESET");
  app.add_option("--batch-size", o.batch_size, "data.batch_size")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "optim.lr")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", o.weight_decay, "optim.weight_decay")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", o.max_steps,
                 "train.max_steps: stop after N optimizer steps (a smoke run)")
      ->check(CLI::PositiveNumber);
  app.add_option("--subset", o.subset, "data.subset: train on the first N training images only")
      ->check(CLI::PositiveNumber);
  app.footer(
      "Every config key can be set with --set KEY=VALUE (vitrine-train --print-config shows "
      "them all); the flags above are shortcuts for the keys they name.");
  app.get_option("--resume")->excludes("--config")->excludes("--finetune")->excludes("--eval");
  app.get_option("--eval")->excludes("--finetune");
  app.get_option("--split")->needs("--eval");
  app.get_option("--model")->excludes("--model-config");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    fmt::print(stderr,
               "vitrine-train: {}\nEvery config key can be set with --set KEY=VALUE (as --set "
               "optim.lr=5e-4; --print-config lists the keys); the options are in --help.\n",
               e.what());
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is a ParseError too, with code 0
  }

  dist::ProcessGroup* world = nullptr;
  try {
    // Under mpirun: every rank trains, rank 0 alone prints (errors go to stderr from any rank).
    world = &dist::world();
    if (world->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      fmt::print(stderr, "vitrine-train (rank {}): cannot silence stdout\n", world->rank());
    if (o.print_config || o.summary) {
      std::vector<std::string> notes;
      const json base = base_config(o);
      json config = build_config(o, base, notes);
      // With --data, an image folder's class folders decide the head, as training would.
      if (o.summary && !o.data.empty())
        for (std::string& n : tr::fit_classes_to_data(config, num_classes_given(o, base)))
          notes.push_back(n);
      if (o.summary) print_notes(notes);
      if (o.print_config) {
        fmt::print("{}\n", config.dump(2));
        return 0;
      }
      return summary(config);
    }
    if (!o.eval.empty()) return evaluate_checkpoint(o);
    return run_training(o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (world && world->size() > 1) {
      // The other ranks may be waiting in a collective for this one: end the whole job.
      fmt::print(stderr, "vitrine-train: error on rank {} of {}: {}\n", world->rank(),
                 world->size(), e.what());
      std::fflush(stderr);
      world->abort(1);
    }
    fmt::print(stderr, "vitrine-train: error: {}\n", e.what());
    return 1;
  }
}
