// The Vision Transformer: config (JSON, presets), the model, position-embedding interpolation, and
// introspection for the explain tools. See vit.h for the computation and the names.
#include "models/vit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "autograd/grad_mode.h"
#include "nn/chunks.h"
#include "nn/init.h"
#include "nn/json.h"
#include "ops/ops.h"

namespace vitrine::models {

// ---- config ----------------------------------------------------------------------------------

void ViTConfig::validate() const {
  VT_CHECK(image_h > 0 && image_w > 0 && patch > 0 && channels > 0,
           "ViTConfig: image {}x{}, patch {} and channels {} must be positive", image_h, image_w,
           patch, channels);
  VT_CHECK(image_h % patch == 0 && image_w % patch == 0,
           "ViTConfig: image size {}x{} is not a multiple of the patch size {}", image_h, image_w,
           patch);
  VT_CHECK(
      patch_kernel == 0 || (patch_kernel >= patch && (patch_kernel - patch) % 2 == 0),
      "ViTConfig: patch_kernel {} must be 0 (the patch size) or the patch size {} plus an even "
      "number",
      patch_kernel, patch);
  VT_CHECK(stem.size() <= 8, "ViTConfig: stem has {} stages, at most 8 are allowed", stem.size());
  for (int64_t w : stem)
    VT_CHECK(w > 0 && w <= 4096, "ViTConfig: stem widths must be in [1, 4096], got {}", w);
  VT_CHECK(stem.empty() || patch_kernel == 0,
           "ViTConfig: a stem and patch_kernel {} cannot be combined (the stem overlaps its "
           "windows already)",
           patch_kernel);
  VT_CHECK(dim > 0 && depth > 0 && heads > 0 && mlp_dim > 0,
           "ViTConfig: dim {}, depth {}, heads {} and mlp_dim {} must be positive", dim, depth,
           heads, mlp_dim);
  VT_CHECK(dim_head >= 0, "ViTConfig: dim_head must be >= 0 (0: dim / heads), got {}", dim_head);
  VT_CHECK(dim_head > 0 || dim % heads == 0,
           "ViTConfig: dim {} is not divisible by heads {} (or set dim_head)", dim, heads);
  VT_CHECK(num_classes >= 0 && representation >= 0 && registers >= 0,
           "ViTConfig: num_classes, representation and registers must be >= 0");
  VT_CHECK(pool == "cls" || pool == "mean", "ViTConfig: pool '{}' is not 'cls' or 'mean'", pool);
  for (double p : {dropout, attn_dropout, embed_dropout, drop_path})
    VT_CHECK(p >= 0 && p < 1, "ViTConfig: dropout rates must be in [0, 1), got {}", p);
  VT_CHECK(eps > 0, "ViTConfig: eps must be positive, got {}", eps);
  // Upper bounds, so that a tiny hostile config cannot ask for an absurd model (or overflow the
  // sizes computed from it): far above every published ViT (ViT-22B: dim 6144, depth 48).
  const auto at_most = [](const char* name, int64_t v, int64_t hi) {
    VT_CHECK(v <= hi, "ViTConfig: {} is {}, over the limit of {}", name, v, hi);
  };
  at_most("image height", image_h, 16384);
  at_most("image width", image_w, 16384);
  at_most("patch_kernel", patch_kernel, 16384);
  at_most("channels", channels, 4096);
  at_most("dim", dim, 65536);
  at_most("depth", depth, 4096);
  at_most("mlp_dim", mlp_dim, 262144);
  at_most("dim_head", dim_head, 65536);
  at_most("heads", heads, 65536);
  at_most("num_classes", num_classes, 1 << 24);
  at_most("representation", representation, 65536);
  at_most("registers", registers, 4096);
  at_most("tokens (patches per image)", (image_h / patch) * (image_w / patch), 1 << 20);
}

std::vector<int64_t> ViTConfig::stem_strides() const {
  std::vector<int64_t> strides;
  int64_t left = patch;
  for (size_t i = 0; i < stem.size(); ++i) {
    strides.push_back(left % 2 == 0 ? 2 : 1);
    left /= strides.back();
  }
  return strides;
}

int64_t ViTConfig::stem_stride() const {
  int64_t product = 1;
  for (int64_t s : stem_strides()) product *= s;
  return product;
}

nlohmann::json ViTConfig::to_json() const {
  return {{"image_size", {image_h, image_w}},
          {"patch", patch},
          {"patch_kernel", patch_kernel},
          {"stem", stem},
          {"channels", channels},
          {"num_classes", num_classes},
          {"dim", dim},
          {"depth", depth},
          {"heads", heads},
          {"dim_head", dim_head},
          {"mlp_dim", mlp_dim},
          {"dropout", dropout},
          {"attn_dropout", attn_dropout},
          {"embed_dropout", embed_dropout},
          {"drop_path", drop_path},
          {"pool", pool},
          {"representation", representation},
          {"qkv_bias", qkv_bias},
          {"eps", eps},
          {"registers", registers},
          {"layer_scale", layer_scale},
          {"layer_scale_init", layer_scale_init},
          {"no_embed_class", no_embed_class},
          {"fc_norm", fc_norm},
          {"final_norm", final_norm}};
}

ViTConfig ViTConfig::from_json(const nlohmann::json& j) {
  VT_CHECK(j.is_object(), "ViTConfig: expected a JSON object, got {}", j.type_name());
  ViTConfig c;
  // Sizes must be whole numbers (16.7 is refused, not truncated) and every number finite; the
  // ranges are validate()'s.
  const auto integer = [](const std::string& k, const nlohmann::json& v) {
    return nn::json_integer(v, fmt::format("ViTConfig: '{}'", k),
                            std::numeric_limits<int64_t>::min());
  };
  const auto number = [](const std::string& k, const nlohmann::json& v) {
    return nn::json_number(v, fmt::format("ViTConfig: '{}'", k));
  };
  for (const auto& [k, v] : j.items()) {
    try {
      if (k == "image_size") {
        if (v.is_array()) {
          VT_CHECK(v.size() == 2, "ViTConfig: image_size must be a number or [h, w]");
          c.image_h = integer(k, v[0]);
          c.image_w = integer(k, v[1]);
        } else {
          c.image_h = c.image_w = integer(k, v);
        }
      } else if (k == "patch")
        c.patch = integer(k, v);
      else if (k == "patch_kernel")
        c.patch_kernel = integer(k, v);
      else if (k == "stem") {
        VT_CHECK(v.is_array() && v.size() <= 8,
                 "ViTConfig: stem must be a list of at most 8 widths, got {}", v.dump());
        c.stem.clear();
        for (const auto& w : v) c.stem.push_back(integer(k, w));
      } else if (k == "channels")
        c.channels = integer(k, v);
      else if (k == "num_classes")
        c.num_classes = integer(k, v);
      else if (k == "dim")
        c.dim = integer(k, v);
      else if (k == "depth")
        c.depth = integer(k, v);
      else if (k == "heads")
        c.heads = integer(k, v);
      else if (k == "dim_head")
        c.dim_head = integer(k, v);
      else if (k == "mlp_dim")
        c.mlp_dim = integer(k, v);
      else if (k == "dropout")
        c.dropout = number(k, v);
      else if (k == "attn_dropout")
        c.attn_dropout = number(k, v);
      else if (k == "embed_dropout")
        c.embed_dropout = number(k, v);
      else if (k == "drop_path")
        c.drop_path = number(k, v);
      else if (k == "pool")
        c.pool = v.get<std::string>();
      else if (k == "representation")
        c.representation = integer(k, v);
      else if (k == "qkv_bias")
        c.qkv_bias = v.get<bool>();
      else if (k == "eps")
        c.eps = number(k, v);
      else if (k == "registers")
        c.registers = integer(k, v);
      else if (k == "layer_scale")
        c.layer_scale = v.get<bool>();
      else if (k == "layer_scale_init")
        c.layer_scale_init = number(k, v);
      else if (k == "no_embed_class")
        c.no_embed_class = v.get<bool>();
      else if (k == "fc_norm")
        c.fc_norm = v.get<bool>();
      else if (k == "final_norm")
        c.final_norm = v.get<bool>();
      else
        fail("ViTConfig: unknown key '{}'", k);
    } catch (const nlohmann::json::exception& e) {
      fail("ViTConfig: key '{}' has the wrong type ({})", k, e.what());
    }
  }
  c.validate();
  return c;
}

namespace {
struct Size {
  const char* name;
  int64_t dim, depth, heads, mlp;
};
constexpr Size kSizes[] = {{"tiny", 192, 12, 3, 768},
                           {"small", 384, 12, 6, 1536},
                           {"base", 768, 12, 12, 3072},
                           {"large", 1024, 24, 16, 4096}};
}  // namespace

std::vector<std::string> ViTConfig::preset_names() {
  std::vector<std::string> names;
  for (const Size& s : kSizes)
    for (int p : {8, 16, 32}) names.push_back(fmt::format("vit_{}_patch{}_224", s.name, p));
  names.push_back("fmnist");
  names.push_back("cifar10");
  return names;
}

ViTConfig ViTConfig::preset(const std::string& name) {
  ViTConfig c;
  if (name == "fmnist") {
    c.image_h = c.image_w = 28;
    c.patch = 4;
    c.channels = 1;
    c.num_classes = 10;
    c.dim = 128, c.depth = 6, c.heads = 4, c.mlp_dim = 256;
    return c;
  }
  if (name == "cifar10") {
    c.image_h = c.image_w = 32;
    c.patch = 4;
    c.num_classes = 10;
    c.dim = 192, c.depth = 6, c.heads = 3, c.mlp_dim = 768;
    return c;
  }
  for (const Size& s : kSizes)
    for (int p : {8, 16, 32})
      if (name == fmt::format("vit_{}_patch{}_224", s.name, p)) {
        c.patch = p;
        c.dim = s.dim, c.depth = s.depth, c.heads = s.heads, c.mlp_dim = s.mlp;
        return c;
      }
  fail("ViTConfig: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

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
  init_linear(*head, gen);
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
      has_forward_hooks_below())
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

namespace {
/// 86567656 -> "86,567,656" (torchinfo's numbers)
std::string with_commas(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

/// What a forward hook saw of a module's output.
struct ModuleOutput {
  Dims shape;
  int64_t bytes = 0;
};

struct SummaryRow {
  std::string label, shape;
  int64_t params = 0;  // printed "--" when 0
  int depth = 0;
};

struct SummaryTotals {
  int64_t leaf_output_bytes = 0, param_bytes = 0;
};

/// One row per module, pre-order; a leaf module's row counts its parameters, a module with
/// children gets a Parameter row for each tensor it owns itself (the ViT's tokens). A tensor
/// shared by two modules counts on its first row only, as in num_parameters().
std::vector<SummaryRow> summary_rows(
    const std::vector<std::pair<std::string, nn::Module*>>& modules,
    const std::map<const nn::Module*, ModuleOutput>& outputs, SummaryTotals& totals) {
  std::vector<SummaryRow> rows;
  std::set<const TensorImpl*> counted;
  for (const auto& [name, mod] : modules) {
    const int depth =
        name.empty() ? 0 : static_cast<int>(std::count(name.begin(), name.end(), '.')) + 1;
    const bool leaf = mod->named_children().empty();
    const auto out = outputs.find(mod);
    if (leaf && out != outputs.end()) totals.leaf_output_bytes += out->second.bytes;
    SummaryRow row{name.empty() ? mod->type_name() : fmt::format("{} ({})", name, mod->type_name()),
                   out != outputs.end() ? out->second.shape.str() : "--", 0, depth};
    std::vector<SummaryRow> tensors;
    for (const auto& [pname, p] : mod->named_parameters(false)) {
      const int64_t n = counted.insert(p.impl_ptr().get()).second ? p.numel() : 0;
      totals.param_bytes += n * static_cast<int64_t>(dtype_size(p.dtype()));
      if (leaf)
        row.params += n;
      else
        tensors.push_back({fmt::format("{}{} (Parameter)", name.empty() ? "" : name + ".", pname),
                           p.shape().str(), n, depth + 1});
    }
    rows.push_back(row);
    rows.insert(rows.end(), tensors.begin(), tensors.end());
  }
  return rows;
}

std::string format_summary(const std::vector<SummaryRow>& rows, const SummaryTotals& totals,
                           int64_t total, int64_t trainable, int64_t input_bytes) {
  size_t label_w = std::string("Layer (type)").size(), shape_w = std::string("Output Shape").size();
  for (const SummaryRow& r : rows) {
    label_w = std::max(label_w, 2 * static_cast<size_t>(r.depth) + r.label.size());
    shape_w = std::max(shape_w, r.shape.size());
  }
  const size_t params_w = 12, width = label_w + 2 + shape_w + 2 + params_w;
  const std::string rule = std::string(width, '=') + "\n", thin = std::string(width, '-') + "\n";
  auto line = [&](const std::string& label, const std::string& shape, const std::string& params) {
    return fmt::format("{:<{}}  {:<{}}  {:>{}}\n", label, label_w, shape, shape_w, params,
                       params_w);
  };
  std::string out = rule + line("Layer (type)", "Output Shape", "Param #") + rule;
  for (const SummaryRow& r : rows)
    out += line(std::string(2 * static_cast<size_t>(r.depth), ' ') + r.label, r.shape,
                r.params ? with_commas(r.params) : "--");
  out += rule;
  out +=
      "Param #: parameters the row's module owns itself; its children's are on\n"
      "their rows, a container's own tensors (cls_token, pos_embed) on Parameter\n"
      "rows, so the rows add up to Total params. Output Shape --: the module is\n"
      "not called itself in an eval-mode forward (its owner calls its children,\n"
      "reads its tensors or skips it).\n";
  out += thin;
  out += fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: {}\n",
                     with_commas(total), with_commas(trainable), with_commas(total - trainable));
  out += thin;
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e6; };
  out += fmt::format(
      "Input size (MB): {:.2f}\nForward pass size (MB): {:.2f} (the leaf modules' outputs)\n"
      "Params size (MB): {:.2f}\nEstimated total size (MB): {:.2f}\n",
      mb(input_bytes), mb(totals.leaf_output_bytes), mb(totals.param_bytes),
      mb(input_bytes + totals.leaf_output_bytes + totals.param_bytes));
  return out + rule;
}
}  // namespace

std::string VisionTransformer::summary_table(int64_t batch) {
  VT_CHECK(batch > 0, "summary_table: batch must be positive, got {}", batch);
  // One forward on zeros, in eval mode and without gradients, with a forward hook on every module
  // recording its output. Whatever happens, the hooks go, and the training flags, the attention
  // captures, the patch grid and the block outputs of the last real forward come back.
  struct Restore {
    VisionTransformer& m;
    std::pair<int64_t, int64_t> grid;
    std::vector<Tensor> outputs;
    std::vector<std::pair<bool, bool>> capture = {};
    std::vector<std::pair<nn::Module*, bool>> training = {};
    std::vector<std::pair<nn::Module*, int64_t>> hooks = {};
    ~Restore() {
      for (auto& [mod, handle] : hooks) mod->remove_forward_hook(handle);
      for (auto& [mod, on] : training) mod->train(on);  // parents first: children keep their own
      for (size_t i = 0; i < capture.size(); ++i)
        m.blocks->at<ViTBlock>(i)->attn->capture(capture[i].first, capture[i].second);
      m.last_grid_ = grid;
      m.block_outputs_ = outputs;
    }
  };
  const auto modules = named_modules();  // pre-order, children in registration order
  std::map<const nn::Module*, ModuleOutput> outputs;
  Tensor images = ops::zeros({batch, config_.channels, config_.image_h, config_.image_w},
                             patch_embed->weight.dtype(), patch_embed->weight.device());
  {
    Restore restore{*this, last_grid_, block_outputs_};
    for (const auto& b : *blocks) {
      auto attn = std::static_pointer_cast<ViTBlock>(b)->attn;
      restore.capture.emplace_back(attn->capturing_probs(), attn->capturing_grads());
      attn->capture(false);
    }
    for (const auto& [name, mod] : modules) {
      restore.training.emplace_back(mod, mod->is_training());
      restore.hooks.emplace_back(
          mod,
          mod->register_forward_hook([&outputs](nn::Module& m, const Tensor&, const Tensor& y) {
            outputs[&m] = {y.shape(), y.numel() * static_cast<int64_t>(dtype_size(y.dtype()))};
            return Tensor();
          }));
    }
    eval();
    NoGradGuard no_grad;
    (*this)(images);
  }
  SummaryTotals totals;
  const std::vector<SummaryRow> rows = summary_rows(modules, outputs, totals);
  int64_t listed = 0;
  for (const SummaryRow& r : rows) listed += r.params;
  VT_ASSERT(listed == num_parameters());
  return format_summary(rows, totals, num_parameters(), num_parameters(true),
                        images.numel() * static_cast<int64_t>(dtype_size(images.dtype())));
}

}  // namespace vitrine::models
