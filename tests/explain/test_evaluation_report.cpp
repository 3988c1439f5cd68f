// explain/report: the evaluation's page of an EvalResult made by hand (three methods, one
// named "a<&>b", the two baselines, 5 images, curves of 4 points, 2 sanity steps): every row and
// column title, the cells' "mean [lo, hi]", the best cell per column (never a baseline's), one
// polyline per row in each of the two curve charts at x = s / S, the sanity shading, escaping,
// "-" for what is not finite, nothing fetched; then the page in headless Chromium.
#include <cmath>
#include <map>
#include <regex>

#include "browser.h"
#include "explain/evaluate.h"
#include "explain/report.h"
#include "test_util.h"

using namespace vt_test;
using namespace vitrine::explain;

namespace {

/// The text from the first `from` to the next `to` after it.
std::string between(const std::string& s, const std::string& from, const std::string& to) {
  const size_t a = s.find(from);
  REQUIRE(a != std::string::npos);
  const size_t b = s.find(to, a + from.size());
  REQUIRE(b != std::string::npos);
  return s.substr(a, b - a);
}

/// A table's rows: (the first cell's text, every <td>'s class and text after it).
struct Row {
  std::string name;
  std::vector<std::pair<std::string, std::string>> cells;  // (class attribute, text)
};
std::vector<Row> table_rows(const std::string& table) {
  std::vector<Row> rows;
  const std::regex tr("<tr[^>]*><td>([^<]*)</td>(.*)</tr>");
  const std::regex td("<td class=\"([^\"]*)\"[^>]*>([^<]*)</td>");
  for (auto it = std::sregex_iterator(table.begin(), table.end(), tr); it != std::sregex_iterator();
       ++it) {
    Row row{(*it)[1].str(), {}};
    const std::string rest = (*it)[2].str();
    for (auto c = std::sregex_iterator(rest.begin(), rest.end(), td); c != std::sregex_iterator();
         ++c)
      row.cells.emplace_back((*c)[1].str(), (*c)[2].str());
    rows.push_back(row);
  }
  return rows;
}

const std::string kOdd = "a<&>b";  // a method name that needs escaping
const std::string kOddHtml = "a&lt;&amp;&gt;b";

/// Per row, per column: 5 images. Bests among the methods: deletion rollout (random is lower but
/// a baseline), insertion kOdd (centre is higher), pointing attention, energy rollout.
EvalResult sample_result() {
  EvalResult r;
  r.rows = {"attention", "rollout", kOdd, "random", "centre"};
  r.images = 5;
  r.seconds = 12.3;
  auto same = [](double v) { return std::vector<double>(5, v); };
  r.deletion_auc = {{"attention", {0.2, 0.3, 0.4, 0.5, 0.6}},
                    {"rollout", same(0.1)},
                    {kOdd, same(0.3)},
                    {"random", same(0.05)},
                    {"centre", same(0.5)}};
  r.insertion_auc = {{"attention", same(0.5)},
                     {"rollout", same(0.6)},
                     {kOdd, same(0.7)},
                     {"random", same(0.2)},
                     {"centre", same(0.9)}};
  r.pointing = {{"attention", {1, 1, 1, 1, 0}},
                {"rollout", {1, 0, 1, 0, 0}},
                {kOdd, {0, 0, 0, 0, 0}},
                {"random", {1, 1, 1, 1, 1}},
                {"centre", {0, 1, 0, 1, 0}}};
  r.energy = {{"attention", same(0.3)},
              {"rollout", same(0.6)},
              {kOdd, {0.9, NAN, 0.9, 0.9, 0.9}},  // not finite: "-", and not the best
              {"random", same(0.95)},
              {"centre", same(0.4)}};
  // Mean curves: deletion falls, insertion rises; each row a little apart.
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const double d = 0.05 * static_cast<double>(i);
    r.deletion_curve[r.rows[i]] = {0.9, 0.5 + d, 0.3 + d, 0.1};
    r.insertion_curve[r.rows[i]] = {0.1, 0.4 - d, 0.6 - d, 0.9};
  }
  r.sanity_steps = {"logits", "block 0"};
  r.sanity = {{"attention", {same(1.0), same(1.0)}},  // ignores the weights
              {"rollout", {same(0.0), same(0.0)}},
              {kOdd, {same(0.5), {NAN, NAN, NAN, NAN, NAN}}}};
  return r;
}

}  // namespace

TEST_CASE("evaluation report: titles, cells, the best per column, curves, sanity shades") {
  TempDir dir;
  const std::string path = dir / "evaluation.html";
  CHECK(write_evaluation_report(path, sample_result(), "Evaluation <of> vit",
                                {{"removal", "zero"}, {"patches per step", "4"}}) == path);
  CHECK(dir.files() == std::vector<std::string>{"evaluation.html"});
  const std::string html = read_text(path);

  // Title, settings, and no unescaped text.
  CHECK(count(html, "Evaluation &lt;of&gt; vit") == 2);  // <title> and <h1>
  CHECK(html.find("<p class=\"sub\">5 images, 12 s</p>") != std::string::npos);
  CHECK(html.find("<tr><th>patches per step</th><td>4</td></tr>") != std::string::npos);
  CHECK(html.find("<of>") == std::string::npos);
  CHECK(html.find(kOdd) == std::string::npos);

  // Faithfulness and localisation: every column title, every row with a cell per column.
  const std::string faith = between(html, "<h2>Faithfulness", "<h2>");
  for (const char* column :
       {">method<", ">deletion AUC<", ">insertion AUC<", ">pointing game<", ">energy in box<"})
    CHECK(faith.find(column) != std::string::npos);
  CHECK(count(faith, "lower is better") == 1);
  const std::vector<Row> rows = table_rows(faith);
  REQUIRE(rows.size() == 5);
  const std::vector<std::string> names = {"attention", "rollout", kOddHtml, "random", "centre"};
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].name == names[i]);
    CHECK(rows[i].cells.size() == 4);
  }
  CHECK(faith.find("<tr class=\"baseline\"><td>random</td>") != std::string::npos);
  CHECK(faith.find("<tr class=\"baseline\"><td>centre</td>") != std::string::npos);
  CHECK(count(faith, "class=\"baseline\"") == 2);

  // "mean [lo, hi]": 0.2 .. 0.6 has mean 0.4, standard error sqrt(0.025 / 5) = 0.0707, so
  // 0.4 -/+ 1.96 * 0.0707 = [0.261, 0.539]; five equal values have no spread.
  CHECK(rows[0].cells[0].second == "0.400 [0.261, 0.539]");
  CHECK(rows[1].cells[0].second == "0.100 [0.100, 0.100]");
  CHECK(rows[2].cells[3].second == "-");  // a NaN among the energies

  // The best per column: the methods' lowest deletion, highest of the others; a baseline that
  // does better (random's deletion, centre's insertion, random's pointing and energy) is not.
  std::map<std::string, std::vector<size_t>> best;  // column -> rows
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t c = 0; c < rows[i].cells.size(); ++c) {
      const std::string& cls = rows[i].cells[c].first;
      if (cls.find("best") != std::string::npos) best[std::to_string(c)].push_back(i);
    }
  CHECK(best ==
        std::map<std::string, std::vector<size_t>>{{"0", {1}}, {"1", {2}}, {"2", {0}}, {"3", {1}}});
  CHECK(count(html, "class=\"num best\"") == 4);

  // Two curve charts, one polyline per row, its 4 points at x = 0, 1/3, 2/3, 1 of the plot's
  // 64 .. 544 px; every row in each legend.
  CHECK(count(html, "<svg") == 2);
  const std::string deletion = between(html, "<svg", "</svg>");
  const std::string insertion = between(html.substr(html.find("</svg>")), "<svg", "</svg>");
  CHECK(deletion.find(">fraction of patches removed<") != std::string::npos);
  CHECK(insertion.find(">fraction of patches inserted<") != std::string::npos);
  for (const std::string& svg : {deletion, insertion}) {
    const std::vector<std::string> lines = captures(svg, "<polyline[^>]*points=\"([^\"]*)\"");
    REQUIRE(lines.size() == 5);
    for (const std::string& pts : lines)
      CHECK(captures(pts, "([0-9.]+),[0-9.]+") ==
            std::vector<std::string>{"64.0", "224.0", "384.0", "544.0"});
    for (const std::string& name : names)
      CHECK(svg.find(">" + name + "</text>") != std::string::npos);
    CHECK(svg.find(">target probability<") != std::string::npos);
  }

  // Sanity: the methods only, a column per step; rho = 1 in full red, rho = 0 white, a NaN "-".
  const std::string sanity = between(html, "<h2>Sanity", "</table>");
  CHECK(sanity.find(">logits<") != std::string::npos);
  CHECK(sanity.find(">block 0<") != std::string::npos);
  CHECK(sanity.find("near 1 means the map does not depend on the weights") != std::string::npos);
  const std::vector<Row> srows = table_rows(sanity);
  REQUIRE(srows.size() == 3);
  CHECK(srows[0].name == "attention");
  CHECK(srows[1].name == "rollout");
  CHECK(srows[2].name == kOddHtml);
  CHECK(srows[0].cells[0].second == "1.00 [1.00, 1.00]");
  CHECK(srows[2].cells[1].second == "-");
  const std::vector<std::string> shades =
      captures(sanity, "<td class=\"num\" style=\"background:(#[0-9a-f]{6})");
  REQUIRE(shades.size() == 5);  // 3 rows x 2 steps, less the NaN
  CHECK(shades[0] == "#d62728");
  CHECK(shades[1] == "#d62728");
  CHECK(shades[2] == "#ffffff");
  CHECK(shades[4] == "#eb9394");  // |rho| = 0.5: halfway
  CHECK(shades[0] != shades[2]);

  // Nothing fetched: the only "http" is the SVG namespace, no script, no links, no sources.
  CHECK(count(html, "http") == 2);
  CHECK(count(html, "xmlns=\"http://www.w3.org/2000/svg\"") == 2);
  for (const char* fetcher : {"<script", "src=", "href=", "url(", "@import"})
    CHECK(html.find(fetcher) == std::string::npos);
}

TEST_CASE("evaluation report: without localisation and sanity steps, and with nothing at all") {
  TempDir dir;
  EvalResult r = sample_result();
  r.pointing.clear();
  r.energy.clear();
  r.sanity_steps.clear();
  r.sanity.clear();
  r.deletion_curve.erase("rollout");  // a row without a curve has no line
  const std::string html = read_text(write_evaluation_report(dir / "a.html", r, "", {}));
  CHECK(count(html, "vitrine-explain evaluation") == 2);  // the default title
  CHECK(html.find("<h2>Settings</h2>") == std::string::npos);
  CHECK(html.find("pointing game") == std::string::npos);
  CHECK(table_rows(between(html, "<h2>Faithfulness", "</table>"))[0].cells.size() == 2);
  CHECK(html.find("The sanity checks were not run.") != std::string::npos);
  CHECK(count(between(html, "<svg", "</svg>"), "<polyline") == 4);

  // No rows: empty tables and two "no data" charts, still a page.
  const std::string empty = read_text(write_evaluation_report(dir / "b.html", {}, "t", {}));
  CHECK(count(empty, ">no data</text>") == 2);
  CHECK(empty.find("</html>") != std::string::npos);
}

TEST_CASE("evaluation report: in a browser, quiet and fetching nothing") {
  if (find_chromium().empty()) {
    skip(
        "chromium is not on PATH (install it with scripts/install-deps.sh to run the browser "
        "tests of the HTML reports)");
    return;
  }
  TempDir dir;
  const BrowserCheck b =
      check_in_browser(write_evaluation_report(dir / "evaluation.html", sample_result(), "t", {}));
  CHECK(b.images == 0);
  for (const std::string& e : b.console_errors) FAIL_CHECK("console: " << e);
  for (const std::string& url : b.fetched) FAIL_CHECK("fetched: " << url);
}
