// vitrine-explain's command line (program code, not installed): the options as parsed (cli.cpp),
// and how they become the model, the images and the methods' options (inputs.cpp). main.cpp runs
// them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "explain/explain.h"
#include "explain/model.h"
#include "explain/options_schema.h"
#include "explain/serve.h"
#include "explain/serve_http.h"

namespace CLI {
class App;
}

namespace vitrine::explain::cli {

namespace ex = vitrine::explain;

/// The command line: the program's own options, and (RequestValues) one request's options, which
/// options_schema.h names for the command line and the server alike.
struct Cli : ex::RequestValues {
  std::string checkpoint, model_config, out = "explain", dataset, data, input, device = "cpu";
  std::vector<std::string> images;
  int64_t first = 0, count = 12, sample = 0;
  std::string init;  // --init: random:PRESET's initialisation scheme
  // --evaluate
  bool evaluate = false;
  int64_t sanity_count = 100, patches_per_step = 4;
  std::string removal = "zero";
  std::string boxes;  // --boxes FILE
  // --serve
  bool serve = false;
  ex::HttpOptions http;
  ex::ServeLimits limits;
  double max_body_mb = 16;
  bool list_options = false;  // --list-options (main answers it before parsing the rest)
};

/// Every option and flag of the program, parsed into cli: the request's options from
/// options_schema.h (add_request_options), then the program's own.
void add_options(CLI::App& app, Cli& cli);

/// The request options of options_schema.h that the command line reads (kCliOption), as CLI11
/// options bound to values: the flag --NAME, the entry's help, default, range or choices.
void add_request_options(CLI::App& app, ex::RequestValues& values);

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
