// The one explanation entry point (explain.h): explain(model, request) for every model. A ViT gets
// one shared pass and every method read from it (explain_method, explain.cpp); any other model its
// own passes per method (Grad-CAM at a named layer, the input gradients, and the attention methods
// on one pass of an AttentionModel). explain.h's shorter overloads are this entry point too.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "tools/explain/detail.h"
#include "tools/explain/evaluate.h"
#include "tools/explain/explain.h"

namespace vitrine::explain {

using namespace detail;

namespace {

using clock = std::chrono::steady_clock;

/// A ViT: one pass (or the request's), then each method read from it, timed.
Result explain_vit(models::VisionTransformer& model, const Request& r) {
  Result out;
  if (r.pass) {
    out.pass = *r.pass;
  } else {
    const auto t0 = clock::now();
    const bool gradients = r.gradients || std::any_of(r.methods.begin(), r.methods.end(),
                                                      [](Method m) { return needs_gradients(m); });
    out.pass =
        run_pass(model, r.images, r.targets, r.options.layer, gradients, r.options.pos_interp);
    out.seconds.emplace_back(gradients ? "forward + backward" : "forward", seconds_since(t0));
  }
  for (Method m : r.methods) {
    const auto t0 = clock::now();
    out.explanations.push_back(explain_method(model, r.images, out.pass, m, r.options));
    out.seconds.emplace_back(method_name(m), seconds_since(t0));
  }
  out.logits = out.pass.logits;
  out.targets = out.pass.targets;
  return out;
}

/// One method of a model that is not a ViT, for the resolved targets t. pass: the attention
/// methods' shared pass, run on first need (with gradients when grad-rollout or chefer is asked).
Explanation any_model_method(nn::Module& model, nn::Module* gradcam_layer, const Request& r,
                             const std::vector<int64_t>& t, Method m, std::optional<Pass>& pass) {
  const Tensor& images = r.images;
  const Options& options = r.options;
  const int64_t H = images.size(2), W = images.size(3);
  Explanation e{};
  e.method = m;
  switch (m) {
    case Method::GradCam:
      VT_CHECK(gradcam_layer != nullptr,
               "explain: gradcam needs the layer whose activations it weighs (a convolutional "
               "stage, e.g. a ResNet's layer3)");
      e.grid = gradcam(model, *gradcam_layer, images, t);
      e.raw = upsample(e.grid, H, W, options.upsample);
      break;
    case Method::Saliency:
    case Method::SmoothGrad:
    case Method::IntegratedGradients: {
      const Attribution a =
          m == Method::Saliency     ? saliency(model, images, t, nullptr, options.pos_interp)
          : m == Method::SmoothGrad ? smoothgrad(model, images, t, options)
                                    : integrated_gradients(model, images, t, options);
      e.raw = attribution_map(a, m);
      e.grid = patch_mean(e.raw, r.cell);
      e.completeness_gap = a.completeness_gap;
      break;
    }
    case Method::ActivationMax:
    case Method::Qkv:
      fail("explain: {} reads a Vision Transformer (explain_method); this {} is not one",
           method_name(m), model.type_name());
    default: {  // an attention method: one pass for all of them
      if (!pass) {
        const bool gradients = std::any_of(r.methods.begin(), r.methods.end(), [](Method k) {
          return k == Method::GradRollout || k == Method::Chefer;
        });
        pass = run_pass(model, images, t, gradients);
      }
      e.grid = m == Method::Attention ? attention_map(*pass, options.layer, options.head, &e.heads)
               : m == Method::Rollout ? rollout(*pass, options.head_fusion, options.discard_ratio)
               : m == Method::GradRollout ? grad_rollout(*pass, options.discard_ratio)
                                          : chefer(*pass);
      if (m == Method::Attention && options.threshold > 0)
        e.mask = threshold_mask(e.grid, options.threshold);
      e.raw = upsample(e.grid, H, W, options.upsample);
    }
  }
  e.map = minmax(e.raw);
  return e;
}

/// Any other model: one forward for the logits and the targets, then each method, timed.
Result explain_any_model(nn::Module& model, nn::Module* gradcam_layer, const Request& r) {
  check_images(model, r.images);
  VT_CHECK(r.cell >= 1, "explain: the cell size must be positive, got {}", r.cell);
  VT_CHECK(r.pass == nullptr,
           "explain: a Pass is a Vision Transformer's; the {} runs the passes of its methods",
           model.type_name());
  Result out;
  auto t0 = clock::now();
  {
    VitForward vit(model, r.options.pos_interp);
    out.logits = logits_of(model)(r.images);
  }
  out.targets = resolve_targets(out.logits, r.targets);
  out.seconds.emplace_back("forward", seconds_since(t0));
  std::optional<Pass> pass;
  for (Method m : r.methods) {
    t0 = clock::now();
    out.explanations.push_back(any_model_method(model, gradcam_layer, r, out.targets, m, pass));
    out.seconds.emplace_back(method_name(m), seconds_since(t0));
  }
  return out;
}

}  // namespace

Result explain(nn::Module& model, const Request& request) {
  if (auto* vit = dynamic_cast<models::VisionTransformer*>(&model))
    return explain_vit(*vit, request);
  nn::Module* layer =
      request.gradcam_layer.empty() ? nullptr : &submodule(model, request.gradcam_layer);
  return explain_any_model(model, layer, request);
}

std::vector<Explanation> explain(models::VisionTransformer& model, const Tensor& images,
                                 const std::vector<int64_t>& targets,
                                 const std::vector<Method>& methods, const Options& options,
                                 Pass* pass_out) {
  Result r = explain_vit(
      model, {.images = images, .targets = targets, .methods = methods, .options = options});
  if (pass_out) *pass_out = std::move(r.pass);
  return std::move(r.explanations);
}

std::vector<Explanation> explain(nn::Module& model, nn::Module* gradcam_layer, const Tensor& images,
                                 const std::vector<int64_t>& targets,
                                 const std::vector<Method>& methods, const Options& options,
                                 int64_t cell, std::vector<int64_t>* resolved) {
  Result r = explain_any_model(
      model, gradcam_layer,
      {.images = images, .targets = targets, .methods = methods, .options = options, .cell = cell});
  if (resolved) *resolved = r.targets;
  return std::move(r.explanations);
}

}  // namespace vitrine::explain
