// vitrine-explain's pages (see report.h): the index.html of image rows of <figure>s with data: URI
// PNGs and the attention-distance scatter plot as inline SVG; the evaluation's tables, mean curves
// and shaded sanity table.
#include "explain/report.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "backends/error.h"
#include "common/files.h"
#include "common/html.h"
#include "explain/evaluate.h"

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

std::string image_row(const ReportImage& im, double threshold) {
  const auto original = png_size(im.original_png, im.name, "original");
  // The original and the overlays are shown kDisplayHeight high, the head grid at the original's
  // scale (so that tiles of the image's size match it).
  const double scale = kDisplayHeight / static_cast<double>(std::max<int64_t>(original.second, 1));
  std::string out = fmt::format("<section class=\"image\">\n<h3>{}</h3>\n", escape_html(im.name));
  if (!im.predicted.empty()) {
    out += fmt::format("<p>predicted <b>{}</b> ({:.1f}%)", escape_html(im.predicted),
                       100 * im.probability);
    if (!im.label.empty())
      out += fmt::format(", true label <b class=\"{}\">{}</b>",
                         im.label == im.predicted ? "right" : "wrong", escape_html(im.label));
    out += fmt::format("; explained class <b>{}</b></p>\n", escape_html(im.target));
  } else if (!im.label.empty()) {  // a model without a head: no prediction line
    out += fmt::format("<p>label <b>{}</b></p>\n", escape_html(im.label));
  }
  out += "<div class=\"row\">\n";
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
  if (!im.head_masks_png.empty())
    out += figure(img(im.head_masks_png, png_size(im.head_masks_png, im.name, "head masks"), scale,
                      im.name + ": threshold masks"),
                  threshold > 0 ? fmt::format("threshold masks (keep {:g}% of each head's "
                                              "attention)",
                                              100 * threshold)
                                : std::string("threshold masks"));
  for (const auto& [caption, png] : im.figures)
    out +=
        figure(img(png, png_size(png, im.name, caption), scale, im.name + ": " + caption), caption);
  out += "</div>\n";
  if (!im.notes.empty()) {
    out += "<ul class=\"notes\">\n";
    for (const std::string& n : im.notes) out += "<li>" + escape_html(n) + "</li>\n";
    out += "</ul>\n";
  }
  return out + "</section>\n";
}

/// The ViT paper's figure of mean attention distance: one point per head at its layer, under a
/// legend of every head's colour (rows above the plot, as tools::line_chart_svg places its own).
std::string distance_svg(const std::vector<std::vector<double>>& distance) {
  const int width = 640;
  const double left = 64, right = width - 16.0, plot_height = 262;
  const int64_t layers = static_cast<int64_t>(distance.size());
  double hi = 0;
  size_t heads = 0;
  for (size_t l = 0; l < distance.size(); ++l) {
    heads = std::max(heads, distance[l].size());
    for (size_t h = 0; h < distance[l].size(); ++h) {
      VT_CHECK(std::isfinite(distance[l][h]),
               "write_report: the attention distance of layer {} head {} is {}", l, h,
               distance[l][h]);
      hi = std::max(hi, distance[l][h]);
    }
  }
  // The legend: (x, row) per head, "head k" counted from 0 as --head counts, wrapping at the
  // plot's right edge.
  std::vector<std::pair<double, int>> legend;
  double lx = left;
  int rows = 1;
  for (size_t h = 0; h < heads; ++h) {
    const double w = 14 + tools::text_width(fmt::format("head {}", h));
    if (lx > left && lx + w > right) {
      lx = left;
      ++rows;
    }
    legend.emplace_back(lx, rows - 1);
    lx += w + 14;
  }
  const double top = 30 + 18.0 * (rows - 1), bottom = top + plot_height;
  const int height = static_cast<int>(bottom) + 42;

  const tools::Axis ay = tools::nice_axis(0, hi);
  // x: one column per layer, labelled 0..L-1 as --layer counts, half a column of margin on
  // either side.
  auto px = [&](double layer) {
    return left + (layer - 0.5) / static_cast<double>(layers) * (right - left);
  };
  auto py = [&](double y) { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); };

  std::string out =
      tools::svg_open(width, height) + tools::plot_frame(left, top, right, bottom, ay);
  // Every layer is labelled up to 16 layers; deeper models at the multiples of a nice step.
  const int64_t every =
      layers <= 16 ? 1 : std::max<int64_t>(1, std::lround(tools::nice_axis(1, layers).tick(1)));
  for (int64_t l = 1; l <= layers; ++l) {
    if (l % every != 0 && l != 1) continue;
    out += fmt::format(
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
        px(static_cast<double>(l)), bottom + 16, l - 1);
  }
  for (size_t l = 0; l < distance.size(); ++l)
    for (size_t h = 0; h < distance[l].size(); ++h)
      out += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" fill-opacity=\"0.8\">"
          "<title>layer {}, head {}: {:.1f} px</title></circle>\n",
          px(static_cast<double>(l + 1)), py(distance[l][h]), kTab10[h % 10], l, h, distance[l][h]);
  for (size_t h = 0; h < heads; ++h) {
    const auto [x, row] = legend[h];
    const int y = 15 + 18 * row;
    out += fmt::format(
        "<circle class=\"key\" cx=\"{:.1f}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"/>"
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{}\">head {}</text>\n",
        x + 4, y, kTab10[h % 10], x + 12, y + 4, h);
  }
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

// ---- evaluation page ---------------------------------------------------------------------------

const char* kEvalStyle = R"css(
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th .hint { display: block; font-size: 0.8em; color: #888; }
td.best { font-weight: bold; background: #e8f5e9; }
tr.baseline td { font-style: italic; color: #666; }
table.eval td:first-child { white-space: nowrap; }
p.how { color: #444; max-width: 60em; }
)css";

// The curves' colours: tab10 without its grey, which the baselines get (random light, centre dark).
constexpr const char* kMethodColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                          "#8c564b", "#e377c2", "#bcbd22", "#17becf"};

bool is_baseline(const std::string& row) { return row == "random" || row == "centre"; }

/// The summary of per-image values, when there are some and their mean is finite.
std::optional<Stat> finite_stat(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  const Stat s = summarize(values);
  if (!std::isfinite(s.mean)) return std::nullopt;
  return s;
}

/// A row's summary in one column (a map row -> per-image values).
std::optional<Stat> stat_of(const std::map<std::string, std::vector<double>>& column,
                            const std::string& row) {
  auto it = column.find(row);
  return it == column.end() ? std::nullopt : finite_stat(it->second);
}

/// "mean [lo, hi]" with `digits` decimals, or "-" when there is no finite mean.
std::string stat_text(const std::optional<Stat>& s, int digits) {
  if (!s) return "-";
  auto num = [&](double v) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "-"; };
  return fmt::format("{} [{}, {}]", num(s->mean), num(s->lo), num(s->hi));
}

struct Column {
  std::string title, hint;
  const std::map<std::string, std::vector<double>>* values;
  bool lower_is_better;
};

std::string faithfulness_table(const EvalResult& r, const std::vector<Column>& columns) {
  // The best mean per column among the methods (the baselines are never best).
  std::vector<std::optional<double>> best(columns.size());
  for (size_t c = 0; c < columns.size(); ++c)
    for (const std::string& row : r.rows) {
      if (is_baseline(row)) continue;
      const auto s = stat_of(*columns[c].values, row);
      if (s && (!best[c] || (columns[c].lower_is_better ? s->mean < *best[c] : s->mean > *best[c])))
        best[c] = s->mean;
    }
  std::string out = "<table class=\"eval\">\n<tr><th>method</th>";
  for (const Column& c : columns)
    out += fmt::format("<th class=\"num\">{}<span class=\"hint\">{}</span></th>",
                       escape_html(c.title), escape_html(c.hint));
  out += "</tr>\n";
  for (const std::string& row : r.rows) {
    const bool baseline = is_baseline(row);
    out +=
        fmt::format("<tr{}><td>{}</td>", baseline ? " class=\"baseline\"" : "", escape_html(row));
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto s = stat_of(*columns[c].values, row);
      const bool is_best = !baseline && s && best[c] && s->mean == *best[c];
      out += fmt::format("<td class=\"num{}\">{}</td>", is_best ? " best" : "",
                         escape_html(stat_text(s, 3)));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

/// One mean curve per row: point s of S + 1 at x = s / S.
std::string curves_svg(const EvalResult& r,
                       const std::map<std::string, std::vector<double>>& curves,
                       const std::string& x_title) {
  std::vector<tools::Series> series;
  size_t method = 0;
  for (const std::string& row : r.rows) {
    auto it = curves.find(row);
    if (it == curves.end() || it->second.empty()) continue;
    const std::string colour = row == "random"   ? "#aaaaaa"
                               : row == "centre" ? "#555555"
                                                 : kMethodColours[method++ % 9];
    tools::Series s{row, colour, {}, false};
    const size_t n = it->second.size();
    for (size_t i = 0; i < n; ++i)
      s.points.emplace_back(n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0,
                            it->second[i]);
    series.push_back(std::move(s));
  }
  return tools::line_chart_svg(series, x_title, "target probability", 560, 340);
}

/// White at |rho| = 0 to tab10's red (214, 39, 40) at |rho| = 1; white text on the darker half.
std::string sanity_cell(const std::vector<double>& per_image) {
  const std::optional<Stat> s = finite_stat(per_image);
  if (!s) return "<td class=\"num\">-</td>";
  const double a = std::clamp(std::abs(s->mean), 0.0, 1.0);
  auto mix = [&](int to) { return static_cast<int>(std::lround(255 + (to - 255) * a)); };
  return fmt::format("<td class=\"num\" style=\"background:#{:02x}{:02x}{:02x};color:{}\">{}</td>",
                     mix(214), mix(39), mix(40), a > 0.6 ? "#fff" : "#222",
                     escape_html(stat_text(s, 2)));
}

std::string sanity_table(const EvalResult& r) {
  std::string out = "<table class=\"eval sanity\">\n<tr><th>method</th>";
  for (const std::string& step : r.sanity_steps)
    out += fmt::format("<th class=\"num\">{}</th>", escape_html(step));
  out += "</tr>\n";
  for (const std::string& row : r.rows) {
    auto it = r.sanity.find(row);
    if (it == r.sanity.end()) continue;
    out += fmt::format("<tr><td>{}</td>", escape_html(row));
    for (size_t i = 0; i < r.sanity_steps.size(); ++i)
      out += i < it->second.size() ? sanity_cell(it->second[i]) : "<td class=\"num\">-</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

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
  for (const ReportImage& im : data.images) out += image_row(im, data.threshold);
  if (!data.grids.empty()) {
    out +=
        "<h2>Grids</h2>\n<p>Every image under one method, captioned with its label and the "
        "prediction (the same overlays as above, side by side).</p>\n<div class=\"row\">\n";
    for (const auto& [method, png] : data.grids) {
      const auto size = png_size(png, "grid", method);
      out += figure(img(png, size, 1.0, method + " grid"), method);
    }
    out += "</div>\n";
  }
  if (!data.attention_distance.empty()) {
    out += fmt::format(
        "<h2>Mean attention distance</h2>\n<p>Per layer and head, the distance in pixels "
        "between a query patch and the patches it attends to, weighted by the attention and "
        "averaged over the queries and the images (patch {} px): the ViT paper's figure 7. Low "
        "values are local attention, high ones global. Colour: the head, as the legend names it "
        "(layers and heads counted from 0, as --layer and --head count them; the colours "
        "cycle past ten heads).</p>\n",
        data.patch);
    out += distance_svg(data.attention_distance);
  }
  out += "</body>\n</html>\n";
  tools::write_file_atomically(path, out);
  return path;
}

std::string write_evaluation_report(
    const std::string& path, const EvalResult& result, const std::string& title,
    const std::vector<std::pair<std::string, std::string>>& settings) {
  const EvalResult& r = result;
  const std::string heading = title.empty() ? "vitrine-explain evaluation" : title;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += fmt::format("<title>{0}</title>\n<style>{1}{2}</style>\n</head>\n<body>\n<h1>{0}</h1>\n",
                     escape_html(heading), kStyle, kEvalStyle);
  out += fmt::format("<p class=\"sub\">{} images", r.images);
  if (std::isfinite(r.seconds) && r.seconds > 0) out += fmt::format(", {:.0f} s", r.seconds);
  out += "</p>\n";
  if (!settings.empty()) {
    out += "<h2>Settings</h2>\n<table>\n";
    for (const auto& [name, value] : settings)
      out +=
          fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", escape_html(name), escape_html(value));
    out += "</table>\n";
  }

  const bool loc = !r.pointing.empty();
  std::vector<Column> columns = {{"deletion AUC", "lower is better", &r.deletion_auc, true},
                                 {"insertion AUC", "higher is better", &r.insertion_auc, false}};
  if (loc) {
    columns.push_back({"pointing game", "higher is better", &r.pointing, false});
    columns.push_back({"energy in box", "higher is better", &r.energy, false});
  }
  out += fmt::format("<h2>Faithfulness{}</h2>\n", loc ? " and localisation" : "");
  out += fmt::format(
      "<p class=\"how\">Deletion removes the patches in the order of the map's relevance, most "
      "relevant first, and follows the explained class's probability: a faithful map makes it "
      "fall fast, so a <b>lower</b> deletion AUC (area under the curve) is better. Insertion adds "
      "them in that order to an image with every patch removed: a <b>higher</b> insertion AUC is "
      "better.{} Cells: mean [95% interval] over {} images; the best method of each column is "
      "shaded. The baselines in italics, <i>random</i> (uniform noise) and <i>centre</i> (a "
      "Gaussian at the image's centre), are never highlighted: a method worth its cost beats "
      "them.</p>\n",
      loc ? " Pointing game: the share of images whose map has its maximum in the object's box; "
            "energy in box: the share of the map's positive relevance that lies in the box; "
            "<b>higher</b> is better for both."
          : "",
      r.images);
  out += faithfulness_table(r, columns);

  out +=
      "<h2>Mean curves</h2>\n<p class=\"how\">The explained class's probability, averaged over "
      "the images, as the patches are removed (deletion: the faster it falls, the better) or "
      "inserted (insertion: the faster it rises, the better), most relevant first.</p>\n"
      "<div class=\"row\">\n";
  out += "<figure>" + curves_svg(r, r.deletion_curve, "fraction of patches removed") +
         "<figcaption>deletion</figcaption></figure>\n";
  out += "<figure>" + curves_svg(r, r.insertion_curve, "fraction of patches inserted") +
         "<figcaption>insertion</figcaption></figure>\n</div>\n";

  out += "<h2>Sanity</h2>\n";
  if (r.sanity_steps.empty()) {
    out += "<p class=\"how\">The sanity checks were not run.</p>\n";
  } else {
    out +=
        "<p class=\"how\">The model's layers are re-initialised from the top, one more step per "
        "column (cascading randomisation), and each method's map of the randomised model is "
        "compared with its map of the trained one by Spearman's rank correlation &rho; (mean "
        "[95% interval] over the images). A map that explains the model changes as its weights "
        "go: &rho; should fall towards 0. <b>&rho; near 1 means the map does not depend on the "
        "weights.</b> Shade: |&rho;|, from white (0) to red (1).</p>\n";
    out += sanity_table(r);
  }
  out += "</body>\n</html>\n";
  tools::write_file_atomically(path, out);
  return path;
}

std::string size_groups_index_html(const std::string& checkpoint,
                                   const std::vector<std::string>& folders,
                                   const std::vector<nlohmann::json>& predictions) {
  using tools::escape_html;
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>vitrine-explain: {}"
      "</title>\n<style>body{{font-family:sans-serif;margin:2em}}li{{margin:.2em 0}}</style>"
      "</head><body>\n<h1>{}</h1>\n<p>The images have {} sizes; each size was explained as one "
      "batch at its own size, in its own folder with its own report.</p>\n",
      escape_html(checkpoint), escape_html(checkpoint), folders.size());
  for (const std::string& f : folders) {
    html += fmt::format("<h2><a href=\"{}/index.html\">{}</a></h2>\n<ul>\n", escape_html(f),
                        escape_html(f));
    for (const nlohmann::json& p : predictions) {
      if (p.value("folder", "") != f) continue;
      std::string line = escape_html(p.value("name", ""));
      if (p.contains("predicted_name"))
        line += fmt::format(": predicted {} ({:.1f}%)",
                            escape_html(p.at("predicted_name").get<std::string>()),
                            100 * p.value("probability", 0.0));
      html += "<li>" + line + "</li>\n";
    }
    html += "</ul>\n";
  }
  return html + "</body></html>\n";
}

}  // namespace vitrine::explain
