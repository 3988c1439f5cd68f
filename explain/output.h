// vitrine-explain's output folder: what explain() (explain.h) found for a batch, written as files a
// person and a program read (the maps as .npy, their pictures as PNG, predictions.json and the
// self-contained index.html of report.h), and the folder itself, which appears whole or not at
// all (OutputFolder). The server (serve.h) writes no files: it answers with the same maps drawn
// by render.h.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "explain/explain.h"
#include "explain/model.h"
#include "explain/render.h"

namespace vitrine::explain {

/// An output folder written as a whole: the files go to a fresh temporary folder beside `out`
/// (path(), "<out>.tmp-<pid>"), which publish() renames to out; destroyed unpublished (an error
/// on the way), it removes the temporary folder and leaves out as it was. An existing out is
/// replaced only when it is an earlier vitrine-explain output (an index.html with
/// predictions.json or evaluation.json); else the constructor's Error names it.
class OutputFolder {
 public:
  explicit OutputFolder(std::string out);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  const std::string& path() const { return tmp_; }
  void publish();

 private:
  std::string out_, tmp_;
  bool published_ = false;
};

/// What the folder shows besides the results.
struct OutputOptions {
  std::string checkpoint;                                     // named in the report
  std::vector<std::pair<std::string, std::string>> settings;  // the report's table
  Colormap colormap = Colormap::Inferno;
  double alpha = 0.5;
  Style style = Style::Overlay;
  /// The images are raw model inputs (--input) whose normalisation is unknown: activation-max's
  /// optimised inputs are shown min-max scaled instead of un-normalised with the model's.
  bool raw_inputs = false;
};

/// What write_explanations wrote, for the caller to print.
struct Written {
  nlohmann::json predictions;        // predictions.json: per image its prediction and target
  std::vector<std::string> skipped;  // outputs left out, each with why
};

/// Writes the result of explain(model, request) for the samples (whose inputs were the request's
/// images) into folder, an empty folder (OutputFolder::path()):
///   <method>.npy            each method's maps [N, H, W] in [0, 1] (activation-max: the
///                           optimised inputs), <method>.grid.npy the patch-grid values, and
///                           .values, .scores, .heads, .mask.npy where the method has them;
///   logits.npy              (features.npy for a model without a head), and for a ViT
///                           attention-distance.npy [L, H] and attention_probs.npy (the first
///                           image's attention of every layer, unless over 512 MB: skipped);
///   NNN/                    per image: original.png, <method>.png, all.png (the row), and for
///                           a ViT heads.png, heads_mask.png (a threshold), qkv.heads.png and
///                           qkv.values.png; attention.heads_mask.npy with a threshold;
///   <method>.grid.png       every image's picture of a method, labelled (images of one size);
///   predictions.json, index.html (report.h).
/// Pictures are enlarged to at least 112 pixels a side. A non-finite logit is an Error naming
/// the weights or the input, before anything is written.
Written write_explanations(const std::string& folder, const LoadedModel& model,
                           const std::vector<Sample>& samples,
                           const std::vector<std::string>& label_names, const Result& result,
                           const Options& options, const OutputOptions& output);

}  // namespace vitrine::explain
