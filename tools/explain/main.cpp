// vitrine-explain: why did a ViT (or another image classifier, as a ResNet) give an image its
// class? Runs the explanation methods of explain.h on images (files, a data set's test images, or
// a raw model-input .npy) and writes heatmap overlays, the maps as .npy, and a self-contained
// index.html report. A model other than a ViT gets the methods that need no attention: gradcam
// (at --gradcam-layer), saliency, smoothgrad, integrated-gradients. The work is the library's:
// explain() (explain.h) and write_explanations() (output.h), the same call as the server's;
// here are the command line (cli.h), the loading and the printing.
//
//   vitrine-explain --checkpoint runs/demo/best.safetensors --dataset fashion-mnist --count 12
//   vitrine-explain --checkpoint vit.safetensors --model-config vit_small_patch16_224 cat.jpg
//   vitrine-explain --checkpoint runs/cifar/best.safetensors --dataset cifar10 --sample 16
//   vitrine-explain --checkpoint runs/resnet/best.safetensors --dataset fashion-mnist --evaluate
//   vitrine-explain --checkpoint dino.safetensors --model-config vit_small_patch8_224
//       --method attention --pos-interp dino --resize none --crop topleft --threshold 0.6 photo.jpg
//   vitrine-explain --checkpoint runs/demo/best.safetensors --serve      (then open
//       http://127.0.0.1:8080/ and drop an image on the page)
//
// Exit codes: 0 done, 1 error (the message names the file or option), 2 bad command line.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>

#include "common/files.h"
#include "explain/evaluate.h"
#include "explain/explain.h"
#include "explain/model.h"
#include "explain/output.h"
#include "explain/report.h"
#include "explain/serve_http.h"
#include "tools/explain/cli.h"

namespace {

using namespace vitrine;
using namespace vitrine::explain::cli;
namespace ex = vitrine::explain;

using ex::Sample;
using Loaded = ex::LoadedModel;

/// The samples' indices grouped by input size [H, W], in the order each size first appears.
std::vector<std::vector<size_t>> size_groups(const std::vector<Sample>& samples) {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < samples.size(); ++i) {
    auto same = [&](const std::vector<size_t>& g) {
      return samples[g[0]].input.shape() == samples[i].input.shape();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end())
      groups.push_back({i});
    else
      it->push_back(i);
  }
  return groups;
}

/// Explains the images with the methods (explain.h's one entry point) and writes the folder
/// (output.h's one writer); prints the times and each image's prediction. Images of several
/// sizes (--resize none or factor:F on photos of different sizes) are explained each at its own
/// size: one batch per size, written to OUT/<H>x<W>/ in the usual layout, with OUT/index.html
/// linking them and OUT/predictions.json holding every image's prediction (its "folder" named).
int run(const Cli& cli) {
  auto methods = ex::parse_methods(cli.methods);
  Loaded l = load(cli);
  if (l.headless) check_headless(cli, methods);
  if (!l.vit) methods = methods_for_any_model(cli, l, methods);
  l.model->to(Device::parse(cli.device));
  l.model->eval();

  std::vector<std::string> label_names;
  const std::vector<Sample> all = read_samples(cli, l, label_names);
  const std::vector<std::vector<size_t>> groups = size_groups(all);
  const ex::Options opt = options_of(cli, l);
  const std::vector<int64_t> all_targets = targets_for(cli, all, l.classes);
  ex::OutputFolder folder(cli.out);
  nlohmann::json predictions = nlohmann::json::array();
  std::vector<nlohmann::json> by_sample(all.size());
  std::vector<std::string> skipped, subfolders;
  for (const std::vector<size_t>& group : groups) {
    std::vector<Sample> samples;
    std::vector<int64_t> targets;
    for (size_t i : group) {
      samples.push_back(all[i]);
      targets.push_back(all_targets[i]);
    }
    const Tensor batch = batch_of(samples);
    const int64_t N = batch.size(0), H = batch.size(2), W = batch.size(3);
    if (l.vit) {
      const auto& c = l.vit->config();
      fmt::print(
          "explaining {} image{} ({}x{}) with {} on {} ({}x{} patches of {}, {} blocks, {} "
          "heads)\n",
          N, N == 1 ? "" : "s", H, W, cli.methods, cli.checkpoint, H / c.patch, W / c.patch,
          c.patch, c.depth, c.heads);
    } else {
      fmt::print("explaining {} image{} ({}x{}) with {} on {} ({}; Grad-CAM at {})\n", N,
                 N == 1 ? "" : "s", H, W, cli.methods, cli.checkpoint, l.spec.describe(),
                 l.gradcam_layer.empty() ? "no layer" : l.gradcam_layer);
    }
    std::fflush(stdout);
    const ex::Result result = ex::explain(*l.model, {.images = batch,
                                                     .targets = targets,
                                                     .methods = methods,
                                                     .options = opt,
                                                     .gradcam_layer = l.gradcam_layer,
                                                     .cell = cli.cell});
    std::string dir = folder.path();
    if (groups.size() > 1) {
      subfolders.push_back(fmt::format("{}x{}", H, W));
      dir += "/" + subfolders.back();
      std::filesystem::create_directories(dir);
    }
    ex::Written written = ex::write_explanations(dir, l, samples, label_names, result, opt,
                                                 {.checkpoint = cli.checkpoint,
                                                  .settings = report_settings(cli, l, opt, methods),
                                                  .colormap = ex::parse_colormap(cli.colormap),
                                                  .alpha = cli.alpha,
                                                  .style = ex::parse_style(cli.style),
                                                  .raw_inputs = !cli.input.empty()});
    for (const auto& [name, sec] : result.seconds) fmt::print("  {:<22} {:7.2f} s\n", name, sec);
    for (size_t k = 0; k < group.size(); ++k) {
      by_sample[group[k]] = written.predictions[k];
      if (groups.size() > 1) by_sample[group[k]]["folder"] = subfolders.back();
    }
    for (std::string& what : written.skipped) skipped.push_back(std::move(what));
  }
  if (groups.size() > 1) {
    for (const nlohmann::json& p : by_sample) predictions.push_back(p);
    tools::write_file_atomically(folder.path() + "/predictions.json", predictions.dump(2) + "\n");
    tools::write_file_atomically(folder.path() + "/index.html",
                                 ex::size_groups_index_html(cli.checkpoint, subfolders, by_sample));
  }
  folder.publish();

  fmt::print("\n");
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& e = by_sample[i];
    const std::string label = all[i].label >= 0 && !label_names.empty()
                                  ? fmt::format("label {}", label_names[all[i].label])
                                  : std::string();
    if (l.headless)
      fmt::print("  {:<28} {}\n", all[i].name, label.empty() ? "(no head)" : label);
    else
      fmt::print("  {:<28} predicted {} ({:.1f}%){}\n", all[i].name,
                 e["predicted_name"].get<std::string>(), 100 * e["probability"].get<double>(),
                 label.empty() ? "" : ", " + label);
  }
  for (const std::string& what : skipped) fmt::print("\nnot written: {}", what);
  if (groups.size() > 1)
    fmt::print(
        "\n{} sizes, each explained at its own: {}/{{{}}}/<method>.npy   report: "
        "{}/index.html\n",
        groups.size(), cli.out, fmt::join(subfolders, ","), cli.out);
  else
    fmt::print("\nmaps: {}/<method>.npy   report: {}/index.html\n", cli.out, cli.out);
  return 0;
}

/// --evaluate: every method's faithfulness (and localisation, on the pasted benchmark) and the
/// sanity checks, as tables (printed, evaluation.md, evaluation.json) and a report.
int run_evaluation(const Cli& cli) {
  auto methods = ex::parse_methods(cli.methods);
  Loaded l = load(cli);
  if (!l.vit) methods = methods_for_any_model(cli, l, methods);
  VT_CHECK(!l.headless,
           "--evaluate: the model {} has no classification head (a feature extractor): the "
           "faithfulness and sanity measures follow a class score",
           cli.checkpoint);
  l.model->to(Device::parse(cli.device));
  l.model->eval();
  std::vector<std::string> label_names;
  const std::vector<Sample> samples = read_samples(cli, l, label_names);
  const Tensor batch = batch_of(samples);
  std::optional<ex::ImageBoxes> boxes;
  if (!cli.boxes.empty() || !samples.front().boxes.empty()) {
    boxes.emplace();
    for (const Sample& s : samples) boxes->push_back(s.boxes);
  } else if (samples.front().box) {
    boxes.emplace();
    for (const Sample& s : samples) boxes->push_back({*s.box});
  }
  ex::EvalOptions eo;
  eo.methods = methods;
  eo.explain = options_of(cli, l);
  eo.curves.patches_per_step = cli.patches_per_step;
  eo.curves.removal = ex::parse_removal(cli.removal);
  eo.curves.black = eo.explain.black;
  eo.sanity_images = cli.sanity_count;
  eo.seed = cli.opt.seed;
  eo.cell = cli.cell;
  fmt::print(
      "evaluating {} on {} images{} ({} patches per step, removal {}), sanity checks on "
      "{}\n",
      cli.methods, batch.size(0), boxes ? " with object boxes" : "", cli.patches_per_step,
      cli.removal, std::min<int64_t>(cli.sanity_count, batch.size(0)));
  std::fflush(stdout);
  ex::OutputFolder folder(cli.out);
  const std::string& tmp = folder.path();
  const ex::ModelBuilder build = [&spec = l.spec](Generator& gen) { return spec.build(gen); };
  const ex::EvalResult r =
      ex::evaluate(*l.model, l.gradcam_layer, build, batch, targets_for(cli, samples, l.classes),
                   boxes, eo, [](const std::string& stage, int64_t done, int64_t total) {
                     fmt::print("  {} {}/{}\n", stage, done, total);
                     std::fflush(stdout);
                   });
  const std::string md = ex::to_markdown(r);
  tools::write_file_atomically(tmp + "/evaluation.md", md);
  tools::write_file_atomically(tmp + "/evaluation.json", ex::to_json(r).dump(2) + "\n");
  ex::write_evaluation_report(
      tmp + "/index.html", r, "vitrine-explain --evaluate",
      {{"checkpoint", cli.checkpoint},
       {"model", l.spec.describe()},
       {"images", fmt::format("{} ({} from {})", batch.size(0),
                              cli.dataset.empty() ? "given" : cli.dataset, cli.first)},
       {"methods", cli.methods},
       {"target", cli.target},
       {"patches per step, removal", fmt::format("{}, {}", cli.patches_per_step, cli.removal)},
       {"smoothgrad samples, sigma", fmt::format("{}, {}", eo.explain.samples, eo.explain.sigma)},
       {"integrated-gradients steps", std::to_string(eo.explain.steps)},
       {"sanity images", std::to_string(std::min<int64_t>(cli.sanity_count, batch.size(0)))}});
  folder.publish();
  fmt::print("\n{}\nfinished in {:.0f} s   tables: {}/evaluation.md   report: {}/index.html\n", md,
             r.seconds, cli.out, cli.out);
  return 0;
}

/// --serve: the page and the JSON API until Ctrl-C.
int run_serve(Cli cli) {
  ex::block_stop_signals();  // before the model's loading starts any thread
  Loaded l = load(cli);
  l.model->to(Device::parse(cli.device));
  cli.limits.max_body_bytes = static_cast<int64_t>(cli.max_body_mb * (1 << 20));
  ex::ExplainService service(std::move(l), cli.limits);
  cli.http.log = [](const std::string& line) {
    fmt::print("  {}\n", line);
    std::fflush(stdout);
  };
  return ex::serve(service, cli.http);
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  CLI::App app{
      "vitrine-explain: attention maps, rollout, gradient rollout, Chefer relevance, "
      "Grad-CAM and input gradients for a Vision Transformer; Grad-CAM and input gradients for "
      "any other image classifier (a ResNet)",
      "vitrine-explain"};
  add_options(app, cli);
  // --list-options needs no checkpoint: the table, before CLI11 asks for one.
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--list-options") {
      fmt::print("{}", ex::options_markdown());
      return 0;
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const int sources = !cli.images.empty() + !cli.dataset.empty() + !cli.input.empty();
  if (cli.serve && (sources > 0 || cli.evaluate)) {
    fmt::print(stderr,
               "vitrine-explain: --serve takes its images from the page; give no images, "
               "--dataset, --input or --evaluate with it\n");
    return 2;
  }
  if (!cli.boxes.empty() && !cli.evaluate) {
    fmt::print(stderr, "vitrine-explain: --boxes is for --evaluate (the pointing game)\n");
    return 2;
  }
  if (sources > 1) {
    fmt::print(stderr, "vitrine-explain: give images, --dataset or --input, not several\n");
    return 2;
  }
  try {
    return cli.serve ? run_serve(cli) : cli.evaluate ? run_evaluation(cli) : run(cli);
  } catch (const std::exception& e) {
    fmt::print(stderr, "vitrine-explain: error: {}\n", e.what());
    return 1;
  }
}
