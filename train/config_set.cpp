// vitrine-train's --set: apply_override, one "section.key=value" assignment checked against the
// config's keys and the old value's type (see config.h).
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "backends/error.h"
#include "nn/data/open.h"
#include "nn/json.h"
#include "train/config.h"
#include "train/config_schema.h"

namespace vitrine::train {

using nlohmann::json;
using namespace schema;

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

/// The keys that may be set at `parent` though absent from the config, and a value of each
/// key's type (null: any type, left to validate_config).
std::map<std::string, json> optional_keys(const std::string& parent, const json& node) {
  std::map<std::string, json> out;
  if (parent == "model") {
    const bool resnet = node.is_object() && node.value("arch", std::string()) == "resnet";
    const json fields = resnet ? models::ResNetConfig::fields() : models::ViTConfig{}.to_json();
    for (const auto& [k, v] : fields.items()) out[k] = v;
    out["preset"] = resnet ? "resnet8" : "fmnist";
    out["arch"] = "vit";
  } else if (parent == "data.transforms") {
    for (const std::string& k : kTransformKeys) out[k] = nullptr;
  } else if (parent == "data.transforms.random_crop" && node.is_object()) {
    for (const std::string& k : kRandomCropKeys) out[k] = nullptr;
  } else if (parent == "data.transforms.resize" && node.is_object()) {
    for (const char* k : {"size", "factor", "interpolation", "antialias"}) out[k] = nullptr;
  } else if (parent == "data") {
    out["pasted"] = json::object();
  } else if (parent == "train") {
    out["tensorboard"] = true;  // (added after the shipped configs: true when absent)
  } else if (parent == "data.pasted") {
    out = nn::data::pasted_options_to_json({});
  }
  return out;
}

/// What to write for the whole value at path in a message: its keys when it is an object of
/// known keys ({"padding": ..., "size": ...} for a random crop), else VALUE.
std::string whole_value(const std::string& path) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : optional_keys(path, json::object())) {
    (void)v;
    keys.push_back(fmt::format("\"{}\": ...", k));
  }
  return keys.empty() ? std::string("VALUE") : fmt::format("{{{}}}", join(keys));
}

/// Whether `given` may replace a value like `old` at path.
bool same_kind(const json& old, const json& given, const std::string& path) {
  if (old.is_null() || given.type() == old.type()) return true;
  if (old.is_number() && given.is_number()) return true;
  // null removes a transform (nn::data::from_config), as "random_crop": null in a file.
  if (given.is_null() && path.starts_with("data.transforms.")) return true;
  if (contains(kSizeKeys, path)) {
    const bool size_like =
        given.is_number() || given.is_array() ||
        ((path == "data.transforms.random_crop" || path == "data.transforms.resize") &&
         given.is_object());
    return size_like && (old.is_number() || old.is_array() || old.is_object());
  }
  return false;
}

/// "a number (now 0.001)", "an object" (objects are long: no value).
std::string describe_old(const json& old) {
  if (old.is_object()) return nn::json_a_type(old);
  return fmt::format("{} (now {})", nn::json_a_type(old), old.dump());
}

}  // namespace

void apply_override(json& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  VT_CHECK(eq != std::string::npos,
           "--set \"{}\": expected KEY=VALUE with a dotted key, as model.depth=4 or "
           "optim.lr=5e-4",
           assignment);
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const std::string& p : parts)
    VT_CHECK(!p.empty(), "--set \"{}\": \"{}\" is not a dotted key (as model.depth or optim.lr)",
             assignment, key);

  // A value that is not JSON (or is too deep or too long for it) is a string.
  json given;
  try {
    given = nn::parse_json(text, "--set");
  } catch (const Error&) {
    given = text;
  }
  if (given.is_string() && !text.empty()) {  // numbers JSON refuses but C does: .5, 1., +3
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() && std::isfinite(x) &&
        !std::isspace(static_cast<unsigned char>(text[0])))
      given = x;
  }

  if (key == "model.arch" && config.contains("model") && config["model"].is_object()) {
    // Another architecture: the old model section's fields mean nothing to it. The new section
    // keeps what the data decided (channels, classes, input size) and takes the rest from the
    // architecture's defaults; --set model.KEY after this one sets its own fields. A ResNet starts
    // from ResNet-8: on 2 cores it trains 2.7 times faster than ResNet-20 (docs/benchmarks.md).
    const std::string arch = given.is_string() ? given.get<std::string>() : given.dump();
    std::string current;
    try {
      current = models::arch_of(config["model"]);
      (void)models::arch_of(json{{"arch", arch}});
    } catch (const Error& e) {
      fail("--set {}: {}", assignment, e.what());
    }
    if (arch != current) {
      const models::ClassifierSpec old = model_spec(config);
      config["model"] = {{"arch", arch},
                         {"channels", old.channels},
                         {"num_classes", old.num_classes},
                         {"image_size", json::array({old.image_h, old.image_w})}};
      if (arch == "resnet") config["model"]["preset"] = "resnet8";
    }
    return;
  }

  json* node = &config;
  std::string parent;  // the dotted path of node
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const std::string path = dotted(parent, part);
    if (!node->is_object()) {
      VT_CHECK(!node->is_array(), "--set {}: {} is an array; set it whole, as {}={}", assignment,
               parent, parent, node->dump());
      fail("--set {}: {} is {}, not a section, so it has no key \"{}\"", assignment, parent,
           describe_old(*node), part);
    }
    const bool last = i + 1 == parts.size();
    if (!node->contains(part)) {
      const std::map<std::string, json> optional = optional_keys(parent, *node);
      const auto it = optional.find(part);
      if (it != optional.end() && last) {
        if (it->second.is_string() && !given.is_string()) given = text;
        VT_CHECK(same_kind(it->second, given, path), "--set {}: {} takes {}, got {} ({})",
                 assignment, path, nn::json_a_type(it->second), text, nn::json_a_type(given));
        (*node)[part] = given;
        return;
      }
      if (it != optional.end())  // a key inside an optional value that is not there
        fail(
            "--set {}: {} is not in the config, so it has no key \"{}\"; set it whole, as "
            "{}={}",
            assignment, path, parts[i + 1], path, whole_value(path));
      std::vector<std::string> valid;
      for (const auto& [k, v] : node->items()) {
        (void)v;
        if (!nn::is_comment_key(k)) valid.push_back(k);
      }
      for (const auto& [k, v] : optional) {
        (void)v;
        if (!contains(valid, k)) valid.push_back(k);
      }
      std::sort(valid.begin(), valid.end());
      if (parent.empty()) valid = kSections;
      fail("--set {}: {}", assignment, nn::unknown_key_message(parent, part, valid));
    }
    node = &(*node)[part];
    parent = path;
  }

  json& old = *node;
  if (old.is_string() && !given.is_string()) given = text;  // a string key takes the text as is
  VT_CHECK(same_kind(old, given, parent), "--set {}: {} holds {}, got {} ({})", assignment, parent,
           describe_old(old), text, nn::json_a_type(given));
  old = given;
}

}  // namespace vitrine::train
