// vitrine-explain's output folder (output.h): the arrays, each image's pictures, the montages, the
// predictions and the report, from one explain() result.
#include "explain/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/files.h"
#include "explain/npy.h"
#include "explain/report.h"
#include "ops/ops.h"

namespace vitrine::explain {

namespace fs = std::filesystem;
using json = nlohmann::json;

OutputFolder::OutputFolder(std::string out) : out_(std::move(out)) {
  if (fs::exists(out_))
    VT_CHECK(fs::is_directory(out_) && fs::exists(fs::path(out_) / "index.html") &&
                 (fs::exists(fs::path(out_) / "predictions.json") ||
                  fs::exists(fs::path(out_) / "evaluation.json")),
             "--out {}: exists and is not a vitrine-explain output folder (it would be replaced)",
             out_);
  tmp_ = out_ + fmt::format(".tmp-{}", getpid());
  fs::remove_all(tmp_);
  fs::create_directories(tmp_);
}

OutputFolder::~OutputFolder() {
  if (published_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void OutputFolder::publish() {
  const std::string old = out_ + fmt::format(".old-{}", getpid());
  if (fs::exists(out_)) fs::rename(out_, old);
  fs::rename(tmp_, out_);
  published_ = true;
  fs::remove_all(old);
}

namespace {

std::string percent(double p) { return fmt::format("{:.1f}%", 100 * p); }

/// What every picture of one folder shares.
struct Pictures {
  const LoadedModel& model;
  const Options& opt;
  const OutputOptions& out;
  int64_t H, W, enlarge;

  /// A map [H, W] in [0, 1] drawn on its image.
  Rgb8 map(const Tensor& display, const Tensor& m) const {
    return draw_map(display, m, out.style, out.colormap, out.alpha, enlarge);
  }
  /// An optimised model input [C, H, W] as a person sees it: un-normalised with the model's mean
  /// and std and clamped to [0, 1]; a raw input (its normalisation unknown) min-max scaled.
  Rgb8 input(const Tensor& x) const {
    const Tensor shown = out.raw_inputs ? minmax(x.reshape({1, x.numel()})).reshape(x.shape())
                                        : unnormalised(x, model.mean, model.std);
    return explain::enlarge(to_rgb8(shown), enlarge);
  }
  /// Per-head maps [heads, gh, gw] at image size, each drawn, labelled "head h" in up to 6
  /// columns; scaled: each min-max scaled (else as they are, as 0/1 masks).
  Rgb8 heads(const Tensor& display, const Tensor& per_head, bool scaled) const {
    const Tensor up = upsample(per_head, H, W, opt.upsample);
    const Tensor shown = scaled ? minmax(up) : up;
    std::vector<Rgb8> tiles;
    std::vector<std::string> labels;
    for (int64_t h = 0; h < per_head.size(0); ++h) {
      tiles.push_back(map(display, shown.select(0, h)));
      labels.push_back(fmt::format("head {}", h));
    }
    return labelled_grid(tiles, labels, std::min<int64_t>(per_head.size(0), 6));
  }
};

/// The arrays of the results: each method's .npy files, the logits, and a ViT's attention
/// distance [L, H] (returned; undefined for another model) and first image's attention.
Tensor write_arrays(const std::string& folder, const LoadedModel& model, const Result& result,
                    const Options& opt, std::vector<std::string>& skipped) {
  for (const auto& e : result.explanations) {
    const std::string name = method_name(e.method);
    if (e.picture.defined()) {  // activation-max: the optimised model inputs
      write_npy(folder + "/" + name + ".npy", e.picture);
      continue;
    }
    write_npy(folder + "/" + name + ".npy", e.map);
    write_npy(folder + "/" + name + ".grid.npy", e.grid);
    if (e.values.defined()) write_npy(folder + "/" + name + ".values.npy", e.values);
    if (e.scores.defined()) write_npy(folder + "/" + name + ".scores.npy", e.scores);
    if (e.heads.defined()) write_npy(folder + "/" + name + ".heads.npy", e.heads);
    if (e.mask.defined()) write_npy(folder + "/" + name + ".mask.npy", e.mask);
  }
  const Pass& pass = result.pass;
  const bool vit = !pass.attentions.empty();
  const Tensor distance = vit ? attention_distance(pass, model.patch, opt.distance_norm) : Tensor();
  if (vit) write_npy(folder + "/attention-distance.npy", distance);
  write_npy(folder + (model.headless ? "/features.npy" : "/logits.npy"), result.logits);
  // The first image's attention probabilities of every layer [L, heads, N, N], unless that is
  // over 512 MB (a photo at its own size: 4801 tokens make 6.6 GB for ViT-S/8).
  if (vit) {
    const int64_t probs_bytes = static_cast<int64_t>(pass.attentions.size()) *
                                pass.attentions[0].numel() / pass.attentions[0].size(0) * 4;
    if (probs_bytes <= (int64_t{512} << 20)) {
      std::vector<Tensor> first;
      for (const Tensor& a : pass.attentions) first.push_back(a.select(0, 0));
      write_npy(folder + "/attention_probs.npy", ops::stack(first, 0));
    } else {
      skipped.push_back(fmt::format(
          "attention_probs.npy (the first image's attention of every layer would take {:.1f} "
          "GB)",
          static_cast<double>(probs_bytes) / 1e9));
    }
  }
  return distance;
}

/// Image i's pictures of a ViT's per-head methods (qkv's tiles, attention's heads and their
/// threshold masks) in dir and the report; head_masks [N, heads, gh, gw] gets the masks.
void head_pictures(const Pictures& p, const Explanation& e, int64_t i, int64_t N,
                   const Tensor& display, const std::string& dir, ReportImage& ri, json& entry,
                   Tensor& head_masks) {
  const Options& opt = p.opt;
  if (e.method == Method::Qkv) {  // one tile per head: scores, then value norms
    entry["qkv_patch"] = {e.query_row, e.query_col};
    for (const std::string what : {"heads", "values"}) {
      const Rgb8 grid = p.heads(display, (what == "heads" ? e.heads : e.values).select(0, i), true);
      write_png(dir + "/qkv." + what + ".png", grid);
      ri.figures.emplace_back(
          what == "heads" ? fmt::format("qkv: patch ({}, {})'s query-key scores per head, block {}",
                                        e.query_row, e.query_col, opt.layer)
                          : fmt::format("qkv: the values' norms per head, block {}", opt.layer),
          encode_png(grid));
    }
  }
  if (e.method == Method::Attention && e.heads.defined()) {
    // DINO's figure: every head of the layer
    const Tensor heads = e.heads.select(0, i);
    const Rgb8 grid = p.heads(display, heads, true);
    write_png(dir + "/heads.png", grid);
    ri.head_grid_png = encode_png(grid);
    if (opt.threshold > 0) {
      // DINO's visualize_attention: per head, the smallest set of patches holding `threshold`
      // of its attention, drawn over the image.
      const Tensor masks = threshold_mask(heads, opt.threshold);  // [heads, gh, gw]
      if (i == 0) head_masks = ops::zeros({N, heads.size(0), heads.size(1), heads.size(2)});
      head_masks.select(0, i).copy_(masks);
      const Rgb8 mgrid = p.heads(display, masks, false);
      write_png(dir + "/heads_mask.png", mgrid);
      ri.head_masks_png = encode_png(mgrid);
    }
  }
}

/// Image i's prediction: its predictions.json entry's fields, the report's, and the montage's
/// short label (returned).
std::string predict(const LoadedModel& model, const std::vector<double>& p, int64_t K, int64_t i,
                    int64_t target, ReportImage& ri, json& entry, const std::string& name) {
  std::string short_label = ri.label.empty() ? name : ri.label;
  if (model.headless) return short_label;
  const int64_t pred =
      std::max_element(p.begin() + i * K, p.begin() + (i + 1) * K) - (p.begin() + i * K);
  ri.predicted = model.classes[pred];
  ri.probability = p[i * K + pred];
  ri.target = model.classes[target];
  entry.update({{"predicted", pred},
                {"predicted_name", model.classes[pred]},
                {"probability", p[i * K + pred]},
                {"target", target},
                {"target_name", model.classes[target]},
                {"target_probability", p[i * K + target]}});
  return ri.label.empty() || ri.label == ri.predicted
             ? fmt::format("{} {}", ri.predicted, percent(ri.probability))
             : fmt::format("{} as {}", ri.label, ri.predicted);
}

}  // namespace

Written write_explanations(const std::string& folder, const LoadedModel& model,
                           const std::vector<Sample>& samples,
                           const std::vector<std::string>& label_names, const Result& result,
                           const Options& opt, const OutputOptions& output) {
  // NaN or inf in the weights or the input reaches the output: say so rather than print "nan%".
  for (float v : result.logits.detach().to(kCPU).to(kFloat32).contiguous().to_vector<float>())
    VT_CHECK(std::isfinite(v),
             "the model's output holds {} for the images given: the checkpoint's weights or the "
             "input hold non-finite values (NaN or inf)",
             v);
  const auto& results = result.explanations;
  const int64_t N = static_cast<int64_t>(samples.size());
  const int64_t H = samples.front().input.size(1), W = samples.front().input.size(2);
  Written written;
  const Tensor distance = write_arrays(folder, model, result, opt, written.skipped);

  // The pictures and the report.
  ReportData report;
  report.title = "vitrine-explain";
  report.checkpoint = output.checkpoint;
  report.patch = model.patch;
  report.settings = output.settings;
  const auto dist = distance.defined() ? distance.to_vector<double>() : std::vector<double>();
  for (int64_t layer = 0; distance.defined() && layer < distance.size(0); ++layer)
    report.attention_distance.emplace_back(dist.begin() + layer * distance.size(1),
                                           dist.begin() + (layer + 1) * distance.size(1));
  const Pictures pictures{
      model, opt, output, H, W, std::max<int64_t>(1, (112 + std::max(H, W) - 1) / std::max(H, W))};
  // Class probabilities; a model without a head has none (its "logits" are its features).
  const Tensor probs = model.headless ? Tensor() : ops::softmax(result.logits.to(kFloat32), -1);
  const auto p = model.headless ? std::vector<double>() : probs.to_vector<double>();
  const int64_t K = model.headless ? 0 : probs.size(1);
  json& predictions = written.predictions = json::array();
  // <method>.grid.png: every image's picture for one method, labelled, in a near-square grid.
  std::vector<std::vector<Rgb8>> montage(results.size());
  std::vector<std::string> montage_labels;
  Tensor head_masks;  // [N, heads, gh, gw] with a threshold: each head's own DINO mask
  for (int64_t i = 0; i < N; ++i) {
    const Sample& s = samples[i];
    const std::string dir = fmt::format("{}/{:03d}", folder, i);
    fs::create_directories(dir);
    ReportImage ri;
    ri.name = s.name;
    const Rgb8 original = enlarge(to_rgb8(s.display), pictures.enlarge);
    ri.original_png = encode_png(original);
    write_png(dir + "/original.png", original);
    std::vector<Rgb8> row{original};  // all.png: the original, then every method
    std::vector<std::string> row_labels{"image"};
    if (s.label >= 0)
      ri.label = s.label < static_cast<int64_t>(label_names.size()) ? label_names[s.label]
                                                                    : std::to_string(s.label);
    json entry = {{"index", i}, {"name", s.name}};
    montage_labels.push_back(
        predict(model, p, K, i, model.headless ? -1 : result.targets[i], ri, entry, s.name));
    if (s.label >= 0) entry["label"] = s.label;
    for (size_t r = 0; r < results.size(); ++r) {
      const auto& e = results[r];
      const std::string name = method_name(e.method);
      // activation-max's picture is the optimised image itself; every other method a map.
      const Rgb8 png = e.picture.defined() ? pictures.input(e.picture.select(0, i))
                                           : pictures.map(s.display, e.map.select(0, i));
      write_png(dir + "/" + name + ".png", png);
      ri.maps.emplace_back(name, encode_png(png));
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
      head_pictures(pictures, e, i, N, s.display, dir, ri, entry, head_masks);
    }
    write_png(dir + "/all.png", labelled_grid(row, row_labels, static_cast<int64_t>(row.size())));
    predictions.push_back(entry);
    report.images.push_back(std::move(ri));
  }
  if (head_masks.defined()) write_npy(folder + "/attention.heads_mask.npy", head_masks);
  const int64_t montage_columns =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(N)))));
  for (size_t r = 0; r < results.size(); ++r) {
    if (montage[r].empty()) continue;  // (the tiles share one size: the images are one batch)
    const std::string name = method_name(results[r].method);
    const Rgb8 g = labelled_grid(montage[r], montage_labels, montage_columns);
    write_png(folder + "/" + name + ".grid.png", g);
    report.grids.emplace_back(name, encode_png(g));
  }
  report.threshold = opt.threshold;
  tools::write_file_atomically(folder + "/predictions.json", predictions.dump(2) + "\n");
  write_report(folder + "/index.html", report);
  return written;
}

}  // namespace vitrine::explain
