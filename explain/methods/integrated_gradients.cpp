// integrated-gradients: integrated gradients as Captum defines them (Sundararajan et al., 2017),
// summed over channels, with the completeness gap (integrated_gradients in explain.h).
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  return explanation_of(integrated_gradients(c.model, c.images, c.targets, c.options),
                        ChannelReduction::SumAbs, c.cell);
}

}  // namespace

VT_EXPLAIN_METHOD(integrated_gradients) {
  return {.name = "integrated-gradients",
          .help =
              "the input gradient integrated along a path from a baseline (Sundararajan et "
              "al.)",
          .order = 80,
          .needs = {.input_gradient = true},
          .options = {"steps", "ig-method", "baseline"},
          .compute = compute};
}

}  // namespace vitrine::explain
