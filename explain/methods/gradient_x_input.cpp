// gradient-x-input: the input times its gradient, x * d y_c / d x (Shrikumar et al., 2016;
// Captum's InputXGradient), an attribution over the pixels whose map is the max over channels of
// its magnitude, as saliency's. A ViT's gradient comes from the shared pass; another model's from
// one forward and backward of its own. (This file is the whole method: docs/explain.md, "Adding
// a method", walks through it.)
#include "explain/detail.h"
#include "explain/explain.h"

namespace vitrine::explain {

namespace {

/// x * d y_c / d x for another model: one forward and backward in eval mode (saliency's pass).
Tensor input_times_gradient(const MethodContext& c) {
  detail::EvalMode eval(c.model);
  detail::FrozenParameters frozen(c.model);
  detail::VitForward vit(c.model, c.options.pos_interp);
  const Tensor x =
      c.images.detach().to(detail::model_device(c.model)).to(detail::model_dtype(c.model));
  const Tensor g = detail::input_gradients(c.model, x, c.targets, x.size(0)).first;
  return x.to(kCPU) * g;
}

Explanation compute(const MethodContext& c) {
  Tensor a;
  if (c.vit) {
    const Pass& pass = c.pass();
    VT_CHECK(pass.input_grad.defined(), "explain: the pass holds no input gradient");
    a = c.images.to(kCPU).to(pass.input_grad.dtype()) * pass.input_grad;
  } else {
    a = input_times_gradient(c);
  }
  return explanation_of({a, {}}, ChannelReduction::MaxAbs, c.cell);
}

}  // namespace

VT_EXPLAIN_METHOD(gradient_x_input) {
  return {.name = "gradient-x-input",
          .help = "the input times its gradient, the max over channels (Captum's InputXGradient)",
          .order = 85,
          .needs = {.gradients = true, .input_gradient = true},
          .options = {},
          .compute = compute};
}

}  // namespace vitrine::explain
