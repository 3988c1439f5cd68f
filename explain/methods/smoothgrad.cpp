// smoothgrad: SmoothGrad (Smilkov et al., 2017), the input gradient averaged over noisy copies of
// the image, summed over channels (smoothgrad in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  return explanation_of(smoothgrad(c.model, c.images, c.targets, c.options),
                        ChannelReduction::SumAbs, c.cell);
}

}  // namespace

VT_EXPLAIN_METHOD(smoothgrad) {
  return {.name = "smoothgrad",
          .help = "the input gradient averaged over noisy copies of the image (Smilkov et al.)",
          .order = 70,
          .needs = {.input_gradient = true},
          .options = {"samples", "sigma", "seed"},
          .compute = compute};
}

}  // namespace vitrine::explain
