// activation-max: an input image optimised to maximise a class logit or a channel of a block's
// MLP, with Lucid's regularisation (explain.h). Conventions: x is the model's input [B, C, H, W]
// (normalised), kept on the host as doubles between steps; the model runs on its own device.
#include <algorithm>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "explain/detail.h"
#include "explain/explain.h"
#include "ops/ops.h"

namespace vitrine::explain {

using namespace detail;

namespace {

/// torch.roll(x, (dy, dx), dims=(2, 3)) of planes [P, H, W]: out[y, x] = in[y - dy, x - dx],
/// indices wrapping around.
std::vector<double> roll(const std::vector<double>& x, int64_t planes, int64_t H, int64_t W,
                         int64_t dy, int64_t dx) {
  std::vector<double> out(x.size());
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t c = 0; c < W; ++c)
        out[(p * H + (y + dy + H) % H) * W + (c + dx + W) % W] = x[(p * H + y) * W + c];
  return out;
}

/// A Gaussian blur of planes [P, H, W] in place: sigma in pixels, radius ceil(2 sigma) (at least
/// 1), reflect padding (index -1 reads 1), rows then columns.
void blur(std::vector<double>& x, int64_t planes, int64_t H, int64_t W, double sigma) {
  const auto R = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(2 * sigma)));
  std::vector<double> k(static_cast<size_t>(2 * R + 1));
  double ks = 0;
  for (int64_t i = -R; i <= R; ++i)
    ks += k[i + R] = std::exp(-0.5 * static_cast<double>(i * i) / (sigma * sigma));
  for (double& v : k) v /= ks;
  const auto reflect = [](int64_t i, int64_t n) {
    if (n == 1) return int64_t{0};
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
  };
  std::vector<double> t(static_cast<size_t>(H * W));
  for (int64_t p = 0; p < planes; ++p) {
    double* plane = x.data() + p * H * W;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t c = 0; c < W; ++c) {
        double s = 0;
        for (int64_t i = -R; i <= R; ++i) s += k[i + R] * plane[y * W + reflect(c + i, W)];
        t[y * W + c] = s;
      }
    for (int64_t y = 0; y < H; ++y)
      for (int64_t c = 0; c < W; ++c) {
        double s = 0;
        for (int64_t i = -R; i <= R; ++i) s += k[i + R] * t[reflect(y + i, H) * W + c];
        plane[y * W + c] = s;
      }
  }
}

/// Per channel, the model-input values of a black and a white pixel (empty options: 0 and 1).
std::pair<std::vector<double>, std::vector<double>> pixel_range(const Options& o, int64_t C) {
  VT_CHECK(o.black.empty() || static_cast<int64_t>(o.black.size()) == C,
           "explain: {} black values given for {} channels", o.black.size(), C);
  VT_CHECK(o.white.size() == o.black.size(), "explain: {} white values for {} black values",
           o.white.size(), o.black.size());
  std::vector<double> lo(static_cast<size_t>(C), 0.0), hi(static_cast<size_t>(C), 1.0);
  for (size_t c = 0; c < o.black.size(); ++c) {
    lo[c] = std::min(o.black[c], o.white[c]);
    hi[c] = std::max(o.black[c], o.white[c]);
  }
  return {lo, hi};
}

}  // namespace

Tensor activation_objective(nn::Module& model, const Tensor& x, const std::vector<int64_t>& targets,
                            const Options& options) {
  if (options.neuron < 0) {
    const Tensor logits = model(x);  // [B, K]
    return ops::sum(logits * target_selector(logits, targets), {1});
  }
  auto* vit = dynamic_cast<models::VisionTransformer*>(&model);
  VT_CHECK(vit != nullptr,
           "explain: activation-max of an MLP channel reads a Vision Transformer's block; this {} "
           "has none (maximise a class logit: no --neuron)",
           model.type_name());
  const auto& c = vit->config();
  const int64_t depth = c.depth;
  VT_CHECK(options.layer >= -depth && options.layer < depth,
           "explain: activation-max layer {} is out of range for a model with {} blocks",
           options.layer, depth);
  const int64_t l = options.layer < 0 ? options.layer + depth : options.layer;
  auto block = vit->blocks->at<models::ViTBlock>(l);
  VT_CHECK(options.neuron < c.mlp_dim,
           "explain: --neuron {} is out of range for an MLP of {} channels (0..{})", options.neuron,
           c.mlp_dim, c.mlp_dim - 1);
  // The block's MLP input (norm2's output), read by a hook; the channel after fc1 and the GELU,
  // averaged over the tokens.
  Tensor hidden_in;
  {
    ForwardHook hook(*block->norm2, [&hidden_in](nn::Module&, const Tensor&, const Tensor& out) {
      hidden_in = out;
      return Tensor();
    });
    (void)model(x);
  }
  const Tensor w = block->mlp->fc1->weight.narrow(0, options.neuron, 1);  // [1, D]
  const Tensor b = block->mlp->fc1->bias.defined()
                       ? block->mlp->fc1->bias.narrow(0, options.neuron, 1)
                       : Tensor();
  const Tensor h = ops::gelu(ops::linear(hidden_in, w, b));  // [B, N, 1]
  return ops::mean(h, {1, 2});
}

ActivationMax activation_max(nn::Module& model, const Dims& shape,
                             const std::vector<int64_t>& targets, const Options& o) {
  VT_CHECK(shape.size() == 4, "explain: activation-max needs an image shape [B, C, H, W], got {}",
           shape);
  const int64_t B = shape[0], C = shape[1], H = shape[2], W = shape[3];
  VT_CHECK(o.am_steps >= 0 && o.am_lr > 0 && o.am_jitter >= -1 && o.am_blur_every >= 0 &&
               o.am_blur_sigma > 0 && o.am_l2 >= 0,
           "explain: activation-max needs steps >= 0, lr > 0, jitter >= 0 (or -1), blur every "
           ">= 0, blur sigma > 0 and l2 >= 0 (got {}, {}, {}, {}, {}, {})",
           o.am_steps, o.am_lr, o.am_jitter, o.am_blur_every, o.am_blur_sigma, o.am_l2);
  VT_CHECK(static_cast<int64_t>(targets.size()) == B,
           "explain: activation-max: {} targets for {} images", targets.size(), B);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  VitForward fwd(model, o.pos_interp);
  const Device device = model_device(model);
  const DType dtype = model_dtype(model);
  const auto [lo, hi] = pixel_range(o, C);
  const int64_t plane = H * W;
  // The start: mid-grey plus 10% noise of the pixel range, from a generator seeded with o.seed.
  Generator gen(o.seed);
  std::vector<double> x = values(ops::randn({B, C, H, W}, gen, kFloat64));
  for (int64_t i = 0; i < B * C * plane; ++i) {
    const int64_t c = (i / plane) % C;
    x[i] = lo[c] + (hi[c] - lo[c]) * std::clamp(0.5 + 0.1 * x[i], 0.0, 1.0);
  }
  const auto to_model = [&](const std::vector<double>& v) {
    return ops::from_vector(v, {B, C, H, W}, dtype).to(device);
  };
  const auto score = [&](const std::vector<double>& v) {
    NoGradGuard no_grad;
    return values(activation_objective(model, to_model(v), targets, o));
  };
  const int64_t jitter =
      o.am_jitter >= 0
          ? o.am_jitter
          : std::max<int64_t>(1, std::llround(static_cast<double>(std::min(H, W)) / 28));
  ActivationMax out;
  out.start = score(x);
  Generator shifts(o.seed + 1);
  for (int64_t step = 0; step < o.am_steps; ++step) {
    // Jitter: the image shifted by (dy, dx) in [-jitter, jitter], its gradient shifted back.
    int64_t dy = 0, dx = 0;
    if (jitter > 0) {
      const auto u = values(ops::rand({2}, shifts, kFloat64));
      const int64_t span = 2 * jitter + 1;
      dy = std::min<int64_t>(span - 1, static_cast<int64_t>(u[0] * span)) - jitter;
      dx = std::min<int64_t>(span - 1, static_cast<int64_t>(u[1] * span)) - jitter;
    }
    Tensor xt = to_model(roll(x, B * C, H, W, dy, dx));
    xt.requires_grad_(true);
    Tensor objective = ops::sum(activation_objective(model, xt, targets, o));
    if (o.am_l2 > 0) objective = objective - ops::sum(xt * xt) * o.am_l2;
    const std::vector<double> g = roll(values(grad({objective}, {xt})[0]), B * C, H, W, -dy, -dx);
    // Gradient ascent with the step normalised per image: lr times the pixel range per mean
    // absolute gradient.
    const int64_t per_image = C * plane;
    for (int64_t b = 0; b < B; ++b) {
      double m = 0;
      for (int64_t i = 0; i < per_image; ++i) m += std::abs(g[b * per_image + i]);
      m = m / static_cast<double>(per_image) + 1e-12;
      for (int64_t i = 0; i < per_image; ++i) {
        const int64_t c = i / plane;
        x[b * per_image + i] += o.am_lr * (hi[c] - lo[c]) * g[b * per_image + i] / m;
      }
    }
    if (o.am_blur_every > 0 && (step + 1) % o.am_blur_every == 0)
      blur(x, B * C, H, W, o.am_blur_sigma);
    for (int64_t i = 0; i < B * C * plane; ++i) {
      const int64_t c = (i / plane) % C;
      x[i] = std::clamp(x[i], lo[c], hi[c]);
    }
  }
  out.end = score(x);
  out.images = ops::from_vector(x, {B, C, H, W}, kFloat32);
  return out;
}

}  // namespace vitrine::explain
