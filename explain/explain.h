// Explanation methods: why did the model give this image this class? Start at explain(model,
// request) below, the one entry point for every model (output.h writes what it gives to a folder,
// as vitrine-explain does; serve.h answers with it). The attention methods read the attention of
// any model that exposes it through models::AttentionModel (the VisionTransformer does; a Pass),
// the token Grad-CAM a ViT's tokens; the input-gradient methods and the convolutional Grad-CAM
// take any nn::Module mapping images to logits (the end of this header). Every method returns a
// map over the patch grid (its raw values, kept as they come) and the same map at image
// resolution (the grid upsampled bilinearly, align_corners=False, or nearest as Options::upsample
// says, then min-max scaled to [0, 1]); the input-gradient methods work at pixel resolution
// directly. Two methods are named only (not in "all"): activation-max gives an optimised input
// instead of a map, qkv one patch's query-key view.
//
// Each method is one file, explain/methods/<name>.cpp, in the registry of method.h
// (explain::methods(), find_method, parse_methods); the functions below are their building blocks.
//
// Notation, per image: L layers, H heads, N tokens (P = prefix tokens: the class token and any
// registers; then the gh x gw patches, row-major), A_l [H, N, N] the attention probabilities of
// layer l (after softmax, before dropout), y_c the target score: the pre-softmax logit of the
// target class c (the predicted class unless the caller names one), and
//     G_l = d y_c / d A_l                                             [H, N, N]
// "CLS row over the patches" of an N x N matrix M is M[0, P:] reshaped to gh x gw. For SmoothGrad
// and integrated gradients too, "the predicted class" is that of the clean image, not of each
// noisy sample or path point.
//
// All the attention and token methods read one forward and one backward (a Pass); SmoothGrad
// and integrated gradients run their own batched passes. Images of a batch are independent (a
// ViT mixes nothing across the batch), so one backward of sum_b y_{c_b} gives every image's
// gradients at once.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "explain/method.h"
#include "models/vit.h"

namespace vitrine::explain {

enum class HeadFusion { Mean, Max, Min };
/// How a patch-grid map is brought to the image's size: bilinear (align_corners=False), or
/// nearest, each patch one constant block (DINO's visualize_attention: nearest with
/// scale_factor = patch).
enum class Upsample { Bilinear, Nearest };
/// The mean attention distance's weights: the attention as it is over the key patches (raw), or
/// renormalised to sum 1 over them once the prefix tokens' columns are dropped (patches).
enum class DistanceNorm { Raw, Patches };
enum class IgRule { GaussLegendre, Trapezoid };
enum class IgBaseline { Black, Blur };

struct Options {
  /// attention and gradcam: the block (0-based; negative counts from the end, -1 the last).
  int64_t layer = -1;
  /// attention: one head, or -1 for the mean over heads.
  int64_t head = -1;
  /// attention: DINO's mask keeps the patches holding this fraction of the attention mass
  /// (0: no mask).
  double threshold = 0;
  /// rollout: how heads are fused (grad-rollout always takes the mean).
  HeadFusion head_fusion = HeadFusion::Mean;
  /// rollout and grad-rollout: the fraction of each fused matrix's entries set to zero, the
  /// smallest first (never the [CLS, CLS] entry).
  double discard_ratio = 0.9;
  /// integrated gradients: number of points on the path, the rule, and the baseline.
  int64_t steps = 50;
  IgRule ig_rule = IgRule::GaussLegendre;
  IgBaseline baseline = IgBaseline::Black;
  /// The model-input value of a black pixel (0 before normalisation), per channel:
  /// -mean[c] / std[c]. Empty: 0 (the input is taken as given, as with --input).
  std::vector<float> black;
  /// smoothgrad: number of noisy samples, noise sigma as a fraction of the input's value range
  /// (max - min of the model input, per image: the SmoothGrad paper's noise level), and the seed
  /// of the noise.
  int64_t samples = 16;
  double sigma = 0.15;
  uint64_t seed = 0;
  /// Images per forward in smoothgrad and integrated gradients (their passes are batched).
  int64_t chunk = 64;
  /// How the position embedding is resized for inputs of another size than the model's (timm's
  /// bicubic to the grid, or DINO's scale factor): every forward of the methods uses it.
  models::PosInterp pos_interp = models::PosInterp::Size;
  /// How every grid map is brought to image resolution (the Explanation's raw and map).
  Upsample upsample = Upsample::Bilinear;
  /// The model-input value of a white pixel (1 before normalisation) per channel:
  /// (1 - mean[c]) / std[c]; with black, the range activation-max clips to. Empty: 1 (and 0).
  std::vector<float> white;
  /// activation-max: gradient-ascent steps; the step, a fraction of the pixel range per unit of
  /// the gradient normalised by its mean absolute value; the jitter (a random shift of up to this
  /// many pixels each step, the gradient shifted back; -1: min(H, W) / 28 rounded, at least 1,
  /// so 8 pixels at 224 as Lucid's jitter(8)); a Gaussian blur of am_blur_sigma pixels
  /// every am_blur_every steps (0: none); the L2 decay weight. The objective: the target class's
  /// logit, or with neuron >= 0 channel `neuron` of block `layer`'s MLP hidden layer (after the
  /// GELU) averaged over the tokens. The start is drawn from a Generator seeded with seed.
  int64_t am_steps = 64;
  double am_lr = 0.05;
  int64_t am_jitter = -1;
  int64_t am_blur_every = 4;
  double am_blur_sigma = 0.5;
  double am_l2 = 0;
  int64_t neuron = -1;
  /// qkv: the query patch (row, column) on the grid; -1: the centre (gh / 2, gw / 2). The block
  /// is `layer`.
  int64_t patch_row = -1, patch_col = -1;
  /// The mean attention distance's weights (attention_distance).
  DistanceNorm distance_norm = DistanceNorm::Raw;
};

/// What one forward and one backward leave behind (CPU, float32, detached).
struct Pass {
  Tensor logits;                        // [B, K] (without a head: the features [B, dim])
  std::vector<int64_t> targets;         // c per image
  std::vector<Tensor> attentions;       // A_l [B, H, N, N] per layer
  std::vector<Tensor> attention_grads;  // G_l [B, H, N, N] per layer
  Tensor tokens;                        // gradcam: the hooked block's norm1 output [B, N, D]
  Tensor tokens_grad;                   // d y_c / d tokens [B, N, D]
  Tensor input_grad;                    // d y_c / d images [B, C, H, W]
  int64_t prefix = 1, grid_h = 0, grid_w = 0;
};

/// Runs images [B, C, H, W] (the model's input: normalised, a multiple of the patch size) through
/// the model in eval mode with the attention probabilities captured, then backward from
/// sum_b logits[b, c_b]. targets: one per image, -1 for the predicted class; a class index out of
/// range is an Error naming it and the number of classes. gradcam_layer: which block's norm1
/// output to keep (negative from the end). The model is left as it was found (mode, capture).
/// gradients = false: the forward alone (grad mode off, the fused attention kernel), enough for
/// the methods that do not need_gradients(); the pass then holds no gradients and no tokens.
/// A model without a head (a feature extractor, as DINO's backbones) has no class score: only
/// gradients = false is allowed (an Error otherwise), the targets are ignored and left empty,
/// and logits holds the pooled features [B, dim].
Pass run_pass(models::VisionTransformer& model, const Tensor& images,
              const std::vector<int64_t>& targets, int64_t gradcam_layer = -1,
              bool gradients = true, models::PosInterp pos_interp = models::PosInterp::Size);

/// The same pass for any model that exposes its attention (models::AttentionModel: a ViT, or a
/// transformer of your own with a class token), with the model's own forward. The Pass then holds
/// no Grad-CAM tokens (gradcam(model, layer, ...) below takes any model). An Error for a model
/// that is not an AttentionModel, naming the methods that apply to it.
Pass run_pass(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
              bool gradients = true);

// ---- the methods on the patch grid, as pure functions of what a Pass holds -------------------
// Each returns [B, gh, gw] (float32). They are the library's building blocks and what the
// parity tests check.

/// DINO's attention map: A_l[h, 0, P:] for head h, or the mean over heads for head = -1.
/// Returns [B, gh, gw]; with head = -1 also fills per_head [B, H, gh, gw] when given.
Tensor attention_map(const Pass& pass, int64_t layer, int64_t head, Tensor* per_head = nullptr);

/// DINO's --threshold mask of a map [B, gh, gw]: per image, with the values v normalised to sum
/// 1 and sorted ascending, keep the patches where the cumulative sum exceeds 1 - threshold (the
/// top patches that hold `threshold` of the mass). Returns 0/1 values [B, gh, gw].
Tensor threshold_mask(const Tensor& map, double threshold);

/// Attention rollout (Abnar & Zuidema, 2020), per image:
///   F_l = fuse_h A_l                      (mean, max or min over heads)     [N, N]
///   F_l[i, j] = 0 for the floor(N^2 * discard_ratio) smallest entries, except [0, 0] (when it
///               is among them, one entry fewer is zeroed, as vit-explain does)
///   R_l = (F_l + I) / 2, each row divided by its sum
///   R = R_L ... R_2 R_1;  map = CLS row of R over the patches.
Tensor rollout(const Pass& pass, HeadFusion fusion, double discard_ratio);

/// Gradient-weighted rollout: as rollout with F_l = max(0, mean_h (G_l * A_l)), layers in the
/// same forward order as their gradients.
Tensor grad_rollout(const Pass& pass, double discard_ratio);

/// Chefer et al. (2021), generic attention explainability, per image:
///   R = I;  for l = 1..L:  R = R + mean_h max(0, G_l * A_l) @ R;   map = CLS row of R.
Tensor chefer(const Pass& pass);

/// Grad-CAM on the token grid (pytorch-grad-cam with its ViT reshape transform), per image, with
/// T = the hooked block's norm1 output at the patch tokens as [D, gh, gw] and G its gradient:
///   alpha_d = mean_{i,j} G[d, i, j];   map = max(0, sum_d alpha_d T[d]).
Tensor gradcam(const Pass& pass);

// ---- the input-gradient methods --------------------------------------------------------------

/// An attribution over the input pixels [B, C, H, W] and the per-image reductions.
struct Attribution {
  Tensor values;  // [B, C, H, W], in the model's dtype
  /// integrated gradients: sum(attribution) - (y_c(x) - y_c(baseline)) per image.
  std::vector<double> completeness_gap;
};

/// |d y_c / d x|, from the pass (its image map is the max over channels).
Attribution saliency(const Pass& pass);

/// SmoothGrad (Smilkov et al., 2017): the mean over n samples of d y_c / d x at
///   x_i = x + sigma * (max(x) - min(x)) * z_i,   z_i ~ N(0, 1) per pixel,
/// with max/min over each image's input. noise: the z_i [B, n, C, H, W] from the caller (the
/// parity test feeds PyTorch's); undefined: drawn from a Generator seeded with options.seed.
Attribution smoothgrad(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
                       const Options& options, const Tensor& noise = Tensor());

/// The baseline x' of integrated gradients: black (options.black per channel, or 0) or blur (a
/// Gaussian blur of the input, kernel 11, sigma 5, reflect padding, as torchvision's
/// gaussian_blur).
Tensor ig_baseline(const Tensor& images, const Options& options);

/// Integrated gradients as Captum defines them:
///   attr = (x - x') * sum_k w_k * d y_c / d x (x' + alpha_k (x - x'))
/// Gauss-Legendre: alpha_k = (1 + t_k) / 2, w_k = u_k / 2 for the n-point Legendre nodes t_k and
/// weights u_k; trapezoid (Captum's riemann_trapezoid, n >= 2): alpha_k = k / (n - 1),
/// w_k = 1 / n with the first and last halved; these weights sum to (n - 1) / n, not 1, so its
/// completeness gap stays large (Captum's choice, kept for parity). Also reports the gap.
Attribution integrated_gradients(nn::Module& model, const Tensor& images,
                                 const std::vector<int64_t>& targets, const Options& options);

/// The n-point rule on [0, 1]: (alphas, weights) as above.
std::pair<std::vector<double>, std::vector<double>> ig_rule(IgRule rule, int64_t n);

/// An attribution's map at pixel resolution [B, H, W]: max over channels of |a| for saliency, the
/// sum over channels of |a| otherwise.
Tensor attribution_map(const Attribution& a, const Method& m);
/// How an attribution's channels become one map: max or sum over channels of |a|.
enum class ChannelReduction { MaxAbs, SumAbs };
Tensor attribution_map(const Attribution& a, ChannelReduction reduction);

/// The patch-grid values of a pixel-resolution map [B, H, W]: the mean over each patch
/// [B, gh, gw] (what the evaluation metrics and the grid .npy files use).
Tensor patch_mean(const Tensor& map, int64_t patch);

// ---- resolution and scaling ------------------------------------------------------------------

/// A grid [B, gh, gw] at image resolution [B, H, W]: bilinear, align_corners=False, or nearest
/// (out[y, x] = grid[floor(y gh / H), floor(x gw / W)], PyTorch's "nearest": for H = gh * patch
/// each cell a constant patch x patch block).
Tensor upsample(const Tensor& grid, int64_t height, int64_t width,
                Upsample mode = Upsample::Bilinear);
/// "bilinear" or "nearest"; another name is an Error naming both.
Upsample parse_upsample(const std::string& name);
/// Per image (first dim): (m - min) / (max - min), zeros when max == min.
Tensor minmax(const Tensor& maps);

/// Mean attention distance (the ViT paper's figure 7 and appendix D.7), [L, H]: per layer and
/// head, the mean over images and query patches i of
///   raw:      sum_{key patches j} A_l[h, i, j] * |p_i - p_j| * patch
///   patches:  the same divided by sum_{key patches j} A_l[h, i, j] (the row renormalised over
///             the patches once the class token and registers are dropped)
/// with p the patch's (row, column) on the grid: how far, in pixels, each head looks. Raw is the
/// paper's definition (the attention weights as they are; docs/explain.md).
Tensor attention_distance(const Pass& pass, int64_t patch, DistanceNorm norm = DistanceNorm::Raw);

// ---- activation maximisation and the query-key view (activation_max.cpp, qkv.cpp) ----------

/// The objective of activation-max per image [B] (differentiable): the target's logit
/// y_{c_b}(x_b), or (options.neuron >= 0, a ViT) the mean over tokens of GELU(fc1(norm2(h)))
/// at channel neuron in block options.layer. targets: resolved class indices.
Tensor activation_objective(nn::Module& model, const Tensor& x, const std::vector<int64_t>& targets,
                            const Options& options);

/// Activation maximisation with Lucid's regularisation, per image b of a batch of `shape`
/// [B, C, H, W] for its target c_b:
///   x_0 = lo + (hi - lo) * clamp(0.5 + 0.1 z), z ~ N(0, 1) from Generator(seed)
///   per step: (dy, dx) uniform in [-jitter, jitter]^2 (Generator(seed + 1); jitter -1: auto),
///             g = roll(d/dx' [objective(x') - l2 |x'|^2], -(dy, dx)) at x' = roll(x, (dy, dx)),
///             x += lr (hi - lo) g / mean|g|   (per image),
///             every blur_every steps x = gaussian_blur(x, blur_sigma),   x = clamp(x, lo, hi)
/// with lo, hi the model-input values of black and white per channel (options.black and white).
struct ActivationMax {
  Tensor images;                   // the optimised model inputs [B, C, H, W] (float32, CPU)
  std::vector<double> start, end;  // the objective at x_0 and at the end, per image
};
ActivationMax activation_max(nn::Module& model, const Dims& shape,
                             const std::vector<int64_t>& targets, const Options& options);

/// The query-key view of block `layer` for the query patch (row, col) (-1: the grid's centre),
/// per image and head h, with T = norm1(x) the block's attention input and q, k, v = qkv(T):
///   scores[b, h, j]   = scale q_p . k_j   over every token j (prefix tokens first; no softmax:
///                       softmax over j gives the attention row A_l[h, p, :])
///   similarity        = scores over the patches [B, H, gh, gw]
///   value_norms[b, h] = |v_j| per patch [B, H, gh, gw]
struct QkvMaps {
  Tensor scores, similarity, value_norms;
  int64_t row = 0, col = 0;  // the query patch
};
QkvMaps qkv_maps(models::VisionTransformer& model, const Tensor& images, int64_t layer,
                 int64_t row = -1, int64_t col = -1,
                 models::PosInterp pos_interp = models::PosInterp::Size);

// ---- all at once -----------------------------------------------------------------------------

/// One method's result for a batch.
struct Explanation {
  Method method;
  Tensor grid;   // [B, gh, gw] raw values on the patch grid
  Tensor map;    // [B, H, W] at image resolution, in [0, 1]
  Tensor raw;    // [B, H, W] at image resolution before scaling (the evaluation's maps)
  Tensor heads;  // attention: [B, H, gh, gw] every head of the chosen layer (raw)
  Tensor mask;   // attention with a threshold: [B, gh, gw] of 0/1
  std::vector<double> completeness_gap;  // integrated gradients
  /// activation-max: the optimised model inputs [B, C, H, W] and the objective at the start and
  /// at the end per image (no grid, raw or map).
  Tensor picture;
  std::vector<double> start_score, end_score;
  /// qkv: heads holds the similarity [B, H, gh, gw] (the grid their mean), values the value norms
  /// [B, H, gh, gw], scores the scores over every token [B, H, N]; the query patch.
  Tensor values, scores;
  int64_t query_row = -1, query_col = -1;
};

/// An input-gradient method's explanation from its attribution: raw = attribution_map(a,
/// reduction), grid = patch_mean(raw, cell), and the attribution's completeness gap.
Explanation explanation_of(const Attribution& a, ChannelReduction reduction, int64_t cell);

/// One method on a batch whose Pass (run_pass with options.layer) is at hand: the attention and
/// token methods and saliency read it; smoothgrad and integrated gradients run their own passes
/// for the pass's resolved targets.
Explanation explain_method(models::VisionTransformer& model, const Tensor& images, const Pass& pass,
                           const Method& method, const Options& options);

// ---- the entry point (entry.cpp): every model, every method ----------------------------------

/// What to explain: images, the classes, the methods and their options.
struct Request {
  Tensor images{};                 // [B, C, H, W], the model's input (normalised)
  std::vector<int64_t> targets{};  // one per image, -1 for the predicted class
  std::vector<Method> methods{};   // in the order the results come
  Options options{};
  /// A model other than a ViT: the submodule whose activations Grad-CAM weighs, by its dotted
  /// name (submodule() below; empty: no gradcam), and the side in pixels of the cells its
  /// input-gradient grids average over.
  std::string gradcam_layer{};
  int64_t cell = 4;
  /// A ViT: a pass already run on these images (run_pass with options.layer and
  /// options.pos_interp, as explain runs one), whose targets then stand; null: explain runs it.
  const Pass* pass = nullptr;
  /// A ViT: run the pass's backward even when no method asked needs it (a pass kept for later).
  bool gradients = false;
};

/// What explain gives back.
struct Result {
  std::vector<Explanation> explanations;  // one per method of the request, in its order
  Tensor logits;                          // [B, K] (a ViT without a head: its features [B, dim])
  std::vector<int64_t> targets;           // the request's, -1 replaced by the predicted class
  Pass pass;                              // a ViT: its pass (empty for another model)
  /// Seconds per stage: the pass ("forward + backward" or "forward"; none when the request
  /// brought one), then each method by name.
  std::vector<std::pair<std::string, double>> seconds;
};

/// The one explanation entry point, for every model:
///  - a models::VisionTransformer gets one shared pass (run_pass: attention, tokens, gradients,
///    its backward only when a method needs_gradients() or request.gradients) and every method,
///    each read from it by explain_method: the attention and token methods, activation-max, qkv;
///  - any other model the methods below (explain(model, gradcam_layer, ...)): Grad-CAM at
///    request.gradcam_layer and the input-gradient methods, and the attention methods on one
///    run_pass(model, ...) when it is a models::AttentionModel; its logits from one forward
///    (logits_of, evaluate.h).
Result explain(nn::Module& model, const Request& request);

/// A ViT's methods on a batch sharing one Pass: explain(model, request).explanations, the pass in
/// pass_out when given.
std::vector<Explanation> explain(models::VisionTransformer& model, const Tensor& images,
                                 const std::vector<int64_t>& targets,
                                 const std::vector<Method>& methods, const Options& options,
                                 Pass* pass_out = nullptr);

// ---- any image classifier (attribution.cpp) ---------------------------------------------------
// These need nothing but a differentiable model, images [B, C, H, W] -> logits [B, K]: a ViT, a
// ResNet, your own nn::Module. smoothgrad and integrated_gradients above take any model too.
// targets: one per image, -1 for the predicted class.

/// |d y_c / d x| from one forward and backward of the model in eval mode (saliency(pass) is the
/// same read from a ViT's Pass). resolved: receives the targets with -1 replaced.
Attribution saliency(nn::Module& model, const Tensor& images, const std::vector<int64_t>& targets,
                     std::vector<int64_t>* resolved = nullptr,
                     models::PosInterp pos_interp = models::PosInterp::Size);

/// Grad-CAM (Selvaraju et al., 2017) as pytorch-grad-cam computes it at `layer`, a module the
/// model calls whose output is a feature map A [B, K, h, w] (a CNN's last convolutional stage,
/// as ResNet's layer3), read through a forward hook:
///   alpha_k = mean_{i,j} d y_c / d A_k[i, j];   map = max(0, sum_k alpha_k A_k)      [B, h, w]
Tensor gradcam(nn::Module& model, nn::Module& layer, const Tensor& images,
               const std::vector<int64_t>& targets, std::vector<int64_t>* resolved = nullptr);

/// What explain(model, request) runs for a model that is not a ViT (here for any model, a ViT too,
/// with Grad-CAM's layer given as a module): the methods that apply to any model (gradcam with
/// gradcam_layer, saliency, smoothgrad, integrated-gradients) on a batch, and the attention methods
/// (attention, rollout, grad-rollout, chefer) when the model is a models::AttentionModel (else an
/// Error naming the others); those share one run_pass(model, ...) and their maps are on the patch
/// grid, as a ViT's. Each result's raw map is at image resolution (Grad-CAM's upsampled
/// bilinearly), its grid the mean over cells of cell x cell pixels for the input-gradient methods
/// (what the evaluation ranks) and the layer's own h x w for Grad-CAM. resolved: receives the
/// targets with -1 replaced by the predicted class.
std::vector<Explanation> explain(nn::Module& model, nn::Module* gradcam_layer, const Tensor& images,
                                 const std::vector<int64_t>& targets,
                                 const std::vector<Method>& methods, const Options& options,
                                 int64_t cell = 4, std::vector<int64_t>* resolved = nullptr);

/// The submodule of model at a dotted name, as named_modules() lists it ("layer3",
/// "layer3.2.conv2"); an Error naming the model's top-level children otherwise.
nn::Module& submodule(nn::Module& model, const std::string& name);

}  // namespace vitrine::explain
