// vitrine-train: train a ViT from scratch or fine-tune one, from the command line.
//   vitrine-train                                   the default Fashion-MNIST ViT (configs/)
//   vitrine-train --set model.depth=4 --set optim.lr=5e-4
//   vitrine-train --config configs/cifar10.json --data ~/data/cifar-10-batches-bin
//   vitrine-train --resume runs/fashion_mnist       continue a stopped or killed run exactly
//   vitrine-train --eval runs/fashion_mnist/best.safetensors
//   vitrine-train --finetune vit.safetensors --freeze-backbone --data DIR --config ...
//   vitrine-train --summary                         the model's layers and sizes, then exit
// Exit status: 0 done, 1 an error (the message names the file or key), 2 a bad command line,
// 130 stopped by Ctrl-C (the run can be resumed).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backends/error.h"
#include "nn/data/transforms.h"
#include "nn/state.h"
#include "tools/train/config.h"
#include "tools/train/datasets.h"
#include "tools/train/progress.h"
#include "tools/train/report.h"
#include "tools/train/trainer.h"

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
  std::string config_path, data, out, device, resume, eval, finetune;
  std::vector<std::string> sets;
  int64_t epochs = 0;
  bool freeze_backbone = false, summary = false, print_config = false;
};

/// The config the command line describes: a file (or the default), then --set in order, then
/// the flags that name one key each.
json build_config(const Options& o) {
  json c;
  if (!o.resume.empty()) {
    const std::string saved = o.resume + "/config.json";
    VT_CHECK(fs::exists(saved), "--resume {}: {} does not exist (not a vitrine-train run folder)",
             o.resume, saved);
    c = tr::load_config(saved);
  } else {
    c = o.config_path.empty() ? tr::default_config() : tr::load_config(o.config_path);
  }
  for (const std::string& s : o.sets) tr::apply_override(c, s);
  if (!o.data.empty()) c["data"]["path"] = o.data;
  if (!o.out.empty()) c["train"]["out"] = o.out;
  if (!o.resume.empty()) c["train"]["out"] = o.resume;
  if (!o.device.empty()) c["train"]["device"] = o.device;
  if (o.epochs > 0) c["train"]["epochs"] = o.epochs;
  return c;
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

std::string describe_model(const models::ViTConfig& m) {
  const std::string overlap =
      m.kernel() != m.patch ? fmt::format(" (seen through {}x{} kernels)", m.kernel(), m.kernel())
                            : "";
  return fmt::format("ViT {}x{}x{} in {}x{} patches{}, dim {}, depth {}, {} heads, MLP {}",
                     m.channels, m.image_h, m.image_w, m.patch, m.patch, overlap, m.dim, m.depth,
                     m.heads, m.mlp_dim);
}

int summary(const json& config) {
  const models::ViTConfig mc = tr::model_config(config);
  Generator gen(0);
  models::VisionTransformer model(mc, gen);
  fmt::print("{}\n\n{}\n", describe_model(mc), model.summary_table());
  return 0;
}

int evaluate_checkpoint(json config, const std::string& checkpoint) {
  auto model = models::load_vit(checkpoint);
  model->eval();
  const nn::Metadata meta = nn::read_safetensors(checkpoint).metadata;
  config["model"] = model->config().to_json();
  json& transforms = config["data"]["transforms"];
  // The checkpoint's own normalisation wins: it is what its weights were trained with.
  for (const auto& [key, name] : {std::pair{nn::kMeanKey, "mean"}, std::pair{nn::kStdKey, "std"}})
    if (json v = nn::metadata_json(meta, key); !v.is_null()) transforms[name] = v;
  tr::validate_config(config);
  auto test = tr::load_test_set(config);
  std::vector<std::string> classes = test->classes();
  VT_CHECK(static_cast<int64_t>(classes.size()) == model->config().num_classes,
           "--eval {}: the model has {} classes, the test set {} has {}", checkpoint,
           model->config().num_classes, test->source(), classes.size());
  const Device device = Device::parse(config["train"]["device"].get<std::string>());
  model->to(device);
  const auto& d = config["data"];
  const bool tta = config["train"]["tta_hflip"].get<bool>();
  fmt::print("evaluating {} ({}) on {} ({} images{})\n", checkpoint,
             describe_model(model->config()), test->source(), test->size(),
             tta ? ", with flip test-time augmentation" : "");
  tr::Evaluation e = tr::evaluate(
      *model, test, nn::data::from_config(d["transforms"], model->config().channels, false),
      d["batch_size"].get<int64_t>(), d["workers"].get<int64_t>(), device, tta);
  fmt::print("\n{}\n", e.table(classes));
  return 0;
}

int run_training(json config, const Options& o) {
  std::shared_ptr<models::VisionTransformer> pretrained;  // read once, for config and weights
  if (!o.finetune.empty()) {
    // The data set decides the new head's size: open it with the config as given first.
    tr::validate_config(config);
    const int64_t classes = static_cast<int64_t>(tr::load_test_set(config)->classes().size());
    pretrained = models::load_vit(o.finetune);
    config =
        tr::finetune_config(config, pretrained->config(), o.finetune, classes, o.freeze_backbone);
  }
  tr::validate_config(config);
  const bool resuming = !o.resume.empty();
  const std::string run_dir =
      resuming ? o.resume : fresh_run_dir(config["train"]["out"].get<std::string>());
  config["train"]["out"] = run_dir;

  tr::Datasets data = tr::load_datasets(config);
  tr::Trainer trainer(config, data.train, data.validation, data.test, run_dir);
  const models::ViTConfig& mc = trainer.model().config();
  const json& t = config["train"];
  const json& op = config["optim"];
  fmt::print("vitrine-train: {} ({:.2f}M parameters{})\n", describe_model(mc),
             static_cast<double>(trainer.model().num_parameters()) / 1e6,
             t["freeze_backbone"].get<bool>()
                 ? fmt::format(", {} trainable", trainer.model().num_parameters(true))
                 : "");
  fmt::print("  data:  {} from {}: {} train, {} validation, {} test images\n",
             config["data"]["dataset"].get<std::string>(), data.path, data.train->size(),
             data.validation ? data.validation->size() : 0, data.test->size());
  fmt::print("  train: {} epochs of {} steps (batch {}), {} lr {:g} weight decay {:g}, {} on {}\n",
             t["epochs"].get<int64_t>(), trainer.steps_per_epoch(),
             config["data"]["batch_size"].get<int64_t>() * t["accum_steps"].get<int64_t>(),
             op["name"].get<std::string>(), op["lr"].get<double>(),
             op["weight_decay"].get<double>(), config["schedule"]["name"].get<std::string>(),
             t["device"].get<std::string>());
  if (t["tta_hflip"].get<bool>())
    fmt::print("  eval:  flip test-time augmentation (each image and its mirror image)\n");
  if (!t["finetune"].get<std::string>().empty())
    fmt::print("  from:  {}{}\n", t["finetune"].get<std::string>(),
               t["freeze_backbone"].get<bool>() ? " (backbone frozen, head trained)" : "");
  fmt::print("  run folder: {}{}\n", run_dir, resuming ? " (resuming)" : "");
  std::fflush(stdout);

  tr::Progress progress(stdout, isatty(STDOUT_FILENO) != 0, t["epochs"].get<int64_t>(),
                        t["log_every"].get<int64_t>());
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
  const std::string report = tr::write_report(run_dir);
  fmt::print("{}\n", r.message);
  if (r.stopped) {
    fmt::print("report so far: {}\n", report);
    return 130;
  }
  fmt::print("\ntest set ({} images):\n{}\n", r.test->count, r.test->table(data.test->classes()));
  fmt::print("run folder: {}\n", run_dir);
  if (r.best_accuracy >= 0)
    fmt::print("  best.safetensors   the best validation accuracy, {:.2f}%\n",
               100 * r.best_accuracy);
  fmt::print("  last.safetensors   the final weights (test accuracy {:.2f}%)\n",
             100 * r.test->accuracy);
  fmt::print("  metrics.jsonl, confusion_matrix.json, config.json\n");
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
  app.add_option("--config", o.config_path,
                 "JSON config (configs/*.json); keys it leaves out take the defaults")
      ->check(CLI::ExistingFile);
  app.add_option("--set", o.sets,
                 "override one key: --set model.depth=4 --set optim.lr=5e-4 (repeatable)")
      ->type_name("KEY=VALUE");
  app.add_option("--data", o.data, "the data set's folder (data.path)")->type_name("DIR");
  app.add_option("--out", o.out, "the run folder (train.out); a used one gets a -2, -3 suffix")
      ->type_name("DIR");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N (train.device)");
  app.add_option("--epochs", o.epochs, "train.epochs")->check(CLI::PositiveNumber);
  app.add_option("--resume", o.resume, "continue the run saved in this run folder exactly")
      ->type_name("RUN_DIR");
  app.add_flag("--summary", o.summary, "print the model's layers, shapes and sizes and exit");
  app.add_flag("--print-config", o.print_config, "print the full config and exit");
  app.add_option("--eval", o.eval, "evaluate a checkpoint on the test set and exit")
      ->type_name("CHECKPOINT")
      ->check(CLI::ExistingFile);
  auto* ft = app.add_option("--finetune", o.finetune,
                            "start from this checkpoint's weights (Vitrine, timm, Hugging Face) "
                            "with a new head for the data set's classes")
                 ->type_name("CHECKPOINT")
                 ->check(CLI::ExistingFile);
  app.add_flag("--freeze-backbone", o.freeze_backbone, "with --finetune: train the head only")
      ->needs(ft);
  app.get_option("--resume")->excludes("--config")->excludes("--finetune")->excludes("--eval");
  app.get_option("--eval")->excludes("--finetune");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is a ParseError too, with code 0
  }

  try {
    json config = build_config(o);
    if (o.print_config) {
      fmt::print("{}\n", config.dump(2));
      return 0;
    }
    if (o.summary) {
      tr::validate_config(config);
      return summary(config);
    }
    if (!o.eval.empty()) return evaluate_checkpoint(config, o.eval);
    return run_training(config, o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "vitrine-train: error: {}\n", e.what());
    return 1;
  }
}
