// activation-max: an input optimised for the target class's logit or an MLP channel, with Lucid's
// regularisation (activation_max in explain.h; the optimisation is
// explain/activation_max.cpp). It gives a picture, not a map of the image, so it is named
// only (not in "all").
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

Explanation compute(const MethodContext& c) {
  VT_CHECK(c.options.neuron >= 0 || !c.targets.empty(),
           "explain: activation-max of a class needs a model with a classification head "
           "(maximise an MLP channel instead: --neuron)");
  const ActivationMax a = activation_max(
      c.model, c.images.shape(),
      c.targets.empty() ? std::vector<int64_t>(c.images.size(0), 0) : c.targets, c.options);
  Explanation e{};
  e.picture = a.images;
  e.start_score = a.start;
  e.end_score = a.end;
  return e;
}

}  // namespace

VT_EXPLAIN_METHOD(activation_max) {
  return {.name = "activation-max",
          .help = "an input optimised for the target class (or an MLP channel), Lucid's way",
          .order = 90,
          .needs = {.vit = true, .layer = true},
          .options = {"am-steps", "am-lr", "jitter", "blur-every", "blur-sigma", "l2", "neuron",
                      "layer", "seed"},
          .extra = true,
          .compute = compute};
}

}  // namespace vitrine::explain
