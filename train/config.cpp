// vitrine-train's configuration: the schema's pieces (config_schema.h), the default, reading a
// file, and the few values derived from a config (model config, data set, data path). Validation
// is config_validate.cpp's, --set config_set.cpp's. See config.h for the keys.
#include "train/config.h"

#include <fmt/format.h>

#include "backends/error.h"
#include "common/files.h"
#include "nn/data/dataset.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "train/config_schema.h"

namespace vitrine::train {

using nlohmann::json;

namespace schema {

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

namespace {
const json& section_value(const json& config, const std::string& name) {
  VT_CHECK(config.is_object() && config.contains(name),
           "config: missing section \"{}\" (the sections are: {})", name, join(kSections));
  const json& j = config.at(name);
  VT_CHECK(j.is_object(), "config: section \"{}\" must be an object, got {}", name,
           nn::json_a_type(j));
  return j;
}
}  // namespace

Section::Section(const json& config, const std::string& name)
    : nn::JsonSection(section_value(config, name), name,
                      "config: ", "see configs/fashion_mnist.json") {}

nn::data::PastedOptions read_pasted(const Section& data) {
  if (!data.has("pasted")) return {};
  try {
    return nn::data::pasted_options_from_json(data.at("pasted"));
  } catch (const Error& e) {
    fail("config: {}", e.what());
  }
}

DatasetSpec dataset_spec(const Section& data) {
  DatasetSpec d = nn::data::dataset_info(data.choice("dataset", nn::data::dataset_names()));
  if (d.name == kPastedDataset) d.height = d.width = read_pasted(data).canvas;
  return d;
}

}  // namespace schema

using namespace schema;

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
      if (!nn::is_comment_key(k)) out[k] = without_comments(v);
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
    if (nn::is_comment_key(section)) continue;
    if (!out.contains(section)) {
      out[section] = values;
    } else if (section != "model" && out[section].is_object() && values.is_object()) {
      for (const auto& [k, v] : values.items())
        if (!nn::is_comment_key(k) && !out[section].contains(k)) out[section][k] = v;
    }
  }
  return out;
}

json load_config(const std::string& path) {
  const json j = tools::read_json_file(path, "config file");
  VT_CHECK(j.is_object(), "config file \"{}\": expected a JSON object with the sections {}, got {}",
           path, join(kSections), nn::json_a_type(j));
  return with_defaults(j);
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
