// The index.html of vitrine-explain (see report.h): image rows of <figure>s with data: URI PNGs,
// and the attention-distance scatter plot as inline SVG.
#include "tools/explain/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backends/error.h"
#include "tools/common/files.h"
#include "tools/common/html.h"

namespace vitrine::explain {

using tools::escape_html;

namespace {

constexpr double kDisplayHeight = 112;  // px: a 28 x 28 image at 4x

// matplotlib's tab10, the colours of the heads in the scatter plot (cycling past ten heads).
constexpr const char* kTab10[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

/// A PNG's width and height, from its IHDR chunk (which must come first: bytes 16..23 hold the
/// two big-endian uint32 after the 8-byte signature, the chunk's length and its type).
std::pair<int64_t, int64_t> png_size(const std::string& png, const std::string& image,
                                     const std::string& what) {
  VT_CHECK(!png.empty(), "write_report: image '{}' has no {} PNG", image, what);
  VT_CHECK(png.size() >= 24 && png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0 &&
               png.compare(12, 4, "IHDR") == 0,
           "write_report: image '{}': the {} is not a PNG ({} bytes)", image, what, png.size());
  auto be32 = [&](size_t at) {
    int64_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(png[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

/// An <img> of PNG bytes at scale display pixels per image pixel (the width and height
/// attributes keep the layout while the page loads).
std::string img(const std::string& png, std::pair<int64_t, int64_t> size, double scale,
                const std::string& alt) {
  return fmt::format("<img src=\"{}\" width=\"{}\" height=\"{}\" alt=\"{}\">",
                     tools::data_uri("image/png", png),
                     std::lround(static_cast<double>(size.first) * scale),
                     std::lround(static_cast<double>(size.second) * scale), escape_html(alt));
}

std::string figure(const std::string& image_html, const std::string& caption) {
  return fmt::format("<figure>{}<figcaption>{}</figcaption></figure>\n", image_html,
                     escape_html(caption));
}

std::string image_row(const ReportImage& im) {
  const auto original = png_size(im.original_png, im.name, "original");
  // The original and the overlays are shown kDisplayHeight high, the head grid at the original's
  // scale (so that tiles of the image's size match it).
  const double scale = kDisplayHeight / static_cast<double>(std::max<int64_t>(original.second, 1));
  std::string out =
      fmt::format("<section class=\"image\">\n<h3>{}</h3>\n<p>predicted <b>{}</b> ({:.1f}%)",
                  escape_html(im.name), escape_html(im.predicted), 100 * im.probability);
  if (!im.label.empty())
    out += fmt::format(", true label <b class=\"{}\">{}</b>",
                       im.label == im.predicted ? "right" : "wrong", escape_html(im.label));
  out +=
      fmt::format("; explained class <b>{}</b></p>\n<div class=\"row\">\n", escape_html(im.target));
  out += figure(img(im.original_png, original, scale, im.name), "original");
  for (const auto& [method, png] : im.maps) {
    const auto size = png_size(png, im.name, method + " overlay");
    const double s = kDisplayHeight / static_cast<double>(std::max<int64_t>(size.second, 1));
    out += figure(img(png, size, s, im.name + ": " + method), method);
  }
  if (!im.head_grid_png.empty())
    out += figure(img(im.head_grid_png, png_size(im.head_grid_png, im.name, "head grid"), scale,
                      im.name + ": attention heads"),
                  "attention heads");
  out += "</div>\n";
  if (!im.notes.empty()) {
    out += "<ul class=\"notes\">\n";
    for (const std::string& n : im.notes) out += "<li>" + escape_html(n) + "</li>\n";
    out += "</ul>\n";
  }
  return out + "</section>\n";
}

/// The ViT paper's figure of mean attention distance: one point per head at its layer.
std::string distance_svg(const std::vector<std::vector<double>>& distance) {
  const int width = 640, height = 320;
  const double left = 64, right = width - 16.0, top = 16, bottom = height - 42.0;
  const int64_t layers = static_cast<int64_t>(distance.size());
  double hi = 0;
  for (size_t l = 0; l < distance.size(); ++l)
    for (size_t h = 0; h < distance[l].size(); ++h) {
      VT_CHECK(std::isfinite(distance[l][h]),
               "write_report: the attention distance of layer {} head {} is {}", l + 1, h + 1,
               distance[l][h]);
      hi = std::max(hi, distance[l][h]);
    }
  const tools::Axis ay = tools::nice_axis(0, hi);
  // x: one column per layer, 1..L, half a column of margin on either side.
  auto px = [&](double layer) {
    return left + (layer - 0.5) / static_cast<double>(layers) * (right - left);
  };
  auto py = [&](double y) { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); };

  std::string out = tools::svg_open(width, height);
  out += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fff\" "
      "stroke=\"#999\"/>\n",
      left, top, right - left, bottom - top);
  for (int64_t k = ay.first; k <= ay.last; ++k) {
    const double y = py(ay.tick(k));
    out += fmt::format(
        "<line x1=\"{1:.1f}\" y1=\"{0:.1f}\" x2=\"{2:.1f}\" y2=\"{0:.1f}\" stroke=\"#eee\"/>\n"
        "<text class=\"tick\" x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        y, left, right, left - 6, y + 4, ay.label(k));
  }
  // Every layer is labelled up to 16 layers; deeper models at the multiples of a nice step.
  const int64_t every =
      layers <= 16 ? 1 : std::max<int64_t>(1, std::lround(tools::nice_axis(1, layers).tick(1)));
  for (int64_t l = 1; l <= layers; ++l) {
    if (l % every != 0 && l != 1) continue;
    out += fmt::format(
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
        px(static_cast<double>(l)), bottom + 16, l);
  }
  for (size_t l = 0; l < distance.size(); ++l)
    for (size_t h = 0; h < distance[l].size(); ++h)
      out += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" fill-opacity=\"0.8\">"
          "<title>layer {}, head {}: {:.1f} px</title></circle>\n",
          px(static_cast<double>(l + 1)), py(distance[l][h]), kTab10[h % 10], l + 1, h + 1,
          distance[l][h]);
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">layer</text>\n"
      "<text transform=\"translate(14,{:.1f}) rotate(-90)\" text-anchor=\"middle\">mean "
      "attention distance (pixels)</text>\n</svg>\n",
      (left + right) / 2, height - 8, (top + bottom) / 2);
  return out;
}

const char* kStyle = R"css(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 1200px; margin: 2em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.1em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
h3 { font-size: 1em; margin: 1.2em 0 0.2em; }
.sub { color: #666; margin-top: 0; word-break: break-all; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #eee; text-align: left; }
th { color: #555; font-weight: normal; }
.row { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-size: 0.85em; color: #444; text-align: center; }
img { image-rendering: pixelated; display: block; max-width: 100%; height: auto; }
.wrong { color: #c62828; }
.right { color: #2e7d32; }
.notes { color: #555; font-size: 0.9em; margin: 0.4em 0; }
svg { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
)css";

}  // namespace

std::string write_report(const std::string& path, const ReportData& data) {
  const std::string title = data.title.empty() ? "vitrine-explain report" : data.title;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += fmt::format("<title>{0}</title>\n<style>{1}</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
                     escape_html(title), kStyle);
  if (!data.checkpoint.empty())
    out += fmt::format("<p class=\"sub\">checkpoint {}</p>\n", escape_html(data.checkpoint));
  if (!data.settings.empty()) {
    out += "<h2>Settings</h2>\n<table>\n";
    for (const auto& [name, value] : data.settings)
      out +=
          fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", escape_html(name), escape_html(value));
    out += "</table>\n";
  }
  out += "<h2>Images</h2>\n";
  for (const ReportImage& im : data.images) out += image_row(im);
  if (!data.attention_distance.empty()) {
    out += fmt::format(
        "<h2>Mean attention distance</h2>\n<p>Per layer and head, the distance in pixels "
        "between a query patch and the patches it attends to, weighted by the attention and "
        "averaged over the queries and the images (patch {} px): the ViT paper's figure 7. Low "
        "values are local attention, high ones global. Colour: the head (cycling past ten).</p>\n",
        data.patch);
    out += distance_svg(data.attention_distance);
  }
  out += "</body>\n</html>\n";
  tools::write_file_atomically(path, out);
  return path;
}

}  // namespace vitrine::explain
