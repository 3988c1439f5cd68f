// saliency: |d y_c / d x|, the max over channels at each pixel (Simonyan et al., 2014); a ViT's
// from its pass, another model's from a forward and backward of its own.
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  const Attribution a = c.vit
                            ? saliency(c.pass())
                            : saliency(c.model, c.images, c.targets, nullptr, c.options.pos_interp);
  return explanation_of(a, ChannelReduction::MaxAbs, c.cell);
}

}  // namespace

VT_EXPLAIN_METHOD(saliency) {
  return {.name = "saliency",
          .help = "the input gradient's magnitude, the max over channels (Simonyan et al.)",
          .order = 60,
          .needs = {.gradients = true, .input_gradient = true},
          .options = {},
          .compute = compute};
}

}  // namespace vitrine::explain
