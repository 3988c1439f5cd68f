#include "tools/explain/explain.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::explain {

namespace {

/// A tensor's values as doubles, row-major (any device, any dtype).
std::vector<double> values(const Tensor& t) { return t.to(kCPU).contiguous().to_vector<double>(); }

/// doubles -> a float32 CPU tensor of the given shape.
Tensor make(const std::vector<double>& v, const Dims& shape) {
  return ops::from_vector(v, shape, kFloat32);
}

/// A layer index from the front (0-based) or the back (negative), checked.
int64_t resolve_layer(int64_t layer, int64_t depth, const char* what) {
  VT_CHECK(layer >= -depth && layer < depth,
           "explain: {} layer {} is out of range for a model with {} blocks (0..{}, or -{}..-1 "
           "counted from the end)",
           what, layer, depth, depth - 1, depth);
  return layer < 0 ? layer + depth : layer;
}

/// Every parameter's requires_grad switched off for the lifetime of the guard (and restored):
/// the explanation methods need gradients of the input and of activations only, so backward
/// skips the weight gradients.
class FrozenParameters {
 public:
  explicit FrozenParameters(nn::Module& m) : params_(m.parameters()) {
    for (auto& p : params_) {
      was_.push_back(p.requires_grad());
      p.requires_grad_(false);
    }
  }
  ~FrozenParameters() {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].requires_grad_(was_[i]);
  }
  FrozenParameters(const FrozenParameters&) = delete;
  FrozenParameters& operator=(const FrozenParameters&) = delete;

 private:
  std::vector<Tensor> params_;
  std::vector<bool> was_;
};

/// Eval mode for the lifetime of the guard, then the mode the model had.
class EvalMode {
 public:
  explicit EvalMode(nn::Module& m) : m_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalMode() { m_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  nn::Module& m_;
  bool was_training_;
};

/// Every block's attention capturing its probabilities for the lifetime of the guard, then each
/// block's capture state as it was.
class CaptureAttention {
 public:
  explicit CaptureAttention(models::VisionTransformer& m) : m_(m) {
    for (const auto& b : *m.blocks) {
      auto& attn = *std::static_pointer_cast<models::ViTBlock>(b)->attn;
      was_.emplace_back(attn.capturing_probs(), attn.capturing_grads());
    }
    m.capture(true);
  }
  ~CaptureAttention() {
    for (size_t l = 0; l < was_.size(); ++l)
      m_.blocks->at<models::ViTBlock>(l)->attn->capture(was_[l].first, was_[l].second);
  }
  CaptureAttention(const CaptureAttention&) = delete;
  CaptureAttention& operator=(const CaptureAttention&) = delete;

 private:
  models::VisionTransformer& m_;
  std::vector<std::pair<bool, bool>> was_;
};

/// A forward hook on a module for the lifetime of the guard.
class ForwardHook {
 public:
  ForwardHook(nn::Module& m, nn::Module::ForwardHook hook)
      : m_(m), handle_(m.register_forward_hook(std::move(hook))) {}
  ~ForwardHook() { m_.remove_forward_hook(handle_); }
  ForwardHook(const ForwardHook&) = delete;
  ForwardHook& operator=(const ForwardHook&) = delete;

 private:
  nn::Module& m_;
  int64_t handle_;
};

Device model_device(const models::VisionTransformer& model) {
  return model.parameters().front().device();
}

DType model_dtype(const models::VisionTransformer& model) {
  return model.parameters().front().dtype();
}

void check_images(const models::VisionTransformer& model, const Tensor& images) {
  const auto& c = model.config();
  VT_CHECK(images.defined() && images.dim() == 4 && images.size(1) == c.channels,
           "explain: expected images [B, {}, H, W], got {}", c.channels,
           images.defined() ? images.shape() : Dims{});
  VT_CHECK(images.size(2) % c.patch == 0 && images.size(3) % c.patch == 0,
           "explain: image size {}x{} is not a multiple of the patch size {}", images.size(2),
           images.size(3), c.patch);
}

/// One-hot rows selecting each image's target logit: [B, K].
Tensor target_selector(const Tensor& logits, const std::vector<int64_t>& targets) {
  const int64_t B = logits.size(0), K = logits.size(1);
  std::vector<double> sel(static_cast<size_t>(B * K), 0.0);
  for (int64_t b = 0; b < B; ++b) sel[static_cast<size_t>(b * K + targets[b])] = 1.0;
  return ops::from_vector(sel, {B, K}, logits.dtype()).to(logits.device());
}

/// Checks the targets against the logits and replaces -1 by the predicted class.
std::vector<int64_t> resolve_targets(const Tensor& logits, const std::vector<int64_t>& targets) {
  const int64_t B = logits.size(0), K = logits.size(1);
  VT_CHECK(static_cast<int64_t>(targets.size()) == B,
           "explain: {} target classes given for {} images", targets.size(), B);
  const auto predicted = ops::argmax(logits.detach(), 1).to(kCPU).to_vector<int64_t>();
  std::vector<int64_t> out(targets.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t t = targets[b];
    VT_CHECK(t == -1 || (t >= 0 && t < K),
             "explain: class {} is out of range for a model with {} classes (0..{})", t, K, K - 1);
    out[b] = t == -1 ? predicted[b] : t;
  }
  return out;
}

/// d y_c / d x for a batch of model inputs X [M, C, H, W] with targets [M], in chunks of at
/// most `chunk` images; also returns y_c at each input.
std::pair<Tensor, std::vector<double>> input_gradients(models::VisionTransformer& model,
                                                       const Tensor& X,
                                                       const std::vector<int64_t>& targets,
                                                       int64_t chunk,
                                                       models::PosInterp pos_interp) {
  const int64_t M = X.size(0);
  std::vector<Tensor> grads;
  std::vector<double> scores;
  for (int64_t s = 0; s < M; s += chunk) {
    const int64_t n = std::min(chunk, M - s);
    Tensor x = X.narrow(0, s, n).detach().contiguous();
    x.requires_grad_(true);
    Tensor logits = model.forward(x, {pos_interp, false});
    std::vector<int64_t> t(targets.begin() + s, targets.begin() + s + n);
    Tensor sel = target_selector(logits, t);
    const auto y = values(ops::sum(logits.detach() * sel, {1}));
    scores.insert(scores.end(), y.begin(), y.end());
    grads.push_back(grad({logits}, {x}, {sel})[0].to(kCPU));
  }
  return {ops::cat(grads, 0), scores};
}

/// The n x n matrix of the CLS row over the patches, read from a vector over the tokens.
Tensor cls_row_grid(const std::vector<std::vector<double>>& rows, const Pass& pass) {
  const int64_t B = static_cast<int64_t>(rows.size()), P = pass.prefix;
  std::vector<double> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin() + P, r.end());
  return make(out, {B, pass.grid_h, pass.grid_w});
}

/// Sets the floor(N^2 * ratio) smallest entries of an N x N matrix to zero, never entry [0, 0]
/// (vit-explain: the k smallest flat indices, index 0 removed from them).
void discard_smallest(std::vector<double>& m, double ratio) {
  const size_t k = static_cast<size_t>(std::floor(static_cast<double>(m.size()) * ratio));
  if (k == 0) return;
  std::vector<size_t> order(m.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(),
                   [&](size_t a, size_t b) { return m[a] < m[b] || (m[a] == m[b] && a < b); });
  for (size_t i = 0; i < k; ++i)
    if (order[i] != 0) m[order[i]] = 0;
}

/// The CLS row of R_L ... R_1 for per-layer N x N matrices R_l: the row vector e_0^T times the
/// product, computed from the left (e_0^T R_L, then times R_{L-1}, ...), O(N^2) per layer
/// instead of the full product's O(N^3).
std::vector<double> cls_row_of_product(const std::vector<std::vector<double>>& layers, int64_t N) {
  std::vector<double> v(static_cast<size_t>(N), 0.0), next(static_cast<size_t>(N));
  v[0] = 1;
  for (auto l = layers.rbegin(); l != layers.rend(); ++l) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      const double vi = v[i];
      if (vi == 0) continue;
      const double* row = l->data() + i * N;
      for (int64_t j = 0; j < N; ++j) next[j] += vi * row[j];
    }
    v.swap(next);
  }
  return v;
}

/// Per image and layer, heads fused into one N x N matrix: fuse(A) for rollout, or
/// max(0, mean_h G * A) when grads are given.
std::vector<double> fuse_heads(const double* A, const double* G, int64_t H, int64_t N,
                               HeadFusion fusion) {
  const int64_t NN = N * N;
  std::vector<double> f(static_cast<size_t>(NN));
  for (int64_t e = 0; e < NN; ++e) {
    double acc = G ? 0.0 : (fusion == HeadFusion::Mean ? 0.0 : A[e]);
    for (int64_t h = 0; h < H; ++h) {
      const double a = A[h * NN + e];
      if (G)
        acc += a * G[h * NN + e];
      else if (fusion == HeadFusion::Mean)
        acc += a;
      else if (fusion == HeadFusion::Max)
        acc = std::max(acc, a);
      else
        acc = std::min(acc, a);
    }
    if (G)
      acc = std::max(0.0, acc / static_cast<double>(H));
    else if (fusion == HeadFusion::Mean)
      acc /= static_cast<double>(H);
    f[e] = acc;
  }
  return f;
}

/// Every layer's attention (and, with grads, its gradient) as doubles, with the sizes.
struct Layers {
  int64_t B = 0, H = 0, N = 0;
  std::vector<std::vector<double>> A, G;
};
/// t's values into out, reusing out's memory.
void values_into(const Tensor& t, std::vector<double>& out) {
  const Tensor c = t.to(kCPU).to(kFloat64).contiguous();
  out.assign(c.data<double>(), c.data<double>() + c.numel());
}
/// The layers, in one instance per thread whose vectors keep their memory from call to call. With
/// fresh vectors, each map allocated 24 blocks of 1.9 MB for ViT-S/16 (12 layers of [6, 197, 197],
/// probabilities and gradients), which glibc mapped, faulted in and returned every time: about
/// 40 ms of a 170 ms Chefer or grad-rollout map (docs/benchmarks.md).
const Layers& read_layers(const Pass& pass, bool grads) {
  VT_CHECK(!pass.attentions.empty(), "explain: the pass holds no attention probabilities");
  VT_CHECK(!grads || pass.attention_grads.size() == pass.attentions.size(),
           "explain: the pass holds no attention gradients");
  thread_local Layers l;
  l.B = pass.attentions[0].size(0);
  l.H = pass.attentions[0].size(1);
  l.N = pass.attentions[0].size(2);
  const size_t L = pass.attentions.size();
  l.A.resize(L);
  l.G.resize(grads ? L : 0);
  for (size_t i = 0; i < L; ++i) {
    values_into(pass.attentions[i], l.A[i]);
    if (grads) values_into(pass.attention_grads[i], l.G[i]);
  }
  return l;
}

/// Shared by rollout and grad-rollout: per layer fuse, discard, add I and halve, re-normalise
/// rows; the CLS row of the product.
Tensor rollout_impl(const Pass& pass, HeadFusion fusion, double discard_ratio, bool gradients) {
  VT_CHECK(discard_ratio >= 0 && discard_ratio < 1,
           "explain: discard ratio must be in [0, 1), got {}", discard_ratio);
  const Layers& ls = read_layers(pass, gradients);
  const int64_t B = ls.B, H = ls.H, N = ls.N, NN = N * N;
  const auto &A = ls.A, &G = ls.G;
  std::vector<std::vector<double>> rows;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<double>> layers;
    for (size_t l = 0; l < A.size(); ++l) {
      const double* a = A[l].data() + b * H * NN;
      const double* g = gradients ? G[l].data() + b * H * NN : nullptr;
      std::vector<double> f = fuse_heads(a, g, H, N, fusion);
      discard_smallest(f, discard_ratio);
      for (int64_t i = 0; i < N; ++i) {  // (F + I) / 2, then each row divided by its sum
        double* row = f.data() + i * N;
        row[i] += 1;
        double s = 0;
        for (int64_t j = 0; j < N; ++j) s += row[j] /= 2;
        for (int64_t j = 0; j < N; ++j) row[j] /= s;
      }
      layers.push_back(std::move(f));
    }
    rows.push_back(cls_row_of_product(layers, N));
  }
  return cls_row_grid(rows, pass);
}

}  // namespace

// ---- names -----------------------------------------------------------------------------------

std::string method_name(Method m) {
  switch (m) {
    case Method::Attention:
      return "attention";
    case Method::Rollout:
      return "rollout";
    case Method::GradRollout:
      return "grad-rollout";
    case Method::Chefer:
      return "chefer";
    case Method::GradCam:
      return "gradcam";
    case Method::Saliency:
      return "saliency";
    case Method::SmoothGrad:
      return "smoothgrad";
    case Method::IntegratedGradients:
      return "integrated-gradients";
  }
  return "?";
}

std::vector<Method> all_methods() {
  return {Method::Attention, Method::Rollout,  Method::GradRollout, Method::Chefer,
          Method::GradCam,   Method::Saliency, Method::SmoothGrad,  Method::IntegratedGradients};
}

std::vector<Method> parse_methods(const std::string& list) {
  std::vector<Method> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    start = end + 1;
    if (name == "all") {
      for (Method m : all_methods())
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
      continue;
    }
    std::string known;
    bool found = false;
    for (Method m : all_methods()) {
      known += (known.empty() ? "" : ", ") + method_name(m);
      if (method_name(m) == name) {
        found = true;
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
      }
    }
    VT_CHECK(found, "explain: unknown method '{}' (known: {}, or all)", name, known);
  }
  return out;
}

bool is_input_gradient(Method m) {
  return m == Method::Saliency || m == Method::SmoothGrad || m == Method::IntegratedGradients;
}

bool needs_gradients(Method m) {
  return m == Method::GradRollout || m == Method::Chefer || m == Method::GradCam ||
         m == Method::Saliency;
}

bool needs_class_score(Method m) { return m != Method::Attention && m != Method::Rollout; }

// ---- the pass --------------------------------------------------------------------------------

Pass run_pass(models::VisionTransformer& model, const Tensor& images,
              const std::vector<int64_t>& targets, int64_t gradcam_layer, bool gradients,
              models::PosInterp pos_interp) {
  check_images(model, images);
  const auto& c = model.config();
  const bool headless = !model.head;
  VT_CHECK(!headless || !gradients,
           "explain: the model has no classification head (a feature extractor), so there is no "
           "class score to take gradients of: only attention and rollout apply");
  const models::ViTForwardOptions fwd{pos_interp, false};
  const int64_t gl = resolve_layer(gradcam_layer, c.depth, "gradcam");
  EvalMode eval(model);
  FrozenParameters frozen(model);
  CaptureAttention capture(model);

  // Grad-CAM's activation: the chosen block's norm1 output, kept by a forward hook.
  Tensor tokens;
  ForwardHook hook(*model.blocks->at<models::ViTBlock>(gl)->norm1,
                   [&tokens](nn::Module&, const Tensor&, const Tensor& out) {
                     tokens = out;
                     return Tensor();
                   });

  Pass pass;
  Tensor x = images.to(model_device(model)).to(model_dtype(model)).detach().contiguous();
  pass.prefix = c.prefix_tokens();
  if (!gradients) {
    NoGradGuard no_grad;
    Tensor logits = model.forward(x, fwd);
    if (!headless) pass.targets = resolve_targets(logits, targets);
    pass.logits = logits.to(kCPU);
    for (const Tensor& a : model.attentions()) pass.attentions.push_back(a.to(kCPU));
    std::tie(pass.grid_h, pass.grid_w) = model.last_grid();
    return pass;
  }
  x.requires_grad_(true);
  Tensor logits = model.forward(x, fwd);
  pass.targets = resolve_targets(logits, targets);
  std::vector<Tensor> inputs{x, tokens};
  const auto attn = model.attentions();
  inputs.insert(inputs.end(), attn.begin(), attn.end());
  // One backward of sum_b y_{c_b}: every image's gradients at once.
  const auto grads = grad({logits}, inputs, {target_selector(logits, pass.targets)}, false, false,
                          /*allow_unused=*/true);
  pass.logits = logits.detach().to(kCPU);
  pass.input_grad = grads[0].to(kCPU);
  pass.tokens = tokens.detach().to(kCPU);
  pass.tokens_grad = grads[1].to(kCPU);
  for (size_t l = 0; l < attn.size(); ++l) {
    pass.attentions.push_back(attn[l].detach().to(kCPU));
    pass.attention_grads.push_back(grads[2 + l].to(kCPU));
  }
  std::tie(pass.grid_h, pass.grid_w) = model.last_grid();
  return pass;
}

// ---- attention-based methods -----------------------------------------------------------------

Tensor attention_map(const Pass& pass, int64_t layer, int64_t head, Tensor* per_head) {
  const int64_t L = static_cast<int64_t>(pass.attentions.size());
  VT_CHECK(L > 0, "explain: the pass holds no attention probabilities");
  const int64_t l = resolve_layer(layer, L, "attention");
  const Tensor& A = pass.attentions[l];
  const int64_t B = A.size(0), H = A.size(1), N = A.size(2), P = pass.prefix, n = N - P;
  VT_CHECK(head >= -1 && head < H,
           "explain: head {} is out of range for {} heads (0..{}, or -1 "
           "for their mean)",
           head, H, H - 1);
  const auto a = values(A.select(2, 0).contiguous());  // query 0 (CLS): [B, H, N]
  std::vector<double> heads(static_cast<size_t>(B * H * n)), out(static_cast<size_t>(B * n), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double* row = a.data() + (b * H + h) * N;
      for (int64_t j = 0; j < n; ++j) {
        heads[(b * H + h) * n + j] = row[P + j];
        if (head == -1)
          out[b * n + j] += row[P + j] / static_cast<double>(H);
        else if (h == head)
          out[b * n + j] = row[P + j];
      }
    }
  if (per_head) *per_head = make(heads, {B, H, pass.grid_h, pass.grid_w});
  return make(out, {B, pass.grid_h, pass.grid_w});
}

Tensor threshold_mask(const Tensor& map, double threshold) {
  VT_CHECK(threshold > 0 && threshold <= 1, "explain: threshold must be in (0, 1], got {}",
           threshold);
  const int64_t B = map.size(0), n = map.numel() / B;
  const auto v = values(map);
  std::vector<double> mask(v.size(), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const double* m = v.data() + b * n;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return m[x] < m[y]; });
    const double total = std::accumulate(m, m + n, 0.0);
    double cum = 0;
    for (int64_t i = 0; i < n; ++i) {  // ascending: the last ones past 1 - threshold are kept
      cum += m[order[i]] / total;
      if (cum > 1 - threshold) mask[b * n + order[i]] = 1;
    }
  }
  return make(mask, map.shape());
}

Tensor rollout(const Pass& pass, HeadFusion fusion, double discard_ratio) {
  return rollout_impl(pass, fusion, discard_ratio, false);
}

Tensor grad_rollout(const Pass& pass, double discard_ratio) {
  return rollout_impl(pass, HeadFusion::Mean, discard_ratio, true);
}

Tensor chefer(const Pass& pass) {
  const Layers& ls = read_layers(pass, true);
  const int64_t B = ls.B, H = ls.H, N = ls.N, NN = N * N;
  const auto &A = ls.A, &G = ls.G;
  // R = I; R = R + Abar_l R = (I + Abar_l) R per layer, so R = (I + Abar_L) ... (I + Abar_1).
  std::vector<std::vector<double>> rows;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<double>> layers;
    for (size_t l = 0; l < A.size(); ++l) {
      // Abar = mean_h max(0, G * A): clamped per head, then averaged (grad-rollout clamps the
      // average instead).
      const double* a = A[l].data() + b * H * NN;
      const double* g = G[l].data() + b * H * NN;
      std::vector<double> f(static_cast<size_t>(NN), 0.0);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < NN; ++e)
          f[e] += std::max(0.0, a[h * NN + e] * g[h * NN + e]) / static_cast<double>(H);
      for (int64_t i = 0; i < N; ++i) f[i * N + i] += 1;
      layers.push_back(std::move(f));
    }
    rows.push_back(cls_row_of_product(layers, N));
  }
  return cls_row_grid(rows, pass);
}

Tensor gradcam(const Pass& pass) {
  VT_CHECK(pass.tokens.defined() && pass.tokens_grad.defined(),
           "explain: the pass holds no Grad-CAM activations");
  const int64_t B = pass.tokens.size(0), N = pass.tokens.size(1), D = pass.tokens.size(2),
                P = pass.prefix, n = N - P;
  const auto T = values(pass.tokens), G = values(pass.tokens_grad);
  std::vector<double> out(static_cast<size_t>(B * n));
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> alpha(static_cast<size_t>(D), 0.0);  // mean gradient per channel
    for (int64_t p = P; p < N; ++p)
      for (int64_t d = 0; d < D; ++d) alpha[d] += G[(b * N + p) * D + d] / static_cast<double>(n);
    for (int64_t p = P; p < N; ++p) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += alpha[d] * T[(b * N + p) * D + d];
      out[b * n + (p - P)] = std::max(0.0, s);
    }
  }
  return make(out, {B, pass.grid_h, pass.grid_w});
}

// ---- input-gradient methods ------------------------------------------------------------------

Attribution saliency(const Pass& pass) {
  VT_CHECK(pass.input_grad.defined(), "explain: the pass holds no input gradient");
  return {ops::abs(pass.input_grad), {}};
}

Attribution smoothgrad(models::VisionTransformer& model, const Tensor& images,
                       const std::vector<int64_t>& targets, const Options& options,
                       const Tensor& noise_in) {
  check_images(model, images);
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
    t = resolve_targets(model.forward(x.to(dev), {options.pos_interp, false}), targets);
  }
  std::vector<int64_t> ts;
  for (int64_t b = 0; b < B; ++b) ts.insert(ts.end(), static_cast<size_t>(n), t[b]);
  auto [g, scores] = input_gradients(model, X.to(dev), ts, options.chunk, options.pos_interp);
  Dims gs = sample_shape;
  return {ops::mean(g.reshape(gs), {1}), {}};
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

Attribution integrated_gradients(models::VisionTransformer& model, const Tensor& images,
                                 const std::vector<int64_t>& targets, const Options& options) {
  check_images(model, images);
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
    Tensor logits = model.forward(ops::cat({x, base}, 0).to(dev), {options.pos_interp, false});
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
  auto [g, scores] =
      input_gradients(model, ops::cat(points, 0).to(dev), ts, options.chunk, options.pos_interp);
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

Tensor attribution_map(const Attribution& a, Method m) {
  Tensor v = ops::abs(a.values);
  if (m == Method::Saliency) {  // max over channels
    Tensor best = v.select(1, 0);
    for (int64_t c = 1; c < v.size(1); ++c) best = ops::maximum(best, v.select(1, c));
    return best.contiguous().to(kFloat32);
  }
  return ops::sum(v, {1}).to(kFloat32);
}

Tensor patch_mean(const Tensor& map, int64_t patch) {
  const int64_t B = map.size(0), H = map.size(1), W = map.size(2);
  VT_CHECK(H % patch == 0 && W % patch == 0, "explain: map {}x{} is not a multiple of patch {}", H,
           W, patch);
  return ops::mean(map.reshape({B, H / patch, patch, W / patch, patch}), {2, 4}).to(kFloat32);
}

// ---- resolution and scaling ------------------------------------------------------------------

Tensor upsample(const Tensor& grid, int64_t height, int64_t width) {
  ops::InterpolateOptions o;
  o.size = std::pair{height, width};
  o.mode = "bilinear";
  o.align_corners = false;
  return ops::interpolate(grid.to(kFloat32).unsqueeze(1), o).squeeze(1);
}

Tensor minmax(const Tensor& maps) {
  const int64_t B = maps.size(0), n = maps.numel() / B;
  auto v = values(maps);
  for (int64_t b = 0; b < B; ++b) {
    double* m = v.data() + b * n;
    const auto [lo, hi] = std::minmax_element(m, m + n);
    const double a = *lo, r = *hi - *lo;
    for (int64_t i = 0; i < n; ++i) m[i] = r > 0 ? (m[i] - a) / r : 0.0;
  }
  return make(v, maps.shape());
}

Tensor attention_distance(const Pass& pass, int64_t patch) {
  const int64_t L = static_cast<int64_t>(pass.attentions.size());
  VT_CHECK(L > 0, "explain: the pass holds no attention probabilities");
  const int64_t B = pass.attentions[0].size(0), H = pass.attentions[0].size(1),
                N = pass.attentions[0].size(2), P = pass.prefix, n = N - P, gw = pass.grid_w;
  std::vector<double> dist(static_cast<size_t>(n * n));  // pixels between patch centres
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      dist[i * n + j] =
          static_cast<double>(patch) *
          std::hypot(static_cast<double>(i / gw - j / gw), static_cast<double>(i % gw - j % gw));
  std::vector<double> out(static_cast<size_t>(L * H), 0.0);
  for (int64_t l = 0; l < L; ++l) {
    // Read in place (float32; a photo's N x N maps are too large to copy to doubles per layer).
    const Tensor A = pass.attentions[l].to(kCPU).to(kFloat32).contiguous();
    const float* a = static_cast<const float*>(A.data_ptr());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float* row = a + ((b * H + h) * N + P + i) * N + P;
          const double* d = dist.data() + i * n;
          for (int64_t j = 0; j < n; ++j) s += static_cast<double>(row[j]) * d[j];
        }
        out[l * H + h] += s / static_cast<double>(n * B);
      }
  }
  return make(out, {L, H});
}

// ---- all at once -----------------------------------------------------------------------------

Explanation explain_method(models::VisionTransformer& model, const Tensor& images, const Pass& pass,
                           Method m, const Options& options) {
  check_images(model, images);
  const int64_t H = images.size(2), W = images.size(3), patch = model.config().patch;
  VT_CHECK(!needs_gradients(m) || pass.input_grad.defined(),
           "explain: {} needs the gradients of the pass (run_pass with gradients = true)",
           method_name(m));
  Explanation e{m, {}, {}, {}, {}, {}, {}};
  switch (m) {
    case Method::Attention:
      e.grid = attention_map(pass, options.layer, options.head, &e.heads);
      if (options.threshold > 0) e.mask = threshold_mask(e.grid, options.threshold);
      break;
    case Method::Rollout:
      e.grid = rollout(pass, options.head_fusion, options.discard_ratio);
      break;
    case Method::GradRollout:
      e.grid = grad_rollout(pass, options.discard_ratio);
      break;
    case Method::Chefer:
      e.grid = chefer(pass);
      break;
    case Method::GradCam:
      e.grid = gradcam(pass);
      break;
    case Method::Saliency:
    case Method::SmoothGrad:
    case Method::IntegratedGradients: {
      const Attribution a = m == Method::Saliency ? saliency(pass)
                            : m == Method::SmoothGrad
                                ? smoothgrad(model, images, pass.targets, options)
                                : integrated_gradients(model, images, pass.targets, options);
      e.raw = attribution_map(a, m);
      e.grid = patch_mean(e.raw, patch);
      e.completeness_gap = a.completeness_gap;
      break;
    }
  }
  if (!e.raw.defined()) e.raw = upsample(e.grid, H, W);
  e.map = minmax(e.raw);
  return e;
}

std::vector<Explanation> explain(models::VisionTransformer& model, const Tensor& images,
                                 const std::vector<int64_t>& targets,
                                 const std::vector<Method>& methods, const Options& options,
                                 Pass* pass_out) {
  const bool gradients =
      std::any_of(methods.begin(), methods.end(), [](Method m) { return needs_gradients(m); });
  Pass pass = run_pass(model, images, targets, options.layer, gradients, options.pos_interp);
  std::vector<Explanation> out;
  for (Method m : methods) out.push_back(explain_method(model, images, pass, m, options));
  if (pass_out) *pass_out = std::move(pass);
  return out;
}

}  // namespace vitrine::explain
