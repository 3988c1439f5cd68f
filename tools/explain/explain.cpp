#include "tools/explain/explain.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "tools/explain/detail.h"

namespace vitrine::explain {

namespace detail {

void check_images(const nn::Module& model, const Tensor& images) {
  VT_CHECK(images.defined() && images.dim() == 4, "explain: expected images [B, C, H, W], got {}",
           images.defined() ? images.shape() : Dims{});
  const auto* vit = dynamic_cast<const models::VisionTransformer*>(&model);
  if (!vit) return;
  const auto& c = vit->config();
  VT_CHECK(images.size(1) == c.channels, "explain: expected images [B, {}, H, W], got {}",
           c.channels, images.shape());
  VT_CHECK(images.size(2) % c.patch == 0 && images.size(3) % c.patch == 0,
           "explain: image size {}x{} is not a multiple of the patch size {}", images.size(2),
           images.size(3), c.patch);
}

}  // namespace detail

using namespace detail;

namespace {

/// A layer index from the front (0-based) or the back (negative), checked.
int64_t resolve_layer(int64_t layer, int64_t depth, const char* what) {
  VT_CHECK(layer >= -depth && layer < depth,
           "explain: {} layer {} is out of range for a model with {} blocks (0..{}, or -{}..-1 "
           "counted from the end)",
           what, layer, depth, depth - 1, depth);
  return layer < 0 ? layer + depth : layer;
}

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
