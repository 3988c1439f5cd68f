#include "models/classifier.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nn/json.h"
#include "nn/state.h"

namespace vitrine::models {

using nlohmann::json;

std::vector<std::string> architectures() { return {"vit", "resnet"}; }

std::string arch_of(const json& j) {
  if (!j.is_object() || !j.contains("arch")) return "vit";
  VT_CHECK(j.at("arch").is_string(), "model.arch must be a name ({}), got {}",
           fmt::join(architectures(), ", "), j.at("arch").dump());
  const std::string arch = j.at("arch").get<std::string>();
  for (const std::string& a : architectures())
    if (a == arch) return arch;
  fail("model.arch '{}' is not an architecture Vitrine knows (known: {})", arch,
       fmt::join(architectures(), ", "));
}

namespace {
/// The spec of an architecture's config (every config has these fields).
template <typename Config>
ClassifierSpec spec_of(const std::string& arch, const Config& c, const std::string& head) {
  ClassifierSpec s;
  s.arch = arch;
  s.config = c.to_json();
  s.channels = c.channels;
  s.num_classes = c.num_classes;
  s.image_h = c.image_h;
  s.image_w = c.image_w;
  s.head = head;
  return s;
}
}  // namespace

ClassifierSpec ClassifierSpec::of(const ViTConfig& c) { return spec_of("vit", c, "head"); }

ClassifierSpec ClassifierSpec::of(const ResNetConfig& c) { return spec_of("resnet", c, "fc"); }

ClassifierSpec ClassifierSpec::from_json(const json& j) {
  const std::string arch = arch_of(j);
  json c = j;
  if (c.is_object() && c.contains("preset")) {  // the preset's config with the other keys changed
    const json& preset = j.at("preset");
    VT_CHECK(preset.is_string(), "\"preset\" must be a preset name, got {}", preset.dump());
    const std::string name = preset.get<std::string>();
    const std::vector<std::string> resnets = ResNetConfig::preset_names();
    VT_CHECK(arch == "resnet" || std::find(resnets.begin(), resnets.end(), name) == resnets.end(),
             "preset '{}' is a ResNet's, and this model section's arch is {}: give \"arch\": "
             "\"resnet\" with it (vitrine-train: --set model.arch=resnet --set model.preset={})",
             name, arch, name);
    c = arch == "resnet" ? ResNetConfig::preset(name).to_json() : ViTConfig::preset(name).to_json();
    for (const auto& [k, v] : j.items())
      if (k != "preset") c[k] = v;
    // A ResNet's depth follows the layers given (the preset's depth counts the preset's layers).
    if (arch == "resnet" && j.contains("layers") && !j.contains("depth")) c.erase("depth");
  }
  if (arch == "resnet") return of(ResNetConfig::from_json(c));
  if (c.is_object()) c.erase("arch");
  return of(ViTConfig::from_json(c));
}

std::shared_ptr<nn::Module> ClassifierSpec::build(Generator& gen) const {
  if (arch == "resnet") return std::make_shared<ResNet>(ResNetConfig::from_json(config), gen);
  return std::make_shared<VisionTransformer>(ViTConfig::from_json(config), gen);
}

ViTConfig ClassifierSpec::vit(const std::string& what) const {
  VT_CHECK(arch == "vit", "{} needs a Vision Transformer; this model is a {} ({})", what, arch,
           describe());
  return ViTConfig::from_json(config);
}

std::string ClassifierSpec::describe() const {
  if (arch == "resnet") {
    return ResNetConfig::from_json(config).describe();
  }
  const ViTConfig m = ViTConfig::from_json(config);
  const std::string overlap =
      !m.stem.empty()
          ? fmt::format(" (after a convolutional stem of widths {})", fmt::join(m.stem, ", "))
      : m.kernel() != m.patch ? fmt::format(" (seen through {}x{} kernels)", m.kernel(), m.kernel())
                              : "";
  const std::string head_dim =
      m.dim_head > 0 ? fmt::format(" of width {}", m.dim_head) : std::string();
  return fmt::format("ViT {}x{}x{} in {}x{} patches{}, dim {}, depth {}, {} heads{}, MLP {}{}",
                     m.channels, m.image_h, m.image_w, m.patch, m.patch, overlap, m.dim, m.depth,
                     m.heads, head_dim, m.mlp_dim, m.final_norm ? "" : ", no final norm");
}

std::shared_ptr<nn::Module> load_classifier(const std::string& path,
                                            const std::optional<ClassifierSpec>& given,
                                            ClassifierSpec* spec_out) {
  const nn::Metadata meta = nn::read_safetensors_metadata(path);
  const json stored = nn::metadata_json(meta, nn::kConfigKey);
  const std::string arch = !stored.is_null() ? arch_of(stored) : given ? given->arch : "vit";
  VT_CHECK(!given || given->arch == arch,
           "{}: a {} checkpoint, which names its own architecture; the {} architecture given is "
           "for checkpoints without one",
           path, arch, given ? given->arch : "");
  if (arch == "vit") {
    std::optional<ViTConfig> vit;
    if (given) vit = given->vit(fmt::format("{} (no vitrine.config)", path));
    auto model = load_vit(path, vit);
    if (spec_out) *spec_out = ClassifierSpec::of(model->config());
    return model;
  }
  VT_CHECK(!stored.is_null(), "{}: a {} checkpoint must hold its vitrine.config", path, arch);
  ClassifierSpec spec;
  try {
    spec = ClassifierSpec::from_json(stored);
  } catch (const Error& e) {
    fail("{}: vitrine.config: {}", path, e.what());
  }
  if (spec.arch == "resnet") {
    const ResNetConfig c = ResNetConfig::from_json(spec.config);
    nn::check_checkpoint_holds(path, c.min_parameters(),
                               fmt::format("a ResNet-{} of width {}", c.depth, c.width));
  }
  Generator gen(0);  // every value is overwritten
  auto model = spec.build(gen);
  nn::load_checkpoint(path, *model);
  if (spec_out) *spec_out = spec;
  return model;
}

std::string head_note(const std::string& model_config, int64_t given_classes,
                      int64_t checkpoint_classes) {
  const std::string has = checkpoint_classes > 0
                              ? fmt::format("has {}: its head is used", checkpoint_classes)
                              : std::string("is absent (a backbone): no head");
  return fmt::format("--model-config {} gives {} classes; the checkpoint's own head {}",
                     model_config, given_classes, has);
}

Normalisation checkpoint_normalisation(const std::string& path, const nn::Metadata& meta,
                                       int64_t channels, bool has_head) {
  Normalisation n;
  json mean, std;
  try {
    mean = nn::metadata_json(meta, nn::kMeanKey);
    std = nn::metadata_json(meta, nn::kStdKey);
    if (mean.is_array() && std.is_array()) {
      for (const json& m : mean)
        n.mean.push_back(static_cast<float>(nn::json_number(m, "its mean")));
      for (const json& s : std)
        n.std.push_back(static_cast<float>(nn::json_number(s, "its std", 1e-12)));
      n.source = "the checkpoint";
    }
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  if (n.source.empty()) {
    std::optional<ViTNaming> naming;
    try {  // the names from the header only; a foreign checkpoint's metadata holds no naming
      nn::NamedTensors names;
      for (std::string& name : nn::read_safetensors_names(path)) names.emplace_back(name, Tensor());
      naming = detect_naming(names);
    } catch (const Error&) {  // not a ViT (a ResNet, say): the plain default below
    }
    const bool imagenet = channels == 3 && naming &&
                          (*naming == ViTNaming::Torchvision || *naming == ViTNaming::Dinov2 ||
                           (*naming == ViTNaming::Timm && !has_head));
    if (imagenet) {
      n.mean = kImageNetMean;
      n.std = kImageNetStd;
      n.source = fmt::format("ImageNet's, as {} (the checkpoint names none)",
                             *naming == ViTNaming::Timm ? std::string("DINO's backbones")
                                                        : naming_name(*naming) + "'s ViTs");
    } else {
      n.mean.assign(static_cast<size_t>(channels), 0.5f);
      n.std.assign(static_cast<size_t>(channels), 0.5f);
      n.source = "0.5 / 0.5, timm's and Hugging Face's ViT default (the checkpoint names none)";
    }
  }
  if (n.mean.size() == 1) n.mean.resize(static_cast<size_t>(channels), n.mean[0]);
  if (n.std.size() == 1) n.std.resize(static_cast<size_t>(channels), n.std[0]);
  VT_CHECK(static_cast<int64_t>(n.mean.size()) == channels &&
               static_cast<int64_t>(n.std.size()) == channels,
           "{}: normalisation from {}: {} mean and {} std values for a {}-channel model", path,
           n.source, n.mean.size(), n.std.size(), channels);
  return n;
}

}  // namespace vitrine::models
