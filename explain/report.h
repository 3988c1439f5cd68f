// vitrine-explain's reports: the explained images' index.html and the evaluation's page. Each is
// one self-contained file: images are PNGs embedded as data:image/png;base64 URIs and charts
// inline SVG; there is no script and nothing is fetched, so a page opens offline and can be
// mailed as it is. Every string is HTML-escaped.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitrine::explain {

struct EvalResult;  // explain/evaluate.h

/// One explained image of the report.
struct ReportImage {
  std::string name;
  std::string original_png;  // PNG bytes of the input image
  std::string label;         // the true class name, may be empty
  std::string predicted;     // the predicted class name; empty for a model without a head
  double probability = 0;    // of the predicted class
  std::string target;        // the class explained
  /// (method name, overlay PNG bytes), in method order.
  std::vector<std::pair<std::string, std::string>> maps;
  std::string head_grid_png;   // every head's attention map tiled; may be empty
  std::string head_masks_png;  // every head's threshold mask tiled (--threshold); may be empty
  /// Lines shown under the image, e.g. "integrated-gradients completeness gap 0.0012".
  std::vector<std::string> notes;
  /// More pictures after the head grids, (caption, PNG bytes): qkv's per-head tiles.
  std::vector<std::pair<std::string, std::string>> figures{};
};

/// What the report shows.
struct ReportData {
  std::string title;
  std::string checkpoint;
  /// Method options, shown as a table of (name, value).
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<ReportImage> images;
  /// Mean attention distance in pixels, [layers][heads]; may be empty.
  std::vector<std::vector<double>> attention_distance;
  int64_t patch = 0;  // the model's patch size in pixels, named in the chart's caption
  /// The attention threshold of the head masks (the fraction of each head's attention they
  /// keep, in (0, 1]), worded in their caption; 0 when unknown.
  double threshold = 0;
  /// (method name, PNG bytes): every image's overlay of one method in a labelled montage.
  std::vector<std::pair<std::string, std::string>> grids;
};

/// Writes path (atomically): per image a row with the original, the prediction with its
/// probability (and the true label when known; a model without a head, predicted empty, has no
/// prediction line, only the label when known), every method's overlay side by side with the
/// method names as captions (<figcaption>), the head grid ("attention heads") and beside it the
/// heads' threshold masks (captioned "threshold masks (keep 60% of each head's attention)" for
/// threshold 0.6; "threshold masks" when threshold is 0); then, when grids is not empty, a
/// section "Grids" with one montage per method captioned with its name, shown at its own size;
/// then the attention-distance scatter plot as the ViT paper's figure (layer on x, 1-based; one
/// <circle> per head, mean distance in pixels on y) as inline SVG with the shared nice axes
/// (common/html.h), under a legend of one coloured dot (<circle class="key">) and
/// "head k" (<text class="legend">, 1-based as the points' tooltips) per head, in rows above the
/// plot that wrap at its width (the SVG grows 18 px per further row). Images are shown with CSS
/// image-rendering: pixelated at a fixed height of 112 px (the head grid and the masks at the
/// original's scale), so that small maps are visible. Returns path.
///
/// Errors (vitrine::Error): an image whose PNG bytes are missing or not a PNG (naming the image
/// and which of its pictures), a non-finite attention distance (naming layer and head), a file
/// that cannot be written.
std::string write_report(const std::string& path, const ReportData& data);

/// Writes path (atomically, common/files.h): a self-contained page (inline CSS and SVG, no
/// script, nothing fetched) of an evaluation (evaluate.h), each part under a sentence that says
/// how to read it:
///  - the title (default "vitrine-explain evaluation"), the number of images, the settings table;
///  - faithfulness: a row per result row, columns deletion AUC and insertion AUC, with
///    localisation values (result.pointing not empty) also pointing game and energy in box; each
///    cell "mean [lo, hi]" (summarize(), 3 decimals). In each column the best method (lowest
///    deletion AUC, highest of the others; every row that ties with it) has class "best". The
///    baselines, rows "random" and "centre", are <tr class="baseline"> (italics) and never best;
///  - the mean deletion and insertion curves as two line charts (tools::line_chart_svg), one
///    series per row that has a curve: x = the fraction of patches removed (inserted), point s of
///    S + 1 at s / S; y = the target's probability. Baselines are grey;
///  - sanity: a row per method with sanity values, a column per result.sanity_steps, cells
///    "mean [lo, hi]" of Spearman's rho (2 decimals) shaded by |mean| from white (0) to red (1),
///    so that a map that does not depend on the weights stands out. Without sanity steps the
///    page says the checks were not run.
/// A value that is missing, or a mean that is not finite, is shown as "-" (and never best).
/// Returns path. Errors (vitrine::Error): a file that cannot be written.
std::string write_evaluation_report(
    const std::string& path, const EvalResult& result, const std::string& title,
    const std::vector<std::pair<std::string, std::string>>& settings);

/// The index.html of a run whose images had several sizes (each size explained in its own
/// folder, "HxW"): a self-contained page that links each folder's index.html and lists, per
/// folder, its images with their prediction (predictions: every image's predictions.json entry,
/// holding its "folder").
std::string size_groups_index_html(const std::string& checkpoint,
                                   const std::vector<std::string>& folders,
                                   const std::vector<nlohmann::json>& predictions);

}  // namespace vitrine::explain
