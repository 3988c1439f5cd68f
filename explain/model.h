// The model vitrine-explain explains, as the command line and the server (--serve) load it: any
// image classifier in a safetensors checkpoint, its class names, and the input normalisation it
// was trained with; and how one decoded image becomes the model's input (a Sample).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/classifier.h"
#include "models/vit.h"
#include "nn/data/image_folder.h"
#include "nn/data/pasted.h"
#include "nn/state.h"

namespace vitrine::explain {

/// Where the model comes from and what the user said about it.
struct ModelSource {
  std::string checkpoint;
  /// The architecture when the checkpoint names none: a preset or a JSON file (empty: none).
  std::string model_config;
  /// A model other than a ViT: the submodule Grad-CAM reads (empty: a ResNet's last stage).
  std::string gradcam_layer;
  /// A model other than a ViT: the squares (in pixels) its grid maps average over.
  int64_t cell = 4;
  /// The input normalisation; empty: the checkpoint's, or `normalise`'s.
  std::vector<float> mean, std;
  /// "checkpoint" or "" (its metadata, else the default for its naming), "imagenet" (ImageNet's
  /// mean and std) or "none" (mean 0, std 1: the pixels in [0, 1] as they are, as DINO's
  /// visualize_attention and the seed recipes feed them). An error together with mean/std.
  std::string normalise;
  /// checkpoint "random:PRESET": the seed of the untrained model's initialisation.
  uint64_t seed = 0;
  /// checkpoint "random:PRESET": the initialisation scheme (ViTConfig::init: timm, torchvision,
  /// vit-pytorch, dino; empty: the preset's, timm's). An error with a checkpoint file, whose
  /// weights do not depend on it.
  std::string init;
};

/// Whether a checkpoint names an untrained model, "random:PRESET" (a models::ViTConfig preset,
/// as DINO's random=True): built and initialised from ModelSource::seed, no file read.
bool is_random_checkpoint(const std::string& checkpoint);

/// The model, its class names and the input normalisation it was trained with.
struct LoadedModel {
  std::shared_ptr<nn::Module> model;               // any image classifier
  std::shared_ptr<models::VisionTransformer> vit;  // the same model when it is a ViT, else null
  models::ClassifierSpec spec;                     // channels, classes, input size
  /// A ViT's patch; for another model the cell, the squares its grid maps average over: images
  /// are cropped to (resize none) or must be (a raw input) a multiple of it.
  int64_t patch = 1;
  std::string gradcam_layer;  // another model: the submodule Grad-CAM reads (a ResNet's last stage)
  nn::Metadata meta;          // the checkpoint's metadata
  std::string checkpoint_name;  // the checkpoint's file name (without its folder)
  bool headless = false;        // no classification head: attention methods only
  std::vector<std::string>
      classes;                   // "0", "1", ... where the checkpoint names none; empty: no head
  std::vector<float> mean, std;  // one per channel
  /// Where mean and std came from ("the checkpoint", "--mean/--std", or a default and why).
  std::string normalisation;
  /// What the loading decided that the command line did not say (printed as "note: ..."): a
  /// --model-config whose classes the checkpoint's own head overrides.
  std::vector<std::string> notes;
};

/// Reads the checkpoint (any classifier load_classifier knows), its class names, mean and std
/// (the source's, else the checkpoint's metadata, else ImageNet's for a head-less 3-channel
/// backbone, else timm's 0.5). Errors name the checkpoint and the faulty value.
LoadedModel load_model(const ModelSource& source);

/// The model-input value of a black pixel per channel: -mean[c] / std[c].
std::vector<float> black_pixel(const LoadedModel& model);

/// How an image is fitted to the model (torchvision's evaluation transforms by default):
///   "model"    the shorter side to the model's size (Resize(int), antialiased bilinear; for a
///              model that is not square, the smallest such size that covers its h x w), then a
///              centre crop to the model's (h, w) (CenterCrop): the photo's aspect is kept;
///   "stretch"  resized to the model's (h, w), whatever the photo's aspect (the old "model");
///   "none"     its own size;   "factor:F" every side scaled by F in (0, 16] (antialiased);
/// the last two then crop to a multiple of the patch, at the "center" or the "topleft" (DINO's
/// visualize_attention).
struct InputGeometry {
  std::string resize = "model", crop = "center";
};

/// The resize values, for messages: "model, stretch, none or factor:F".
extern const char* const kResizeValues;

/// resize "factor:F"'s F, or 0 for "model", "stretch" and "none"; a malformed factor is an Error.
double resize_factor(const std::string& resize);
/// Whether resize is one of the values above (a malformed factor is an Error).
bool valid_resize(const std::string& resize);

/// The size "model" resizes an H x W image to before its centre crop to (h, w): torchvision's
/// shorter_side_size(H, W, min(h, w)) when that covers h x w, else the smallest size with the
/// aspect kept that does.
std::pair<int64_t, int64_t> cover_size(int64_t height, int64_t width, int64_t h, int64_t w);

/// Where the image's own pixels went: a point (y, x) of the original image is at
/// (y * scale_y - top, x * scale_x - left) in the fitted one (scales from the resize, offsets
/// from the crop).
struct Fit {
  double scale_y = 1, scale_x = 1;
  int64_t top = 0, left = 0;
  /// A box in the original image's pixels as the fitted image's (height, width) pixels: its
  /// corners mapped, rounded outwards, clipped to the image (empty when it falls outside).
  nn::data::Box map(const nn::data::Box& box, int64_t height, int64_t width) const;
};

/// One image to explain: what the model sees and what a person sees.
struct Sample {
  std::string name;
  Tensor input;    // [C, H, W], the model's input (normalised)
  Tensor display;  // [C, H, W] in [0, 1]
  int64_t label = -1;
  std::optional<nn::data::Box> box;  // the object's box (the pasted benchmark's images)
  Fit fit{};                         // how the original image became the input
  std::string file{};                // the image file it was read from (when one)
  /// --boxes: the objects' boxes in the input's pixels (mapped through fit).
  std::vector<nn::data::Box> boxes{};
};

/// A decoded image as the model takes it: checked against the patch size, fitted (geometry),
/// then normalised. Errors name the image.
Sample prepare_image(const std::string& name, const nn::data::Image& raw, int64_t label,
                     const InputGeometry& geometry, const LoadedModel& model);

/// A decoded image as a tensor [C, H, W].
Tensor image_tensor(const nn::data::Image& image);

}  // namespace vitrine::explain
