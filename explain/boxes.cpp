// Reading ground-truth boxes (boxes.h).
#include "explain/boxes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/error.h"
#include "nn/json.h"

namespace vitrine::explain {

namespace {

/// A coordinate: a finite number, or an Error naming where.
double number(const std::string& text, const std::string& where, const char* what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  while (used < text.size() && std::isspace(static_cast<unsigned char>(text[used]))) ++used;
  VT_CHECK(used == text.size() && !text.empty() && std::isfinite(v),
           "{}: {} \"{}\" is not a number", where, what, text);
  return v;
}

/// [x0, x1) x [y0, y1) as a Box of whole pixels (rounded outwards), checked.
nn::data::Box make_box(double x0, double y0, double x1, double y1, const std::string& where) {
  VT_CHECK(x0 >= 0 && y0 >= 0, "{}: the box ({}, {}, {}, {}) starts left of or above the image",
           where, x0, y0, x1, y1);
  VT_CHECK(x1 > x0 && y1 > y0,
           "{}: the box ({}, {}, {}, {}) is empty: expected x0 < x1 and y0 < y1 (x1, y1 past the "
           "box)",
           where, x0, y0, x1, y1);
  const auto t = static_cast<int64_t>(std::floor(y0)), l = static_cast<int64_t>(std::floor(x0));
  return {t, l, static_cast<int64_t>(std::ceil(y1)) - t, static_cast<int64_t>(std::ceil(x1)) - l};
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, sep)) out.push_back(field);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

BoxTable read_json(const std::string& path, const std::string& text) {
  const nlohmann::json j = nn::parse_json(text, path);
  VT_CHECK(j.is_object(),
           "{}: expected a JSON object of image names to lists of boxes ({{\"image.jpg\": [[x0, "
           "y0, x1, y1], ...]}}), got {}",
           path, nn::json_brief(j));
  BoxTable out;
  for (const auto& [image, boxes] : j.items()) {
    VT_CHECK(boxes.is_array() && !boxes.empty(),
             "{}: \"{}\": expected a list of boxes [[x0, y0, x1, y1], ...], got {}", path, image,
             nn::json_brief(boxes));
    for (size_t k = 0; k < boxes.size(); ++k) {
      const std::string where = fmt::format("{}: \"{}\" box {}", path, image, k);
      const nlohmann::json& b = boxes[k];
      VT_CHECK(b.is_array() && b.size() == 4 &&
                   std::all_of(b.begin(), b.end(), [](const auto& v) { return v.is_number(); }),
               "{}: expected [x0, y0, x1, y1] (four numbers), got {}", where, nn::json_brief(b));
      out[image].push_back(make_box(b[0].get<double>(), b[1].get<double>(), b[2].get<double>(),
                                    b[3].get<double>(), where));
    }
  }
  return out;
}

/// CSV (sep ',', 5 or 6 fields, exclusive ends) or tiny-imagenet (sep '\t', 6 fields, inclusive).
BoxTable read_lines(const std::string& path, const std::string& text, bool tiny) {
  BoxTable out;
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (trim(line).empty()) continue;
    const std::string where = fmt::format("{}:{}", path, n);
    std::vector<std::string> f = split(line, tiny ? '\t' : ',');
    for (auto& s : f) s = trim(s);
    if (!tiny && n == 1 && f.size() >= 5 && f[1] == "x0") continue;  // the header
    if (tiny)
      VT_CHECK(f.size() == 6,
               "{}: expected 6 tab-separated fields (file, wnid, x0, y0, x1, y1), got {}", where,
               f.size());
    else
      VT_CHECK(f.size() == 5 || f.size() == 6,
               "{}: expected image,x0,y0,x1,y1 or image,x0,y0,x1,y1,label, got {} field{}", where,
               f.size(), f.size() == 1 ? "" : "s");
    VT_CHECK(!f[0].empty(), "{}: the image name is empty", where);
    const size_t c = tiny ? 2 : 1;
    const double x0 = number(f[c], where, "x0"), y0 = number(f[c + 1], where, "y0"),
                 x1 = number(f[c + 2], where, "x1"), y1 = number(f[c + 3], where, "y1");
    const double end = tiny ? 1 : 0;  // tiny-imagenet's corners are inclusive
    out[f[0]].push_back(make_box(x0, y0, x1 + end, y1 + end, where));
  }
  VT_CHECK(!out.empty(), "{}: holds no boxes", path);
  return out;
}

}  // namespace

BoxTable read_boxes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VT_CHECK(f.good(), "--boxes {}: cannot open the file", path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::filesystem::path p(path);
  std::string ext = p.extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".json") return read_json(path, text);
  const bool tiny = p.filename() == "val_annotations.txt" ||
                    text.substr(0, text.find('\n')).find('\t') != std::string::npos;
  return read_lines(path, text, tiny);
}

const std::vector<nn::data::Box>* find_boxes(const BoxTable& table, const std::string& image) {
  if (auto it = table.find(image); it != table.end()) return &it->second;
  const std::string name = std::filesystem::path(image).filename().string();
  if (auto it = table.find(name); it != table.end()) return &it->second;
  return nullptr;
}

}  // namespace vitrine::explain
