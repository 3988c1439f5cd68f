// The one explanation entry point (explain.h): explain(model, request) for every model. A ViT gets
// one shared pass and every method read from it (explain_method); any other model the passes its
// methods run (Grad-CAM at a named layer, the input gradients), and the attention methods one
// pass of an AttentionModel, run on first need. Each method is its registry entry's compute
// (method.h, explain/methods/). explain.h's shorter overloads are this entry point too.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "explain/detail.h"
#include "explain/evaluate.h"
#include "explain/explain.h"

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
    const bool gradients =
        r.gradients || std::any_of(r.methods.begin(), r.methods.end(),
                                   [](const Method& m) { return needs_gradients(m); });
    out.pass =
        run_pass(model, r.images, r.targets, r.options.layer, gradients, r.options.pos_interp);
    out.seconds.emplace_back(gradients ? "forward + backward" : "forward", seconds_since(t0));
  }
  for (const Method& m : r.methods) {
    const auto t0 = clock::now();
    out.explanations.push_back(explain_method(model, r.images, out.pass, m, r.options));
    out.seconds.emplace_back(method_name(m), seconds_since(t0));
  }
  out.logits = out.pass.logits;
  out.targets = out.pass.targets;
  return out;
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
  // The attention methods' shared pass, run on first need (with gradients when a method asked
  // reads the attention's gradients: grad-rollout, chefer).
  std::optional<Pass> pass;
  const auto attention_pass = [&]() -> const Pass& {
    if (!pass) {
      const bool gradients = std::any_of(r.methods.begin(), r.methods.end(), [](const Method& k) {
        return k.needs().attention && k.needs().gradients;
      });
      pass = run_pass(model, r.images, out.targets, gradients);
    }
    return *pass;
  };
  const MethodContext context(model, nullptr, r.images, r.options, out.targets, r.cell,
                              gradcam_layer, attention_pass);
  for (const Method& m : r.methods) {
    t0 = clock::now();
    out.explanations.push_back(m.compute(context));
    out.seconds.emplace_back(method_name(m), seconds_since(t0));
  }
  return out;
}

}  // namespace

Explanation explain_method(models::VisionTransformer& model, const Tensor& images, const Pass& pass,
                           const Method& m, const Options& options) {
  check_images(model, images);
  VT_CHECK(!needs_gradients(m) || pass.input_grad.defined(),
           "explain: {} needs the gradients of the pass (run_pass with gradients = true)",
           method_name(m));
  const MethodContext context(model, &model, images, options, pass.targets, model.config().patch,
                              nullptr, [&pass]() -> const Pass& { return pass; });
  return m.compute(context);
}

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
