// The HTML report of a run folder: reading metrics.jsonl, config.json and confusion_matrix.json,
// and drawing the confusion matrix as inline SVG (see report.h for the page's contents; the line
// charts and the tick rule are in common/html.h).
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/error.h"
#include "common/files.h"
#include "common/html.h"
#include "nn/json.h"
#include "train/config.h"

namespace vitrine::train {

using nlohmann::json;
namespace fs = std::filesystem;
using tools::escape_html;
using tools::line_chart_svg;
using tools::svg_open;
using tools::text_width;

namespace {

// ---- text --------------------------------------------------------------------------------------

/// A JSON value as text: a string as it is, anything else as JSON.
std::string show(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

std::string percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

/// A number of a metrics line, when the key holds a finite number.
std::optional<double> number(const json& line, const char* key) {
  auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

// ---- confusion matrix --------------------------------------------------------------------------

std::string confusion_svg(const std::vector<std::vector<int64_t>>& confusion,
                          const std::vector<std::string>& classes) {
  const size_t c = confusion.size();
  for (size_t t = 0; t < c; ++t)
    VT_CHECK(confusion[t].size() == c,
             "confusion_svg: the matrix must be square, row {} has {} entries for {} rows", t,
             confusion[t].size(), c);
  VT_CHECK(classes.empty() || classes.size() == c, "confusion_svg: {} class names for {} classes",
           classes.size(), c);
  if (c == 0)
    return svg_open(200, 40) +
           "<text x=\"100\" y=\"24\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n</svg>\n";
  std::vector<std::string> names = classes;
  if (names.empty())
    for (size_t k = 0; k < c; ++k) names.push_back(std::to_string(k));

  const bool counts = c <= 20;
  const double cell = std::clamp(440.0 / static_cast<double>(c), 14.0, 44.0);
  const double font = std::clamp(cell * 0.55, 7.0, 11.0);  // of the class names
  double label = 0;
  for (const std::string& n : names) label = std::max(label, text_width(n) * font / 11);
  label = std::min(label, 200.0) + 8;
  const double slant = 0.71 * label;  // the height and overhang of the column labels at -45 deg
  const double left = 22 + label, top = 22 + slant + 4;
  const int width = static_cast<int>(std::ceil(left + static_cast<double>(c) * cell + slant + 8));
  const int height = static_cast<int>(std::ceil(top + static_cast<double>(c) * cell + 8));
  const double size = std::clamp(cell * 0.3, 8.0, 12.0);

  std::string out = svg_open(width, height);
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"14\" text-anchor=\"middle\" font-weight=\"bold\">predicted</text>\n"
      "<text transform=\"translate(12,{:.1f}) rotate(-90)\" text-anchor=\"middle\" "
      "font-weight=\"bold\">true</text>\n",
      left + static_cast<double>(c) * cell / 2, top + static_cast<double>(c) * cell / 2);
  for (size_t k = 0; k < c; ++k) {
    const double mid = static_cast<double>(k) * cell + cell / 2;
    const std::string name = escape_html(names[k]);
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" dominant-baseline=\"central\" "
        "font-size=\"{:.1f}\">{}</text>\n"
        "<text transform=\"translate({:.1f},{:.1f}) rotate(-45)\" font-size=\"{:.1f}\">{}</text>\n",
        left - 6, top + mid, font, name, left + mid - font / 3, top - 6, font, name);
  }
  for (size_t t = 0; t < c; ++t) {
    int64_t row = 0;
    for (int64_t v : confusion[t]) row += v;
    for (size_t p = 0; p < c; ++p) {
      const int64_t n = confusion[t][p];
      const double share = row > 0 ? static_cast<double>(n) / static_cast<double>(row) : 0;
      // White (255, 255, 255) to dark blue (8, 48, 107).
      auto mix = [&](double dark) {
        return static_cast<int>(std::lround(255 + (dark - 255) * share));
      };
      const double x = left + static_cast<double>(p) * cell,
                   y = top + static_cast<double>(t) * cell;
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"rgb({},{},{})\" stroke=\"#ddd\"><title>true {}, predicted {}: {} ({:.1f}% of "
          "{})</title></rect>\n",
          x, y, cell, cell, mix(8), mix(48), mix(107), escape_html(names[t]), escape_html(names[p]),
          n, 100 * share, escape_html(names[t]));
      if (counts)
        out += fmt::format(
            "<text class=\"count\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
            "dominant-baseline=\"central\" font-size=\"{:.0f}\" fill=\"{}\">{}</text>\n",
            x + cell / 2, y + cell / 2, size, share > 0.5 ? "#fff" : "#000", n);
    }
  }
  return out + "</svg>\n";
}

// ---- the page ----------------------------------------------------------------------------------

namespace {

/// The JSON of a file, or nullopt when it does not exist; an Error names a file that is not JSON.
std::optional<json> read_json_file(const std::string& path) {
  if (!fs::exists(path)) return std::nullopt;
  return tools::read_json_file(path, "report: run file");
}

struct Metrics {
  std::vector<std::pair<double, double>> train_loss, train_acc, lr, eval_loss, eval_acc, test_acc;
  std::optional<json> test;             // the last "test" line
  std::optional<double> train_seconds;  // the last line's (written by later trainers)
  std::optional<double> best_accuracy;
  std::optional<double> last_step;
};

Metrics read_metrics(const std::string& path) {
  VT_CHECK(fs::exists(path), "report: {} does not exist (not a vitrine-train run folder?)", path);
  std::ifstream f(path);
  VT_CHECK(f, "report: cannot read {}", path);
  Metrics m;
  std::string text;
  for (int64_t n = 1; std::getline(f, text); ++n) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json line = nn::parse_json(text, fmt::format("report: {}: line {}", path, n));
    VT_CHECK(line.is_object(), "report: {}: line {} is not a JSON object: {}", path, n,
             text.substr(0, 80));
    const std::string type = line.value("type", "");
    const std::optional<double> step = number(line, "global_step");
    if (step) m.last_step = std::max(m.last_step.value_or(*step), *step);
    if (auto t = number(line, "train_seconds")) m.train_seconds = t;
    auto add = [&](std::vector<std::pair<double, double>>& to, const char* key) {
      if (auto v = number(line, key); v && step) to.emplace_back(*step, *v);
    };
    if (type == "train") {
      add(m.train_loss, "loss");
      add(m.train_acc, "accuracy");
      add(m.lr, "lr");
    } else if (type == "eval") {
      add(m.eval_loss, "loss");
      add(m.eval_acc, "accuracy");
      if (auto a = number(line, "accuracy"))
        m.best_accuracy = std::max(m.best_accuracy.value_or(*a), *a);
    } else if (type == "test") {
      add(m.test_acc, "accuracy");
      m.test = line;
    }
  }
  return m;
}

/// What the page shows of confusion_matrix.json, checked.
struct TestSet {
  double accuracy = 0, loss = 0, macro_precision = 0, macro_recall = 0, macro_f1 = 0;
  int64_t count = 0;
  std::vector<std::string> classes;
  std::vector<json> per_class;
  std::vector<std::vector<int64_t>> confusion;
};

TestSet read_test_set(const json& j, const std::string& path) {
  TestSet t;
  try {
    VT_CHECK(j.is_object(), "report: {} must be a JSON object", path);
    t.accuracy = j.at("accuracy").get<double>();
    t.loss = j.value("loss", 0.0);
    t.count = j.value("count", int64_t{0});
    t.macro_precision = j.at("macro_precision").get<double>();
    t.macro_recall = j.at("macro_recall").get<double>();
    t.macro_f1 = j.at("macro_f1").get<double>();
    t.confusion = j.at("confusion").get<std::vector<std::vector<int64_t>>>();
    t.per_class = j.at("per_class").get<std::vector<json>>();
    if (j.contains("classes")) t.classes = j.at("classes").get<std::vector<std::string>>();
    for (const json& k : t.per_class)
      for (const char* key : {"precision", "recall", "f1", "support"})
        VT_CHECK(k.contains(key) && k.at(key).is_number(),
                 "report: {}: a per_class entry has no number \"{}\"", path, key);
  } catch (const json::exception& e) {
    fail("report: {}: unexpected content: {}", path, e.what());
  }
  const size_t c = t.confusion.size();
  VT_CHECK(t.per_class.size() == c, "report: {}: {} per_class entries for a {} x {} confusion",
           path, t.per_class.size(), c, c);
  VT_CHECK(t.classes.empty() || t.classes.size() == c, "report: {}: {} class names for {} classes",
           path, t.classes.size(), c);
  for (size_t r = 0; r < c; ++r)
    VT_CHECK(t.confusion[r].size() == c, "report: {}: confusion row {} has {} entries, not {}",
             path, r, t.confusion[r].size(), c);
  return t;
}

/// Rows of the summary table: (heading, HTML-escaped text) from config.json.
std::vector<std::pair<std::string, std::string>> config_rows(const json& config,
                                                             const std::string& path) {
  std::vector<std::pair<std::string, std::string>> rows;
  const json cfg = without_comments(config);
  auto section = [&](const char* name) {
    return cfg.contains(name) && cfg.at(name).is_object() ? cfg.at(name) : json::object();
  };
  auto get = [](const json& s, const char* key) {
    return s.contains(key) ? show(s.at(key)) : std::string("?");
  };
  if (cfg.contains("model")) {
    std::string model;
    try {
      const models::ClassifierSpec spec = model_spec(cfg);
      // (a ResNet's line names its classes already)
      model = escape_html(spec.arch == "vit"
                              ? fmt::format("{}, {} classes", spec.describe(), spec.num_classes)
                              : spec.describe());
    } catch (const Error& e) {
      fail("report: {}: {}", path, e.what());
    }
    rows.emplace_back("Model", model);
    rows.emplace_back("Model config", "<code>" + escape_html(cfg.at("model").dump()) + "</code>");
  }
  const json data = section("data"), optim = section("optim"), schedule = section("schedule"),
             train = section("train");
  if (!data.empty()) {
    std::string text = escape_html(get(data, "dataset"));
    if (data.contains("path") && !show(data.at("path")).empty())
      text += " (" + escape_html(show(data.at("path"))) + ")";
    text += ", batch " + escape_html(get(data, "batch_size"));
    if (data.contains("validation_fraction") && data.at("validation_fraction").is_number()) {
      const double f = data.at("validation_fraction").get<double>();
      text += f > 0 ? fmt::format(", {:g}% held out for validation", 100 * f)
                    : std::string(", no validation split (every training image trains)");
    }
    rows.emplace_back("Data set", text);
    if (data.contains("transforms"))
      rows.emplace_back("Transforms",
                        "<code>" + escape_html(data.at("transforms").dump()) + "</code>");
  }
  if (!optim.empty()) {
    std::string text = escape_html(get(optim, "name")) + ", lr " + escape_html(get(optim, "lr")) +
                       ", weight decay " + escape_html(get(optim, "weight_decay"));
    for (const char* key : {"label_smoothing", "grad_clip"})  // shown when not 0 (off)
      if (optim.contains(key) && optim.at(key).is_number() && optim.at(key).get<double>() != 0)
        text += fmt::format(", {} {}", key, escape_html(show(optim.at(key))));
    rows.emplace_back("Optimizer", text);
  }
  if (!schedule.empty()) {
    const std::string name = get(schedule, "name");
    std::string text = escape_html(name);
    if (name == "warmup_cosine")
      text += ", warm-up " + escape_html(get(schedule, "warmup_epochs")) +
              " epochs, min lr factor " + escape_html(get(schedule, "min_lr_factor"));
    else if (name == "step")
      text += ", &times;" + escape_html(get(schedule, "gamma")) + " every " +
              escape_html(get(schedule, "step_epochs")) + " epochs";
    rows.emplace_back("Schedule", text);
  }
  if (!train.empty()) {
    rows.emplace_back("Epochs", escape_html(get(train, "epochs")));
    std::string text =
        "seed " + escape_html(get(train, "seed")) + ", device " + escape_html(get(train, "device"));
    // Shown when not at their default (off).
    for (const auto& [key, off] : {std::pair<const char*, double>{"accum_steps", 1},
                                   {"ema_decay", 0},
                                   {"early_stopping_patience", 0}})
      if (train.contains(key) && train.at(key).is_number() && train.at(key).get<double>() != off)
        text += fmt::format(", {} {}", key, escape_html(show(train.at(key))));
    rows.emplace_back("Training", text);
  }
  return rows;
}

const char* kStyle = R"css(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
       max-width: 960px; margin: 2em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.1em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #eee; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { border-top: 2px solid #ccc; font-weight: bold; }
table.summary th { color: #555; font-weight: normal; white-space: nowrap; vertical-align: top; }
code { font-size: 0.9em; word-break: break-all; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: 0.6em 1em; }
svg { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
)css";

// The series colours (matplotlib's tab10).
const char* kBlue = "#1f77b4";
const char* kOrange = "#ff7f0e";
const char* kGreen = "#2ca02c";

std::string page(const std::string& run_dir, const Metrics& m, const std::optional<json>& config,
                 const std::string& config_path, const std::optional<TestSet>& test) {
  const std::string run_name = fs::path(run_dir).lexically_normal().filename().string();
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += fmt::format("<title>Training report: {}</title>\n<style>{}</style>\n</head>\n<body>\n",
                     escape_html(run_name.empty() ? run_dir : run_name), kStyle);
  out += fmt::format("<h1>Training report</h1>\n<p class=\"sub\">{}</p>\n", escape_html(run_dir));

  // Summary.
  std::optional<double> test_acc, test_f1, test_loss;
  if (m.test) {
    test_acc = number(*m.test, "accuracy");
    test_f1 = number(*m.test, "macro_f1");
    test_loss = number(*m.test, "loss");
  }
  if (test) {
    test_acc = test->accuracy;
    test_f1 = test->macro_f1;
    test_loss = test->loss;
  }
  out += "<h2>Summary</h2>\n<table class=\"summary\">\n";
  auto row = [&](const std::string& head, const std::string& html) {
    out += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", head, html);
  };
  if (test_acc) {
    row("Test accuracy", "<b>" + percent(*test_acc) + "</b>");
    if (test_f1) row("Test macro F1", fmt::format("{:.4f}", *test_f1));
    if (test_loss) row("Test loss", fmt::format("{:.4f}", *test_loss));
  } else {
    row("Test set", "not evaluated yet");
  }
  if (m.best_accuracy) row("Best validation accuracy", percent(*m.best_accuracy));
  if (m.last_step) row("Steps", fmt::format("{:.0f}", *m.last_step));
  if (m.train_seconds) {
    const auto s = static_cast<int64_t>(std::lround(*m.train_seconds));
    row("Training time", fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60));
  }
  if (config)
    for (const auto& [head, html] : config_rows(*config, config_path)) row(head, html);
  else
    row("Config", escape_html(config_path) + " not found");
  out += "</table>\n";

  // Curves.
  out += "<h2>Loss</h2>\n";
  out += line_chart_svg(
      {{"train", kBlue, m.train_loss, false}, {"validation", kOrange, m.eval_loss, true}},
      "global step", "loss");
  out += "<h2>Accuracy</h2>\n";
  out += line_chart_svg({{"train", kBlue, m.train_acc, false},
                         {"validation", kOrange, m.eval_acc, true},
                         {"test", kGreen, m.test_acc, true}},
                        "global step", "accuracy");
  out += "<h2>Learning rate</h2>\n";
  out += line_chart_svg({{"lr (first group)", kBlue, m.lr, false}}, "global step", "learning rate");

  // Test set.
  out += "<h2>Test set</h2>\n";
  if (!test) {
    out +=
        "<p class=\"note\">The test set was not evaluated yet: the run has no "
        "confusion_matrix.json (it was stopped before its end, or is still running).</p>\n";
    return out + "</body>\n</html>\n";
  }
  const size_t c = test->confusion.size();
  std::vector<std::string> names = test->classes;
  if (names.empty())
    for (size_t k = 0; k < c; ++k) names.push_back(std::to_string(k));
  out += fmt::format("<p>{} examples, accuracy {}, mean loss {:.4f}.</p>\n", test->count,
                     percent(test->accuracy), test->loss);
  out +=
      "<table>\n<tr><th>class</th><th class=\"num\">precision</th><th class=\"num\">recall</th>"
      "<th class=\"num\">F1</th><th class=\"num\">support</th></tr>\n";
  for (size_t k = 0; k < c; ++k) {
    const json& e = test->per_class[k];
    out += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{:.4f}</td><td class=\"num\">{:.4f}</td>"
        "<td class=\"num\">{:.4f}</td><td class=\"num\">{}</td></tr>\n",
        escape_html(names[k]), e.at("precision").get<double>(), e.at("recall").get<double>(),
        e.at("f1").get<double>(), e.at("support").dump());
  }
  out += fmt::format(
      "<tr class=\"total\"><td>macro avg</td><td class=\"num\">{:.4f}</td><td class=\"num\">{:.4f}"
      "</td><td class=\"num\">{:.4f}</td><td class=\"num\">{}</td></tr>\n</table>\n",
      test->macro_precision, test->macro_recall, test->macro_f1, test->count);
  out +=
      "<h2>Confusion matrix</h2>\n<p>Rows: true class; columns: predicted class; shade: the "
      "share of the row.</p>\n";
  out += confusion_svg(test->confusion, test->classes);
  return out + "</body>\n</html>\n";
}

}  // namespace

std::string write_report(const std::string& run_dir) {
  const fs::path dir(run_dir);
  const Metrics m = read_metrics((dir / "metrics.jsonl").string());
  const std::string config_path = (dir / "config.json").string();
  const std::optional<json> config = read_json_file(config_path);
  const std::string confusion_path = (dir / "confusion_matrix.json").string();
  std::optional<TestSet> test;
  if (std::optional<json> j = read_json_file(confusion_path))
    test = read_test_set(*j, confusion_path);
  const std::string html = page(run_dir, m, config, config_path, test);

  const std::string path = (dir / "report.html").string();
  tools::write_file_atomically(path, html);
  return path;
}

}  // namespace vitrine::train
