// vitrine-train's configuration: the default, reading a file, --set overrides, validation, and
// the few values derived from it (model config, data path, schedule). See config.h for the keys.
#include "tools/train/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/device.h"
#include "backends/error.h"
#include "nn/data/dataset.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "nn/data/transforms.h"
#include "nn/json.h"
#include "tools/common/files.h"
#include "tools/train/options.h"

namespace vitrine::train {

using nlohmann::json;

namespace {

// ---- the schema --------------------------------------------------------------------------------

const std::vector<std::string> kSections = {"model", "data", "optim", "schedule", "train"};

// The keys of every section but "model" (whose keys are "preset" and ViTConfig's fields).
const std::map<std::string, std::vector<std::string>> kSectionKeys = {
    {"data",
     {"dataset", "path", "validation_fraction", "subset", "batch_size", "workers", "transforms"}},
    {"optim",
     {"name", "lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "label_smoothing",
      "grad_clip"}},
    {"schedule", {"name", "warmup_epochs", "min_lr_factor", "step_epochs", "gamma"}},
    {"train",
     {"epochs", "seed", "eval_every", "log_every", "early_stopping_patience", "accum_steps",
      "ema_decay", "test_each_epoch", "tta_hflip", "max_steps", "finetune", "freeze_backbone",
      "device", "precision", "out"}},
};

// What from_config knows (data.transforms) and what a random_crop object holds.
const std::vector<std::string> kTransformKeys = {"resize", "center_crop", "random_crop",
                                                 "hflip",  "mean",        "std"};
const std::vector<std::string> kRandomCropKeys = {"size", "padding"};

// data.pasted: optional, read by fashion-mnist-pasted only; absent keys take PastedOptions'
// defaults.
const std::vector<std::string> kPastedKeys = {"canvas", "min_scale", "max_scale", "distractors",
                                              "count",  "noise",     "seed"};
const std::string kPastedDataset = "fashion-mnist-pasted";

// Keys that hold an image size: a number or [h, w] (random_crop also {"size", "padding"}).
const std::vector<std::string> kSizeKeys = {
    "model.image_size", "data.transforms.resize", "data.transforms.center_crop",
    "data.transforms.random_crop", "data.transforms.random_crop.size"};

using DatasetSpec = nn::data::DatasetInfo;

/// The model section's keys for its architecture (model.arch, "vit" when absent).
std::vector<std::string> model_keys(const std::string& arch) {
  std::vector<std::string> keys = {"arch", "preset"};
  const json fields =
      arch == "resnet" ? models::ResNetConfig::fields() : models::ViTConfig{}.to_json();
  for (const auto& [k, v] : fields.items()) {
    (void)v;
    if (k != "arch") keys.push_back(k);
  }
  return keys;
}

bool is_comment(const std::string& key) { return !key.empty() && key[0] == '_'; }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  return fmt::format("{}", fmt::join(v, ", "));
}

std::string dotted(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

/// "a number", "an array", ... for messages.
std::string a_type(const json& v) {
  const std::string t = v.type_name();
  if (v.is_null()) return "null";
  return (t[0] == 'a' || t[0] == 'o' ? "an " : "a ") + t;
}

// ---- messages ----------------------------------------------------------------------------------

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

/// The candidate closest to key when it is close enough to be a typo, else "".
std::string closest(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  const size_t limit = key.size() <= 3 ? 1 : key.size() <= 6 ? 2 : 3;
  return best_d <= limit && best_d < key.size() ? best : "";
}

/// `unknown key "optim.lrr" (did you mean "optim.lr"?); the keys of "optim" are: ...`
std::string unknown_key(const std::string& parent, const std::string& key,
                        const std::vector<std::string>& valid) {
  std::string msg =
      fmt::format("unknown {} \"{}\"", parent.empty() ? "section" : "key", dotted(parent, key));
  if (std::string s = closest(key, valid); !s.empty())
    msg += fmt::format(" (did you mean \"{}\"?)", dotted(parent, s));
  if (parent.empty()) return msg + fmt::format("; the sections are: {}", join(valid));
  return msg + fmt::format("; the keys of \"{}\" are: {}", parent, join(valid));
}

// ---- reading values ----------------------------------------------------------------------------

/// One section of a config, with typed, range-checked reads whose errors name "section.key".
class Section {
 public:
  Section(const json& config, std::string name) : name_(std::move(name)) {
    VT_CHECK(config.is_object() && config.contains(name_),
             "config: missing section \"{}\" (the sections are: {})", name_, join(kSections));
    j_ = &config.at(name_);
    VT_CHECK(j_->is_object(), "config: section \"{}\" must be an object, got {}", name_,
             a_type(*j_));
  }

  /// An object inside a section, named by its dotted path ("data.pasted").
  static Section nested(const json& value, std::string dotted) {
    Section s;
    s.name_ = std::move(dotted);
    s.j_ = &value;
    return s;
  }

  /// No unknown key (comments aside), no missing one; `optional` keys may be absent.
  void check_keys(const std::vector<std::string>& keys,
                  const std::vector<std::string>& optional = {}) const {
    std::vector<std::string> known = keys;
    known.insert(known.end(), optional.begin(), optional.end());
    for (const auto& [k, v] : j_->items()) {
      (void)v;
      if (!is_comment(k) && !contains(known, k)) fail("config: {}", unknown_key(name_, k, known));
    }
    for (const std::string& k : keys)
      VT_CHECK(j_->contains(k), "config: missing key \"{}\" (see configs/fashion_mnist.json)",
               key(k));
  }

  bool has(const std::string& k) const { return j_->contains(k); }

  const json& at(const std::string& k) const {
    VT_CHECK(j_->contains(k), "config: missing key \"{}\" (see configs/fashion_mnist.json)",
             key(k));
    return j_->at(k);
  }
  std::string key(const std::string& k) const { return name_ + "." + k; }

  /// A number in [lo, hi] (lo_open / hi_open exclude the bound; hi = inf: no upper bound).
  double number(const std::string& k, double lo, bool lo_open, double hi = INFINITY,
                bool hi_open = false) const {
    const json& v = at(k);
    VT_CHECK(v.is_number(), "config: {} must be a number, got {} ({})", key(k), v.dump(),
             a_type(v));
    const double x = v.get<double>();
    const bool ok =
        std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (!ok)
      fail("config: {} must be {}, got {}", key(k), range(lo, lo_open, hi, hi_open), v.dump());
    return x;
  }

  int64_t integer(const std::string& k, int64_t lo,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json& v = at(k);
    const std::optional<int64_t> i = nn::json_as_integer(v);
    const std::string want = hi == std::numeric_limits<int64_t>::max()
                                 ? fmt::format("an integer >= {}", lo)
                                 : fmt::format("an integer in [{}, {}]", lo, hi);
    VT_CHECK(i && *i >= lo && *i <= hi, "config: {} must be {}, got {}", key(k), want, v.dump());
    return *i;
  }

  std::string string(const std::string& k) const {
    const json& v = at(k);
    VT_CHECK(v.is_string(), "config: {} must be a string, got {} ({})", key(k), v.dump(),
             a_type(v));
    return v.get<std::string>();
  }

  std::string choice(const std::string& k, const std::vector<std::string>& choices) const {
    const std::string s = string(k);
    if (contains(choices, s)) return s;
    const std::string near = closest(s, choices);
    fail("config: {} must be one of {}, got \"{}\"{}", key(k), join(choices), s,
         near.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", near));
  }

  bool boolean(const std::string& k) const {
    const json& v = at(k);
    VT_CHECK(v.is_boolean(), "config: {} must be true or false, got {} ({})", key(k), v.dump(),
             a_type(v));
    return v.get<bool>();
  }

  const json& json_value() const { return *j_; }

 private:
  static std::string range(double lo, bool lo_open, double hi, bool hi_open) {
    if (std::isinf(hi)) return fmt::format("{} {}", lo_open ? ">" : ">=", lo);
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  }

  Section() = default;

  std::string name_;
  const json* j_ = nullptr;
};

/// data.pasted as PastedOptions: its keys checked, absent ones PastedOptions' defaults.
nn::data::PastedOptions read_pasted(const Section& data) {
  nn::data::PastedOptions o;
  if (!data.has("pasted")) return o;
  const json& j = data.at("pasted");
  VT_CHECK(j.is_object(),
           "config: data.pasted must be an object (as {{\"canvas\": 64, \"distractors\": "
           "\"fragments\"}}; {{}} for the defaults), got {}",
           a_type(j));
  const Section s = Section::nested(j, "data.pasted");
  s.check_keys({}, kPastedKeys);
  if (s.has("canvas")) o.canvas = s.integer("canvas", 1);
  if (s.has("min_scale")) o.min_scale = s.number("min_scale", 0, true);
  if (s.has("max_scale")) o.max_scale = s.number("max_scale", 0, true);
  VT_CHECK(o.min_scale <= o.max_scale,
           "config: data.pasted.min_scale ({}) must not exceed data.pasted.max_scale ({})",
           o.min_scale, o.max_scale);
  if (s.has("distractors")) o.distractors = s.choice("distractors", nn::data::distractor_names());
  if (s.has("count")) o.count = s.integer("count", 0, nn::data::kMaxFragments);
  if (s.has("noise")) o.noise = s.number("noise", 0, false, 1, false);
  if (s.has("seed")) o.seed = static_cast<uint64_t>(s.integer("seed", 0));
  const DatasetSpec& items = nn::data::dataset_info("fashion-mnist");
  const int64_t h = nn::data::scaled_size(items.height, o.max_scale);
  const int64_t w = nn::data::scaled_size(items.width, o.max_scale);
  VT_CHECK(o.canvas >= h && o.canvas >= w,
           "config: data.pasted.canvas {} cannot hold {}'s {}x{} items at data.pasted.max_scale {} "
           "({}x{})",
           o.canvas, items.name, items.height, items.width, o.max_scale, h, w);
  return o;
}

/// The data set's spec; fashion-mnist-pasted's image size is data.pasted.canvas.
DatasetSpec dataset_spec(const Section& data) {
  DatasetSpec d = nn::data::dataset_info(data.choice("dataset", nn::data::dataset_names()));
  if (d.name == kPastedDataset) d.height = d.width = read_pasted(data).canvas;
  return d;
}

/// "1x28x28"
std::string shape_str(const nn::data::ImageShape& s) {
  return fmt::format("{}x{}x{}", s[0], s[1], s[2]);
}

// ---- the sections ------------------------------------------------------------------------------

void validate_model(const json& config, const DatasetSpec& dataset, models::ClassifierSpec& vit) {
  Section model(config, "model");
  std::string arch;
  try {
    arch = models::arch_of(model.json_value());
  } catch (const Error& e) {
    fail("config: {}", e.what());
  }
  const std::vector<std::string> keys = model_keys(arch);
  for (const auto& [k, v] : model.json_value().items()) {
    (void)v;
    if (!is_comment(k) && !contains(keys, k)) fail("config: {}", unknown_key("model", k, keys));
  }
  vit = model_spec(config);
  VT_CHECK(vit.num_classes >= 1,
           "config: model.num_classes must be >= 1 to train a classifier, got {}", vit.num_classes);
  if (dataset.channels > 0)
    VT_CHECK(vit.channels == dataset.channels,
             "config: model.channels is {}, but {} images have {} channel{}", vit.channels,
             dataset.name, dataset.channels, dataset.channels == 1 ? "" : "s");
  else
    VT_CHECK(vit.channels == 1 || vit.channels == 3,
             "config: model.channels must be 1 (grey) or 3 (RGB) for {}, got {}", dataset.name,
             vit.channels);
  if (dataset.classes > 0)
    VT_CHECK(vit.num_classes == dataset.classes,
             "config: model.num_classes is {}, but {} has {} classes", vit.num_classes,
             dataset.name, dataset.classes);
}

void validate_transforms(const Section& data, const DatasetSpec& dataset,
                         const models::ClassifierSpec& vit) {
  const json& t = data.at("transforms");
  VT_CHECK(t.is_object(),
           "config: data.transforms must be an object (as {{\"resize\": [h, w], \"mean\": [...], "
           "\"std\": [...]}}; {{}} for none), got {}",
           a_type(t));
  const json clean = without_comments(t);
  const nn::data::ImageShape want{vit.channels, vit.image_h, vit.image_w};
  for (bool train : {true, false}) {
    nn::data::Compose pipeline;
    try {
      pipeline = nn::data::from_config(clean, vit.channels, train);
    } catch (const Error& e) {
      fail("config: data.transforms: {}", e.what());
    }
    const char* which = train ? "training" : "evaluation";
    if (dataset.height > 0) {
      const nn::data::ImageShape in{dataset.channels, dataset.height, dataset.width};
      nn::data::ImageShape out{};
      try {
        out = pipeline.output_shape(in);
      } catch (const Error& e) {
        fail("config: data.transforms: on {}'s {} images: {}", dataset.name, shape_str(in),
             e.what());
      }
      VT_CHECK(out == want,
               "config: data.transforms turn {}'s {} images into {} ({} pipeline: {}), but the "
               "model takes {} (model.channels x model.image_size); add a \"resize\" to "
               "data.transforms or change model.image_size",
               dataset.name, shape_str(in), shape_str(out), which, pipeline.describe(),
               shape_str(want));
    } else {
      // Images of any size: the pipeline must bring two differently shaped probes to the model's.
      for (const nn::data::ImageShape& in :
           {nn::data::ImageShape{vit.channels, 2 * vit.image_h + 7, 3 * vit.image_w + 5},
            nn::data::ImageShape{vit.channels, 3 * vit.image_h + 5, 2 * vit.image_w + 7}}) {
        std::optional<nn::data::ImageShape> out;
        try {
          out = pipeline.output_shape(in);
        } catch (const Error&) {
          out.reset();  // reported below with the advice
        }
        VT_CHECK(out && *out == want,
                 "config: {} images come in any size, and the {} pipeline ({}) does not bring "
                 "them to the model's {}: data.transforms needs a \"resize\" (and may crop) to "
                 "model.image_size [{}, {}]",
                 dataset.name, which, pipeline.describe(), shape_str(want), vit.image_h,
                 vit.image_w);
      }
    }
  }
}

void validate_optim(const json& config) {
  Section optim(config, "optim");
  optim.check_keys(kSectionKeys.at("optim"), {"no_decay"});
  const std::string name = optim.choice("name", {"adamw", "adam", "sgd"});
  optim.number("lr", 0, true);
  optim.number("weight_decay", 0, false);
  const json& betas = optim.at("betas");
  VT_CHECK(betas.is_array() && betas.size() == 2 && betas[0].is_number() && betas[1].is_number(),
           "config: optim.betas must be [beta1, beta2], got {}", betas.dump());
  for (const json& b : betas)
    VT_CHECK(b.get<double>() >= 0 && b.get<double>() < 1,
             "config: optim.betas must be in [0, 1), got {}", betas.dump());
  optim.number("eps", 0, true);
  const double momentum = optim.number("momentum", 0, false, 1, true);
  const bool nesterov = optim.boolean("nesterov");
  VT_CHECK(!(name == "sgd" && nesterov && momentum == 0),
           "config: optim.nesterov needs optim.momentum > 0, got momentum 0");
  optim.number("label_smoothing", 0, false, 1, true);
  optim.number("grad_clip", 0, false);
  if (optim.has("no_decay")) {
    const json& nd = optim.at("no_decay");
    VT_CHECK(nd.is_array(),
             "config: optim.no_decay must be a list of parameter-name parts (and \"ndim<=1\" for "
             "every bias and norm), got {}",
             nd.dump());
    for (const json& n : nd)
      VT_CHECK(n.is_string() && !n.get<std::string>().empty(),
               "config: optim.no_decay must hold non-empty strings, got {}", nd.dump());
  }
}

void validate_schedule(const json& config, int64_t epochs) {
  Section schedule(config, "schedule");
  schedule.check_keys(kSectionKeys.at("schedule"));
  schedule.choice("name", {"constant", "step", "warmup_cosine"});
  const double warmup = schedule.number("warmup_epochs", 0, false);
  VT_CHECK(warmup <= static_cast<double>(epochs),
           "config: schedule.warmup_epochs ({}) must not exceed train.epochs ({})", warmup, epochs);
  schedule.number("min_lr_factor", 0, false, 1, false);
  schedule.integer("step_epochs", 1);
  schedule.number("gamma", 0, true, 1, false);
}

int64_t validate_train(const json& config, double validation_fraction) {
  Section train(config, "train");
  train.check_keys(kSectionKeys.at("train"),
                   {"zero", "bucket_mb", "sync_bn", "early_stopping_metric"});  // (optional keys)
  const int64_t epochs = train.integer("epochs", 1);
  train.integer("seed", 0);
  train.integer("eval_every", 0);
  train.integer("log_every", 1);
  const int64_t patience = train.integer("early_stopping_patience", 0);
  VT_CHECK(patience == 0 || validation_fraction > 0,
           "config: train.early_stopping_patience {} needs a validation split "
           "(data.validation_fraction > 0), got data.validation_fraction 0",
           patience);
  if (train.has("early_stopping_metric"))
    train.choice("early_stopping_metric", {"val_accuracy", "val_loss"});
  train.integer("accum_steps", 1);
  train.number("ema_decay", 0, false, 1, true);
  train.boolean("test_each_epoch");
  train.boolean("tta_hflip");
  train.integer("max_steps", 0);
  const std::string finetune = train.string("finetune");
  VT_CHECK(!train.boolean("freeze_backbone") || !finetune.empty(),
           "config: train.freeze_backbone needs train.finetune (the checkpoint whose backbone to "
           "freeze), got train.finetune \"\"");
  const std::string device = train.string("device");
  try {
    (void)Device::parse(device);
  } catch (const Error& e) {
    fail("config: train.device: {}", e.what());
  }
  train.choice("precision", {"fp32", "tf32", "bf16"});
  VT_CHECK(!train.string("out").empty(), "config: train.out must name the run folder, got \"\"");
  if (train.has("zero")) train.integer("zero", 0, 1);  // 1 = ZeRO-1
  if (train.has("bucket_mb")) train.number("bucket_mb", 0, true, 1e6);
  if (train.has("sync_bn")) train.boolean("sync_bn");
  return epochs;
}

// ---- --set ---------------------------------------------------------------------------------

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
  if (old.is_object()) return a_type(old);
  return fmt::format("{} (now {})", a_type(old), old.dump());
}

}  // namespace

// ---- public ------------------------------------------------------------------------------------

json default_config() {
  static const json config = json::parse(
#include "default_config.inc"
  );
  return config;
}

json without_comments(const json& j) {
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [k, v] : j.items())
      if (!is_comment(k)) out[k] = without_comments(v);
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& v : j) out.push_back(without_comments(v));
    return out;
  }
  return j;
}

json with_defaults(const json& config) {
  if (!config.is_object()) return config;
  json out = config;
  const json defaults = default_config();
  for (const auto& [section, values] : defaults.items()) {
    if (is_comment(section)) continue;
    if (!out.contains(section)) {
      out[section] = values;
    } else if (section != "model" && out[section].is_object() && values.is_object()) {
      for (const auto& [k, v] : values.items())
        if (!is_comment(k) && !out[section].contains(k)) out[section][k] = v;
    }
  }
  return out;
}

json load_config(const std::string& path) {
  const json j = tools::read_json_file(path, "config file");
  VT_CHECK(j.is_object(), "config file \"{}\": expected a JSON object with the sections {}, got {}",
           path, join(kSections), a_type(j));
  return with_defaults(j);
}

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
                 assignment, path, a_type(it->second), text, a_type(given));
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
        if (!is_comment(k)) valid.push_back(k);
      }
      for (const auto& [k, v] : optional) {
        (void)v;
        if (!contains(valid, k)) valid.push_back(k);
      }
      std::sort(valid.begin(), valid.end());
      if (parent.empty()) valid = kSections;
      fail("--set {}: {}", assignment, unknown_key(parent, part, valid));
    }
    node = &(*node)[part];
    parent = path;
  }

  json& old = *node;
  if (old.is_string() && !given.is_string()) given = text;  // a string key takes the text as is
  VT_CHECK(same_kind(old, given, parent), "--set {}: {} holds {}, got {} ({})", assignment, parent,
           describe_old(old), text, a_type(given));
  old = given;
}

void validate_config(const json& config) {
  VT_CHECK(config.is_object(), "config: expected a JSON object with the sections {}, got {}",
           join(kSections), a_type(config));
  for (const auto& [k, v] : config.items()) {
    (void)v;
    if (!is_comment(k) && !contains(kSections, k))
      fail("config: {}", unknown_key("", k, kSections));
  }
  Section data(config, "data");
  data.check_keys(kSectionKeys.at("data"), {"pasted"});
  const DatasetSpec dataset = dataset_spec(data);
  VT_CHECK(dataset.name == kPastedDataset || !data.has("pasted"),
           "config: data.pasted is read by data.dataset \"{}\" only, got data.dataset \"{}\" "
           "(remove data.pasted)",
           kPastedDataset, dataset.name);
  data.string("path");
  const double validation_fraction = data.number("validation_fraction", 0, false, 1, true);
  data.integer("subset", 0);
  data.integer("batch_size", 1);
  data.integer("workers", -1);

  models::ClassifierSpec vit;
  validate_model(config, dataset, vit);
  validate_transforms(data, dataset, vit);
  validate_optim(config);
  const int64_t epochs = validate_train(config, validation_fraction);
  validate_schedule(config, epochs);
}

models::ClassifierSpec model_spec(const json& config) {
  Section section(config, "model");
  const json model = without_comments(section.json_value());
  try {
    return models::ClassifierSpec::from_json(model);
  } catch (const Error& e) {
    fail("config: model: {}", e.what());
  }
}

models::ViTConfig model_config(const json& config) {
  const models::ClassifierSpec spec = model_spec(config);
  try {
    return spec.vit("this");
  } catch (const Error& e) {
    fail("config: model: {}", e.what());
  }
}

nn::data::DatasetOptions dataset_options(const json& config) {
  Section data(config, "data");
  nn::data::DatasetOptions o;
  o.name = dataset_spec(data).name;
  o.path = data.string("path");
  if (o.name == kPastedDataset) o.pasted = read_pasted(data);
  if (o.name == "imagefolder") o.channels = model_spec(config).channels;
  o.split_seed = static_cast<uint64_t>(Section(config, "train").integer("seed", 0)) + 1;
  return o;
}

std::string data_path(const json& config) {
  return nn::data::dataset_folder(dataset_options(config));
}

nn::data::PastedOptions pasted_options(const json& config) {
  return read_pasted(Section(config, "data"));
}

}  // namespace vitrine::train
