// The Vision Transformer: the model, position-embedding interpolation, and introspection for the
// explain tools (the config is vit_config.cpp's). See vit.h for the computation and the names.
#include "models/vit.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/chunks.h"
#include "nn/init.h"
#include "nn/summary.h"
#include "ops/batch_invariant.h"
#include "ops/ops.h"

namespace vitrine::models {

// ---- modules ---------------------------------------------------------------------------------

namespace {
/// y = x * gamma (DINOv2's LayerScale), gamma: [dim]
class LayerScale : public nn::Module {
 public:
  LayerScale(int64_t dim, double init) {
    gamma = register_parameter("gamma", ops::full({dim}, init));
  }
  Tensor forward(const Tensor& x) override { return x * gamma; }
  std::string type_name() const override { return "LayerScale"; }
  Tensor gamma;
};

/// Holds the patch projection under timm's name patch_embed.proj, and the convolutional stem
/// before it (patch_embed.stem) when the config has one.
class PatchEmbed : public nn::Module {
 public:
  PatchEmbed(std::shared_ptr<nn::Conv2d> p, std::shared_ptr<nn::Sequential> s) {
    if (s) stem = register_module("stem", std::move(s));
    proj = register_module("proj", std::move(p));
  }
  std::string type_name() const override { return "PatchEmbed"; }
  std::shared_ptr<nn::Sequential> stem;
  std::shared_ptr<nn::Conv2d> proj;
};

/// ViTConfig::stem as modules: per width, Conv2d 3x3 (no bias), BatchNorm2d, ReLU.
std::shared_ptr<nn::Sequential> make_stem(const ViTConfig& c, Generator& gen) {
  if (c.stem.empty()) return nullptr;
  auto s = std::make_shared<nn::Sequential>();
  const std::vector<int64_t> strides = c.stem_strides();
  int64_t in = c.channels;
  for (size_t i = 0; i < c.stem.size(); ++i) {
    s->push_back(std::make_shared<nn::Conv2d>(in, c.stem[i], 3, strides[i], 1, false, gen));
    s->push_back(std::make_shared<nn::BatchNorm2d>(c.stem[i]));
    s->push_back(std::make_shared<nn::ReLU>());
    in = c.stem[i];
  }
  return s;
}

/// Holds the representation layer under timm's name pre_logits.fc.
class PreLogits : public nn::Module {
 public:
  explicit PreLogits(std::shared_ptr<nn::Linear> l) { fc = register_module("fc", std::move(l)); }
  std::string type_name() const override { return "PreLogits"; }
  std::shared_ptr<nn::Linear> fc;
};

/// timm's init for Linear layers of a ViT: weights trunc_normal(std 0.02), biases 0.
void init_linear(nn::Linear& l, Generator& gen) {
  nn::init::trunc_normal_(l.weight, 0, 0.02, -2, 2, gen);
  if (l.bias.defined()) nn::init::zeros_(l.bias);
}
}  // namespace

ViTBlock::ViTBlock(const ViTConfig& c, double dp, Generator& gen) {
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(c.dim, c.eps));
  attn = register_module(
      "attn", std::make_shared<nn::MultiheadSelfAttention>(
                  c.dim, c.heads, c.qkv_bias, c.attn_dropout, c.dropout, gen, c.dim_head));
  if (c.layer_scale)
    ls1 = register_module("ls1", std::make_shared<LayerScale>(c.dim, c.layer_scale_init))->gamma;
  drop_path1 = register_module("drop_path1", std::make_shared<nn::DropPath>(dp, gen));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(c.dim, c.eps));
  mlp = register_module("mlp", std::make_shared<nn::MLP>(c.dim, c.mlp_dim, c.dim, c.dropout, gen));
  if (c.layer_scale)
    ls2 = register_module("ls2", std::make_shared<LayerScale>(c.dim, c.layer_scale_init))->gamma;
  drop_path2 = register_module("drop_path2", std::make_shared<nn::DropPath>(dp, gen));
  for (auto* l : {attn->qkv.get(), attn->proj.get(), mlp->fc1.get(), mlp->fc2.get()})
    init_linear(*l, gen);
}

namespace {
// Whether a residual can be added as the product before it (proj, fc2) is written: nothing
// comes between them (no layer scale, no drop-path at work, no hooks to run).
bool plain(const Tensor& layer_scale, const nn::Module& branch, const nn::DropPath& dp) {
  return !layer_scale.defined() && !dp.active() && !branch.has_forward_hooks() &&
         !dp.has_forward_hooks();
}
}  // namespace

Tensor ViTBlock::forward(const Tensor& x) { return mlp_half(attn_half(x, x.size(1))); }

Tensor ViTBlock::forward_first(const Tensor& x, int64_t rows) {
  return mlp_half(attn_half(x, rows));
}

Tensor ViTBlock::attn_half(const Tensor& x, int64_t rows) {
  // Every row: the fused attention through the module call; fewer: forward_first.
  const bool all = rows == x.size(1);
  const Tensor xn = (*norm1)(x), xr = all ? x : x.slice(1, 0, rows);
  if (plain(ls1, *attn, *drop_path1))
    return all ? attn->forward_add(xn, x) : attn->forward_first(xn, rows, xr);
  Tensor a = all ? (*attn)(xn) : attn->forward_first(xn, rows);
  if (ls1.defined()) a = a * ls1;
  return xr + (*drop_path1)(a);
}

Tensor ViTBlock::mlp_half(const Tensor& h) {
  if (plain(ls2, *mlp, *drop_path2)) return mlp->forward_add((*norm2)(h), h);
  Tensor m = (*mlp)((*norm2)(h));
  if (ls2.defined()) m = m * ls2;
  return h + (*drop_path2)(m);
}

bool ViTBlock::first_rows_exact() const {
  return !has_forward_hooks_below() && !attn->capturing_probs() && !attn->attn_drop->active() &&
         !attn->proj_drop->active() && !mlp->drop1->active() && !mlp->drop2->active();
}

VisionTransformer::VisionTransformer(const ViTConfig& c, Generator& gen) : config_(c) {
  c.validate();
  const int64_t k = c.kernel(), pad = c.kernel_padding(), st = c.stride();
  stem = make_stem(c, gen);
  auto proj = std::make_shared<nn::Conv2d>(c.proj_channels(), c.dim, std::pair{k, k},
                                           std::pair{st, st}, std::pair{pad, pad}, true, gen);
  register_module("patch_embed", std::make_shared<PatchEmbed>(proj, stem));
  patch_embed = proj;
  cls_token = register_parameter("cls_token", ops::zeros({1, 1, c.dim}));
  nn::init::normal_(cls_token, 0, 1e-6, gen);
  if (c.registers > 0) {
    register_tokens = register_parameter("register_tokens", ops::zeros({1, c.registers, c.dim}));
    nn::init::normal_(register_tokens, 0, 1e-6, gen);
  }
  pos_embed = register_parameter("pos_embed", ops::zeros({1, c.pos_tokens(), c.dim}));
  nn::init::trunc_normal_(pos_embed, 0, 0.02, -2, 2, gen);
  pos_drop = register_module("pos_drop", std::make_shared<nn::Dropout>(c.embed_dropout, gen));
  blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.depth; ++i) {
    double dp =
        c.depth > 1 ? c.drop_path * static_cast<double>(i) / static_cast<double>(c.depth - 1) : 0;
    blocks->push_back(std::make_shared<ViTBlock>(c, dp, gen));
  }
  if (c.fc_norm)
    fc_norm = register_module("fc_norm", std::make_shared<nn::LayerNorm>(c.dim, c.eps));
  else if (c.final_norm)
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(c.dim, c.eps));
  if (c.representation > 0) {
    pre_logits = std::make_shared<nn::Linear>(c.dim, c.representation, true, gen);
    init_linear(*pre_logits, gen);
    register_module("pre_logits", std::make_shared<PreLogits>(pre_logits));
  }
  if (c.num_classes > 0) reset_head(c.num_classes, gen);
  if (c.init == "torchvision") init_torchvision(gen);
  if (c.init == "vit-pytorch") init_vit_pytorch(gen);
  if (c.init == "dino") {  // DINO: trunc_normal_(self.cls_token, std=.02), the rest as timm's
    NoGradGuard no_grad;
    nn::init::trunc_normal_(cls_token, 0, 0.02, -2, 2, gen);
  }
}

namespace {
/// PyTorch's nn.Linear / nn.Conv2d reset_parameters: weight kaiming_uniform(a = sqrt 5), that is
/// uniform(+-1 / sqrt(fan_in)), and the bias uniform(+-1 / sqrt(fan_in)).
void torch_default(const Tensor& weight, const Tensor& bias, Generator& gen) {
  nn::init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (!bias.defined()) return;
  const double bound = 1 / std::sqrt(static_cast<double>(nn::init::fan_in_out(weight).first));
  nn::init::uniform_(bias, -bound, bound, gen);
}
}  // namespace

void VisionTransformer::init_vit_pytorch(Generator& gen) {
  NoGradGuard no_grad;
  // vit-pytorch's ViT.__init__: pos_embedding and cls_token are torch.randn, every layer keeps
  // PyTorch's default (its patch embedding is a Linear over (p1 p2 c): the same bounds as our
  // Conv2d's, fan_in = c p p). The blocks and the head were drawn as timm's by their
  // constructors, so every layer is drawn again here.
  nn::init::normal_(pos_embed, 0, 1, gen);
  nn::init::normal_(cls_token, 0, 1, gen);
  if (register_tokens.defined()) nn::init::normal_(register_tokens, 0, 1, gen);
  torch_default(patch_embed->weight, patch_embed->bias, gen);
  for (const auto& b : *blocks) {
    auto& block = *std::static_pointer_cast<ViTBlock>(b);
    for (nn::Linear* l : {block.attn->qkv.get(), block.attn->proj.get(), block.mlp->fc1.get(),
                          block.mlp->fc2.get()})
      torch_default(l->weight, l->bias, gen);
  }
  if (pre_logits) torch_default(pre_logits->weight, pre_logits->bias, gen);
  if (head) torch_default(head->weight, head->bias, gen);
}

void VisionTransformer::init_torchvision(Generator& gen) {
  NoGradGuard no_grad;
  // Draws in torchvision's order: the encoder (position embedding, then per layer the
  // attention's in_proj and out_proj, the MLP), then the patch embedding and the heads.
  nn::init::zeros_(cls_token);
  if (register_tokens.defined()) nn::init::zeros_(register_tokens);
  nn::init::normal_(pos_embed, 0, 0.02, gen);
  for (const auto& b : *blocks) {
    auto& block = *std::static_pointer_cast<ViTBlock>(b);
    nn::Linear& qkv = *block.attn->qkv;
    nn::init::xavier_uniform_(qkv.weight, 1, gen);  // in_proj_weight [3 inner, dim] as one
    if (qkv.bias.defined()) nn::init::zeros_(qkv.bias);
    nn::Linear& proj = *block.attn->proj;  // out_proj: nn.Linear's default, then a zero bias
    nn::init::kaiming_uniform_(proj.weight, std::sqrt(5.0), gen);
    if (proj.bias.defined()) nn::init::zeros_(proj.bias);
    for (nn::Linear* l : {block.mlp->fc1.get(), block.mlp->fc2.get()}) {
      nn::init::xavier_uniform_(l->weight, 1, gen);
      if (l->bias.defined()) nn::init::normal_(l->bias, 0, 1e-6, gen);
    }
  }
  const double patch_fan_in = static_cast<double>(nn::init::fan_in_out(patch_embed->weight).first);
  nn::init::trunc_normal_(patch_embed->weight, 0, std::sqrt(1 / patch_fan_in), -2, 2, gen);
  if (patch_embed->bias.defined()) nn::init::zeros_(patch_embed->bias);
  if (pre_logits) {
    const double fan_in = static_cast<double>(pre_logits->weight.size(1));
    nn::init::trunc_normal_(pre_logits->weight, 0, std::sqrt(1 / fan_in), -2, 2, gen);
    nn::init::zeros_(pre_logits->bias);
  }
  if (head) {
    nn::init::zeros_(head->weight);
    nn::init::zeros_(head->bias);
  }
}

std::string VisionTransformer::extra_repr() const {
  return fmt::format("image={}x{}, patch={}, dim={}, depth={}, heads={}, classes={}",
                     config_.image_h, config_.image_w, config_.patch, config_.dim, config_.depth,
                     config_.heads, config_.num_classes);
}

void VisionTransformer::reset_head(int64_t num_classes, Generator& gen) {
  VT_CHECK(num_classes > 0, "VisionTransformer: reset_head needs num_classes > 0, got {}",
           num_classes);
  int64_t in = config_.representation > 0 ? config_.representation : config_.dim;
  head = set_module("head", std::make_shared<nn::Linear>(in, num_classes, true, gen));
  if (config_.init == "torchvision") {  // torchvision's head starts at zero
    NoGradGuard no_grad;
    nn::init::zeros_(head->weight);
    nn::init::zeros_(head->bias);
  } else if (config_.init == "vit-pytorch") {
    // nn.Linear's default, as the constructor drew it
  } else {
    init_linear(*head, gen);
  }
  config_.num_classes = num_classes;
}

Tensor VisionTransformer::pos_embed_for(int64_t gh, int64_t gw, PosInterp mode) const {
  const int64_t oh = config_.grid_h(), ow = config_.grid_w(), D = config_.dim;
  if (gh == oh && gw == ow) return pos_embed;
  const int64_t prefix = config_.no_embed_class ? 0 : 1;
  // [1, oh*ow, D] -> [1, D, oh, ow], resized, -> [1, gh*gw, D]
  Tensor grid = pos_embed.slice(1, prefix, kEnd).reshape({1, oh, ow, D}).permute({0, 3, 1, 2});
  ops::InterpolateOptions o;
  o.mode = "bicubic";
  o.align_corners = false;
  if (mode == PosInterp::Size) {
    o.size = std::pair{gh, gw};
  } else {  // DINO: scale factor (grid + 0.1) / old grid, used as given for source coordinates
    o.scale_factor = std::pair{(static_cast<double>(gh) + 0.1) / static_cast<double>(oh),
                               (static_cast<double>(gw) + 0.1) / static_cast<double>(ow)};
  }
  Tensor resized = ops::interpolate(grid, o);
  VT_ASSERT(resized.size(2) == gh && resized.size(3) == gw);
  Tensor patches = resized.permute({0, 2, 3, 1}).reshape({1, gh * gw, D});
  if (prefix == 0) return patches;
  return ops::cat({pos_embed.slice(1, 0, 1), patches}, 1);
}

namespace {
/// The patch grid of images [B, C, H, W] (height, width in patches): whole patches only, as
/// embed sees them after its crop.
std::pair<int64_t, int64_t> patch_grid(const ViTConfig& c, const Tensor& images) {
  return {images.size(2) / c.patch, images.size(3) / c.patch};
}
}  // namespace

Tensor VisionTransformer::embed(const Tensor& images, const ViTForwardOptions& options) {
  return embed_tokens(images, options, true);
}

Tensor VisionTransformer::embed_tokens(const Tensor& images_in, const ViTForwardOptions& options,
                                       bool record) {
  const ViTConfig& c = config_;
  VT_CHECK(images_in.defined() && images_in.dim() == 4 && images_in.size(1) == c.channels,
           "VisionTransformer: expected images [B, {}, H, W], got {}", c.channels,
           images_in.defined() ? images_in.shape() : Dims{});
  Tensor images = images_in;
  int64_t H = images.size(2), W = images.size(3);
  if (H % c.patch != 0 || W % c.patch != 0) {
    VT_CHECK(options.crop && H >= c.patch && W >= c.patch,
             "VisionTransformer: image size {}x{} is not a multiple of the patch size {} (crop to "
             "{}x{} with ViTForwardOptions::crop)",
             H, W, c.patch, H / c.patch * c.patch, W / c.patch * c.patch);
    H = H / c.patch * c.patch;
    W = W / c.patch * c.patch;
    images = images.narrow(2, 0, H).narrow(3, 0, W);
  }
  const int64_t B = images.size(0);
  const auto [gh, gw] = patch_grid(c, images);
  if (record) last_grid_ = {gh, gw};
  // [B, C, H, W] -> [B, D, gh, gw] -> [B, gh*gw, D]
  Tensor x = (*patch_embed)(stem ? (*stem)(images) : images).flatten(2).transpose(1, 2);
  Tensor pos = pos_embed_for(gh, gw, options.pos_interp);
  Tensor cls = cls_token.expand({B, 1, c.dim});
  if (c.no_embed_class) {  // timm: prefix tokens carry no position embedding
    std::vector<Tensor> parts{cls};
    if (c.registers > 0) parts.push_back(register_tokens.expand({B, c.registers, c.dim}));
    parts.push_back(x + pos);
    x = ops::cat(parts, 1);
  } else {
    x = ops::cat({cls, x}, 1) + pos;
    if (c.registers > 0)  // DINOv2: registers go after the class token, without position
      x = ops::cat(
          {x.slice(1, 0, 1), register_tokens.expand({B, c.registers, c.dim}), x.slice(1, 1, kEnd)},
          1);
  }
  return (*pos_drop)(x);
}

Tensor VisionTransformer::forward_features(const Tensor& images, const ViTForwardOptions& options) {
  return tokens(images, options, 0);
}

Tensor VisionTransformer::tokens(const Tensor& images, const ViTForwardOptions& options,
                                 int64_t last_rows, bool record) {
  Tensor x = embed_tokens(images, options, record);
  if (record) block_outputs_.clear();
  const size_t n = blocks->size();
  for (size_t i = 0; i < n; ++i) {
    if (last_rows > 0 && i + 1 == n)
      x = blocks->at<ViTBlock>(i)->forward_first(x, last_rows);
    else
      x = (*(*blocks)[i])(x);
    if (capture_tokens_ && record) block_outputs_.push_back(x);
  }
  return norm ? (*norm)(x) : x;
}

std::vector<Tensor> VisionTransformer::intermediate_layers(const Tensor& images, int64_t n,
                                                           bool norm_them,
                                                           const ViTForwardOptions& options) {
  const auto depth = static_cast<int64_t>(blocks->size());
  VT_CHECK(n >= 1 && n <= depth, "intermediate_layers: n = {} is not in [1, depth = {}]", n, depth);
  Tensor x = embed(images, options);
  std::vector<Tensor> out;
  for (int64_t i = 0; i < depth; ++i) {
    x = (*(*blocks)[static_cast<size_t>(i)])(x);
    if (i >= depth - n) out.push_back(norm_them && norm ? (*norm)(x) : x);
  }
  return out;
}

bool VisionTransformer::class_token_only() const {
  if (!class_token_shortcut || config_.pool != "cls" || capture_tokens_ || blocks->size() == 0)
    return false;
  if (norm && norm->has_forward_hooks()) return false;
  const auto& last = *blocks->at<ViTBlock>(blocks->size() - 1);
  return !blocks->has_forward_hooks() && last.first_rows_exact();
}

Tensor VisionTransformer::forward_head(const Tensor& tokens) {
  Tensor t = config_.pool == "cls" ? tokens.select(1, 0)
                                   : ops::mean(tokens.slice(1, config_.prefix_tokens(), kEnd), {1});
  if (fc_norm) t = (*fc_norm)(t);
  if (pre_logits) t = ops::tanh((*pre_logits)(t));
  if (head) t = (*head)(t);
  return t;
}

Tensor VisionTransformer::forward(const Tensor& images) { return forward(images, forward_options); }

namespace {
/// Whether m or any module below it mixes the samples of a batch or draws random numbers: one
/// in training mode, or a batch norm without running statistics (batch statistics in eval too).
bool mixes_samples(const nn::Module& m) {
  if (m.is_training()) return true;
  if (const auto* bn = dynamic_cast<const nn::BatchNorm2d*>(&m); bn && !bn->track_running_stats)
    return true;
  for (const auto& [name, c] : m.named_children())
    if (mixes_samples(*c)) return true;
  return false;
}
/// For the chunks of one inference call: every float32 Linear's weight [N, K] replaced by the
/// same values stored as [K, N] (W^T made contiguous, seen transposed), and put back at the end.
/// The own GEMM then reads the weight in place in every chunk, where a weight stored [N, K] is
/// packed again for each: one copy per call instead of one per chunk.
class WeightsInPlace {
 public:
  explicit WeightsInPlace(nn::Module& model) {
    for (const auto& [name, m] : model.named_modules()) {
      auto* lin = dynamic_cast<nn::Linear*>(m);
      if (lin == nullptr || !lin->weight.defined() || lin->weight.dtype() != kFloat32) continue;
      saved_.emplace_back(lin, lin->weight);
      lin->weight = lin->weight.mT().contiguous().mT();
    }
  }
  ~WeightsInPlace() {
    for (auto& [lin, w] : saved_) lin->weight = w;
  }
  WeightsInPlace(const WeightsInPlace&) = delete;
  WeightsInPlace& operator=(const WeightsInPlace&) = delete;

 private:
  std::vector<std::pair<nn::Linear*, Tensor>> saved_;
};
}  // namespace

int64_t VisionTransformer::inference_chunks(const Tensor& images) const {
  if (!inference_in_chunks || GradMode::is_enabled() || !images.defined() || images.dim() != 4 ||
      !images.device().is_cpu() || capture_tokens_ || mixes_samples(*this) ||
      has_forward_hooks_below() ||
      is_batch_invariant())  // (chunks cut where the thread count says; the ops cut by leaves)
    return 1;
  for (const auto& b : *blocks) {
    const auto& attn = *std::static_pointer_cast<ViTBlock>(b)->attn;
    if (attn.capturing_probs() || attn.capturing_grads()) return 1;
  }
  const ViTConfig& c = config_;
  const auto [gh, gw] = patch_grid(c, images);
  const int64_t tokens = c.prefix_tokens() + gh * gw;
  const int64_t widest = std::max({3 * c.inner_dim(), c.mlp_dim, c.dim});
  return nn::inference_chunks(images.size(0), tokens * widest * dtype_size(images.dtype()));
}

Tensor VisionTransformer::forward(const Tensor& images, const ViTForwardOptions& options) {
  const int64_t last_rows = class_token_only() ? 1 : 0;
  const int64_t chunks = inference_chunks(images);
  if (chunks <= 1) return forward_head(tokens(images, options, last_rows));
  // Each chunk on one thread: nothing here may be written by two (tokens' record = false), and
  // the block outputs and the grid are set once, here.
  block_outputs_.clear();
  const WeightsInPlace weights(*this);
  Tensor out = nn::forward_in_chunks(images, chunks, [&](const Tensor& x) {
    return forward_head(tokens(x, options, last_rows, false));
  });
  last_grid_ = patch_grid(config_, images);
  return out;
}

void VisionTransformer::capture(bool attention, bool grads) {
  for (const auto& b : *blocks)
    std::static_pointer_cast<ViTBlock>(b)->attn->capture(attention, grads);
  capture_tokens_ = attention || grads;
}

std::vector<nn::MultiheadSelfAttention*> VisionTransformer::attention_layers() {
  std::vector<nn::MultiheadSelfAttention*> out;
  for (const auto& b : *blocks) out.push_back(std::static_pointer_cast<ViTBlock>(b)->attn.get());
  return out;
}

std::vector<Tensor> VisionTransformer::attentions() const {
  std::vector<Tensor> out;
  for (const auto& b : *blocks)
    out.push_back(std::static_pointer_cast<ViTBlock>(b)->attn->attention());
  return out;
}

std::vector<Tensor> VisionTransformer::attention_grads() const {
  std::vector<Tensor> out;
  for (const auto& b : *blocks)
    out.push_back(std::static_pointer_cast<ViTBlock>(b)->attn->attention_grad());
  return out;
}

Tensor VisionTransformer::get_last_selfattention(const Tensor& images,
                                                 const ViTForwardOptions& options) {
  Tensor x = embed(images, options);
  const size_t n = blocks->size();
  for (size_t i = 0; i + 1 < n; ++i) x = (*(*blocks)[i])(x);
  auto last = blocks->at<ViTBlock>(n - 1);
  const bool probs = last->attn->capturing_probs(), grads = last->attn->capturing_grads();
  last->attn->capture(true, grads);
  last->attn->attend((*last->norm1)(x));
  Tensor a = last->attn->attention();
  last->attn->capture(probs, grads);
  return a;
}

Tensor VisionTransformer::get_attention_output(const Tensor& images, int64_t layer,
                                               int64_t head_index,
                                               const ViTForwardOptions& options) {
  VT_CHECK(layer >= 0 && layer < config_.depth,
           "get_attention_output: layer {} is out of range (depth {})", layer, config_.depth);
  VT_CHECK(head_index >= 0 && head_index < config_.heads,
           "get_attention_output: head {} is out of range ({} heads)", head_index, config_.heads);
  Tensor x = embed(images, options);
  for (int64_t i = 0; i < layer; ++i) x = (*(*blocks)[static_cast<size_t>(i)])(x);
  auto b = blocks->at<ViTBlock>(static_cast<size_t>(layer));
  return b->attn->attend((*b->norm1)(x)).select(1, head_index);  // [B, N, Dh]
}

// ---- summary table ---------------------------------------------------------------------------

std::string VisionTransformer::summary_table(int64_t batch) {
  VT_CHECK(batch > 0, "summary_table: batch must be positive, got {}", batch);
  // nn::summary restores the hooks and training flags; the attention captures, the patch grid and
  // the block outputs of the last real forward come back here, whatever happens.
  struct Restore {
    VisionTransformer& m;
    std::pair<int64_t, int64_t> grid;
    std::vector<Tensor> outputs;
    std::vector<std::pair<bool, bool>> capture = {};
    ~Restore() {
      for (size_t i = 0; i < capture.size(); ++i)
        m.blocks->at<ViTBlock>(i)->attn->capture(capture[i].first, capture[i].second);
      m.last_grid_ = grid;
      m.block_outputs_ = outputs;
    }
  };
  Restore restore{*this, last_grid_, block_outputs_};
  for (const auto& b : *blocks) {
    auto attn = std::static_pointer_cast<ViTBlock>(b)->attn;
    restore.capture.emplace_back(attn->capturing_probs(), attn->capturing_grads());
    attn->capture(false);
  }
  return nn::summary(*this, {batch, config_.channels, config_.image_h, config_.image_w});
}

}  // namespace vitrine::models
