// vitrine-explain: why did a ViT (or another image classifier, as a ResNet) give an image its
// class? Runs the explanation methods of explain.h on images (files, a data set's test images, or
// a raw model-input .npy) and writes heatmap overlays, the maps as .npy, and a self-contained
// index.html report. A model other than a ViT gets the methods that need no attention: gradcam
// (at --gradcam-layer), saliency, smoothgrad, integrated-gradients.
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
#include <fmt/ranges.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/classifier.h"
#include "nn/data/image_folder.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "nn/data/transforms.h"
#include "nn/json.h"
#include "nn/state.h"
#include "ops/ops.h"
#include "tools/common/files.h"
#include "tools/explain/cli.h"
#include "tools/explain/evaluate.h"
#include "tools/explain/explain.h"
#include "tools/explain/model.h"
#include "tools/explain/npy.h"
#include "tools/explain/render.h"
#include "tools/explain/report.h"
#include "tools/explain/serve_http.h"
#include "tools/explain/text.h"

namespace {

using namespace vitrine;
using namespace vitrine::explain::cli;
namespace ex = vitrine::explain;
namespace fs = std::filesystem;
using json = nlohmann::json;

using ex::Sample;
using Loaded = ex::LoadedModel;

/// Where the results go: a fresh temporary folder beside `out`, renamed to `out` at the end. An
/// existing `out` is replaced only when it is an earlier vitrine-explain output.
std::string temp_folder_for(const std::string& out) {
  if (fs::exists(out))
    VT_CHECK(fs::is_directory(out) && fs::exists(fs::path(out) / "index.html") &&
                 (fs::exists(fs::path(out) / "predictions.json") ||
                  fs::exists(fs::path(out) / "evaluation.json")),
             "--out {}: exists and is not a vitrine-explain output folder (it would be replaced)",
             out);
  const fs::path tmp = fs::path(out).string() + fmt::format(".tmp-{}", getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  return tmp.string();
}

void publish(const std::string& tmp, const std::string& out) {
  const std::string old = out + fmt::format(".old-{}", getpid());
  if (fs::exists(out)) fs::rename(out, old);
  fs::rename(tmp, out);
  fs::remove_all(old);
}

/// A map [H, W] in [0, 1] drawn on its image as --style says, enlarged.
ex::Rgb8 overlay_png(const Tensor& display, const Tensor& map, const Cli& cli, int64_t enlarge) {
  return ex::enlarge(ex::parse_style(cli.style) == ex::Style::Mask
                         ? ex::masked(display, map)
                         : ex::overlay(display, map, ex::parse_colormap(cli.colormap), cli.alpha),
                     enlarge);
}

std::string percent(double p) { return fmt::format("{:.1f}%", 100 * p); }

/// An optimised model input [C, H, W] as a person sees it: un-normalised with the model's mean
/// and std and clamped to [0, 1]; with --input (its normalisation unknown) min-max scaled.
Tensor shown_picture(const Tensor& x, const Cli& cli, const Loaded& l) {
  if (!cli.input.empty()) return ex::minmax(x.reshape({1, x.numel()})).reshape(x.shape());
  const int64_t C = x.size(0);
  std::vector<double> mean, std;
  for (int64_t c = 0; c < C; ++c) {
    mean.push_back(l.mean[static_cast<size_t>(c)]);
    std.push_back(l.std[static_cast<size_t>(c)]);
  }
  const Tensor m = ops::from_vector(mean, {C, 1, 1}), s = ops::from_vector(std, {C, 1, 1});
  return ops::clamp(x.to(kFloat32) * s + m, 0.0, 1.0);
}

int run(const Cli& cli) {
  using clock = std::chrono::steady_clock;
  auto methods = ex::parse_methods(cli.methods);
  ex::parse_colormap(cli.colormap);  // checked before any work
  Loaded l = load(cli);
  if (l.headless) check_headless(cli, methods);
  if (!l.vit) methods = methods_for_any_model(cli, l, methods);
  const Device device = Device::parse(cli.device);
  l.model->to(device);
  l.model->eval();

  std::vector<std::string> label_names;
  const std::vector<Sample> samples = read_samples(cli, l, label_names);
  const Tensor batch = batch_of(samples);
  const int64_t N = batch.size(0), H = batch.size(2), W = batch.size(3);
  const ex::Options opt = options_of(cli, l);
  const std::vector<int64_t> targets = targets_for(cli, samples, l.classes);

  if (l.vit) {
    const auto& c = l.vit->config();
    fmt::print(
        "explaining {} image{} ({}x{}) with {} on {} ({}x{} patches of {}, {} blocks, {} "
        "heads)\n",
        N, N == 1 ? "" : "s", H, W, cli.methods, cli.checkpoint, H / c.patch, W / c.patch, c.patch,
        c.depth, c.heads);
  } else {
    fmt::print("explaining {} image{} ({}x{}) with {} on {} ({}; Grad-CAM at {})\n", N,
               N == 1 ? "" : "s", H, W, cli.methods, cli.checkpoint, l.spec.describe(),
               l.gradcam_layer.empty() ? "no layer" : l.gradcam_layer);
  }
  std::fflush(stdout);
  const std::string tmp = temp_folder_for(cli.out);
  try {
    std::vector<std::pair<std::string, double>> seconds;
    std::vector<ex::Explanation> results;
    std::vector<std::string> skipped;  // outputs left out, said at the end
    ex::Pass pass;                     // a ViT's: attention, tokens, gradients
    Tensor logits;                     // [N, K] (a model without a head: its features)
    std::vector<int64_t> resolved;     // the targets, -1 replaced by the predicted class
    auto t0 = clock::now();
    if (l.vit) {
      // One forward and backward for the attention, token and saliency methods; then each
      // method on its own, timed.
      const bool gradients = std::any_of(methods.begin(), methods.end(),
                                         [](ex::Method m) { return ex::needs_gradients(m); });
      pass = ex::run_pass(*l.vit, batch, targets, opt.layer, gradients, opt.pos_interp);
      seconds.emplace_back(gradients ? "forward + backward" : "forward",
                           std::chrono::duration<double>(clock::now() - t0).count());
      for (ex::Method m : methods) {
        t0 = clock::now();
        results.push_back(ex::explain_method(*l.vit, batch, pass, m, opt));
        seconds.emplace_back(ex::method_name(m),
                             std::chrono::duration<double>(clock::now() - t0).count());
      }
      logits = pass.logits;
      resolved = pass.targets;
    } else {
      // Any other classifier: each method runs its own passes through the model.
      logits = ex::logits_of(*l.model)(batch);
      seconds.emplace_back("forward", std::chrono::duration<double>(clock::now() - t0).count());
      nn::Module* layer =
          l.gradcam_layer.empty() ? nullptr : &ex::submodule(*l.model, l.gradcam_layer);
      for (ex::Method m : methods) {
        t0 = clock::now();
        results.push_back(
            ex::explain(*l.model, layer, batch, targets, {m}, opt, cli.cell, &resolved).front());
        seconds.emplace_back(ex::method_name(m),
                             std::chrono::duration<double>(clock::now() - t0).count());
      }
      if (methods.empty()) resolved = targets;
    }
    // NaN or inf in the weights or the input reaches the output: say so rather than print "nan%".
    for (float v : logits.detach().to(kCPU).to(kFloat32).contiguous().to_vector<float>())
      VT_CHECK(std::isfinite(v),
               "the model's output holds {} for the images given: the checkpoint's weights or the "
               "input hold non-finite values (NaN or inf)",
               v);
    // Class probabilities; a model without a head has none (its "logits" are its features).
    const Tensor probs = l.headless ? Tensor() : ops::softmax(logits.to(kFloat32), -1);

    // The arrays.
    for (const auto& e : results) {
      const std::string name = ex::method_name(e.method);
      if (e.picture.defined()) {  // activation-max: the optimised model inputs
        ex::write_npy(tmp + "/" + name + ".npy", e.picture);
        continue;
      }
      ex::write_npy(tmp + "/" + name + ".npy", e.map);
      ex::write_npy(tmp + "/" + name + ".grid.npy", e.grid);
      if (e.values.defined()) ex::write_npy(tmp + "/" + name + ".values.npy", e.values);
      if (e.scores.defined()) ex::write_npy(tmp + "/" + name + ".scores.npy", e.scores);
      if (e.heads.defined()) ex::write_npy(tmp + "/" + name + ".heads.npy", e.heads);
      if (e.mask.defined()) ex::write_npy(tmp + "/" + name + ".mask.npy", e.mask);
    }
    const Tensor distance =
        l.vit ? ex::attention_distance(pass, l.patch, opt.distance_norm) : Tensor();
    if (l.vit) ex::write_npy(tmp + "/attention-distance.npy", distance);
    ex::write_npy(tmp + (l.headless ? "/features.npy" : "/logits.npy"), logits);
    // The first image's attention probabilities of every layer [L, heads, N, N], unless that is
    // over 512 MB (a photo at its own size: 4801 tokens make 6.6 GB for ViT-S/8).
    if (l.vit) {
      const int64_t probs_bytes = static_cast<int64_t>(pass.attentions.size()) *
                                  pass.attentions[0].numel() / pass.attentions[0].size(0) * 4;
      if (probs_bytes <= (int64_t{512} << 20)) {
        std::vector<Tensor> first;
        for (const Tensor& a : pass.attentions) first.push_back(a.select(0, 0));
        ex::write_npy(tmp + "/attention_probs.npy", ops::stack(first, 0));
      } else {
        skipped.push_back(fmt::format(
            "attention_probs.npy (the first image's attention of every layer would take {:.1f} "
            "GB)",
            static_cast<double>(probs_bytes) / 1e9));
      }
    }

    // The pictures and the report.
    ex::ReportData report;
    report.title = "vitrine-explain";
    report.checkpoint = cli.checkpoint;
    report.patch = l.patch;
    report.settings = {
        {"model", l.spec.describe()},
        {"methods", cli.methods},
        {"target", cli.target},
        {"layer (attention, gradcam)",
         l.vit ? std::to_string(opt.layer) : fmt::format("{} (gradcam)", l.gradcam_layer)},
        {"head (attention)", opt.head == -1 ? "mean" : std::to_string(opt.head)},
        {"threshold (attention)", fmt::format("{}", opt.threshold)},
        {"head fusion (rollout)", cli.head_fusion},
        {"discard ratio (rollout, grad-rollout)", fmt::format("{}", opt.discard_ratio)},
        {"samples, sigma (smoothgrad)", fmt::format("{}, {}", opt.samples, opt.sigma)},
        {"steps, rule, baseline (integrated-gradients)",
         fmt::format("{}, {}, {}", opt.steps, cli.ig_method, cli.baseline)},
        {"normalisation", fmt::format("mean {} std {} from {}", l.mean, l.std, l.normalisation)},
        {"input size, position embedding", fmt::format("--resize {}, --crop {}, --pos-interp {}",
                                                       cli.resize, cli.crop, cli.pos_interp)},
        {"colormap, alpha", fmt::format("{}, {}", cli.colormap, cli.alpha)},
        {"upsampling, style", fmt::format("{}, {}", cli.upsample, cli.style)},
        {"attention distance weights", cli.distance_norm},
    };
    if (std::find(methods.begin(), methods.end(), ex::Method::ActivationMax) != methods.end())
      report.settings.emplace_back(
          "activation-max: objective, steps, lr, jitter, blur every, blur sigma, l2, seed",
          fmt::format(
              "{}, {}, {}, {}, {}, {}, {}, {}",
              opt.neuron >= 0 ? fmt::format("block {} MLP channel {}", opt.layer, opt.neuron)
                              : std::string("the target's logit"),
              opt.am_steps, opt.am_lr, opt.am_jitter < 0 ? "auto" : std::to_string(opt.am_jitter),
              opt.am_blur_every, opt.am_blur_sigma, opt.am_l2, opt.seed));
    if (std::find(methods.begin(), methods.end(), ex::Method::Qkv) != methods.end())
      report.settings.emplace_back(
          "qkv: block, query patch",
          fmt::format("{}, {}", opt.layer,
                      opt.patch_row < 0 ? std::string("the centre")
                                        : fmt::format("({}, {})", opt.patch_row, opt.patch_col)));
    const auto dist = l.vit ? distance.to_vector<double>() : std::vector<double>();
    for (int64_t layer = 0; l.vit && layer < distance.size(0); ++layer)
      report.attention_distance.emplace_back(dist.begin() + layer * distance.size(1),
                                             dist.begin() + (layer + 1) * distance.size(1));
    const int64_t enlarge = std::max<int64_t>(1, (112 + std::max(H, W) - 1) / std::max(H, W));
    json predictions = json::array();
    const auto p = l.headless ? std::vector<double>() : probs.to_vector<double>();
    const int64_t K = l.headless ? 0 : probs.size(1);
    // <method>.grid.png: every image's overlay for one method, labelled, in a near-square grid.
    std::vector<std::vector<ex::Rgb8>> montage(results.size());
    std::vector<std::string> montage_labels;
    const int64_t montage_columns =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(N)))));
    const std::vector<int64_t> shown_heads = [&] {
      std::vector<int64_t> v;
      for (int64_t h = 0; l.vit && h < l.vit->config().heads; ++h) v.push_back(h);
      return v;
    }();
    std::vector<std::string> head_labels;
    for (int64_t h : shown_heads) head_labels.push_back(fmt::format("head {}", h));
    Tensor head_masks;  // [N, heads, gh, gw] with --threshold: each head's own DINO mask
    for (int64_t i = 0; i < N; ++i) {
      const Sample& s = samples[i];
      const std::string dir = fmt::format("{}/{:03d}", tmp, i);
      fs::create_directories(dir);
      ex::ReportImage ri;
      ri.name = s.name;
      const ex::Rgb8 original = ex::enlarge(ex::to_rgb8(s.display), enlarge);
      ri.original_png = ex::encode_png(original);
      ex::write_png(dir + "/original.png", original);
      std::vector<ex::Rgb8> row{original};  // all.png: the original, then every method
      std::vector<std::string> row_labels{"image"};
      if (s.label >= 0)
        ri.label = s.label < static_cast<int64_t>(label_names.size()) ? label_names[s.label]
                                                                      : std::to_string(s.label);
      json entry = {{"index", i}, {"name", s.name}};
      std::string short_label = ri.label.empty() ? s.name : ri.label;
      if (!l.headless) {
        const int64_t pred =
            std::max_element(p.begin() + i * K, p.begin() + (i + 1) * K) - (p.begin() + i * K);
        const int64_t target = resolved[i];
        ri.predicted = l.classes[pred];
        ri.probability = p[i * K + pred];
        ri.target = l.classes[target];
        entry.update({{"predicted", pred},
                      {"predicted_name", l.classes[pred]},
                      {"probability", p[i * K + pred]},
                      {"target", target},
                      {"target_name", l.classes[target]},
                      {"target_probability", p[i * K + target]}});
        short_label = ri.label.empty() || ri.label == ri.predicted
                          ? fmt::format("{} {}", ri.predicted, percent(ri.probability))
                          : fmt::format("{} as {}", ri.label, ri.predicted);
      }
      montage_labels.push_back(short_label);
      if (s.label >= 0) entry["label"] = s.label;
      for (size_t r = 0; r < results.size(); ++r) {
        const auto& e = results[r];
        const std::string name = ex::method_name(e.method);
        // activation-max's picture is the optimised image itself; every other method a map.
        const ex::Rgb8 png =
            e.picture.defined()
                ? ex::enlarge(ex::to_rgb8(shown_picture(e.picture.select(0, i), cli, l)), enlarge)
                : overlay_png(s.display, e.map.select(0, i), cli, enlarge);
        ex::write_png(dir + "/" + name + ".png", png);
        ri.maps.emplace_back(name, ex::encode_png(png));
        row.push_back(png);
        row_labels.push_back(name);
        montage[r].push_back(png);
        if (!e.completeness_gap.empty()) {
          entry["completeness_gap"] = e.completeness_gap[i];
          ri.notes.push_back(
              fmt::format("integrated-gradients completeness gap {:.4g}", e.completeness_gap[i]));
        }
        if (e.picture.defined()) {
          entry["activation_max"] = {{"start", e.start_score[i]}, {"end", e.end_score[i]}};
          ri.notes.push_back(fmt::format(
              "activation-max: {} {:.4g} at the start, {:.4g} after {} steps",
              opt.neuron >= 0 ? fmt::format("block {} MLP channel {}", opt.layer, opt.neuron)
                              : "the target's logit",
              e.start_score[i], e.end_score[i], opt.am_steps));
        }
        if (e.method == ex::Method::Qkv) {  // one tile per head: scores, then value norms
          entry["qkv_patch"] = {e.query_row, e.query_col};
          for (const auto& [what, per_head] : {std::pair{std::string("heads"), e.heads},
                                               std::pair{std::string("values"), e.values}}) {
            const Tensor t = per_head.select(0, i);
            const Tensor up = ex::minmax(ex::upsample(t, H, W, opt.upsample));
            std::vector<ex::Rgb8> tiles;
            for (int64_t h = 0; h < t.size(0); ++h)
              tiles.push_back(overlay_png(s.display, up.select(0, h), cli, enlarge));
            const ex::Rgb8 grid =
                ex::labelled_grid(tiles, head_labels, std::min<int64_t>(t.size(0), 6));
            ex::write_png(dir + "/qkv." + what + ".png", grid);
            ri.figures.emplace_back(
                what == "heads"
                    ? fmt::format("qkv: patch ({}, {})'s query-key scores per head, block {}",
                                  e.query_row, e.query_col, opt.layer)
                    : fmt::format("qkv: the values' norms per head, block {}", opt.layer),
                ex::encode_png(grid));
          }
        }
        if (e.method == ex::Method::Attention && e.heads.defined()) {
          // DINO's figure: every head of the layer
          std::vector<ex::Rgb8> tiles;
          const Tensor heads = e.heads.select(0, i);
          const Tensor up = ex::minmax(ex::upsample(heads, H, W, opt.upsample));
          for (int64_t h = 0; h < heads.size(0); ++h)
            tiles.push_back(overlay_png(s.display, up.select(0, h), cli, enlarge));
          const int64_t columns = std::min<int64_t>(heads.size(0), 6);
          const ex::Rgb8 grid = ex::labelled_grid(tiles, head_labels, columns);
          ex::write_png(dir + "/heads.png", grid);
          ri.head_grid_png = ex::encode_png(grid);
          if (opt.threshold > 0) {
            // DINO's visualize_attention: per head, the smallest set of patches holding
            // `threshold` of its attention, drawn over the image.
            const Tensor masks = ex::threshold_mask(heads, opt.threshold);  // [heads, gh, gw]
            if (i == 0) head_masks = ops::zeros({N, heads.size(0), heads.size(1), heads.size(2)});
            head_masks.select(0, i).copy_(masks);
            const Tensor mask_up = ex::upsample(masks, H, W, opt.upsample);
            std::vector<ex::Rgb8> mask_tiles;
            for (int64_t h = 0; h < heads.size(0); ++h)
              mask_tiles.push_back(overlay_png(s.display, mask_up.select(0, h), cli, enlarge));
            const ex::Rgb8 mgrid = ex::labelled_grid(mask_tiles, head_labels, columns);
            ex::write_png(dir + "/heads_mask.png", mgrid);
            ri.head_masks_png = ex::encode_png(mgrid);
          }
        }
      }
      ex::write_png(dir + "/all.png",
                    ex::labelled_grid(row, row_labels, static_cast<int64_t>(row.size())));
      predictions.push_back(entry);
      report.images.push_back(std::move(ri));
    }
    if (head_masks.defined()) ex::write_npy(tmp + "/attention.heads_mask.npy", head_masks);
    for (size_t r = 0; r < results.size(); ++r) {
      bool same = !montage[r].empty();  // tiles of one size (--resize none may differ)
      for (const auto& t : montage[r])
        same = same && t.height == montage[r][0].height && t.width == montage[r][0].width;
      if (!same) continue;
      const std::string name = ex::method_name(results[r].method);
      const ex::Rgb8 g = ex::labelled_grid(montage[r], montage_labels, montage_columns);
      ex::write_png(tmp + "/" + name + ".grid.png", g);
      report.grids.emplace_back(name, ex::encode_png(g));
    }
    report.threshold = opt.threshold;
    tools::write_file_atomically(tmp + "/predictions.json", predictions.dump(2) + "\n");
    ex::write_report(tmp + "/index.html", report);
    publish(tmp, cli.out);

    for (const auto& [name, s] : seconds) fmt::print("  {:<22} {:7.2f} s\n", name, s);
    fmt::print("\n");
    for (int64_t i = 0; i < N; ++i) {
      const auto& e = predictions[i];
      const std::string label = samples[i].label >= 0 && !label_names.empty()
                                    ? fmt::format("label {}", label_names[samples[i].label])
                                    : std::string();
      if (l.headless)
        fmt::print("  {:<28} {}\n", samples[i].name, label.empty() ? "(no head)" : label);
      else
        fmt::print("  {:<28} predicted {} ({}){}\n", samples[i].name,
                   e["predicted_name"].get<std::string>(), percent(e["probability"].get<double>()),
                   label.empty() ? "" : ", " + label);
    }
    for (const std::string& what : skipped) fmt::print("\nnot written: {}", what);
    fmt::print("\nmaps: {}/<method>.npy   report: {}/index.html\n", cli.out, cli.out);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
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
  const std::string tmp = temp_folder_for(cli.out);
  try {
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
    publish(tmp, cli.out);
    fmt::print("\n{}\nfinished in {:.0f} s   tables: {}/evaluation.md   report: {}/index.html\n",
               md, r.seconds, cli.out, cli.out);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
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
  // A repeated option: the last one wins, as with argparse (`--count 3 --count 2` explains 2).
  // The options that take several values (the images, --mean, --std) collect them all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--checkpoint", cli.checkpoint,
                 "the model: a safetensors checkpoint (Vitrine's, timm's, torchvision's, Hugging "
                 "Face's, DINO's), or random:PRESET, an untrained ViT of a preset initialised "
                 "from --seed (random:vit_small_patch16_224, random:fmnist)")
      ->required();
  app.add_option("--model-config", cli.model_config,
                 "the model's config when the checkpoint has none: a preset "
                 "(vit_small_patch16_224, fmnist, ...) or a JSON file (ours, a vitrine-train "
                 "config, or a Hugging Face config.json)");
  app.add_option("images", cli.images, "image files (PNG, JPEG, BMP)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--dataset", cli.dataset, "explain a data set's test images (fashion-mnist, ...)");
  app.add_option("--data", cli.data, "the data set's folder (default: its usual place)");
  app.add_option("--first", cli.first, "the first test image (--dataset)")->capture_default_str();
  app.add_option("--count", cli.count, "how many test images (--dataset)")->capture_default_str();
  app.add_option("--sample", cli.sample,
                 "--dataset: this many test images drawn at random (with --seed) instead of "
                 "--first/--count; each method also gets a labelled montage, <method>.grid.png")
      ->check(CLI::PositiveNumber);
  app.add_option("--input", cli.input,
                 "a .npy of the model's input [N, C, H, W] (normalised already), used exactly");
  app.add_option("--method", cli.methods,
                 "methods, comma-separated, or all: attention, rollout, grad-rollout, chefer, "
                 "gradcam, saliency, smoothgrad, integrated-gradients; and, by name only, "
                 "activation-max and qkv")
      ->capture_default_str();
  app.add_option("--target", cli.target,
                 "the class explained: predicted, label (--dataset), a class index or name")
      ->capture_default_str();
  app.add_option("--out", cli.out, "the output folder (an earlier output there is replaced)")
      ->capture_default_str();
  app.add_option("--device", cli.device, "cpu or cuda")->capture_default_str();
  app.add_option("--resize", cli.resize,
                 "model: as torchvision's evaluation transforms, the shorter side to the model's "
                 "size (antialiased bilinear), then a centre crop to the model's size; stretch: "
                 "resize to the model's size, whatever the aspect; none: keep their size, cropped "
                 "to a multiple of the patch (--crop); factor:F: scale them by F first "
                 "(factor:0.5, as DINO's notebooks)")
      ->check([](const std::string& v) {
        try {
          return ex::valid_resize(v) ? std::string()
                                     : fmt::format("expected {}, got {}", ex::kResizeValues, v);
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      })
      ->type_name("model|stretch|none|factor:F")
      ->capture_default_str();
  app.add_option("--crop", cli.crop,
                 "--resize none/factor: crop to a multiple of the patch at the centre or, as "
                 "DINO's visualize_attention, at the top left")
      ->check(CLI::IsMember({"center", "topleft"}))
      ->capture_default_str();
  app.add_option("--pos-interp", cli.pos_interp,
                 "position embedding for inputs of another size: size (timm: bicubic to the "
                 "grid) or dino (DINO's interpolate_pos_encoding)")
      ->check(CLI::IsMember({"size", "dino"}))
      ->capture_default_str();
  app.add_option("--mean", cli.mean,
                 "input normalisation mean per channel (default: the "
                 "checkpoint's)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--std", cli.std, "input normalisation std per channel")
      ->check(CLI::PositiveNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--layer", cli.opt.layer,
                 "a ViT's attention, gradcam: the block (negative from the end)")
      ->capture_default_str();
  app.add_option("--gradcam-layer", cli.gradcam_layer,
                 "a model other than a ViT: the submodule whose activations Grad-CAM weighs, by "
                 "its dotted name (a ResNet: its last stage, layer3 or layer4, by default)");
  app.add_option("--cell", cli.cell,
                 "a model other than a ViT (no patches): the side in pixels of the squares the "
                 "grid maps average over and --evaluate deletes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--head", cli.opt.head, "attention: the head, -1 for the mean")
      ->capture_default_str();
  app.add_option("--threshold", cli.opt.threshold,
                 "attention: DINO's mask keeping this fraction of the attention mass (0: none)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--head-fusion", cli.head_fusion, "rollout: mean, max or min")
      ->check(CLI::IsMember({"mean", "max", "min"}))
      ->capture_default_str();
  app.add_option("--discard-ratio", cli.opt.discard_ratio,
                 "rollout, grad-rollout: fraction of the smallest attention entries dropped")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--steps", cli.opt.steps, "integrated-gradients: points on the path")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--ig-method", cli.ig_method, "integrated-gradients: gausslegendre or trapezoid")
      ->check(CLI::IsMember({"gausslegendre", "trapezoid"}))
      ->capture_default_str();
  app.add_option("--baseline", cli.baseline,
                 "integrated-gradients: black (a black image) or blur (Gaussian blur, kernel 11, "
                 "sigma 5)")
      ->check(CLI::IsMember({"black", "blur"}))
      ->capture_default_str();
  app.add_option("--samples", cli.opt.samples, "smoothgrad: noisy samples")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--sigma", cli.opt.sigma,
                 "smoothgrad: noise level, a fraction of the input's value range")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", cli.opt.seed,
                 "the seed of smoothgrad's noise, --sample's draw, activation-max's start and "
                 "--checkpoint random:PRESET's initialisation")
      ->capture_default_str();
  app.add_option("--patch", cli.patch,
                 "qkv: the query patch as ROW,COL on the grid (default: the centre)");
  app.add_option("--neuron", cli.opt.neuron,
                 "activation-max: maximise this channel of block --layer's MLP hidden layer "
                 "instead of the target's logit (-1: the logit)")
      ->capture_default_str();
  app.add_option("--am-steps", cli.opt.am_steps, "activation-max: gradient-ascent steps")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--am-lr", cli.opt.am_lr,
                 "activation-max: the step, a fraction of the pixel range per normalised gradient")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--jitter", cli.opt.am_jitter,
                 "activation-max: shift the image by up to this many pixels each step (-1: "
                 "the image's side / 28, 8 at 224)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--blur-every", cli.opt.am_blur_every,
                 "activation-max: a Gaussian blur every this many steps (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--blur-sigma", cli.opt.am_blur_sigma, "activation-max: the blur's sigma, pixels")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--l2", cli.opt.am_l2, "activation-max: the L2 decay's weight")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--colormap", cli.colormap, "inferno, jet or viridis")
      ->check(CLI::IsMember({"inferno", "jet", "viridis"}))
      ->capture_default_str();
  app.add_option("--alpha", cli.alpha, "heatmap opacity over the image")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--upsample", cli.upsample,
                 "how a patch-grid map is brought to the image's size: bilinear, or nearest "
                 "(each patch one block, as DINO's visualize_attention)")
      ->check(CLI::IsMember({"bilinear", "nearest"}))
      ->capture_default_str();
  app.add_option("--style", cli.style,
                 "how a map is drawn: overlay (a heat map over the image, --colormap, --alpha) or "
                 "mask (the image multiplied by the map scaled to [0, 1])")
      ->check(CLI::IsMember({"overlay", "mask"}))
      ->capture_default_str();
  app.add_option("--distance-norm", cli.distance_norm,
                 "the mean attention distance's weights: raw (the attention as it is, the ViT "
                 "paper's) or patches (each query's row renormalised over the patches, the class "
                 "token dropped)")
      ->check(CLI::IsMember({"raw", "patches"}))
      ->capture_default_str();
  app.add_flag("--evaluate", cli.evaluate,
               "measure the methods instead of drawing them: deletion/insertion, the pointing "
               "game and energy in the box (on fashion-mnist-pasted), sanity checks");
  app.add_option("--sanity-count", cli.sanity_count,
                 "--evaluate: images for the cascading-randomisation checks (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--patches-per-step", cli.patches_per_step,
                 "--evaluate: patches deleted or inserted per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--removal", cli.removal,
                 "--evaluate: what replaces a deleted patch: zero (black), mean or blur")
      ->check(CLI::IsMember({"zero", "mean", "blur"}))
      ->capture_default_str();
  app.add_option("--boxes", cli.boxes,
                 "--evaluate: the objects' boxes for the pointing game and the energy in the box, "
                 "in each image's own pixels: a CSV (image,x0,y0,x1,y1[,label], x1 and y1 past "
                 "the box), a JSON ({\"image.jpg\": [[x0, y0, x1, y1], ...]}) or tiny-imagenet's "
                 "val_annotations.txt (read by itself for such a folder)");
  app.add_flag("--serve", cli.serve,
               "serve a page (and a JSON API) where you drop your own images and see every "
               "method, layer and head: http://127.0.0.1:8080/ by default (Ctrl-C stops)");
  app.add_option("--host", cli.http.host,
                 "--serve: the address to listen on (another than 127.0.0.1 opens the server to "
                 "other machines, with a warning)")
      ->capture_default_str();
  app.add_option("--port", cli.http.port, "--serve: the port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--threads", cli.http.threads, "--serve: threads reading and writing requests")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--max-body-mb", cli.max_body_mb, "--serve: the largest request body, MB")
      ->check(CLI::Range(0.001, 1024.0))
      ->capture_default_str();
  app.add_option("--max-image-side", cli.limits.max_image_side,
                 "--serve: the largest image width or height, pixels (read from the header "
                 "before decoding)")
      ->check(CLI::Range(int64_t{1}, int64_t{32768}))
      ->capture_default_str();
  app.add_option("--request-timeout", cli.limits.request_timeout_s,
                 "--serve: seconds a request may wait for the model and run")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--queue", cli.limits.queue,
                 "--serve: requests that may wait while one runs; more get 503 with Retry-After")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--max-steps", cli.limits.max_steps,
                 "--serve: the most integrated-gradients steps or SmoothGrad samples a request "
                 "may ask")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--max-attention-mb", cli.limits.max_attention_mb,
                 "--serve: the most memory one image's attention and its gradients may take "
                 "(bounds images kept at their own size)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
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
