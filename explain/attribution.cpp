// The input-gradient methods (saliency, SmoothGrad, integrated gradients) and Grad-CAM at a
// convolutional layer: they need nothing of the model but images -> logits, so they take any
// nn::Module (a ViT, a ResNet, a model of your own). See explain.h for the formulas.
#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/ranges.h>

#include "explain/detail.h"
#include "explain/explain.h"

namespace vitrine::explain {

using namespace detail;

// ---- input-gradient methods ------------------------------------------------------------------

Attribution saliency(const Pass& pass) {
  VT_CHECK(pass.input_grad.defined(), "explain: the pass holds no input gradient");
  return {ops::abs(pass.input_grad), {}};
}

Attribution smoothgrad(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
                       const Options& options, const Tensor& noise_in) {
  check_images(model, images);
  VitForward vit(model, options.pos_interp);
  VT_CHECK(options.samples >= 1, "explain: smoothgrad needs at least 1 sample, got {}",
           options.samples);
  VT_CHECK(options.sigma >= 0, "explain: smoothgrad sigma must be >= 0, got {}", options.sigma);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  const DType dt = model_dtype(model);
  const Device dev = model_device(model);
  Tensor x = images.detach().to(kCPU).to(dt);
  const int64_t B = x.size(0), n = options.samples;
  Dims sample_shape = x.shape();
  sample_shape.insert(1, n);  // [B, n, C, H, W]
  Tensor noise = noise_in;
  if (noise.defined()) {
    VT_CHECK(noise.shape() == sample_shape, "explain: smoothgrad noise must be {}, got {}",
             sample_shape, noise.shape());
  } else {
    Generator gen(options.seed);
    noise = ops::randn(sample_shape, gen, dt);
  }
  std::vector<Tensor> noisy;
  for (int64_t b = 0; b < B; ++b) {
    Tensor xb = x.select(0, b);
    const double range = ops::max(xb).item() - ops::min(xb).item();
    noisy.push_back(xb.unsqueeze(0) + noise.to(dt).select(0, b) * (options.sigma * range));
  }
  Tensor X = ops::cat(noisy, 0);  // [B * n, C, H, W], image b's samples together
  // The predicted class is that of the clean image, so resolve -1 on it first.
  std::vector<int64_t> t = targets;
  {
    NoGradGuard ng;
    t = resolve_targets(model(x.to(dev)), targets);
  }
  std::vector<int64_t> ts;
  for (int64_t b = 0; b < B; ++b) ts.insert(ts.end(), static_cast<size_t>(n), t[b]);
  const Tensor g = input_gradients(model, X.to(dev), ts, options.chunk).first;
  return {ops::mean(g.reshape(sample_shape), {1}), {}};
}

Tensor ig_baseline(const Tensor& images, const Options& options) {
  const int64_t C = images.size(1), H = images.size(2), W = images.size(3);
  if (options.baseline == IgBaseline::Black) {
    VT_CHECK(options.black.empty() || static_cast<int64_t>(options.black.size()) == C,
             "explain: {} black values given for {} channels", options.black.size(), C);
    Tensor out = ops::zeros(images.shape(), images.dtype());
    if (options.black.empty()) return out;
    std::vector<double> v;
    for (float f : options.black) v.push_back(f);
    return out + ops::from_vector(v, {1, C, 1, 1}, images.dtype());
  }
  // torchvision's gaussian_blur(kernel 11, sigma 5): a normalised 1-D Gaussian at offsets
  // -5..5, applied along rows and then columns (the 2-D kernel is their outer product), with
  // reflect padding (index -1 reads 1, index n reads n - 2).
  constexpr int64_t K = 11, R = K / 2;
  constexpr double sigma = 5;
  VT_CHECK(H > R && W > R, "explain: the blur baseline needs images larger than {}x{}, got {}x{}",
           R, R, H, W);
  std::vector<double> k(K);
  double ks = 0;
  for (int64_t i = 0; i < K; ++i) ks += k[i] = std::exp(-0.5 * std::pow((i - R) / sigma, 2));
  for (double& v : k) v /= ks;
  auto reflect = [](int64_t i, int64_t n) { return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i); };
  const int64_t B = images.size(0);
  auto in = values(images);
  std::vector<double> tmp(in.size()), out(in.size());
  for (int64_t p = 0; p < B * C; ++p) {
    const double* src = in.data() + p * H * W;
    double* t = tmp.data() + p * H * W;
    double* o = out.data() + p * H * W;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        double s = 0;
        for (int64_t i = 0; i < K; ++i) s += k[i] * src[y * W + reflect(x + i - R, W)];
        t[y * W + x] = s;
      }
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        double s = 0;
        for (int64_t i = 0; i < K; ++i) s += k[i] * t[reflect(y + i - R, H) * W + x];
        o[y * W + x] = s;
      }
  }
  return ops::from_vector(out, images.shape(), images.dtype());
}

std::pair<std::vector<double>, std::vector<double>> ig_rule(IgRule rule, int64_t n) {
  std::vector<double> alphas(static_cast<size_t>(n)), weights(static_cast<size_t>(n));
  if (rule == IgRule::Trapezoid) {
    VT_CHECK(n >= 2, "explain: the trapezoid rule needs at least 2 steps, got {}", n);
    for (int64_t k = 0; k < n; ++k) {
      alphas[k] = static_cast<double>(k) / static_cast<double>(n - 1);
      weights[k] = 1.0 / static_cast<double>(n);
    }
    weights.front() /= 2;
    weights.back() /= 2;
    return {alphas, weights};
  }
  VT_CHECK(n >= 1, "explain: Gauss-Legendre needs at least 1 step, got {}", n);
  // The roots t_k of the Legendre polynomial P_n by Newton's method from Chebyshev-like starting
  // points; weights u_k = 2 / ((1 - t^2) P_n'(t)^2). Mapped from [-1, 1] to [0, 1].
  for (int64_t i = 0; i < (n + 1) / 2; ++i) {
    double t = std::cos(std::numbers::pi * (static_cast<double>(i) + 0.75) /
                        (static_cast<double>(n) + 0.5));
    double dp = 0;
    for (int iter = 0; iter < 100; ++iter) {
      double p0 = 1, p1 = t;  // P_0, P_1, then the recurrence up to P_n
      for (int64_t j = 2; j <= n; ++j) {
        const double p2 = ((2.0 * j - 1) * t * p1 - (j - 1.0) * p0) / static_cast<double>(j);
        p0 = p1;
        p1 = p2;
      }
      dp = static_cast<double>(n) * (t * p1 - p0) / (t * t - 1);
      const double dt = p1 / dp;
      t -= dt;
      if (std::abs(dt) < 1e-16) break;
    }
    const double u = 2 / ((1 - t * t) * dp * dp);
    // Nodes ascending: -t first (t is the i-th largest root).
    alphas[i] = (1 - t) / 2;
    alphas[n - 1 - i] = (1 + t) / 2;
    weights[i] = weights[n - 1 - i] = u / 2;
  }
  return {alphas, weights};
}

Attribution integrated_gradients(nn::Module& model, const Tensor& images,
                                 const std::vector<int64_t>& targets, const Options& options) {
  check_images(model, images);
  VitForward vit(model, options.pos_interp);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  const DType dt = model_dtype(model);
  const Device dev = model_device(model);
  Tensor x = images.detach().to(kCPU).to(dt);
  Tensor base = ig_baseline(x, options);
  const auto [alphas, weights] = ig_rule(options.ig_rule, options.steps);
  const int64_t B = x.size(0), n = options.steps;
  std::vector<int64_t> t;
  std::vector<double> y_x, y_base;
  {
    NoGradGuard ng;
    Tensor logits = model(ops::cat({x, base}, 0).to(dev));
    t = resolve_targets(logits.narrow(0, 0, B), targets);
    std::vector<int64_t> both = t;
    both.insert(both.end(), t.begin(), t.end());
    const auto y = values(ops::sum(logits * target_selector(logits, both), {1}));
    y_x.assign(y.begin(), y.begin() + B);
    y_base.assign(y.begin() + B, y.end());
  }
  // The path points x' + alpha_k (x - x'), image b's n points together: [B * n, C, H, W].
  Tensor delta = x - base;
  std::vector<Tensor> points;
  std::vector<int64_t> ts;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < n; ++k) {
      points.push_back((base.select(0, b) + delta.select(0, b) * alphas[k]).unsqueeze(0));
      ts.push_back(t[b]);
    }
  const Tensor g = input_gradients(model, ops::cat(points, 0).to(dev), ts, options.chunk).first;
  Dims gs = x.shape();
  gs.insert(1, n);
  std::vector<double> w(weights.begin(), weights.end());
  Tensor wt = ops::from_vector(w, {1, n, 1, 1, 1}, dt);
  Tensor attr = delta * ops::sum(g.to(dt).reshape(gs) * wt, {1});
  Attribution out{attr, {}};
  const auto sums = values(ops::sum(attr, {1, 2, 3}));
  for (int64_t b = 0; b < B; ++b) out.completeness_gap.push_back(sums[b] - (y_x[b] - y_base[b]));
  return out;
}

Tensor attribution_map(const Attribution& a, const Method& m) {
  return attribution_map(
      a, m.name() == "saliency" ? ChannelReduction::MaxAbs : ChannelReduction::SumAbs);
}

Tensor attribution_map(const Attribution& a, ChannelReduction reduction) {
  Tensor v = ops::abs(a.values);
  if (reduction == ChannelReduction::MaxAbs) {  // max over channels
    Tensor best = v.select(1, 0);
    for (int64_t c = 1; c < v.size(1); ++c) best = ops::maximum(best, v.select(1, c));
    return best.contiguous().to(kFloat32);
  }
  return ops::sum(v, {1}).to(kFloat32);
}

Explanation explanation_of(const Attribution& a, ChannelReduction reduction, int64_t cell) {
  Explanation e{};
  e.raw = attribution_map(a, reduction);
  e.grid = patch_mean(e.raw, cell);
  e.completeness_gap = a.completeness_gap;
  return e;
}

// ---- any image classifier ---------------------------------------------------------------------

Attribution saliency(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
                     std::vector<int64_t>* resolved, models::PosInterp pos_interp) {
  check_images(model, images);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  VitForward vit(model, pos_interp);
  const Tensor x = images.detach().to(model_device(model)).to(model_dtype(model));
  auto [g, t] = input_gradients(model, x, targets, x.size(0));  // one forward and backward
  if (resolved) *resolved = t;
  return {ops::abs(g), {}};
}

Tensor gradcam(nn::Module& model, nn::Module& layer, const Tensor& images,
               const std::vector<int64_t>& targets, std::vector<int64_t>* resolved) {
  check_images(model, images);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  Tensor activation;
  ForwardHook hook(layer, [&](nn::Module&, const Tensor&, const Tensor& out) {
    activation = out;
    return Tensor();
  });
  Tensor x = images.detach().to(model_device(model)).to(model_dtype(model));
  x.requires_grad_(true);  // so that the graph reaches the layer with its weights frozen
  const Tensor logits = model(x);
  VT_CHECK(activation.defined(),
           "gradcam: the layer {} was not called by the model's forward (hook it on a module the "
           "model calls through operator())",
           layer.type_name());
  VT_CHECK(
      activation.dim() == 4,
      "gradcam: the layer's output must be a feature map [B, K, h, w] (a convolutional stage); "
      "got shape {} (a ViT's tokens: use run_pass and gradcam(pass))",
      activation.shape());
  const std::vector<int64_t> t = resolve_targets(logits, targets);
  const Tensor dA = grad({logits}, {activation}, {target_selector(logits, t)})[0];  // [B, K, h, w]
  NoGradGuard ng;
  const Tensor alpha = ops::mean(dA, {2, 3}, true);                          // [B, K, 1, 1]
  const Tensor cam = ops::relu(ops::sum(alpha * activation.detach(), {1}));  // [B, h, w]
  if (resolved) *resolved = t;
  return cam.to(kCPU).to(kFloat32).contiguous();
}

nn::Module& submodule(nn::Module& model, const std::string& name) {
  for (const auto& [n, m] : model.named_modules())
    if (n == name && !n.empty()) return *m;
  std::vector<std::string> children;
  for (const auto& [n, m] : model.named_children()) children.push_back(n);
  fail(
      "the {} has no submodule named '{}' (its children: {}; deeper ones by dotted names, as "
      "layer3.2)",
      model.type_name(), name, fmt::join(children, ", "));
}

}  // namespace vitrine::explain
