// The pass and the maps read from it (explain.h): run_pass (one forward and backward of any
// AttentionModel with its attention captured), the attention map and its threshold mask, rollout,
// gradient rollout, Chefer's relevance, the token Grad-CAM, and the grid helpers every method
// shares (patch_mean, upsample, minmax) and the mean attention distance. The methods that use them
// are the files of methods/ (method.h); explain(model, request) is entry.cpp.
#include "explain/explain.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "explain/detail.h"
#include "ops/ops.h"

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

/// Every attention layer of the model capturing its probabilities for the
/// lifetime of the guard, then each layer's capture state as it was.
class CaptureAttention {
 public:
  explicit CaptureAttention(models::AttentionModel& m) : layers_(m.attention_layers()) {
    VT_CHECK(!layers_.empty(), "explain: the model lists no attention layers");
    for (auto* a : layers_) {
      was_.emplace_back(a->capturing_probs(), a->capturing_grads());
      a->capture(true);  // the probabilities as tensors of the graph: grad() reaches them
    }
  }
  ~CaptureAttention() {
    for (size_t l = 0; l < was_.size(); ++l) layers_[l]->capture(was_[l].first, was_[l].second);
  }
  CaptureAttention(const CaptureAttention&) = delete;
  CaptureAttention& operator=(const CaptureAttention&) = delete;

 private:
  std::vector<nn::MultiheadSelfAttention*> layers_;
  std::vector<std::pair<bool, bool>> was_;
};

/// The pass of any AttentionModel: `forward` runs the model on x; tokens, when given, is a tensor
/// the forward fills (Grad-CAM's activation, through a hook) whose gradient is kept too.
Pass attention_pass(nn::Module& model, models::AttentionModel& am, const Tensor& images,
                    const std::vector<int64_t>& targets, bool gradients, bool headless,
                    const std::function<Tensor(const Tensor&)>& forward,
                    const Tensor* tokens = nullptr) {
  const int64_t P = am.prefix_tokens();
  VT_CHECK(P >= 1,
           "explain: the attention methods read the class token's row (token 0), but the {} has "
           "{} tokens before its patches",
           model.type_name(), P);
  EvalMode eval(model);
  FrozenParameters frozen(model);
  CaptureAttention capture(am);
  const auto layers = am.attention_layers();
  Pass pass;
  Tensor x = images.to(model_device(model)).to(model_dtype(model)).detach().contiguous();
  pass.prefix = P;
  auto check_grid = [&](const Tensor& a) {
    std::tie(pass.grid_h, pass.grid_w) = am.last_grid();
    VT_CHECK(a.defined() && a.dim() == 4 && a.size(2) == P + pass.grid_h * pass.grid_w,
             "explain: the {}'s attention {} does not cover its {} prefix tokens and {}x{} patches",
             model.type_name(), a.defined() ? a.shape().str() : std::string("is undefined:"), P,
             pass.grid_h, pass.grid_w);
  };
  if (!gradients) {
    NoGradGuard no_grad;
    Tensor logits = forward(x);
    if (!headless) pass.targets = resolve_targets(logits, targets);
    pass.logits = logits.to(kCPU);
    for (auto* a : layers) pass.attentions.push_back(a->attention().to(kCPU));
    check_grid(pass.attentions.front());
    return pass;
  }
  x.requires_grad_(true);
  Tensor logits = forward(x);
  pass.targets = resolve_targets(logits, targets);
  std::vector<Tensor> inputs{x};
  if (tokens) inputs.push_back(*tokens);
  for (auto* a : layers) inputs.push_back(a->attention());
  // One backward of sum_b y_{c_b}: every image's gradients at once.
  const auto grads = grad({logits}, inputs, {target_selector(logits, pass.targets)}, false, false,
                          /*allow_unused=*/true);
  pass.logits = logits.detach().to(kCPU);
  pass.input_grad = grads[0].to(kCPU);
  const size_t first = tokens ? 2 : 1;
  if (tokens) {
    pass.tokens = tokens->detach().to(kCPU);
    pass.tokens_grad = grads[1].to(kCPU);
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    pass.attentions.push_back(layers[l]->attention().detach().to(kCPU));
    pass.attention_grads.push_back(grads[first + l].to(kCPU));
  }
  check_grid(pass.attentions.front());
  return pass;
}

// Rollout, gradient rollout and Chefer's relevance are products of per-layer N x N matrices, of
// which only the CLS row is kept. They are computed with tensor ops on the attention's device, in
// float64 (as the references, whose maps they match to 1e-6): each layer's matrix [B, N, N], and
// the CLS row of the product from the left, v = e_0^T M_L, then v M_{L-1}, ... (a [B, 1, N] times
// [B, N, N] product per layer, O(N^2) instead of the full product's O(N^3)).

/// The layers' attention A_l [B, H, N, N] (and G_l with grads), checked.
void check_layers(const Pass& pass, bool grads) {
  VT_CHECK(!pass.attentions.empty(), "explain: the pass holds no attention probabilities");
  VT_CHECK(!grads || pass.attention_grads.size() == pass.attentions.size(),
           "explain: the pass holds no attention gradients");
}

Tensor f64(const Tensor& t) { return t.dtype() == kFloat64 ? t : t.to(kFloat64); }

/// The N x N identity, float64, on `device`.
Tensor identity(int64_t N, Device device) {
  const Tensor i = ops::arange(static_cast<double>(N), kInt64).to(device);
  return ops::to_dtype(ops::eq(i.unsqueeze(1), i.unsqueeze(0)), kFloat64);
}

/// Heads fused into one matrix per image [B, N, N]: fuse_h A for rollout, or max(0, mean_h G * A)
/// when G is given (gradient rollout).
Tensor fuse_heads(const Tensor& A, const Tensor& G, HeadFusion fusion) {
  if (G.defined()) return ops::relu(ops::mean(f64(A) * f64(G), {1}));
  switch (fusion) {
    case HeadFusion::Max:
      return ops::max(f64(A), 1).values;
    case HeadFusion::Min:
      return ops::min(f64(A), 1).values;
    default:
      return ops::mean(f64(A), {1});
  }
}

/// f [B, N, N] with the floor(N^2 * ratio) smallest entries of each image's matrix set to zero,
/// never entry [0, 0] (vit-explain: the k smallest flat indices, index 0 removed from them; ties
/// broken by index). Vitrine has no sort op yet, so the selection is made on the host and applied
/// as a 0/1 mask on f's device.
Tensor discard_smallest(const Tensor& f, double ratio) {
  const int64_t B = f.size(0), NN = f.size(1) * f.size(2);
  const auto k = static_cast<size_t>(std::floor(static_cast<double>(NN) * ratio));
  if (k == 0) return f;
  const std::vector<double> m = detail::values(f);
  std::vector<double> keep(m.size(), 1.0);
  std::vector<size_t> order(static_cast<size_t>(NN));
  for (int64_t b = 0; b < B; ++b) {
    const double* v = m.data() + b * NN;
    std::iota(order.begin(), order.end(), size_t{0});
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(),
                     [&](size_t x, size_t y) { return v[x] < v[y] || (v[x] == v[y] && x < y); });
    for (size_t i = 0; i < k; ++i)
      if (order[i] != 0) keep[static_cast<size_t>(b * NN) + order[i]] = 0;
  }
  return f * ops::from_vector(keep, f.shape(), kFloat64).to(f.device());
}

/// The CLS row of M_L ... M_1 over the patches as [B, gh, gw] float32, for layer(l) = M_l
/// [B, N, N]; eye: the N x N identity (its row 0 is e_0).
template <class Layer>
Tensor cls_row_of_product(const Pass& pass, const Tensor& eye, Layer layer) {
  const int64_t B = pass.attentions[0].size(0), N = eye.size(0), P = pass.prefix;
  Tensor v = ops::narrow(eye, 0, 0, 1);  // e_0^T [1, N]
  for (auto l = static_cast<int64_t>(pass.attentions.size()) - 1; l >= 0; --l)
    v = ops::matmul(v, layer(static_cast<size_t>(l)));  // [B, 1, N]
  v = ops::narrow(v.reshape({B, N}), 1, P, N - P);
  return v.reshape({B, pass.grid_h, pass.grid_w}).to(kFloat32).to(kCPU);
}

/// Shared by rollout and grad-rollout: per layer fuse, discard, add I and halve, re-normalise
/// rows; the CLS row of the product.
Tensor rollout_impl(const Pass& pass, HeadFusion fusion, double discard_ratio, bool gradients) {
  VT_CHECK(discard_ratio >= 0 && discard_ratio < 1,
           "explain: discard ratio must be in [0, 1), got {}", discard_ratio);
  check_layers(pass, gradients);
  NoGradGuard no_grad;
  const Tensor eye = identity(pass.attentions[0].size(2), pass.attentions[0].device());
  return cls_row_of_product(pass, eye, [&](size_t l) {
    Tensor f =
        fuse_heads(pass.attentions[l], gradients ? pass.attention_grads[l] : Tensor(), fusion);
    f = (discard_smallest(f, discard_ratio) + eye) * 0.5;  // (F + I) / 2,
    return f / ops::sum(f, {2}, true);                     // each row divided by its sum
  });
}

}  // namespace

// ---- the pass --------------------------------------------------------------------------------

Pass run_pass(models::VisionTransformer& model, const Tensor& images,
              const std::vector<int64_t>& targets, int64_t gradcam_layer, bool gradients,
              models::PosInterp pos_interp) {
  check_images(model, images);
  const bool headless = !model.head;
  VT_CHECK(!headless || !gradients,
           "explain: the model has no classification head (a feature extractor), so there is no "
           "class score to take gradients of: only attention and rollout apply");
  const models::ViTForwardOptions fwd{pos_interp, false};
  const int64_t gl = resolve_layer(gradcam_layer, model.config().depth, "gradcam");
  // Grad-CAM's activation: the chosen block's norm1 output, kept by a forward hook.
  Tensor tokens;
  ForwardHook hook(*model.blocks->at<models::ViTBlock>(gl)->norm1,
                   [&tokens](nn::Module&, const Tensor&, const Tensor& out) {
                     tokens = out;
                     return Tensor();
                   });
  return attention_pass(
      model, model, images, targets, gradients, headless,
      [&](const Tensor& x) { return model.forward(x, fwd); }, gradients ? &tokens : nullptr);
}

Pass run_pass(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
              bool gradients) {
  if (auto* vit = dynamic_cast<models::VisionTransformer*>(&model))
    return run_pass(*vit, images, targets, -1, gradients);
  auto* am = dynamic_cast<models::AttentionModel*>(&model);
  VT_CHECK(am != nullptr,
           "explain: the attention methods need a model that exposes its attention layers "
           "(models::AttentionModel); this {} does not: gradcam, saliency, smoothgrad and "
           "integrated-gradients apply to any model",
           model.type_name());
  check_images(model, images);
  return attention_pass(model, *am, images, targets, gradients, false,
                        [&](const Tensor& x) { return model.forward(x); });
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
  check_layers(pass, true);
  NoGradGuard no_grad;
  // R = I; R = R + Abar_l R = (I + Abar_l) R per layer, so R = (I + Abar_L) ... (I + Abar_1),
  // with Abar = mean_h max(0, G * A): clamped per head, then averaged (grad-rollout clamps the
  // average instead).
  const Tensor eye = identity(pass.attentions[0].size(2), pass.attentions[0].device());
  return cls_row_of_product(pass, eye, [&](size_t l) {
    return ops::mean(ops::relu(f64(pass.attentions[l]) * f64(pass.attention_grads[l])), {1}) + eye;
  });
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
  if (H % patch != 0 || W % patch != 0) {
    // (a ResNet on 42x42 images with the default --cell 4: name the cells that fit)
    std::string fit;
    for (int64_t d = 2; d <= std::min(H, W); ++d)
      if (H % d == 0 && W % d == 0) fit += (fit.empty() ? "" : ", ") + std::to_string(d);
    fail("explain: map {}x{} is not a multiple of patch {} (a model other than a ViT: --cell {})",
         H, W, patch, fit.empty() ? "1" : "one of " + fit);
  }
  return ops::mean(map.reshape({B, H / patch, patch, W / patch, patch}), {2, 4}).to(kFloat32);
}

// ---- resolution and scaling ------------------------------------------------------------------

Tensor upsample(const Tensor& grid, int64_t height, int64_t width, Upsample mode) {
  ops::InterpolateOptions o;
  o.size = std::pair{height, width};
  o.mode = mode == Upsample::Nearest ? "nearest" : "bilinear";
  o.align_corners = false;
  return ops::interpolate(grid.to(kFloat32).unsqueeze(1), o).squeeze(1);
}

Upsample parse_upsample(const std::string& name) {
  if (name == "bilinear") return Upsample::Bilinear;
  if (name == "nearest") return Upsample::Nearest;
  fail("explain: unknown upsampling '{}' (known: bilinear, nearest)", name);
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

Tensor attention_distance(const Pass& pass, int64_t patch, DistanceNorm norm) {
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
          double si = 0, mass = 0;
          for (int64_t j = 0; j < n; ++j) {
            si += static_cast<double>(row[j]) * d[j];
            mass += static_cast<double>(row[j]);
          }
          s += norm == DistanceNorm::Patches ? (mass > 0 ? si / mass : 0.0) : si;
        }
        out[l * H + h] += s / static_cast<double>(n * B);
      }
  }
  return make(out, {L, H});
}

}  // namespace vitrine::explain
