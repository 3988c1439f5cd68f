// The Vision Transformer: config (JSON, presets), the model, position-embedding interpolation, and
// introspection for the explain tools. See vit.h for the computation and the names.
#include "models/vit.h"

#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "nn/init.h"
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
  VT_CHECK(dim > 0 && depth > 0 && heads > 0 && mlp_dim > 0,
           "ViTConfig: dim {}, depth {}, heads {} and mlp_dim {} must be positive", dim, depth,
           heads, mlp_dim);
  VT_CHECK(dim % heads == 0, "ViTConfig: dim {} is not divisible by heads {}", dim, heads);
  VT_CHECK(num_classes >= 0 && representation >= 0 && registers >= 0,
           "ViTConfig: num_classes, representation and registers must be >= 0");
  VT_CHECK(pool == "cls" || pool == "mean", "ViTConfig: pool '{}' is not 'cls' or 'mean'", pool);
  for (double p : {dropout, attn_dropout, embed_dropout, drop_path})
    VT_CHECK(p >= 0 && p < 1, "ViTConfig: dropout rates must be in [0, 1), got {}", p);
  VT_CHECK(eps > 0, "ViTConfig: eps must be positive, got {}", eps);
}

nlohmann::json ViTConfig::to_json() const {
  return {{"image_size", {image_h, image_w}},
          {"patch", patch},
          {"patch_kernel", patch_kernel},
          {"channels", channels},
          {"num_classes", num_classes},
          {"dim", dim},
          {"depth", depth},
          {"heads", heads},
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
          {"fc_norm", fc_norm}};
}

ViTConfig ViTConfig::from_json(const nlohmann::json& j) {
  VT_CHECK(j.is_object(), "ViTConfig: expected a JSON object, got {}", j.type_name());
  ViTConfig c;
  auto num = [&](const std::string& k, const nlohmann::json& v) {
    VT_CHECK(v.is_number(), "ViTConfig: '{}' must be a number, got {}", k, v.type_name());
    return v;
  };
  for (const auto& [k, v] : j.items()) {
    try {
      if (k == "image_size") {
        if (v.is_array()) {
          VT_CHECK(v.size() == 2, "ViTConfig: image_size must be a number or [h, w]");
          c.image_h = num(k, v[0]).get<int64_t>();
          c.image_w = num(k, v[1]).get<int64_t>();
        } else {
          c.image_h = c.image_w = num(k, v).get<int64_t>();
        }
      } else if (k == "patch")
        c.patch = num(k, v).get<int64_t>();
      else if (k == "patch_kernel")
        c.patch_kernel = num(k, v).get<int64_t>();
      else if (k == "channels")
        c.channels = num(k, v).get<int64_t>();
      else if (k == "num_classes")
        c.num_classes = num(k, v).get<int64_t>();
      else if (k == "dim")
        c.dim = num(k, v).get<int64_t>();
      else if (k == "depth")
        c.depth = num(k, v).get<int64_t>();
      else if (k == "heads")
        c.heads = num(k, v).get<int64_t>();
      else if (k == "mlp_dim")
        c.mlp_dim = num(k, v).get<int64_t>();
      else if (k == "dropout")
        c.dropout = num(k, v).get<double>();
      else if (k == "attn_dropout")
        c.attn_dropout = num(k, v).get<double>();
      else if (k == "embed_dropout")
        c.embed_dropout = num(k, v).get<double>();
      else if (k == "drop_path")
        c.drop_path = num(k, v).get<double>();
      else if (k == "pool")
        c.pool = v.get<std::string>();
      else if (k == "representation")
        c.representation = num(k, v).get<int64_t>();
      else if (k == "qkv_bias")
        c.qkv_bias = v.get<bool>();
      else if (k == "eps")
        c.eps = num(k, v).get<double>();
      else if (k == "registers")
        c.registers = num(k, v).get<int64_t>();
      else if (k == "layer_scale")
        c.layer_scale = v.get<bool>();
      else if (k == "layer_scale_init")
        c.layer_scale_init = num(k, v).get<double>();
      else if (k == "no_embed_class")
        c.no_embed_class = v.get<bool>();
      else if (k == "fc_norm")
        c.fc_norm = v.get<bool>();
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

/// Holds the patch projection under timm's name patch_embed.proj.
class PatchEmbed : public nn::Module {
 public:
  explicit PatchEmbed(std::shared_ptr<nn::Conv2d> p) {
    proj = register_module("proj", std::move(p));
  }
  std::string type_name() const override { return "PatchEmbed"; }
  std::shared_ptr<nn::Conv2d> proj;
};

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
  attn = register_module("attn", std::make_shared<nn::MultiheadSelfAttention>(
                                     c.dim, c.heads, c.qkv_bias, c.attn_dropout, c.dropout, gen));
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

Tensor ViTBlock::forward(const Tensor& x) {
  Tensor a = (*attn)((*norm1)(x));
  if (ls1.defined()) a = a * ls1;
  Tensor h = x + (*drop_path1)(a);
  Tensor m = (*mlp)((*norm2)(h));
  if (ls2.defined()) m = m * ls2;
  return h + (*drop_path2)(m);
}

VisionTransformer::VisionTransformer(const ViTConfig& c, Generator& gen) : config_(c) {
  c.validate();
  const int64_t k = c.kernel(), pad = c.kernel_padding();
  auto proj =
      std::make_shared<nn::Conv2d>(c.channels, c.dim, std::pair{k, k}, std::pair{c.patch, c.patch},
                                   std::pair{pad, pad}, true, gen);
  register_module("patch_embed", std::make_shared<PatchEmbed>(proj));
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
  else
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

Tensor VisionTransformer::embed(const Tensor& images_in, const ViTForwardOptions& options) {
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
  const int64_t B = images.size(0), gh = H / c.patch, gw = W / c.patch;
  last_grid_ = {gh, gw};
  // [B, C, H, W] -> [B, D, gh, gw] -> [B, gh*gw, D]
  Tensor x = (*patch_embed)(images).flatten(2).transpose(1, 2);
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
  Tensor x = embed(images, options);
  block_outputs_.clear();
  for (const auto& b : *blocks) {
    x = (*b)(x);
    if (capture_tokens_) block_outputs_.push_back(x);
  }
  return norm ? (*norm)(x) : x;
}

Tensor VisionTransformer::forward_head(const Tensor& tokens) {
  Tensor t = config_.pool == "cls" ? tokens.select(1, 0)
                                   : ops::mean(tokens.slice(1, config_.prefix_tokens(), kEnd), {1});
  if (fc_norm) t = (*fc_norm)(t);
  if (pre_logits) t = ops::tanh((*pre_logits)(t));
  if (head) t = (*head)(t);
  return t;
}

Tensor VisionTransformer::forward(const Tensor& images) { return forward(images, {}); }

Tensor VisionTransformer::forward(const Tensor& images, const ViTForwardOptions& options) {
  return forward_head(forward_features(images, options));
}

void VisionTransformer::capture(bool attention, bool grads) {
  for (const auto& b : *blocks)
    std::static_pointer_cast<ViTBlock>(b)->attn->capture(attention, grads);
  capture_tokens_ = attention || grads;
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

std::string VisionTransformer::summary_table(int64_t batch) {
  NoGradGuard no_grad;
  // The table runs a forward on zeros: keep what the last real forward captured.
  const auto saved_grid = last_grid_;
  const auto saved_outputs = block_outputs_;
  std::vector<std::pair<bool, bool>> saved_capture;
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto attn = blocks->at<ViTBlock>(i)->attn;
    saved_capture.emplace_back(attn->capturing_probs(), attn->capturing_grads());
    attn->capture(false);
  }
  const ViTConfig& c = config_;
  struct Row {
    std::string name, shape;
    int64_t params;
  };
  std::vector<Row> rows;
  auto count = [](const nn::Module& m) { return m.num_parameters(); };
  Tensor images = ops::zeros({batch, c.channels, c.image_h, c.image_w}, patch_embed->weight.dtype(),
                             patch_embed->weight.device());
  Tensor p = (*patch_embed)(images);
  rows.push_back({"patch_embed.proj (Conv2d)", p.shape().str(), count(*patch_embed)});
  Tensor x = embed(images, {});
  int64_t token_params = cls_token.numel() + pos_embed.numel() +
                         (register_tokens.defined() ? register_tokens.numel() : 0);
  rows.push_back({"tokens (cls, registers, pos_embed)", x.shape().str(), token_params});
  for (size_t i = 0; i < blocks->size(); ++i) {
    x = (*(*blocks)[i])(x);
    rows.push_back({fmt::format("blocks.{} (Block)", i), x.shape().str(), count(*(*blocks)[i])});
  }
  if (norm) {
    x = (*norm)(x);
    rows.push_back({"norm (LayerNorm)", x.shape().str(), count(*norm)});
  }
  Tensor t = c.pool == "cls" ? x.select(1, 0) : ops::mean(x.slice(1, c.prefix_tokens(), kEnd), {1});
  rows.push_back({fmt::format("pool ({})", c.pool), t.shape().str(), 0});
  if (fc_norm) {
    t = (*fc_norm)(t);
    rows.push_back({"fc_norm (LayerNorm)", t.shape().str(), count(*fc_norm)});
  }
  if (pre_logits) {
    t = ops::tanh((*pre_logits)(t));
    rows.push_back({"pre_logits.fc (Linear + tanh)", t.shape().str(), count(*pre_logits)});
  }
  if (head) {
    t = (*head)(t);
    rows.push_back({"head (Linear)", t.shape().str(), count(*head)});
  }
  std::string out = fmt::format("{:<36} {:<18} {:>12}\n", "layer", "output shape", "params");
  out += std::string(68, '-') + "\n";
  for (const Row& r : rows) out += fmt::format("{:<36} {:<18} {:>12}\n", r.name, r.shape, r.params);
  out += std::string(68, '-') + "\n";
  out += fmt::format("total params: {} (trainable {})\n", num_parameters(), num_parameters(true));
  last_grid_ = saved_grid;
  block_outputs_ = saved_outputs;
  for (size_t i = 0; i < blocks->size(); ++i)
    blocks->at<ViTBlock>(i)->attn->capture(saved_capture[i].first, saved_capture[i].second);
  return out;
}

}  // namespace vitrine::models
