// vitrine-explain's inputs (cli.h): the model, the images fitted to it, their boxes, the
// methods' options and targets, from the command line.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "explain/boxes.h"
#include "explain/npy.h"
#include "models/classifier.h"
#include "nn/data/image_folder.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "nn/data/transforms.h"
#include "nn/json.h"
#include "nn/state.h"
#include "ops/ops.h"
#include "tools/explain/cli.h"

namespace vitrine::explain::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ex::Sample;
using Loaded = ex::LoadedModel;

/// The methods of --method a model without a head cannot run, as one Error; none: fine.
void check_headless(const Cli& cli, const std::vector<ex::Method>& methods) {
  std::vector<std::string> need;
  for (ex::Method m : methods)
    if (ex::needs_class_score(m)) need.push_back(ex::method_name(m));
  VT_CHECK(need.empty(),
           "--checkpoint {}: the model has no classification head (a feature extractor, as DINO's "
           "backbones), so there is no class score for {} to explain; attention and rollout (and "
           "the attention distance) need no head: --method attention,rollout",
           cli.checkpoint, fmt::join(need, ", "));
}

/// The methods for a model other than a ViT: "all" is every method that needs no attention
/// (gradcam only with a layer); an attention method asked by name is an Error.
std::vector<ex::Method> methods_for_any_model(const Cli& cli, const Loaded& l,
                                              const std::vector<ex::Method>& asked) {
  if (cli.methods == "all") {
    std::vector<ex::Method> out;
    for (ex::Method m : asked)
      if (ex::is_input_gradient(m) || (m == ex::Method::GradCam && !l.gradcam_layer.empty()))
        out.push_back(m);
    return out;
  }
  for (ex::Method m : asked) {
    VT_CHECK(ex::is_input_gradient(m) || m == ex::Method::GradCam,
             "--method {}: {} reads a Vision Transformer's attention, and {} holds a {} ({}); "
             "for this model: gradcam, saliency, smoothgrad, integrated-gradients",
             cli.methods, ex::method_name(m), cli.checkpoint, l.model->type_name(),
             l.spec.describe());
    VT_CHECK(m != ex::Method::GradCam || !l.gradcam_layer.empty(),
             "--method gradcam: name the layer whose activations Grad-CAM weighs with "
             "--gradcam-layer (a submodule of the {}, as a convolutional stage)",
             l.model->type_name());
  }
  return asked;
}

Loaded load(const Cli& cli) {
  const double mb = ex::is_random_checkpoint(cli.checkpoint)
                        ? 0
                        : static_cast<double>(fs::file_size(cli.checkpoint)) / 1e6;
  if (mb >= 100) {
    fmt::print("reading {} ({:.0f} MB) ...\n", cli.checkpoint, mb);
    std::fflush(stdout);
  }
  Loaded l = ex::load_model({.checkpoint = cli.checkpoint,
                             .model_config = cli.model_config,
                             .gradcam_layer = cli.gradcam_layer,
                             .cell = cli.cell,
                             .mean = cli.mean,
                             .std = cli.std,
                             .normalise = cli.normalise,
                             .seed = cli.opt.seed,
                             .init = cli.init});
  for (const std::string& note : l.notes) fmt::print("note: {}\n", note);
  if (l.normalisation != "the checkpoint")
    fmt::print("normalisation: mean {} std {} from {}\n", l.mean, l.std, l.normalisation);
  return l;
}

namespace {

Sample prepare(const std::string& name, const nn::data::Image& raw, int64_t label, const Cli& cli,
               const Loaded& l) {
  return ex::prepare_image(name, raw, label, {.resize = cli.resize, .crop = cli.crop}, l);
}

/// The test set of --dataset, read as the checkpoint was trained: its run's config.json or its
/// own data section (channels, size, transforms, class names), --data for the folder; another
/// data set than the checkpoint's takes its transforms fitted to the model's size.
struct TestSet {
  std::shared_ptr<const nn::data::Dataset> data;
  nn::data::Compose display;  // the evaluation transforms without the normalisation
  std::string config_source;
  std::string folder;  // where its files are
};

/// The data section the checkpoint was trained with, and where it came from: the run folder's
/// config.json beside the checkpoint, else the checkpoint's vitrine.data metadata, else
/// Fashion-MNIST's. split_seed: the run's train.seed + 1 (an image folder's test split).
json checkpoint_data(const std::string& checkpoint, const nn::Metadata& meta, std::string& source,
                     uint64_t& split_seed) {
  split_seed = 1;
  const fs::path beside = fs::path(checkpoint).parent_path() / "config.json";
  if (!ex::is_random_checkpoint(checkpoint) && fs::exists(beside)) {
    const json config = tools::read_json_file(beside.string(), "config file");
    source = beside.string();
    if (config.contains("train") && config["train"].contains("seed") &&
        config["train"]["seed"].is_number_unsigned())
      split_seed = config["train"]["seed"].get<uint64_t>() + 1;
    if (config.contains("data") && config["data"].is_object()) return config["data"];
    return json::object();
  }
  if (json data = nn::metadata_json(meta, nn::kDataKey); data.is_object()) {
    source = fmt::format("{} (its {} metadata)", checkpoint, nn::kDataKey);
    return data;
  }
  source = "Fashion-MNIST (the checkpoint names no data set)";
  return json::object();
}

TestSet open_test_set(const Cli& cli, const Loaded& l) {
  const models::ClassifierSpec& c = l.spec;
  TestSet t;
  uint64_t split_seed = 1;
  json d = checkpoint_data(cli.checkpoint, l.meta, t.config_source, split_seed);
  if (!d.contains("dataset")) d["dataset"] = "fashion-mnist";
  if (d["dataset"] != cli.dataset) {
    d = {{"dataset", cli.dataset}, {"path", ""}};
    t.config_source = fmt::format("--dataset {} (transforms fitted to the model)", cli.dataset);
  }
  if (!cli.data.empty()) d["path"] = cli.data;
  const nn::data::DatasetOptions o = nn::data::dataset_options_from_json(d, c.channels, split_seed);
  // The geometry of the evaluation pipeline, fitted to the model; the normalisation is the
  // checkpoint's (Loaded's mean and std), applied to each image later.
  json transforms = d.value("transforms", json::object());
  transforms.erase("mean");
  transforms.erase("std");
  nn::data::fit_to_size(transforms, c.channels, nn::data::image_size(o), c.image_h, c.image_w);
  t.display = nn::data::from_config(transforms, c.channels, false);
  t.data = nn::data::open_dataset(o, false).test;
  t.folder = nn::data::dataset_folder(o);
  return t;
}

/// The sample's boxes from the table (--boxes), in its input's pixels: each box of its image
/// mapped through the resize and crop. An image the table does not name is an Error.
void attach_boxes(Sample& s, const ex::BoxTable& table, const std::string& file) {
  const std::string key = s.file.empty() ? s.name : s.file;
  const auto* boxes = ex::find_boxes(table, key);
  VT_CHECK(boxes != nullptr, "--boxes {}: no box for {} (the file names images as {}, ...)", file,
           key, table.begin()->first);
  for (const nn::data::Box& b : *boxes)
    s.boxes.push_back(s.fit.map(b, s.input.size(1), s.input.size(2)));
}

}  // namespace

std::vector<Sample> read_samples(const Cli& cli, const Loaded& l,
                                 std::vector<std::string>& label_names) {
  const models::ClassifierSpec& c = l.spec;
  const int64_t patch = l.patch;
  std::vector<Sample> out;
  std::optional<ex::BoxTable> table;  // --boxes
  std::string table_file = cli.boxes;
  if (!table_file.empty()) table = ex::read_boxes(table_file);
  if (!cli.input.empty()) {  // the model's input, exactly
    Tensor x = ex::read_npy(cli.input);
    if (x.dim() == 3) x = x.unsqueeze(0);
    VT_CHECK(x.dim() == 4 && x.size(1) == c.channels,
             "--input {}: expected [N, {}, H, W] or [{}, H, W], got {}", cli.input, c.channels,
             c.channels, x.shape());
    VT_CHECK(x.size(2) >= patch && x.size(3) >= patch && x.size(2) % patch == 0 &&
                 x.size(3) % patch == 0,
             "--input {}: the image size {}x{} must be a positive multiple of the patch size {}",
             cli.input, x.size(2), x.size(3), patch);
    for (int64_t i = 0; i < x.size(0); ++i) {
      Tensor in = x.select(0, i).contiguous();
      // What a person sees: the input scaled to [0, 1] (its normalisation is unknown).
      Tensor d = ex::minmax(in.reshape({1, in.numel()})).reshape(in.shape());
      out.push_back(
          {fmt::format("{}[{}]", fs::path(cli.input).filename().string(), i), in, d, -1, {}});
    }
    return out;
  }
  if (!cli.dataset.empty()) {
    const TestSet set = open_test_set(cli, l);
    const auto& test = set.data;
    // tiny-imagenet-200's validation boxes, read by themselves for --evaluate.
    const fs::path annotations = fs::path(set.folder) / "val" / "val_annotations.txt";
    if (cli.evaluate && !table && fs::exists(fs::path(set.folder) / "wnids.txt") &&
        fs::exists(annotations)) {
      table_file = annotations.string();
      table = ex::read_boxes(table_file);
      fmt::print("object boxes: {} (tiny-imagenet-200's)\n", table_file);
    }
    auto folder = std::dynamic_pointer_cast<const nn::data::ImageFolder>(test);
    label_names = test->classes();
    std::vector<int64_t> indices;
    if (cli.sample > 0) {  // a seeded random sample, in the test set's order
      VT_CHECK(cli.sample <= test->size(), "--sample {}: the test set {} has {} images", cli.sample,
               test->source(), test->size());
      indices = nn::data::permutation(test->size(), cli.opt.seed, 0);
      indices.resize(static_cast<size_t>(cli.sample));
      std::sort(indices.begin(), indices.end());
    } else {
      VT_CHECK(cli.first >= 0 && cli.count >= 1 && cli.first < test->size() &&
                   cli.count <= test->size() - cli.first,
               "--first {} --count {}: the test set {} has {} images", cli.first, cli.count,
               test->source(), test->size());
      for (int64_t i = cli.first; i < cli.first + cli.count; ++i) indices.push_back(i);
    }
    // Where each object is, for the pointing game: the localisation benchmark knows its boxes;
    // on MNIST-style data (one item on a black background) the item is its non-zero pixels.
    auto pasted = std::dynamic_pointer_cast<const nn::data::PastedObjects>(test);
    const bool on_black = cli.dataset == "fashion-mnist" || cli.dataset == "mnist";
    for (int64_t i : indices) {
      nn::data::Example e = test->get(i);
      const std::string name = fmt::format("{} #{}", cli.dataset, i);
      if (table) {  // fitted by --resize's rule, whose geometry maps the boxes
        out.push_back(prepare(name, e.image, e.label, cli, l));
        if (folder) out.back().file = folder->files()[static_cast<size_t>(i)];
        attach_boxes(out.back(), *table, table_file);
        continue;
      }
      if (cli.resize == "model") {
        const nn::data::Image shown = set.display(e.image);
        VT_CHECK(shown.height == c.image_h && shown.width == c.image_w,
                 "--dataset {}: the evaluation transforms ({}) turn {}'s {}x{} images into {}x{}, "
                 "but the model takes {}x{}",
                 cli.dataset, set.display.describe(), name, e.image.height, e.image.width,
                 shown.height, shown.width, c.image_h, c.image_w);
        out.push_back({name,
                       ex::image_tensor(nn::data::normalize(shown, l.mean, l.std)),
                       ex::image_tensor(shown),
                       e.label,
                       {}});
      } else {
        out.push_back(prepare(name, e.image, e.label, cli, l));
      }
      if (!pasted && !on_black) continue;
      VT_CHECK(
          out.back().input.size(1) == e.image.height && out.back().input.size(2) == e.image.width,
          "--dataset {}: its {}x{} images must be used at their size (for their object boxes), "
          "not resized to the model's {}x{}",
          cli.dataset, e.image.height, e.image.width, c.image_h, c.image_w);
      // The pasted item's drawn pixels (not its square), or the bounding box of the non-zero
      // pixels of the image.
      out.back().box = pasted ? pasted->tight_box(i) : nn::data::nonzero_box(e.image);
    }
    return out;
  }
  VT_CHECK(!cli.images.empty(), "no images: name image files, or --dataset, or --input");
  nn::data::ImageFolder files("command line", cli.images,
                              std::vector<int64_t>(cli.images.size(), 0), {"?"},
                              {.channels = static_cast<int>(c.channels), .limits = {}});
  for (size_t i = 0; i < cli.images.size(); ++i) {
    out.push_back(prepare(cli.images[i], files.get(static_cast<int64_t>(i)).image, -1, cli, l));
    out.back().file = cli.images[i];
    if (table) attach_boxes(out.back(), *table, table_file);
  }
  return out;
}

/// The samples' model inputs as one batch [N, C, H, W] (they must share a size).
Tensor batch_of(const std::vector<Sample>& samples) {
  std::vector<Tensor> inputs;
  for (const Sample& s : samples) {
    VT_CHECK(s.input.shape() == samples[0].input.shape(),
             "{} is {}x{} but {} is {}x{}: images must share one size (use --resize model)", s.name,
             s.input.size(1), s.input.size(2), samples[0].name, samples[0].input.size(1),
             samples[0].input.size(2));
    inputs.push_back(s.input);
  }
  return ops::stack(inputs, 0);
}

/// The methods' options from the command line.
ex::Options options_of(const Cli& cli, const Loaded& l) {
  ex::Options opt = ex::method_options(cli);
  if (cli.input.empty()) {  // with --input the baseline is exactly 0, the range [0, 1]
    opt.black = ex::black_pixel(l);
    for (size_t c = 0; c < l.mean.size(); ++c) opt.white.push_back((1 - l.mean[c]) / l.std[c]);
  }
  return opt;
}

/// Replaces -1 ("predicted") or resolves --target: a class index, a class name, or "label".
std::vector<int64_t> targets_for(const Cli& cli, const std::vector<Sample>& samples,
                                 const std::vector<std::string>& classes) {
  std::vector<int64_t> t;
  if (classes.empty()) return std::vector<int64_t>(samples.size(), -1);  // no head: no class
  for (const Sample& s : samples) {
    if (cli.target == "predicted") {
      t.push_back(-1);
    } else if (cli.target == "label") {
      VT_CHECK(s.label >= 0, "--target label: {} has no label (only --dataset images do)", s.name);
      t.push_back(s.label);
    } else {
      auto it = std::find(classes.begin(), classes.end(), cli.target);
      if (it != classes.end()) {
        t.push_back(it - classes.begin());
        continue;
      }
      size_t used = 0;
      int64_t k = -2;
      try {
        k = std::stoll(cli.target, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      VT_CHECK(used == cli.target.size() && used > 0,
               "--target {}: not a class index, a class name of the model ({}), 'predicted' or "
               "'label'",
               cli.target, fmt::join(classes, ", "));
      VT_CHECK(k >= 0 && k < static_cast<int64_t>(classes.size()),
               "--target {}: class index out of range for a model with {} classes (0..{})", k,
               classes.size(), classes.size() - 1);
      t.push_back(k);
    }
  }
  return t;
}

}  // namespace vitrine::explain::cli
