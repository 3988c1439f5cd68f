// Foreign ViT weights: the naming schemes of timm / DINO / DINOv2, torchvision and Hugging Face
// transformers, mapped to ours (which are timm's), and the loader that checks a checkpoint against
// the model its config builds before copying anything.
//
// Names, foreign -> ours (N: block index, ".w/b": ".weight" and ".bias"):
//   timm, DINO        identity, except reg_token -> register_tokens
//   DINOv2            identity; blocks.C.N.* (chunked blocks) -> blocks.N.*; mask_token ignored
//   Vitrine           identity; optimizer.* (a training checkpoint's optimizer state) ignored
//   torchvision       class_token -> cls_token, conv_proj -> patch_embed.proj,
//                     encoder.pos_embedding -> pos_embed, encoder.ln -> norm,
//                     heads.head -> head, heads.pre_logits -> pre_logits.fc, and per block
//                     encoder.layers.encoder_layer_N.{ln_1 -> norm1,
//                       self_attention.in_proj_{weight,bias} -> attn.qkv.{weight,bias},
//                       self_attention.out_proj -> attn.proj, ln_2 -> norm2,
//                       mlp.0 | mlp.linear_1 -> mlp.fc1, mlp.3 | mlp.linear_2 -> mlp.fc2}
//   Hugging Face      (optional prefix vit. or dinov2.) embeddings.cls_token -> cls_token,
//                     embeddings.position_embeddings -> pos_embed,
//                     embeddings.register_tokens -> register_tokens,
//                     embeddings.patch_embeddings.projection -> patch_embed.proj,
//                     layernorm -> norm, classifier -> head, pooler.dense -> pre_logits.fc (see
//                     below), embeddings.mask_token ignored, and per block encoder.layer.N.{
//                       layernorm_before | norm1 -> norm1, layernorm_after | norm2 -> norm2,
//                       attention.attention.{query,key,value} -> rows q, k, v of attn.qkv,
//                       attention.output.dense -> attn.proj,
//                       intermediate.dense | mlp.fc1 -> mlp.fc1, output.dense | mlp.fc2 -> mlp.fc2,
//                       layer_scale1.lambda1 -> ls1.gamma, layer_scale2.lambda1 -> ls2.gamma}
//                     (the second spellings are transformers' Dinov2Model's).
//
// Every naming also takes its classifier (a single Linear) under head, heads, heads.head, fc or
// classifier: a fine-tuned model's replaced head keeps whatever name its script gave it.
//
// The Hugging Face pooler (ViTModel's pooler_output = tanh(dense(last_hidden_state[:, 0]))) is
// what our representation layer computes on the class token, so it loads as pre_logits.fc when
// the config asks for one (representation == dim, pool "cls"). It is ignored when the config has
// no representation layer (the features are then the normalised class token, HF's
// last_hidden_state[:, 0]) and always when the checkpoint has a classifier: HF's classifier reads
// the class token, not the pooler, so putting the pooler before it would change the logits.
#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "autograd/grad_mode.h"
#include "models/classifier.h"
#include "models/vit.h"
#include "nn/json.h"
#include "ops/ops.h"

namespace vitrine::models {

namespace {

using nlohmann::json;

enum class Family { Timm, Torchvision, HuggingFace };

/// Where a foreign tensor goes: our name, or nowhere (a deliberately ignored key). part >= 0: the
/// tensor is rows part/3 of a concatenation (Hugging Face's query, key, value -> attn.qkv).
struct Target {
  std::string name;  // empty: ignored
  int part = -1;
};

/// One tensor of a foreign state dict with its destination.
struct Entry {
  std::string source;
  Target target;
  Tensor tensor;
};

bool eat(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

/// Consumes "<digits>." and returns the number.
bool eat_index(std::string_view& s, int64_t& n) {
  size_t i = 0;
  while (i < s.size() && i < 9 && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0 || i >= s.size() || s[i] != '.' || (i > 1 && s[0] == '0')) return false;
  n = std::stoll(std::string(s.substr(0, i)));
  s.remove_prefix(i + 1);
  return true;
}

const std::set<std::string, std::less<>> kTopNames = {"cls_token",
                                                      "pos_embed",
                                                      "register_tokens",
                                                      "patch_embed.proj.weight",
                                                      "patch_embed.proj.bias",
                                                      "norm.weight",
                                                      "norm.bias",
                                                      "fc_norm.weight",
                                                      "fc_norm.bias",
                                                      "pre_logits.fc.weight",
                                                      "pre_logits.fc.bias",
                                                      "head.weight",
                                                      "head.bias"};
const std::set<std::string, std::less<>> kBlockNames = {
    "norm1.weight",   "norm1.bias",     "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
    "attn.proj.bias", "ls1.gamma",      "norm2.weight",    "norm2.bias",    "mlp.fc1.weight",
    "mlp.fc1.bias",   "mlp.fc2.weight", "mlp.fc2.bias",    "ls2.gamma"};

// The convolutional stem's tensors (ViTConfig::stem): patch_embed.stem.<i>.<leaf>, where the
// module i is a Conv2d (weight) or a BatchNorm2d (the rest).
const std::set<std::string, std::less<>> kStemLeaves = {"weight", "bias", "running_mean",
                                                        "running_var", "num_batches_tracked"};

/// Whether name is one of a ViT's tensors in our naming (for some config).
bool is_vit_name(std::string_view s) {
  if (kTopNames.count(s)) return true;
  int64_t n;
  if (eat(s, "patch_embed.stem.")) return eat_index(s, n) && kStemLeaves.count(s);
  return eat(s, "blocks.") && eat_index(s, n) && kBlockNames.count(s);
}

std::optional<Target> ours(std::string name) {
  if (!is_vit_name(name)) return std::nullopt;
  return Target{std::move(name)};
}

/// "a.b.weight" -> table["a.b"] + ".weight" when the module is in the table and the leaf is
/// weight or bias.
using ModuleTable = std::vector<std::pair<std::string_view, std::string_view>>;
std::optional<std::string> map_module(std::string_view s, const ModuleTable& table) {
  size_t dot = s.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  std::string_view module = s.substr(0, dot), leaf = s.substr(dot + 1);
  if (leaf != "weight" && leaf != "bias") return std::nullopt;
  for (const auto& [from, to] : table)
    if (module == from) return fmt::format("{}.{}", to, leaf);
  return std::nullopt;
}

/// A classifier under another name than the naming's own: a single Linear saved as head (timm),
/// heads (torchvision's VisionTransformer after `model.heads = nn.Linear(...)`), heads.head
/// (torchvision's own), fc or classifier (Hugging Face, and many fine-tuning scripts).
std::optional<Target> map_head_alias(std::string_view key) {
  static const ModuleTable heads = {{"head", "head"},
                                    {"heads", "head"},
                                    {"heads.head", "head"},
                                    {"fc", "head"},
                                    {"classifier", "head"}};
  if (auto m = map_module(key, heads)) return Target{*m};
  return std::nullopt;
}

// timm, DINO, DINOv2 and Vitrine share one mapping.
std::optional<Target> map_timm(const std::string& key) {
  if (auto h = map_head_alias(key)) return h;
  if (key == "reg_token") return Target{"register_tokens"};
  if (key == "mask_token" || key.starts_with("optimizer.")) return Target{};
  std::string_view s = key;
  int64_t chunk, n;
  if (eat(s, "blocks.") && eat_index(s, chunk) && eat_index(s, n))
    return ours(fmt::format("blocks.{}.{}", n, s));
  return ours(key);
}

std::optional<Target> map_torchvision(const std::string& key) {
  static const std::map<std::string, std::string, std::less<>> leaves = {
      {"class_token", "cls_token"}, {"encoder.pos_embedding", "pos_embed"}};
  static const ModuleTable top = {{"conv_proj", "patch_embed.proj"},
                                  {"encoder.ln", "norm"},
                                  {"heads.head", "head"},
                                  {"heads.pre_logits", "pre_logits.fc"}};
  static const ModuleTable block = {
      {"ln_1", "norm1"},           {"self_attention.out_proj", "attn.proj"},
      {"ln_2", "norm2"},           {"mlp.0", "mlp.fc1"},
      {"mlp.linear_1", "mlp.fc1"}, {"mlp.3", "mlp.fc2"},
      {"mlp.linear_2", "mlp.fc2"}};
  if (auto it = leaves.find(key); it != leaves.end()) return Target{it->second};
  if (auto m = map_module(key, top)) return Target{*m};
  if (auto h = map_head_alias(key)) return h;
  std::string_view s = key;
  int64_t n;
  if (!eat(s, "encoder.layers.encoder_layer_") || !eat_index(s, n)) return std::nullopt;
  if (s == "self_attention.in_proj_weight")
    return Target{fmt::format("blocks.{}.attn.qkv.weight", n)};
  if (s == "self_attention.in_proj_bias") return Target{fmt::format("blocks.{}.attn.qkv.bias", n)};
  if (auto m = map_module(s, block)) return Target{fmt::format("blocks.{}.{}", n, *m)};
  return std::nullopt;
}

std::optional<Target> map_hf(const std::string& key) {
  static const std::map<std::string, std::string, std::less<>> leaves = {
      {"embeddings.cls_token", "cls_token"},
      {"embeddings.position_embeddings", "pos_embed"},
      {"embeddings.register_tokens", "register_tokens"},
      {"embeddings.mask_token", ""}};
  static const ModuleTable top = {{"embeddings.patch_embeddings.projection", "patch_embed.proj"},
                                  {"layernorm", "norm"},
                                  {"classifier", "head"},
                                  {"pooler.dense", "pre_logits.fc"}};
  static const ModuleTable block = {{"layernorm_before", "norm1"},
                                    {"norm1", "norm1"},
                                    {"layernorm_after", "norm2"},
                                    {"norm2", "norm2"},
                                    {"attention.output.dense", "attn.proj"},
                                    {"intermediate.dense", "mlp.fc1"},
                                    {"mlp.fc1", "mlp.fc1"},
                                    {"output.dense", "mlp.fc2"},
                                    {"mlp.fc2", "mlp.fc2"}};
  static const ModuleTable qkv = {{"attention.attention.query", "0"},
                                  {"attention.attention.key", "1"},
                                  {"attention.attention.value", "2"}};
  std::string_view s = key;
  if (!eat(s, "vit.")) eat(s, "dinov2.");
  if (auto it = leaves.find(s); it != leaves.end()) return Target{it->second};
  if (auto m = map_module(s, top)) return Target{*m};
  if (auto h = map_head_alias(s)) return h;
  int64_t n;
  if (!eat(s, "encoder.layer.") || !eat_index(s, n)) return std::nullopt;
  if (s == "layer_scale1.lambda1") return Target{fmt::format("blocks.{}.ls1.gamma", n)};
  if (s == "layer_scale2.lambda1") return Target{fmt::format("blocks.{}.ls2.gamma", n)};
  if (auto m = map_module(s, block)) return Target{fmt::format("blocks.{}.{}", n, *m)};
  if (auto m = map_module(s, qkv)) {  // "<part>.weight" / "<part>.bias"
    int part = (*m)[0] - '0';
    return Target{fmt::format("blocks.{}.attn.qkv{}", n, m->substr(1)), part};
  }
  return std::nullopt;
}

Family family_of(ViTNaming n) {
  switch (n) {
    case ViTNaming::Torchvision:
      return Family::Torchvision;
    case ViTNaming::HuggingFace:
      return Family::HuggingFace;
    default:
      return Family::Timm;
  }
}

std::optional<Target> map_key(const std::string& key, Family f) {
  switch (f) {
    case Family::Timm:
      return map_timm(key);
    case Family::Torchvision:
      return map_torchvision(key);
    case Family::HuggingFace:
      return map_hf(key);
  }
  return std::nullopt;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Timm:
      return "timm/DINO";
    case Family::Torchvision:
      return "torchvision";
    case Family::HuggingFace:
      return "Hugging Face";
  }
  return "?";
}

const char* family_examples(Family f) {
  switch (f) {
    case Family::Timm:
      return "cls_token, pos_embed, patch_embed.proj.weight, blocks.0.attn.qkv.weight, "
             "norm.weight, "
             "head.weight";
    case Family::Torchvision:
      return "class_token, conv_proj.weight, encoder.pos_embedding, "
             "encoder.layers.encoder_layer_0.self_attention.in_proj_weight, encoder.ln.weight, "
             "heads.head.weight";
    case Family::HuggingFace:
      return "[vit.]embeddings.cls_token, embeddings.position_embeddings, "
             "encoder.layer.0.attention.attention.query.weight, layernorm.weight, "
             "classifier.weight";
  }
  return "";
}

ViTNaming detect(const nn::NamedTensors& state, const std::string& where) {
  VT_CHECK(!state.empty(), "{}: the state dict has no tensors, so no ViT naming to detect", where);
  constexpr Family kFamilies[] = {Family::Timm, Family::Torchvision, Family::HuggingFace};
  Family best = Family::Timm;
  size_t best_count = 0;
  for (Family f : kFamilies) {
    size_t count = 0;
    for (const auto& [key, t] : state) {
      // A classifier's name (fc, classifier, ...) is no evidence of a naming: a ResNet has fc.
      const std::optional<Target> target = map_key(key, f);
      count += target.has_value() && !target->name.starts_with("head.");
    }
    if (count > best_count) best = f, best_count = count;
  }
  VT_CHECK(best_count > 0,
           "{}: '{}' is not a tensor name of any supported ViT naming (timm/DINO, DINOv2, "
           "torchvision, Hugging Face), nor is any other key; is this a Vision Transformer "
           "checkpoint?",
           where, state.front().first);
  for (const auto& [key, t] : state)
    VT_CHECK(map_key(key, best).has_value(),
             "{}: unknown tensor '{}': the other names follow the {} naming ({} of {} keys), "
             "which has no such tensor (expected names like {})",
             where, key, family_name(best), best_count, state.size(), family_examples(best));
  if (best == Family::Torchvision) return ViTNaming::Torchvision;
  if (best == Family::HuggingFace) return ViTNaming::HuggingFace;
  bool dinov2 = false;
  for (const auto& [key, t] : state) {
    if (key.starts_with("optimizer.")) return ViTNaming::Vitrine;
    std::string_view s = key;
    int64_t c, n;
    dinov2 = dinov2 || key == "mask_token" || key == "register_tokens" ||
             key.ends_with(".ls1.gamma") || key.ends_with(".ls2.gamma") ||
             (eat(s, "blocks.") && eat_index(s, c) && eat_index(s, n));
  }
  return dinov2 ? ViTNaming::Dinov2 : ViTNaming::Timm;
}

/// The state's tensors with their destinations, in the state's order. Hugging Face's pooler is
/// marked ignored when the state has a classifier (see the file comment).
std::vector<Entry> map_state(const nn::NamedTensors& state, ViTNaming naming,
                             const std::string& where) {
  Family f = family_of(naming);
  std::vector<Entry> out;
  bool has_head = false;
  for (const auto& [key, t] : state) {
    std::optional<Target> target = map_key(key, f);
    VT_CHECK(target.has_value(), "{}: unknown tensor '{}': not a name of the {} naming ({})", where,
             key, naming_name(naming), family_examples(f));
    VT_CHECK(t.defined(), "{}: tensor '{}' is undefined", where, key);
    has_head = has_head || target->name.starts_with("head.");
    out.push_back({key, *target, t});
  }
  if (f == Family::HuggingFace && has_head)
    for (Entry& e : out)
      if (e.target.name.starts_with("pre_logits.")) e.target = {};
  return out;
}

std::string describe_target(const Entry& e) {
  if (e.source == e.target.name) return "";
  if (e.target.part < 0) return fmt::format(" (loads as '{}')", e.target.name);
  return fmt::format(" (loads as the {} rows of '{}')",
                     std::array{"query", "key", "value"}[e.target.part], e.target.name);
}

/// Our state dict from the mapped entries: ignored ones dropped, query/key/value concatenated
/// (rows q, k, v; 16-bit parts converted to float32 first, losslessly).
nn::NamedTensors assemble(const std::vector<Entry>& entries, const std::string& where) {
  nn::NamedTensors out;
  std::map<std::string, const Entry*> seen;
  std::map<std::string, std::array<const Entry*, 3>> parts;
  for (const Entry& e : entries) {
    if (e.target.name.empty()) continue;
    std::string slot =
        e.target.part < 0 ? e.target.name : fmt::format("{}#{}", e.target.name, e.target.part);
    auto [it, fresh] = seen.emplace(slot, &e);
    VT_CHECK(fresh, "{}: tensors '{}' and '{}' both load as '{}'", where, it->second->source,
             e.source, e.target.name);
    if (e.target.part < 0) {
      out.emplace_back(e.target.name, e.tensor);
      continue;
    }
    auto [p, first] = parts.try_emplace(e.target.name, std::array<const Entry*, 3>{});
    p->second[e.target.part] = &e;
    if (first) out.emplace_back(e.target.name, Tensor());  // filled below, keeps the order
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : out) {
    if (t.defined()) continue;
    const auto& p = parts.at(name);
    const Entry* any = *std::find_if(p.begin(), p.end(), [](const Entry* e) { return e; });
    for (int i = 0; i < 3; ++i)
      VT_CHECK(p[i], "{}: '{}' has no {} part to go with '{}'", where, name,
               std::array{"query", "key", "value"}[i], any->source);
    for (int i = 1; i < 3; ++i)
      VT_CHECK(p[i]->tensor.shape() == p[0]->tensor.shape(),
               "{}: '{}' has shape {}, but '{}' has {} (query, key and value must match)", where,
               p[i]->source, p[i]->tensor.shape(), p[0]->source, p[0]->tensor.shape());
    std::vector<Tensor> qkv;
    for (const Entry* e : p)
      qkv.push_back(is_float(e->tensor.dtype()) ? e->tensor.detach() : e->tensor.to(kFloat32));
    t = ops::cat(qkv, 0);
  }
  return out;
}

std::string config_brief(const ViTConfig& c) {
  return fmt::format(
      "image {}x{}, patch {}, channels {}, dim {}, depth {}, mlp_dim {}, num_classes {}, "
      "representation {}, registers {}, no_embed_class {}",
      c.image_h, c.image_w, c.patch, c.channels, c.dim, c.depth, c.mlp_dim, c.num_classes,
      c.representation, c.registers, c.no_embed_class);
}

/// Why the model built from c has no tensor called name.
std::string why_absent(const std::string& name, const Tensor& t, const ViTConfig& c) {
  std::string_view s = name;
  int64_t n;
  if (eat(s, "blocks.") && eat_index(s, n)) {
    if (n >= c.depth) return fmt::format("the config's depth is {}", c.depth);
    if (s.starts_with("ls")) return "the config has layer_scale off";
    if (s == "attn.qkv.bias") return "the config has qkv_bias off";
  }
  if (eat(s, "patch_embed.stem.") && eat_index(s, n))
    return c.stem.empty() ? std::string("the config has no stem")
                          : fmt::format("the config's stem has {} stages ({} modules)",
                                        c.stem.size(), 3 * c.stem.size());
  auto rows = t.dim() > 0 ? t.size(0) : 0;
  if (name.starts_with("head."))
    return fmt::format("the config has num_classes 0 (no head); this head has {} classes", rows);
  if (name.starts_with("pre_logits."))
    return fmt::format("the config has representation 0; this layer has size {}", rows);
  if (name == "register_tokens")
    return fmt::format("the config has registers 0; this checkpoint has {}",
                       t.dim() == 3 ? t.size(1) : 0);
  if (name.starts_with("fc_norm.")) return "the config has fc_norm off";
  if (name.starts_with("norm."))
    return c.fc_norm ? "the config has fc_norm on (no final norm)"
                     : "the config has final_norm off (no final norm)";
  return "the config does not build it";
}

/// Every mapped tensor must be a floating tensor of the model's shape, and every tensor of the
/// model must be there; the first offence (file order, then the model's order) throws.
void check_against(const std::vector<Entry>& entries, const VisionTransformer& model,
                   ViTNaming naming, const std::string& where) {
  const ViTConfig& c = model.config();
  std::map<std::string, Tensor> expected;
  for (const auto& [name, t] : model.state_dict()) expected[name] = t;
  std::set<std::string> found;
  for (const Entry& e : entries) {
    if (e.target.name.empty()) continue;
    const Tensor& t = e.tensor;
    auto it = expected.find(e.target.name);
    // Weights may come in any floating dtype; an integer buffer (a stem BatchNorm's batch count)
    // only in its own.
    const bool integer = it != expected.end() && !is_floating_point(it->second.dtype());
    VT_CHECK(integer ? t.dtype() == it->second.dtype() : is_floating_point(t.dtype()),
             "{}: tensor '{}'{} has dtype {}; expected {}", where, e.source, describe_target(e),
             dtype_name(t.dtype()),
             integer ? std::string(dtype_name(it->second.dtype()))
                     : std::string("a floating dtype (float32, float64, float16 or bfloat16)"));
    VT_CHECK(it != expected.end(),
             "{}: tensor '{}'{} of shape {} does not fit the config: {} ({} naming; config: {})",
             where, e.source, describe_target(e), t.shape(), why_absent(e.target.name, t, c),
             naming_name(naming), config_brief(c));
    Dims want = it->second.shape();
    if (e.target.part >= 0) want[0] /= 3;
    VT_CHECK(t.shape() == want, "{}: tensor '{}'{} has shape {}, expected {} for the config ({})",
             where, e.source, describe_target(e), t.shape(), want, config_brief(c));
    found.insert(e.target.name);
  }
  bool has_head_weights = found.count("head.weight") || found.count("head.bias");
  for (const auto& [name, t] : model.state_dict()) {
    if (found.count(name)) continue;
    VT_CHECK(!name.starts_with("head.") || has_head_weights,
             "{}: the checkpoint has no head ('{}' is missing) but the config has num_classes {}; "
             "load it with num_classes = 0 as a feature extractor (as DINO's backbones), or "
             "train a head with reset_head",
             where, name, c.num_classes);
    fail("{}: the checkpoint has no tensor for '{}' (expected shape {}; {} naming; config: {})",
         where, name, t.shape(), naming_name(naming), config_brief(c));
  }
}

/// The first field in which two configs' JSON differ, as "name (a vs b)"; empty when equal.
std::string first_difference(const json& a, const json& b) {
  for (const auto& [k, v] : a.items())
    if (!b.contains(k) || b[k] != v)
      return fmt::format("'{}' ({} in the file, {} given)", k, v.dump(),
                         b.contains(k) ? b[k].dump() : "nothing");
  return "";
}

/// The config to build: the file's vitrine.config, or the caller's. When both are given they must
/// agree except in the training-only fields (dropout rates, drop-path, layer-scale init), which
/// the caller's config sets (to fine-tune with other regularisation), and in the head and the
/// initialisation scheme, which are the file's: a fine-tuned checkpoint's 3-class head wins over
/// a preset's 1000 classes (the tools print a note when the classes differ).
ViTConfig choose_config(const nn::Metadata& metadata, const std::optional<ViTConfig>& given,
                        const std::string& where) {
  json stored;
  try {
    stored = nn::metadata_json(metadata, nn::kConfigKey);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  if (stored.is_null()) {
    VT_CHECK(given.has_value(),
             "{}: the checkpoint has no '{}' metadata, and a ViT's heads, patch size and other "
             "hyperparameters cannot be read from its weights; give a config: a preset name (one "
             "of {}) or a JSON file (Vitrine's model config or training config, or a Hugging "
             "Face config.json)",
             where, nn::kConfigKey, fmt::join(ViTConfig::preset_names(), ", "));
    return *given;
  }
  ViTConfig file;
  try {
    file = ViTConfig::from_json(stored);
  } catch (const Error& e) {
    fail("{}: metadata '{}': {}", where, nn::kConfigKey, e.what());
  }
  if (!given) return file;
  ViTConfig shaped = *given;
  shaped.dropout = file.dropout, shaped.attn_dropout = file.attn_dropout;
  shaped.embed_dropout = file.embed_dropout, shaped.drop_path = file.drop_path;
  shaped.layer_scale_init = file.layer_scale_init;
  shaped.num_classes = file.num_classes, shaped.init = file.init;
  std::string diff = first_difference(file.to_json(), shaped.to_json());
  VT_CHECK(diff.empty(),
           "{}: the given config differs from the checkpoint's own ('{}' metadata) in {}; give no "
           "config to use the checkpoint's, or one that agrees with it",
           where, nn::kConfigKey, diff);
  ViTConfig chosen = *given;
  chosen.num_classes = file.num_classes, chosen.init = file.init;
  return chosen;
}

template <typename T>
T hf_get(const json& hf, const char* key, T fallback) {
  if (!hf.contains(key) || hf[key].is_null()) return fallback;
  const std::string what = fmt::format("config_from_hf: '{}'", key);
  if constexpr (std::is_same_v<T, int64_t>)  // whole and in range: 16.7 and 1e300 are refused
    return nn::json_integer(hf[key], what, std::numeric_limits<int64_t>::min());
  if constexpr (std::is_same_v<T, double>) return nn::json_number(hf[key], what);
  try {
    return hf[key].get<T>();
  } catch (const json::exception&) {
    fail("config_from_hf: '{}' has the wrong type ({}: {})", key, hf[key].type_name(),
         hf[key].dump());
  }
}

/// image_size / patch_size: one number or [h, w].
std::pair<int64_t, int64_t> hf_size(const json& hf, const char* key, int64_t fallback) {
  if (!hf.contains(key)) return {fallback, fallback};
  const json& v = hf[key];
  const std::string what = fmt::format("config_from_hf: '{}'", key);
  if (v.is_array() && v.size() == 2)
    return {nn::json_integer(v[0], what, 1), nn::json_integer(v[1], what, 1)};
  VT_CHECK(v.is_number(), "config_from_hf: '{}' must be a number or [h, w], got {}", key,
           nn::json_brief(v));
  const int64_t n = nn::json_integer(v, what, 1);
  return {n, n};
}

}  // namespace

std::string naming_name(ViTNaming n) {
  switch (n) {
    case ViTNaming::Vitrine:
      return "Vitrine";
    case ViTNaming::Timm:
      return "timm/DINO";
    case ViTNaming::Torchvision:
      return "torchvision";
    case ViTNaming::HuggingFace:
      return "Hugging Face";
    case ViTNaming::Dinov2:
      return "DINOv2";
  }
  return "?";
}

ViTNaming detect_naming(const nn::NamedTensors& state) { return detect(state, "detect_naming"); }

nn::NamedTensors to_vitrine_names(const nn::NamedTensors& state, ViTNaming naming) {
  return assemble(map_state(state, naming, "to_vitrine_names"), "to_vitrine_names");
}

ViTConfig config_from_hf(const json& hf) {
  VT_CHECK(hf.is_object() && (hf.contains("model_type") || hf.contains("hidden_size")),
           "config_from_hf: expected a Hugging Face config.json object (with \"model_type\" or "
           "\"hidden_size\"), got a JSON {}",
           hf.type_name());
  std::string type = hf_get<std::string>(hf, "model_type", "vit");
  bool dinov2 = type == "dinov2" || type == "dinov2_with_registers";
  VT_CHECK(type == "vit" || dinov2,
           "config_from_hf: model_type '{}' is not supported (expected vit, dinov2 or "
           "dinov2_with_registers)",
           type);
  std::string act = hf_get<std::string>(hf, "hidden_act", "gelu");
  VT_CHECK(act == "gelu",
           "config_from_hf: hidden_act '{}' is not supported (expected \"gelu\", the exact erf "
           "GELU that Vitrine's MLP computes)",
           act);
  VT_CHECK(!hf_get<bool>(hf, "use_swiglu_ffn", false),
           "config_from_hf: use_swiglu_ffn is true; Vitrine's ViT has a GELU MLP, not SwiGLU");

  ViTConfig c;
  std::tie(c.image_h, c.image_w) = hf_size(hf, "image_size", 224);
  auto [ph, pw] = hf_size(hf, "patch_size", dinov2 ? 14 : 16);
  VT_CHECK(ph == pw, "config_from_hf: patch_size [{}, {}] is not square", ph, pw);
  c.patch = ph;
  c.channels = hf_get<int64_t>(hf, "num_channels", 3);
  c.dim = hf_get<int64_t>(hf, "hidden_size", 768);
  c.depth = hf_get<int64_t>(hf, "num_hidden_layers", 12);
  c.heads = hf_get<int64_t>(hf, "num_attention_heads", 12);
  if (dinov2) {
    const double ratio = hf_get<double>(hf, "mlp_ratio", 4.0);
    const double mlp = static_cast<double>(c.dim) * ratio;
    VT_CHECK(mlp >= 1 && mlp <= 1e9,
             "config_from_hf: hidden_size {} x mlp_ratio {} is out of range", c.dim, ratio);
    c.mlp_dim = static_cast<int64_t>(mlp);
    c.layer_scale = true;
    c.layer_scale_init = hf_get<double>(hf, "layerscale_value", 1.0);
    c.drop_path = hf_get<double>(hf, "drop_path_rate", 0.0);
    c.registers = hf_get<int64_t>(hf, "num_register_tokens", type == "dinov2" ? 0 : 4);
  } else {
    c.mlp_dim = hf_get<int64_t>(hf, "intermediate_size", 3072);
  }
  c.dropout = hf_get<double>(hf, "hidden_dropout_prob", 0.0);
  c.embed_dropout = c.dropout;  // HF's embeddings dropout is hidden_dropout_prob
  c.attn_dropout = hf_get<double>(hf, "attention_probs_dropout_prob", 0.0);
  c.eps = hf_get<double>(hf, "layer_norm_eps", dinov2 ? 1e-6 : 1e-12);
  c.qkv_bias = hf_get<bool>(hf, "qkv_bias", true);

  // Classes: id2label's size, else num_labels, else 2 (transformers' default) for a
  // *ForImageClassification architecture; a model whose listed architectures include no
  // classifier (ViTModel, Dinov2Model) has no head.
  bool classifier = true;
  if (hf.contains("architectures") && hf["architectures"].is_array()) {
    classifier = false;
    for (const json& a : hf["architectures"]) {
      if (!a.is_string()) continue;
      const std::string arch = a.get<std::string>();
      // DINOv2's classifier reads [class token, mean patch token] (2 * dim inputs): not a ViT head.
      VT_CHECK(!(dinov2 && arch.ends_with("ForImageClassification")),
               "config_from_hf: {} is not supported (its classifier reads the class token and the "
               "mean patch token together); load the backbone as Dinov2Model (num_classes 0)",
               arch);
      classifier = classifier || arch.ends_with("ForImageClassification");
    }
  }
  c.num_classes = 0;
  if (classifier) {
    if (hf.contains("id2label") && hf["id2label"].is_object())
      c.num_classes = static_cast<int64_t>(hf["id2label"].size());
    else
      c.num_classes = hf_get<int64_t>(hf, "num_labels", 2);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("config_from_hf: {}", e.what());
  }
  return c;
}

std::shared_ptr<VisionTransformer> load_vit(const std::string& path,
                                            const std::optional<ViTConfig>& config) {
  nn::SafetensorsFile file = nn::read_safetensors(path);
  ViTNaming naming = detect(file.tensors, path);
  ViTConfig c = choose_config(file.metadata, config, path);
  nn::check_checkpoint_holds(
      path, c.min_parameters(),
      fmt::format("a ViT of dim {}, depth {}, MLP {}", c.dim, c.depth, c.mlp_dim));
  if (naming == ViTNaming::Timm && file.metadata.count(nn::kConfigKey)) naming = ViTNaming::Vitrine;
  std::vector<Entry> entries = map_state(file.tensors, naming, path);
  if (!file.metadata.count(nn::kConfigKey)) {
    // A preset or config file names the architecture; the head is the weights' own: its rows,
    // or none (DINO's backbones), whatever the given config's num_classes says.
    int64_t rows = 0;
    for (const Entry& e : entries)
      if (e.target.name == "head.weight" && e.tensor.dim() == 2) rows = e.tensor.size(0);
    c.num_classes = rows;
  }

  Generator gen(0);  // the initial values are all overwritten
  auto model = std::make_shared<VisionTransformer>(c, gen);
  // HF's pooler is a Linear + tanh on the class token: it is our pre_logits only with cls pooling.
  if (naming == ViTNaming::HuggingFace && (!model->pre_logits || c.pool != "cls"))
    for (Entry& e : entries)
      if (e.target.name.starts_with("pre_logits.")) e.target = {};  // the unused pooler
  check_against(entries, *model, naming, path);
  nn::load_state_dict(*model, assemble(entries, path), true);
  return model;
}

void save_vit_timm(const std::string& path, const VisionTransformer& model,
                   const nn::Metadata& extra) {
  for (const char* key : {nn::kConfigKey, "format"})
    VT_CHECK(!extra.count(key), "save_vit_timm: {}: metadata key '{}' is written by save_vit_timm",
             path, key);
  ViTConfig c = model.config();
  // timm names the registers reg_token and has them only without a class position embedding
  // (no_embed_class). A DINOv2-style model (registers after the class token's position
  // embedding) is saved as timm converts DINOv2 checkpoints: the class token's position
  // embedding folded into cls_token, pos_embed for the patches only, no_embed_class on, which
  // computes the same for every input size.
  const bool fold = c.registers > 0 && !c.no_embed_class;
  NoGradGuard no_grad;
  nn::NamedTensors out;
  for (const auto& [name, t] : model.state_dict()) {
    if (name == "register_tokens")
      out.emplace_back("reg_token", t);
    else if (fold && name == "cls_token")
      out.emplace_back(name, t + model.pos_embed.slice(1, 0, 1));
    else if (fold && name == "pos_embed")
      out.emplace_back(name, t.slice(1, 1, kEnd));
    else
      out.emplace_back(name, t);
  }
  if (fold) c.no_embed_class = true;
  nn::Metadata md = extra;
  nn::set_metadata_json(md, nn::kConfigKey, c.to_json());
  md["format"] = "pt";
  nn::write_safetensors(path, out, md);
}

ViTConfig resolve_config(const std::string& spec) {
  const ClassifierSpec c = resolve_classifier(spec);
  try {
    return c.vit("this");
  } catch (const Error& e) {
    fail("model config '{}': {}", spec, e.what());
  }
}

ClassifierSpec resolve_classifier(const std::string& spec) {
  const auto vits = ViTConfig::preset_names();
  if (std::find(vits.begin(), vits.end(), spec) != vits.end())
    return ClassifierSpec::of(ViTConfig::preset(spec));
  const auto resnets = ResNetConfig::preset_names();
  if (std::find(resnets.begin(), resnets.end(), spec) != resnets.end())
    return ClassifierSpec::of(ResNetConfig::preset(spec));
  std::ifstream in(spec, std::ios::binary);
  VT_CHECK(in.good(), "model config '{}': not a preset name ({}, {}) and not a readable file", spec,
           fmt::join(vits, ", "), fmt::join(resnets, ", "));
  // A model config is a few hundred bytes: read at most a megabyte of it.
  constexpr std::streamsize kMaxBytes = 1 << 20;
  std::string text(static_cast<size_t>(kMaxBytes) + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  VT_CHECK(!in.bad(), "model config '{}': cannot read it", spec);
  const json j = nn::parse_json(text, fmt::format("model config '{}'", spec),
                                {.max_bytes = static_cast<uint64_t>(kMaxBytes)});
  try {
    if (j.is_object() && (j.contains("model_type") || j.contains("hidden_size")))
      return ClassifierSpec::of(config_from_hf(j));
    // A vitrine-train config (configs/*.json) names its model in its "model" section.
    const json& m = j.is_object() && j.contains("model") ? j.at("model") : j;
    return ClassifierSpec::from_json(m);
  } catch (const Error& e) {
    fail("model config '{}': {}", spec, e.what());
  }
}

}  // namespace vitrine::models
