// smoothgrad: SmoothGrad (Smilkov et al., 2017), the input gradient averaged over noisy copies of
// the image, summed over channels (smoothgrad in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  const Attribution a = smoothgrad(c.model, c.images, c.targets, c.options);
  Explanation e{};
  e.raw = attribution_map(a, ChannelReduction::SumAbs);
  e.grid = patch_mean(e.raw, c.cell);
  e.completeness_gap = a.completeness_gap;
  return e;
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
