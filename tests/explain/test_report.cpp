// tools/explain/report: the page of synthetic data (report_data.h): every method's caption, every
// <img> a data: URI whose base64 decodes to a PNG that decodes to the pixels that went in, one
// SVG circle per (layer, head) at the place the axes put it, escaping, nothing fetched, errors.
#include <regex>

#include "decode.h"
#include "report_data.h"
#include "test_util.h"
#include "tools/common/html.h"
#include "tools/explain/report.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::explain;

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
  CHECK(count(html, "<circle") == 12);
  // the legend names the heads (0-based, as --head counts) in their colours
  CHECK(captures(html, "<text class=\"legend\"[^>]*>([^<]*)</text>") ==
        std::vector<std::string>{"head 0", "head 1", "head 2", "head 3"});
  CHECK(html.find("<title>layer 2, head 3: 18.3 px</title>") != std::string::npos);
  // y: 0..27 -> step 5.4 -> 10, ticks 0..30; x: the layers 1..3.
  CHECK(captures(html, "<text class=\"tick\"[^>]*>([^<]*)</text>") ==
        std::vector<std::string>{"0", "10", "20", "30", "1", "2", "3"});
  // The plot spans x 64..624 for layers 0.5..3.5 and y 278..16 for 0..30: layer 1, 3 px at
  // (64 + 0.5 / 3 * 560, 278 - 3 / 30 * 262) = (157.3, 251.8).
  CHECK(html.find("<circle cx=\"157.3\" cy=\"251.8\"") != std::string::npos);
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
  CHECK_ERROR_CONTAINS(write_report(dir / "index.html", data), "layer 3 head 2", "nan");
  CHECK(dir.files().empty());  // nothing written
  const std::string nowhere = dir / "missing/index.html";
  CHECK_ERROR_CONTAINS(write_report(nowhere, sample_report()), nowhere, "cannot write");
}
