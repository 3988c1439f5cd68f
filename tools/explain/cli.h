// vitrine-explain's command line (program code, not installed): the options as parsed (cli.cpp),
// and how they become the model, the images and the methods' options (inputs.cpp). main.cpp runs
// them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/explain/explain.h"
#include "tools/explain/model.h"
#include "tools/explain/serve.h"
#include "tools/explain/serve_http.h"

namespace CLI {
class App;
}

namespace vitrine::explain::cli {

namespace ex = vitrine::explain;

struct Cli {
  std::string checkpoint, model_config, out = "explain", dataset, data, input, device = "cpu";
  std::vector<std::string> images;
  int64_t first = 0, count = 12, sample = 0;
  std::string methods = "all", target = "predicted", resize = "model", crop = "center";
  std::string pos_interp = "size";
  std::string head_fusion = "mean", ig_method = "gausslegendre", baseline = "black";
  std::string colormap = "inferno";
  std::string upsample = "bilinear", style = "overlay", distance_norm = "raw";
  std::string gradcam_layer;  // a model other than a ViT: the submodule Grad-CAM reads
  int64_t cell = 4;           // a model other than a ViT: the grid's cell in pixels
  double alpha = 0.5;
  std::vector<float> mean, std;
  std::string normalise;  // --normalise checkpoint|imagenet|none
  std::string init;       // --init: random:PRESET's initialisation scheme
  ex::Options opt;
  // --evaluate
  bool evaluate = false;
  int64_t sanity_count = 100, patches_per_step = 4;
  std::string removal = "zero";
  std::string boxes;  // --boxes FILE
  std::string patch;  // --patch ROW,COL (qkv)
  // --serve
  bool serve = false;
  ex::HttpOptions http;
  ex::ServeLimits limits;
  double max_body_mb = 16;
};

/// Every option and flag of the program, parsed into cli.
void add_options(CLI::App& app, Cli& cli);

/// The report's table of the settings the methods and the pictures ran with.
std::vector<std::pair<std::string, std::string>> report_settings(
    const Cli& cli, const ex::LoadedModel& l, const ex::Options& opt,
    const std::vector<ex::Method>& methods);

/// The methods of --method a model without a head cannot run, as one Error; none: fine.
void check_headless(const Cli& cli, const std::vector<ex::Method>& methods);

/// The methods for a model other than a ViT: "all" is every method that needs no attention
/// (gradcam only with a layer); an attention method asked by name is an Error.
std::vector<ex::Method> methods_for_any_model(const Cli& cli, const ex::LoadedModel& l,
                                              const std::vector<ex::Method>& asked);

/// --checkpoint (or random:PRESET) with --model-config, --gradcam-layer, --cell, --mean, --std.
ex::LoadedModel load(const Cli& cli);

/// The images to explain: --input's model inputs, --dataset's test images (as the checkpoint was
/// trained), or image files fitted by --resize and --crop; with --boxes (or tiny-imagenet's
/// annotations for --evaluate) each sample's boxes in its input's pixels. label_names: the data
/// set's class names.
std::vector<ex::Sample> read_samples(const Cli& cli, const ex::LoadedModel& l,
                                     std::vector<std::string>& label_names);

/// The samples' model inputs as one batch [N, C, H, W] (they must share a size).
Tensor batch_of(const std::vector<ex::Sample>& samples);

/// The methods' options from the command line.
ex::Options options_of(const Cli& cli, const ex::LoadedModel& l);

/// Replaces -1 ("predicted") or resolves --target: a class index, a class name, or "label".
std::vector<int64_t> targets_for(const Cli& cli, const std::vector<ex::Sample>& samples,
                                 const std::vector<std::string>& classes);

}  // namespace vitrine::explain::cli
