// Reading a JSON object of settings (a config section, data.pasted) with typed, range-checked
// reads whose errors name the dotted key ("config: data.pasted.count must be an integer in
// [0, 100], got -1"), unknown keys with the closest known one ("did you mean ...?") and the list
// of valid ones. Keys starting with "_" are comments and are skipped.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vitrine::nn {

/// Whether a key is a comment ("_comment", any key starting with "_").
bool is_comment_key(const std::string& key);
/// "a number", "an array", "null", ... for messages.
std::string json_a_type(const nlohmann::json& v);
/// The candidate closest to s (optimal string alignment distance) when it is close enough to be a
/// typo, else "".
std::string closest_name(const std::string& s, const std::vector<std::string>& candidates);
/// `unknown key "optim.lrr" (did you mean "optim.lr"?); the keys of "optim" are: ...`, or
/// `unknown section "x"...; the sections are: ...` when parent is "".
std::string unknown_key_message(const std::string& parent, const std::string& key,
                                const std::vector<std::string>& valid);

/// An object of settings named by its dotted path ("data.pasted"); every error starts with
/// `prefix` ("config: ") and names the key as path.key.
class JsonSection {
 public:
  /// value must outlive the section. missing_hint ends a missing key's message ("see ...").
  JsonSection(const nlohmann::json& value, std::string name, std::string prefix = "",
              std::string missing_hint = "");

  /// No unknown key (comments aside), no missing one; `optional` keys may be absent.
  void check_keys(const std::vector<std::string>& keys,
                  const std::vector<std::string>& optional = {}) const;
  bool has(const std::string& k) const { return j_->contains(k); }
  const nlohmann::json& at(const std::string& k) const;
  /// "name.k"
  std::string key(const std::string& k) const { return name_ + "." + k; }

  /// A number in [lo, hi] (lo_open / hi_open exclude the bound; hi = inf: no upper bound).
  double number(const std::string& k, double lo, bool lo_open, double hi = INFINITY,
                bool hi_open = false) const;
  int64_t integer(const std::string& k, int64_t lo,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const;
  std::string string(const std::string& k) const;
  std::string choice(const std::string& k, const std::vector<std::string>& choices) const;
  bool boolean(const std::string& k) const;

  const nlohmann::json& json_value() const { return *j_; }
  const std::string& name() const { return name_; }

 private:
  const nlohmann::json* j_;
  std::string name_, prefix_, missing_hint_;
};

}  // namespace vitrine::nn
