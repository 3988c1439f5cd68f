// Image classifiers by architecture: what the Trainer, vitrine-train and vitrine-explain need to
// know of a model (input channels and size, classes, the name of its classification layer)
// whatever it is, and how to build one or read one from a checkpoint. Architectures: "vit"
// (models/vit.h, the default) and "resnet" (models/resnet.h). A checkpoint's vitrine.config
// metadata is the architecture's own config JSON; a ResNet's says "arch": "resnet", a ViT's
// names no arch (so every ViT checkpoint written before there were others still reads).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/resnet.h"
#include "models/vit.h"

namespace vitrine::models {

struct ClassifierSpec {
  std::string arch = "vit";
  nlohmann::json config;  // the architecture's config as its to_json writes it
  int64_t channels = 0, num_classes = 0, image_h = 0, image_w = 0;
  /// The classification layer's child name: what fine-tuning replaces and freezing keeps
  /// trainable ("head" in a ViT, "fc" in a ResNet).
  std::string head = "head";

  static ClassifierSpec of(const ViTConfig& c);
  static ClassifierSpec of(const ResNetConfig& c);
  /// A model config JSON: "arch" absent or "vit" is a ViTConfig (without the arch key), "resnet"
  /// a ResNetConfig; an unknown arch is an Error listing the known ones. A "preset" key starts
  /// from that preset's config, the other keys changing it ({"preset": "fmnist", "depth": 3});
  /// a ResNet's "layers" without "depth" take the depth they make.
  static ClassifierSpec from_json(const nlohmann::json& j);
  /// A fresh model, initialised from gen.
  std::shared_ptr<nn::Module> build(Generator& gen) const;
  /// The ViT config (an Error naming `what` for another architecture).
  ViTConfig vit(const std::string& what) const;
  /// One line: "ResNet-20, 1x28x28 input, 10 classes, width 16" or the ViT's.
  std::string describe() const;
};

/// What a --model argument names, of any architecture: a preset (ViTConfig's "fmnist",
/// "vit_base_patch16_224", ...; ResNetConfig's "resnet8", ...), or a JSON file as resolve_config
/// reads it (our model config with an optional "arch", a Hugging Face config.json, or a
/// vitrine-train config's "model" section). Errors name the argument and what was tried.
ClassifierSpec resolve_classifier(const std::string& spec);

/// The registered architectures: vit, resnet.
std::vector<std::string> architectures();
/// The architecture named by a model config JSON ("vit" without an "arch" key).
std::string arch_of(const nlohmann::json& model_config);

/// Reads a classifier checkpoint of any architecture: its vitrine.config's arch decides (a ViT,
/// Vitrine's or a foreign one, through load_vit; a ResNet through its config). given: the
/// architecture when the file names none (load_vit's config argument; for a ViT it also
/// overrides the file's, except the head: the checkpoint's own classes win); an Error when it is
/// another architecture than the file's.
std::shared_ptr<nn::Module> load_classifier(const std::string& path,
                                            const std::optional<ClassifierSpec>& given = {},
                                            ClassifierSpec* spec_out = nullptr);

/// The note the tools print when a --model-config's classes are not the checkpoint's head's:
/// "--model-config vit_base_patch16_224 gives 1000 classes; the checkpoint's own head has 3:
/// its head is used".
std::string head_note(const std::string& model_config, int64_t given_classes,
                      int64_t checkpoint_classes);

/// ImageNet's per-channel statistics on pixels in [0, 1], as torchvision's transforms.Normalize
/// of its ImageNet models (and DINO's, DINOv2's) uses them.
inline const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};

/// The input normalisation (per-channel mean and std, on pixels in [0, 1]) a checkpoint expects,
/// the one rule of every tool (vitrine-explain, vitrine-train --eval):
///   1. the checkpoint's own vitrine.mean / vitrine.std metadata (vitrine-train writes them);
///   2. a foreign ViT without them, by the naming of its tensors: torchvision's and DINOv2's, and
///      a timm/DINO file without a head (DINO's backbones), were trained on ImageNet's
///      statistics (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225) (3 channels); timm's and
///      Hugging Face's ViTs on 0.5 / 0.5 (timm's default_cfg, HF's ViTImageProcessor);
///   3. anything else: 0.5 / 0.5 per channel.
/// meta: the file's metadata (read_safetensors_metadata), which the caller has read already;
/// source says which rule gave it, for the tools to print.
struct Normalisation {
  std::vector<float> mean, std;
  std::string source;
};
Normalisation checkpoint_normalisation(const std::string& path, const nn::Metadata& meta,
                                       int64_t channels, bool has_head);

}  // namespace vitrine::models
