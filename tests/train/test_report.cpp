// train/report: the HTML page of a run folder made by hand (metrics.jsonl, the default
// config, a confusion matrix from an Evaluator with a class named "<&>"): what it shows, that it
// escapes and fetches nothing; the chart's ticks and points worked out from the nice-axis rule
// (common/html.h); the confusion grid's counts and shades; errors naming the file and line.
#include <cmath>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "common/html.h"
#include "test_util.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/report.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace tr = vitrine::train;
using ops::from_vector;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> tick_labels(const std::string& svg) {
  return captures(svg, "<text class=\"tick\"[^>]*>([^<]*)</text>");
}

/// Logits [B, C] whose argmax is pred[i].
Tensor logits_for(const std::vector<int64_t>& pred, int64_t c) {
  std::vector<double> v;
  for (int64_t p : pred)
    for (int64_t j = 0; j < c; ++j) v.push_back(j == p ? 2.0 : 0.1 * static_cast<double>(j));
  return from_vector(v, {static_cast<int64_t>(pred.size()), c});
}

const std::vector<std::string> kClasses = {"T-shirt/top", "<&>", "dog"};

/// 15 test examples, 14 right (93.33%): confusion [[5, 0, 0], [0, 5, 0], [0, 1, 4]].
tr::Evaluation test_evaluation() {
  const std::vector<int64_t> truth = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
  std::vector<int64_t> pred = truth;
  pred[10] = 1;
  tr::Evaluator ev(3);
  ev.add(logits_for(pred, 3), from_vector(truth), 4.5);
  return ev.result();
}

/// A run folder as the trainer leaves it; without the test set's files when `finished` is false.
void make_run(const TempDir& run, bool finished) {
  const tr::Evaluation e = test_evaluation();
  std::vector<json> lines = {
      {{"type", "train"},
       {"epoch", 0},
       {"step", 10},
       {"global_step", 10},
       {"loss", 2.0},
       {"accuracy", 0.3},
       {"lr", 0.0005}},
      {{"type", "train"},
       {"epoch", 0},
       {"step", 20},
       {"global_step", 20},
       {"loss", 1.5},
       {"accuracy", 0.5},
       {"lr", 0.001},
       {"elapsed_s", 3.5}},  // an unknown key
      {{"type", "eval"},
       {"epoch", 0},
       {"step", 20},
       {"global_step", 20},
       {"loss", 1.4},
       {"accuracy", 0.55},
       {"macro_f1", 0.5},
       {"best_accuracy", 0.55}},
      {{"type", "speed"}, {"global_step", 20}, {"images_per_s", 900}},  // an unknown type
      {{"type", "train"},
       {"epoch", 1},
       {"step", 10},
       {"global_step", 30},
       {"loss", nullptr},
       {"accuracy", 0.7},
       {"lr", 0.0008}},  // a NaN loss, as nlohmann writes it
      {{"type", "eval"},
       {"epoch", 1},
       {"step", 20},
       {"global_step", 40},
       {"loss", 0.9},
       {"accuracy", 0.8},
       {"macro_f1", 0.79},
       {"best_accuracy", 0.8}}};
  if (finished)
    lines.push_back({{"type", "test"},
                     {"global_step", 40},
                     {"loss", e.loss},
                     {"accuracy", e.accuracy},
                     {"train_seconds", 3725.4},
                     {"macro_f1", e.macro_f1}});
  std::string text;
  for (const json& l : lines) text += l.dump() + "\n";
  write_file(run / "metrics.jsonl", text);
  write_file(run / "config.json", tr::default_config().dump(2));
  if (finished) write_file(run / "confusion_matrix.json", e.to_json(kClasses).dump(2));
}

}  // namespace

TEST_CASE("report: the page of a finished run shows its summary, curves, table and matrix") {
  TempDir run;
  make_run(run, true);
  const tr::Evaluation e = test_evaluation();
  REQUIRE(e.accuracy == doctest::Approx(14.0 / 15));
  const std::string path = tr::write_report(run.dir.string());
  CHECK(path == run / "report.html");
  // Written through a temp file that is gone.
  CHECK(run.files() == std::vector<std::string>{"config.json", "confusion_matrix.json",
                                                "metrics.jsonl", "report.html"});
  const std::string html = read_file(path);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);

  // Four SVGs: loss, accuracy, learning rate, confusion matrix; all with data.
  CHECK(count(html, "<svg") == 4);
  CHECK(count(html, "</svg>") == 4);
  CHECK(count(html, "no data") == 0);

  // Summary: test accuracy (14/15) and macro F1, best validation accuracy, config.json's values.
  CHECK(html.find("<b>93.33%</b>") != std::string::npos);
  // Macro F1: (1 + 10/11 + 8/9) / 3 = 0.93266.
  CHECK(html.find("<th>Test macro F1</th><td>0.9327</td>") != std::string::npos);
  CHECK(html.find("<th>Test loss</th><td>0.3000</td>") != std::string::npos);  // 4.5 / 15
  CHECK(html.find("<th>Best validation accuracy</th><td>80.00%</td>") != std::string::npos);
  CHECK(html.find("<th>Steps</th><td>40</td>") != std::string::npos);
  CHECK(html.find("<th>Training time</th><td>1:02:05</td>") != std::string::npos);
  // The default model: the fmnist preset (28x28 grey, patch 4, dim 128, 4 heads, MLP 256), depth 3,
  // after a convolutional stem.
  CHECK(html.find("ViT 1x28x28 in 4x4 patches (after a convolutional stem of widths 32, 64, 128), "
                  "dim 128, depth 3, 4 heads, MLP 256, 10 classes") != std::string::npos);
  CHECK(html.find("<th>Data set</th><td>fashion-mnist, batch 128, no validation split (every "
                  "training image trains)") != std::string::npos);
  CHECK(html.find("<th>Optimizer</th><td>adamw, lr 0.001, weight decay 0.05, label_smoothing 0.1"
                  "</td>") != std::string::npos);
  const std::string epochs = tr::default_config()["train"]["epochs"].dump();  // config.json's
  CHECK(html.find("<th>Epochs</th><td>" + epochs + "</td>") != std::string::npos);
  CHECK(html.find("not evaluated") == std::string::npos);

  // Class names escaped everywhere, never raw.
  CHECK(html.find("&lt;&amp;&gt;") != std::string::npos);
  CHECK(html.find("<&>") == std::string::npos);
  CHECK(html.find("<td>T-shirt/top</td>") != std::string::npos);
  // Per class: "<&>" is predicted 6 times, 5 right: P 5/6, R 1, F1 10/11.
  CHECK(html.find("<tr><td>&lt;&amp;&gt;</td><td class=\"num\">0.8333</td><td class=\"num\">"
                  "1.0000</td><td class=\"num\">0.9091</td><td class=\"num\">5</td></tr>") !=
        std::string::npos);

  // Curves: train loss has 2 finite points (the null one is skipped), validation loss 2 dots
  // joined by a dashed line; train accuracy 3 points; the lr 3 points.
  const std::vector<std::string> polylines = captures(html, "<polyline[^>]*points=\"([^\"]*)\"");
  std::vector<size_t> sizes;
  for (const std::string& p : polylines) sizes.push_back(count(p, ","));
  CHECK(sizes == std::vector<size_t>{2, 2, 3, 2, 3});

  // Self-contained: the only URL is the SVG namespace, and nothing is loaded or run.
  CHECK(count(html, "http://") == count(html, "http://www.w3.org/2000/svg"));
  CHECK(count(html, "http://www.w3.org/2000/svg") == 4);
  CHECK(count(html, "https://") == 0);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);

  // A second report replaces the first.
  write_file(run / "report.html", "old");
  tr::write_report(run.dir.string());
  CHECK(read_file(path) == html);
}

TEST_CASE("report: a stopped run (no confusion_matrix.json) says the test set was not evaluated") {
  TempDir run;
  make_run(run, false);
  const std::string html = read_file(tr::write_report(run.dir.string()));
  CHECK(html.find("<th>Test set</th><td>not evaluated yet</td>") != std::string::npos);
  CHECK(html.find("The test set was not evaluated yet") != std::string::npos);
  CHECK(count(html, "<svg") == 3);  // the curves, no confusion matrix
  CHECK(html.find("Confusion matrix") == std::string::npos);
  CHECK(html.find("<th>Best validation accuracy</th><td>80.00%</td>") != std::string::npos);

  // A run that has logged nothing yet, without a config: charts saying "no data".
  TempDir empty;
  write_file(empty / "metrics.jsonl", "");
  const std::string blank = read_file(tr::write_report(empty.dir.string()));
  CHECK(count(blank, "<svg") == 3);
  CHECK(count(blank, ">no data</text>") == 3);
  CHECK(blank.find("<th>Config</th><td>" + empty / "config.json" + " not found</td>") !=
        std::string::npos);
}

TEST_CASE("report: errors name the file, and the line of metrics.jsonl") {
  TempDir run;
  const std::string metrics = run / "metrics.jsonl";
  CHECK_ERROR_CONTAINS(tr::write_report(run.dir.string()), metrics, "does not exist");

  write_file(
      metrics,
      "{\"type\": \"train\", \"global_step\": 1, \"loss\": 1}\n{\"type\": \"train\", \"glo\n");
  CHECK_ERROR_CONTAINS(tr::write_report(run.dir.string()), metrics, "line 2: invalid JSON");
  write_file(metrics, "{\"type\": \"train\", \"global_step\": 1}\n\n[1, 2]\n");
  CHECK_ERROR_CONTAINS(tr::write_report(run.dir.string()), metrics, "line 3 is not a JSON object");

  write_file(metrics, "{\"type\": \"train\", \"global_step\": 1, \"loss\": 1}\n");
  write_file(run / "config.json", "{\"model\": ");
  CHECK_ERROR_CONTAINS(tr::write_report(run.dir.string()), run / "config.json",
                       "invalid JSON at line 1");
  write_file(run / "config.json", tr::default_config().dump());
  write_file(run / "confusion_matrix.json", "{\"accuracy\": 1}");
  CHECK_ERROR_CONTAINS(tr::write_report(run.dir.string()), run / "confusion_matrix.json");
  CHECK(run.files() == std::vector<std::string>{"config.json", "confusion_matrix.json",
                                                "metrics.jsonl"});  // no report written
}

TEST_CASE("report: line_chart_svg ticks, points and legend") {
  // x 0..100: step = the 1/2/5 x 10^k at least 100 / 5 = 20 -> 20, ticks 0, 20, ..., 100.
  // y 0.2..0.9: at least 0.7 / 5 = 0.14 -> 0.2, from 0.2 (at or below 0.2) to 1.0 (above 0.9).
  const std::string svg =
      tools::line_chart_svg({{"a<b", "#123456", {{0, 0.2}, {50, 0.5}, {100, 0.9}}, false},
                             {"empty", "#000", {}, false},
                             {"val", "#abcdef", {{50, 0.4}, {100, 0.6}}, true}},
                            "global step", "accuracy");
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"320\"", 0) ==
        0);
  // y ticks (with the frame's grid), then x ticks.
  CHECK(tick_labels(svg) == std::vector<std::string>{"0.2", "0.4", "0.6", "0.8", "1.0", "0", "20",
                                                     "40", "60", "80", "100"});
  // The plot spans x 64..624 and y 278 (bottom, 0.2) .. 30 (top, 1.0): 0.9 is at
  // 278 - 0.7 / 0.8 * 248 = 61.
  const std::vector<std::string> lines = captures(svg, "<polyline[^>]*points=\"([^\"]*)\"");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "64.0,278.0 344.0,185.0 624.0,61.0");
  CHECK(lines[1] == "344.0,216.0 624.0,154.0");  // the dots' dashed line
  CHECK(count(svg, "<circle") == 3);             // two dots and the legend's
  CHECK(svg.find(">a&lt;b</text>") != std::string::npos);
  CHECK(svg.find(">val</text>") != std::string::npos);
  CHECK(svg.find(">empty</text>") == std::string::npos);  // empty series: no legend entry
  CHECK(svg.find(">global step</text>") != std::string::npos);
  CHECK(svg.find(">accuracy</text>") != std::string::npos);

  // Steps of thousands; a constant (widened by a tenth); tiny values in the shortest form.
  const std::string big =
      tools::line_chart_svg({{"lr", "#000", {{50, 0.001}, {4220, 0.001}}, false}}, "step", "lr");
  CHECK(tick_labels(big) == std::vector<std::string>{"0.00090", "0.00095", "0.00100", "0.00105",
                                                     "0.00110", "0", "1000", "2000", "3000", "4000",
                                                     "5000"});
  const std::string tiny =
      tools::line_chart_svg({{"g", "#000", {{1, 0}, {2, 2e-5}}, false}}, "step", "grad");
  CHECK(tick_labels(tiny) == std::vector<std::string>{"0", "5e-06", "1e-05", "1.5e-05", "2e-05",
                                                      "1.0", "1.2", "1.4", "1.6", "1.8", "2.0"});
  const std::string one = tools::line_chart_svg({{"p", "#000", {{0, 0}}, true}}, "x", "y");
  CHECK(tick_labels(one) == std::vector<std::string>{"-1.0", "-0.5", "0.0", "0.5", "1.0", "-1.0",
                                                     "-0.5", "0.0", "0.5", "1.0"});
  CHECK(count(one, "<polyline") == 0);  // a lone dot has no line
  CHECK(count(one, "<circle") == 2);

  // Nothing to draw: no series, only empty ones, only non-finite points.
  for (const std::vector<tools::Series>& none :
       {std::vector<tools::Series>{}, std::vector<tools::Series>{{"a", "#000", {}, false}},
        std::vector<tools::Series>{{"a", "#000", {{NAN, 1}, {2, INFINITY}}, false}}}) {
    const std::string s = tools::line_chart_svg(none, "x", "y", 300, 200);
    CHECK(s.find(">no data</text>") != std::string::npos);
    CHECK(s.find("width=\"300\" height=\"200\"") != std::string::npos);
    CHECK(count(s, "<polyline") == 0);
  }

  // A legend wider than the chart wraps: names of 20 characters take 23 + 20 * 6.5 = 153 px and
  // 16 px of gap; three fit from x = 64 to 624, the next three go on a second row, 18 px lower,
  // and the plot's top moves down from 30 to 48.
  std::vector<tools::Series> six;
  for (int k = 0; k < 6; ++k)
    six.push_back({fmt::format("series-{}-abcdefghijk", k), "#000", {{0, 0}, {1, 1}}, false});
  const std::string wrapped = tools::line_chart_svg(six, "x", "y");
  CHECK(captures(wrapped, "<text x=\"([0-9.]+)\" y=\"19\">series") ==
        std::vector<std::string>{"87.0", "256.0", "425.0"});
  CHECK(captures(wrapped, "<text x=\"([0-9.]+)\" y=\"37\">series") ==
        std::vector<std::string>{"87.0", "256.0", "425.0"});
  CHECK(wrapped.find("<rect x=\"64.0\" y=\"48.0\" width=\"560.0\" height=\"230.0\"") !=
        std::string::npos);
}

TEST_CASE("report: confusion_svg writes every count, shaded by the row's share") {
  const std::vector<std::vector<int64_t>> conf = {{5, 0, 0}, {0, 5, 0}, {0, 1, 4}};
  const std::string svg = tr::confusion_svg(conf, kClasses);
  CHECK(captures(svg, "<text class=\"count\"[^>]*>([^<]*)</text>") ==
        std::vector<std::string>{"5", "0", "0", "0", "5", "0", "0", "1", "4"});
  // Dark (white text) where the share is above 0.5: the diagonal.
  CHECK(captures(svg, "<text class=\"count\"[^>]*fill=\"(#fff)\"") ==
        std::vector<std::string>{"#fff", "#fff", "#fff"});
  // White (255, 255, 255) to (8, 48, 107): share 1, 0, 4/5 -> (57, 89, 137), 1/5 -> (206, 214,
  // 225).
  CHECK(count(svg, "fill=\"rgb(8,48,107)\"") == 2);
  CHECK(count(svg, "fill=\"rgb(255,255,255)\"") == 5);
  CHECK(count(svg, "fill=\"rgb(57,89,137)\"") == 1);
  CHECK(count(svg, "fill=\"rgb(206,214,225)\"") == 1);
  CHECK(svg.find("<title>true dog, predicted &lt;&amp;&gt;: 1 (20.0% of dog)</title>") !=
        std::string::npos);
  CHECK(count(svg, ">T-shirt/top</text>") == 2);  // row and column labels
  CHECK(svg.find("<&>") == std::string::npos);

  // Without names: the indices. A row without examples stays white.
  const std::string idx = tr::confusion_svg({{0, 0}, {3, 1}}, {});
  CHECK(count(idx, ">1</text>") == 3);  // row label, column label and the count 1
  CHECK(count(idx, "fill=\"rgb(255,255,255)\"") == 2);

  // More than 20 classes: shaded cells, no counts.
  const std::vector<std::vector<int64_t>> big(25, std::vector<int64_t>(25, 2));
  const std::string many = tr::confusion_svg(big, {});
  CHECK(count(many, "<rect") == 625);
  CHECK(count(many, "class=\"count\"") == 0);

  CHECK_ERROR_CONTAINS(tr::confusion_svg(conf, {"a", "b"}), "2 class names for 3 classes");
  CHECK_ERROR_CONTAINS(tr::confusion_svg({{1, 2}, {3}}, {}), "row 1 has 1 entries for 2 rows");
}
