// gradcam: Grad-CAM (Selvaraju et al., 2017), on a ViT the tokens of block options.layer
// (gradcam(pass)), on another model the feature map of the module named by --gradcam-layer.
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  Explanation e{};
  if (c.vit) {
    e.grid = gradcam(c.pass());
    return e;
  }
  VT_CHECK(c.gradcam_layer != nullptr,
           "explain: gradcam needs the layer whose activations it weighs (a convolutional "
           "stage, e.g. a ResNet's layer3)");
  e.grid = gradcam(c.model, *c.gradcam_layer, c.images, c.targets);
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(gradcam) {
  return {.name = "gradcam",
          .help = "Grad-CAM: a layer's activations weighed by their mean gradient",
          .order = 50,
          .needs = {.gradients = true, .layer = true},
          .options = {"layer", "gradcam-layer"},
          .compute = compute};
}

}  // namespace vitrine::explain
