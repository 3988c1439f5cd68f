// An explanation method is one file: explain/methods/<name>.cpp defines a MethodSpec (its
// name, a line of help, what it needs, the request options it reads, whether it is an "extra"
// method, and compute) and registers it with VT_EXPLAIN_METHOD. The registry lists every method in
// the order of their keys; the command line, the server, --evaluate and the page all list from it,
// and explain(model, request) (explain.h) runs each through its compute. pytorch-grad-cam's
// BaseCAM is the model: the shared work (the pass, the targets, bringing a grid to image
// resolution and scaling it) is done once around compute, which only makes the method's map.
//
// The build lists the files of explain/methods/ (a glob) and generates the registry's list
// from it, so a new file needs no other edit: its registering function is named after the file
// (methods/grad_rollout.cpp registers with VT_EXPLAIN_METHOD(grad_rollout)), and that reference
// keeps it in any program that links the library, static archive or not.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vitrine {
class Tensor;
namespace nn {
class Module;
}
namespace models {
class VisionTransformer;
}
}  // namespace vitrine

namespace vitrine::explain {

struct Options;
struct Pass;
struct Explanation;

/// What a method needs of the model and of the pass.
struct Needs {
  /// The attention probabilities of the shared pass (a models::AttentionModel).
  bool attention = false;
  /// The shared pass's gradients (its backward); without, the pass is a forward only.
  bool gradients = false;
  /// A class score (a classification head): every method but attention, rollout and qkv.
  bool class_score = true;
  /// An attribution over the input pixels (a map at pixel resolution); any model has one.
  bool input_gradient = false;
  /// A Vision Transformer itself (it reads its blocks): not another model.
  bool vit = false;
  /// A layer: options.layer on a ViT (or Grad-CAM's layer on another model).
  bool layer = false;
};

/// What compute is given: the model, the batch, the options, the resolved targets and the pass.
class MethodContext {
 public:
  MethodContext(nn::Module& model, models::VisionTransformer* vit, const Tensor& images,
                const Options& options, const std::vector<int64_t>& targets, int64_t cell,
                nn::Module* gradcam_layer, std::function<const Pass&()> pass)
      : model(model),
        vit(vit),
        images(images),
        options(options),
        targets(targets),
        cell(cell),
        gradcam_layer(gradcam_layer),
        pass_(std::move(pass)) {}

  nn::Module& model;
  models::VisionTransformer* vit;  // the model when it is a Vision Transformer, else null
  const Tensor& images;            // [B, C, H, W], the model's input
  const Options& options;
  const std::vector<int64_t>& targets;  // one class per image, resolved (empty: headless)
  /// The side in pixels of the grid cells an input-gradient map is averaged over: a ViT's patch,
  /// another model's request.cell.
  int64_t cell;
  nn::Module* gradcam_layer;  // another model: the module Grad-CAM weighs (null: none)
  /// The shared pass: a ViT's (run before any method, with gradients when a method asked needs
  /// them), or another model's attention pass, run on first call (an Error for a model that is
  /// not an AttentionModel).
  const Pass& pass() const { return pass_(); }

 private:
  std::function<const Pass&()> pass_;
};

/// A method as its file defines it.
struct MethodSpec {
  std::string name;  // as the command line's --method names it: "grad-rollout"
  std::string help;  // one line
  /// The position in every list (the registry's order); today's methods are 10, 20, ... 100.
  int order = 1000;
  Needs needs{};
  /// The request options it reads, by their command-line names without "--" ("discard-ratio");
  /// the options every method reads (upsample, pos-interp, ...) are not listed.
  std::vector<std::string> options{};
  /// Named only, never part of "all": not a relevance map of the image (activation-max, qkv).
  bool extra = false;
  /// The method's result for the batch: its grid [B, gh, gw] (and its raw map at image
  /// resolution [B, H, W] when it makes one itself; else the grid is upsampled as
  /// options.upsample says), or a picture. explain then scales raw to the map in [0, 1].
  Explanation (*compute)(const MethodContext&) = nullptr;
};

/// A registered method: a handle on its spec (cheap to copy; equal when the same method).
class Method {
 public:
  Method() = default;
  explicit Method(const MethodSpec* spec) : spec_(spec) {}

  std::string_view name() const;
  std::string_view help() const;
  int order() const;
  const Needs& needs() const;
  const std::vector<std::string>& options() const;
  bool extra() const;
  /// The method's Explanation for the batch, finished: method set, raw at image resolution,
  /// map scaled to [0, 1] (a picture: neither).
  Explanation compute(const MethodContext& context) const;

  const MethodSpec* spec() const { return spec_; }
  explicit operator bool() const { return spec_ != nullptr; }
  bool operator==(const Method& o) const { return spec_ == o.spec_; }

  // The methods of the former enum, for code that still names them (the registry's entries).
  static const Method Attention, Rollout, GradRollout, Chefer, GradCam, Saliency, SmoothGrad,
      IntegratedGradients, ActivationMax, Qkv;

 private:
  const MethodSpec* spec_ = nullptr;
};

/// Every registered method, in the registry's order (by MethodSpec::order).
const std::vector<const Method*>& methods();
/// The method of that name, or nullptr.
const Method* find_method(std::string_view name);
/// The methods' names in the registry's order; include_extras = false: those of "all".
std::vector<std::string> method_names(bool include_extras = true);

std::string method_name(const Method& m);
/// Every relevance-map method, in the registry's order (what "all" means).
std::vector<Method> all_methods();
/// The methods named only (extra): activation-max, qkv.
std::vector<Method> extra_methods();
/// "rollout,chefer" or "all"; an unknown name is an Error listing the known ones.
std::vector<Method> parse_methods(const std::string& list);
/// Methods that read gradients of the input pixels (their maps are at pixel resolution).
bool is_input_gradient(const Method& m);
/// Whether a method reads the gradients of the shared pass (a ViT's pass then runs its backward).
bool needs_gradients(const Method& m);
/// Methods that need a class score (a head): all but attention, rollout and qkv.
bool needs_class_score(const Method& m);

}  // namespace vitrine::explain

/// Defines a method file's registering function: VT_EXPLAIN_METHOD(stem) { return MethodSpec{...};
/// } inside namespace vitrine::explain, stem the file's name without .cpp.
#define VT_EXPLAIN_METHOD(stem)                                   \
  MethodSpec vitrine_explain_spec_##stem();                       \
  const MethodSpec& vitrine_explain_method_##stem() {             \
    static const MethodSpec spec = vitrine_explain_spec_##stem(); \
    return spec;                                                  \
  }                                                               \
  MethodSpec vitrine_explain_spec_##stem()
