// JsonSection and the messages of unknown keys (see json_section.h).
#include "nn/json_section.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/error.h"
#include "nn/json.h"

namespace vitrine::nn {

using nlohmann::json;

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string dotted(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

/// Optimal string alignment distance (Levenshtein with adjacent transpositions).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string range(double lo, bool lo_open, double hi, bool hi_open) {
  if (std::isinf(hi)) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

}  // namespace

bool is_comment_key(const std::string& key) { return !key.empty() && key[0] == '_'; }

std::string json_a_type(const json& v) {
  const std::string t = v.type_name();
  if (v.is_null()) return "null";
  return (t[0] == 'a' || t[0] == 'o' ? "an " : "a ") + t;
}

std::string closest_name(const std::string& s, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(s, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = s.size() <= 3 ? 1 : s.size() <= 6 ? 2 : 3;
  return best_d <= limit && best_d < s.size() ? best : "";
}

std::string unknown_key_message(const std::string& parent, const std::string& key,
                                const std::vector<std::string>& valid) {
  std::string msg =
      fmt::format("unknown {} \"{}\"", parent.empty() ? "section" : "key", dotted(parent, key));
  if (std::string s = closest_name(key, valid); !s.empty())
    msg += fmt::format(" (did you mean \"{}\"?)", dotted(parent, s));
  if (parent.empty()) return msg + fmt::format("; the sections are: {}", fmt::join(valid, ", "));
  return msg + fmt::format("; the keys of \"{}\" are: {}", parent, fmt::join(valid, ", "));
}

JsonSection::JsonSection(const json& value, std::string name, std::string prefix,
                         std::string missing_hint)
    : j_(&value),
      name_(std::move(name)),
      prefix_(std::move(prefix)),
      missing_hint_(std::move(missing_hint)) {}

void JsonSection::check_keys(const std::vector<std::string>& keys,
                             const std::vector<std::string>& optional) const {
  std::vector<std::string> known = keys;
  known.insert(known.end(), optional.begin(), optional.end());
  for (const auto& [k, v] : j_->items()) {
    (void)v;
    if (!is_comment_key(k) && !contains(known, k))
      fail("{}{}", prefix_, unknown_key_message(name_, k, known));
  }
  for (const std::string& k : keys) (void)at(k);
}

const json& JsonSection::at(const std::string& k) const {
  VT_CHECK(j_->contains(k), "{}missing key \"{}\"{}", prefix_, key(k),
           missing_hint_.empty() ? "" : fmt::format(" ({})", missing_hint_));
  return j_->at(k);
}

double JsonSection::number(const std::string& k, double lo, bool lo_open, double hi,
                           bool hi_open) const {
  const json& v = at(k);
  VT_CHECK(v.is_number(), "{}{} must be a number, got {} ({})", prefix_, key(k), v.dump(),
           json_a_type(v));
  const double x = v.get<double>();
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  if (!ok)
    fail("{}{} must be {}, got {}", prefix_, key(k), range(lo, lo_open, hi, hi_open), v.dump());
  return x;
}

int64_t JsonSection::integer(const std::string& k, int64_t lo, int64_t hi) const {
  const json& v = at(k);
  const std::optional<int64_t> i = json_as_integer(v);
  const std::string want = hi == std::numeric_limits<int64_t>::max()
                               ? fmt::format("an integer >= {}", lo)
                               : fmt::format("an integer in [{}, {}]", lo, hi);
  VT_CHECK(i && *i >= lo && *i <= hi, "{}{} must be {}, got {}", prefix_, key(k), want, v.dump());
  return *i;
}

std::string JsonSection::string(const std::string& k) const {
  const json& v = at(k);
  VT_CHECK(v.is_string(), "{}{} must be a string, got {} ({})", prefix_, key(k), v.dump(),
           json_a_type(v));
  return v.get<std::string>();
}

std::string JsonSection::choice(const std::string& k,
                                const std::vector<std::string>& choices) const {
  const std::string s = string(k);
  if (contains(choices, s)) return s;
  const std::string near = closest_name(s, choices);
  fail("{}{} must be one of {}, got \"{}\"{}", prefix_, key(k), fmt::join(choices, ", "), s,
       near.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", near));
}

bool JsonSection::boolean(const std::string& k) const {
  const json& v = at(k);
  VT_CHECK(v.is_boolean(), "{}{} must be true or false, got {} ({})", prefix_, key(k), v.dump(),
           json_a_type(v));
  return v.get<bool>();
}

}  // namespace vitrine::nn
