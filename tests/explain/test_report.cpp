// explain/report: the page of synthetic data (report_data.h): every method's caption, every
// <img> a data: URI whose base64 decodes to a PNG that decodes to the pixels that went in, the
// heads' threshold masks and the montages, no prediction line for a head-less model, one SVG
// circle per (layer, head) at the place the axes put it under a legend of the heads, escaping,
// nothing fetched, errors.
#include <regex>

#include <fmt/format.h>

#include "common/html.h"
#include "decode.h"
#include "explain/render.h"
#include "explain/report.h"
#include "report_data.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::explain;

namespace {

/// A height x width PNG whose pixels are all (r, 10, 20).
std::string solid(int64_t height, int64_t width, uint8_t r) {
  Rgb8 im{height, width, {}};
  for (int64_t i = 0; i < height * width; ++i) im.pixels.insert(im.pixels.end(), {r, 10, 20});
  return encode_png(im);
}

}  // namespace

TEST_CASE("explain report: captions, images as data URIs that decode, escaping, no network") {
  TempDir dir;
  const ReportData data = sample_report();
  const std::string path = dir / "index.html";
  CHECK(write_report(path, data) == path);
  CHECK(dir.files() == std::vector<std::string>{"index.html"});
  const std::string html = read_text(path);

  // Every method's caption, once per image; the originals' and the head grid's.
  for (const std::string& m : sample_methods())
    CHECK(count(html, "<figcaption>" + tools::escape_html(m) + "</figcaption>") == 2);
  CHECK(count(html, "<figcaption>original</figcaption>") == 2);
  CHECK(count(html, "<figcaption>attention heads</figcaption>") == 1);

  // 2 originals + 2 x 3 overlays + 1 head grid, in page order; each decodes to its PNG's pixels.
  std::vector<std::string> pngs;
  for (const ReportImage& im : data.images) {
    pngs.push_back(im.original_png);
    for (const auto& [method, png] : im.maps) pngs.push_back(png);
    if (!im.head_grid_png.empty()) pngs.push_back(im.head_grid_png);
  }
  CHECK(count(html, "<img ") == 9);
  const std::vector<std::string> srcs =
      captures(html, "<img src=\"data:image/png;base64,([A-Za-z0-9+/=]*)\"");
  REQUIRE(srcs.size() == pngs.size());
  for (size_t i = 0; i < srcs.size(); ++i) {
    INFO("image " << i);
    const std::string png = base64_decode(srcs[i]);
    CHECK(png == pngs[i]);
    CHECK(decode_png(png).pixels == decode_png(pngs[i]).pixels);
  }
  // Shown 112 px high (8 px images: 14x); the 8 x 17 grid at the original's scale.
  CHECK(count(html, "width=\"112\" height=\"112\"") == 8);
  CHECK(count(html, "width=\"238\" height=\"112\"") == 1);
  CHECK(html.find("image-rendering: pixelated") != std::string::npos);

  // The prediction, its probability, the true label (wrong for the first image, right for the
  // second), the notes.
  CHECK(
      html.find("predicted <b>Sneaker</b> (97.3%), true label <b class=\"wrong\">Ankle boot</b>") !=
      std::string::npos);
  CHECK(html.find("true label <b class=\"right\">Sneaker</b>") != std::string::npos);
  CHECK(html.find("<li>integrated-gradients completeness gap 0.0012</li>") != std::string::npos);

  // Escaped everywhere: names, title, checkpoint, notes, captions, alt texts.
  CHECK(html.find("<&>") == std::string::npos);
  CHECK(html.find("<h3>shoe &lt;&amp;&gt; 1</h3>") != std::string::npos);
  CHECK(html.find("<title>Explanations of run &lt;1&gt;</title>") != std::string::npos);
  CHECK(html.find("runs/a&amp;b/model.safetensors") != std::string::npos);
  CHECK(html.find("<li>x &lt; y</li>") != std::string::npos);
  CHECK(html.find("alt=\"shoe &lt;&amp;&gt; 1: a&lt;&amp;&gt;b\"") != std::string::npos);
  CHECK(html.find("<tr><th>discard_ratio</th><td>0.9</td></tr>") != std::string::npos);

  // Self-contained: no script, nothing fetched (outside the data: URIs, the only URL is the SVG
  // namespace).
  const std::string text =
      std::regex_replace(html, std::regex("data:image/png;base64,[A-Za-z0-9+/=]*"), "data:");
  CHECK(text.find("<script") == std::string::npos);
  CHECK(count(text, "http") == 1);
  CHECK(text.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  CHECK(text.find("url(") == std::string::npos);
  CHECK(text.find("href") == std::string::npos);
}

TEST_CASE("explain report: the attention-distance plot has one circle per layer and head") {
  TempDir dir;
  ReportData data = sample_report();
  const std::string html = read_text(write_report(dir / "index.html", data));
  CHECK(count(html, "<svg") == 1);
  CHECK(count(html, "<circle cx") == 12);  // the points
  // The legend: a dot in each head's tab10 colour and "head k", counted from 0 as --head counts.
  CHECK(captures(html, "<text class=\"legend\"[^>]*>([^<]*)</text>") ==
        std::vector<std::string>{"head 0", "head 1", "head 2", "head 3"});
  CHECK(captures(html, "<circle class=\"key\"[^>]*fill=\"([^\"]*)\"") ==
        std::vector<std::string>{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"});
  // Head 3's points have head 3's colour.
  CHECK(count(html, "fill=\"#d62728\" fill-opacity=\"0.8\"><title>layer") == 3);
  CHECK(html.find("<title>layer 1, head 2: 18.3 px</title>") != std::string::npos);
  // y: 0..27 -> step 5.4 -> 10, ticks 0..30; x: the layers 0..2, as --layer counts.
  CHECK(captures(html, "<text class=\"tick\"[^>]*>([^<]*)</text>") ==
        std::vector<std::string>{"0", "10", "20", "30", "0", "1", "2"});
  // The plot spans x 64..624 for layers 0.5..3.5 and y 292..30 for 0..30 (one legend row above
  // it): layer 0, 3 px at (64 + 0.5 / 3 * 560, 292 - 3 / 30 * 262) = (157.3, 265.8).
  CHECK(html.find("<circle cx=\"157.3\" cy=\"265.8\"") != std::string::npos);
  CHECK(html.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"334\"") !=
        std::string::npos);
  CHECK(html.find("patch 4 px") != std::string::npos);

  data.attention_distance.clear();  // no distances: no plot
  const std::string without = read_text(write_report(dir / "index.html", data));
  CHECK(without.find("<svg") == std::string::npos);
  CHECK(without.find("Mean attention distance") == std::string::npos);
}

TEST_CASE("explain report: errors name the image and the picture") {
  TempDir dir;
  ReportData data = sample_report();
  data.images[1].maps[1].second = "GIF89a not a png";
  CHECK_ERROR_CONTAINS(write_report(dir / "index.html", data), "image 'bag'",
                       "the chefer overlay is not a PNG");
  data = sample_report();
  data.images[0].original_png.clear();
  CHECK_ERROR_CONTAINS(write_report(dir / "index.html", data), "image 'shoe <&> 1'",
                       "no original PNG");
  data = sample_report();
  data.attention_distance[2][1] = NAN;
  CHECK_ERROR_CONTAINS(write_report(dir / "index.html", data), "layer 2 head 1", "nan");
  CHECK(dir.files().empty());  // nothing written
  const std::string nowhere = dir / "missing/index.html";
  CHECK_ERROR_CONTAINS(write_report(nowhere, sample_report()), nowhere, "cannot write");
}

TEST_CASE("explain report: a legend of 12 heads wraps into rows and the plot moves down") {
  TempDir dir;
  ReportData data = sample_report();
  data.attention_distance.assign(2, std::vector<double>(12, 5.0));
  const std::string html = read_text(write_report(dir / "index.html", data));
  std::vector<std::string> names;
  for (int h = 0; h < 12; ++h) names.push_back("head " + std::to_string(h));
  CHECK(captures(html, "<text class=\"legend\"[^>]*>([^<]*)</text>") == names);
  CHECK(count(html, "<circle class=\"key\"") == 12);
  CHECK(count(html, "<circle cx") == 24);
  // Head 10 cycles back to tab10's first colour.
  CHECK(captures(html, "<circle class=\"key\"[^>]*fill=\"([^\"]*)\"")[10] == "#1f77b4");
  // Every legend entry within the chart's 640 px; more than one row, so the SVG is taller.
  const std::vector<std::string> xs = captures(html, "<text class=\"legend\" x=\"([0-9.]*)\"");
  REQUIRE(xs.size() == 12);
  for (const std::string& x : xs) CHECK(std::stod(x) + 45 < 640);
  const std::vector<std::string> ys = captures(html, "<text class=\"legend\"[^>]* y=\"([0-9]*)\"");
  REQUIRE(ys.size() == 12);
  CHECK(ys.front() == "19");
  CHECK(ys.back() != "19");
  const int64_t rows = (std::stoll(ys.back()) - 19) / 18 + 1;
  CHECK(html.find(fmt::format("height=\"{}\"", 334 + 18 * (rows - 1))) != std::string::npos);
}

TEST_CASE("explain report: the heads' threshold masks beside the head grid, and the grids") {
  TempDir dir;
  ReportData data = sample_report();
  data.threshold = 0.6;
  data.images[0].head_masks_png = solid(8, 17, 200);
  data.grids = {{"rollout", solid(20, 30, 1)}, {"a<&>b", solid(20, 30, 2)}};
  const std::string html = read_text(write_report(dir / "index.html", data));
  CHECK(count(html,
              "<figcaption>threshold masks (keep 60% of each head&#39;s "
              "attention)</figcaption>") == 1);
  // The masks right after the head grid, at the original's scale (8 x 17 -> 112 x 238).
  const size_t heads = html.find("<figcaption>attention heads</figcaption>");
  const size_t masks = html.find("alt=\"shoe &lt;&amp;&gt; 1: threshold masks\"");
  REQUIRE(heads != std::string::npos);
  REQUIRE(masks != std::string::npos);
  CHECK(masks > heads);
  CHECK(html.find("<figure>", heads) < masks);
  CHECK(html.find("</div>", heads) > masks);  // in the same row
  CHECK(count(html, "width=\"238\" height=\"112\"") == 2);

  // The grids: a section after the images, one figure per method at its own size, in order.
  const size_t grids = html.find("<h2>Grids</h2>");
  REQUIRE(grids != std::string::npos);
  CHECK(grids > masks);
  CHECK(html.find("<h2>Mean attention distance</h2>") > grids);
  const std::string tail = html.substr(grids);
  CHECK(captures(tail, "<figcaption>([^<]*)</figcaption>") ==
        std::vector<std::string>{"rollout", "a&lt;&amp;&gt;b"});
  CHECK(count(tail, "width=\"30\" height=\"20\"") == 2);
  const std::vector<std::string> srcs =
      captures(tail, "<img src=\"data:image/png;base64,([A-Za-z0-9+/=]*)\"");
  REQUIRE(srcs.size() == 2);
  CHECK(base64_decode(srcs[0]) == data.grids[0].second);
  CHECK(base64_decode(srcs[1]) == data.grids[1].second);

  // Masks with an unknown threshold: no percentage; no grids: no section.
  data.threshold = 0;
  data.grids.clear();
  const std::string plain = read_text(write_report(dir / "index.html", data));
  CHECK(count(plain, "<figcaption>threshold masks</figcaption>") == 1);
  CHECK(plain.find("Grids") == std::string::npos);
  data.images[0].head_masks_png = "not a png";
  CHECK_ERROR_CONTAINS(write_report(dir / "index.html", data), "image 'shoe <&> 1'",
                       "head masks is not a PNG");
}

TEST_CASE("explain report: a model without a head has no prediction line") {
  TempDir dir;
  ReportData data = sample_report();
  for (ReportImage& im : data.images) {
    im.predicted.clear();
    im.probability = 0;
    im.target.clear();
  }
  data.images[1].label.clear();
  const std::string html = read_text(write_report(dir / "index.html", data));
  CHECK(html.find("predicted") == std::string::npos);
  CHECK(html.find("0.0%") == std::string::npos);
  CHECK(html.find("explained class") == std::string::npos);
  // The label, when known, is still said.
  CHECK(html.find("<p>label <b>Ankle boot</b></p>") != std::string::npos);
  CHECK(count(html, "<p>label") == 1);
  // The pictures are all there.
  CHECK(count(html, "<img ") == 9);
}
