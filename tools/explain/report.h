// vitrine-explain's report: one self-contained index.html. Its images are PNGs embedded as
// data:image/png;base64 URIs and its chart inline SVG; there is no script and nothing is fetched,
// so the page opens offline and can be mailed as it is. Every string is HTML-escaped.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vitrine::explain {

/// One explained image of the report.
struct ReportImage {
  std::string name;
  std::string original_png;  // PNG bytes of the input image
  std::string label;         // the true class name, may be empty
  std::string predicted;     // the predicted class name
  double probability = 0;    // of the predicted class
  std::string target;        // the class explained
  /// (method name, overlay PNG bytes), in method order.
  std::vector<std::pair<std::string, std::string>> maps;
  std::string head_grid_png;  // every head's attention map tiled; may be empty
  /// Lines shown under the image, e.g. "integrated-gradients completeness gap 0.0012".
  std::vector<std::string> notes;
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
};

/// Writes path (atomically): per image a row with the original, the prediction with its
/// probability (and the true label when known), every method's overlay side by side with the
/// method names as captions (<figcaption>), and the head grid; then the attention-distance
/// scatter plot as the ViT paper's figure (layer on x, 1-based; one <circle> per head, mean
/// distance in pixels on y) as inline SVG with the shared nice axes (tools/common/html.h). Images
/// are shown with CSS image-rendering: pixelated at a fixed height of 112 px (the head grid at
/// the original's scale), so that small maps are visible. Returns path.
///
/// Errors (vitrine::Error): an image whose PNG bytes are missing or not a PNG (naming the image
/// and which of its pictures), a non-finite attention distance (naming layer and head), a file
/// that cannot be written.
std::string write_report(const std::string& path, const ReportData& data);

}  // namespace vitrine::explain
