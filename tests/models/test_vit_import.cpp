// models/vit_import: foreign namings (timm/DINO, DINOv2, torchvision, Hugging Face) built in C++
// by renaming a small model's state dict with an independent copy of each naming, detection, exact
// round trips (Hugging Face's query/key/value split and joined), config_from_hf, load_vit from
// files with and without metadata, its error messages, and save_vit_timm -> load_vit.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>

#include "models/classifier.h"
#include "models/vit.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using models::VisionTransformer;
using models::ViTConfig;
using models::ViTNaming;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

ViTConfig tiny() {
  ViTConfig c;
  c.image_h = 8, c.image_w = 12, c.patch = 4, c.channels = 2, c.num_classes = 3;
  c.dim = 8, c.depth = 2, c.heads = 2, c.mlp_dim = 16;
  return c;
}

/// A tiny model with random values everywhere (LayerNorm and LayerScale too, so that a tensor
/// loaded into the wrong place shows).
std::shared_ptr<VisionTransformer> random_model(const ViTConfig& c, uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<VisionTransformer>(c, g);
  NoGradGuard no_grad;
  for (auto [name, t] : m->state_dict()) {
    if (!is_floating_point(t.dtype())) continue;  // a stem BatchNorm's batch count
    Tensor r = ops::randn(t.shape(), g);
    t.copy_(name.ends_with("running_var") ? ops::abs(r) + 0.5 : r);
  }
  m->eval();
  return m;
}

nn::NamedTensors sorted(nn::NamedTensors s) {
  std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return s;
}

std::string rename(const std::string& name,
                   const std::vector<std::pair<std::string, std::string>>& rules) {
  for (const auto& [pattern, replacement] : rules) {
    std::regex re(pattern);
    if (std::regex_match(name, re)) return std::regex_replace(name, re, replacement);
  }
  FAIL("no rule for " << name);
  return name;
}

/// Ours -> torchvision's (mlp.0/mlp.3, or mlp.linear_1/linear_2 as torchvision < 0.14 saved).
nn::NamedTensors to_torchvision(const nn::NamedTensors& state, bool old_mlp = false) {
  const std::string fc1 = old_mlp ? "mlp.linear_1" : "mlp.0",
                    fc2 = old_mlp ? "mlp.linear_2" : "mlp.3";
  const std::string L = "encoder.layers.encoder_layer_$1.";
  std::vector<std::pair<std::string, std::string>> rules = {
      {"cls_token", "class_token"},
      {"pos_embed", "encoder.pos_embedding"},
      {"patch_embed\\.proj\\.(.*)", "conv_proj.$1"},
      {"norm\\.(.*)", "encoder.ln.$1"},
      {"head\\.(.*)", "heads.head.$1"},
      {"pre_logits\\.fc\\.(.*)", "heads.pre_logits.$1"},
      {"blocks\\.(\\d+)\\.norm1\\.(.*)", L + "ln_1.$2"},
      {"blocks\\.(\\d+)\\.norm2\\.(.*)", L + "ln_2.$2"},
      {"blocks\\.(\\d+)\\.attn\\.qkv\\.(.*)", L + "self_attention.in_proj_$2"},
      {"blocks\\.(\\d+)\\.attn\\.proj\\.(.*)", L + "self_attention.out_proj.$2"},
      {"blocks\\.(\\d+)\\.mlp\\.fc1\\.(.*)", L + fc1 + ".$2"},
      {"blocks\\.(\\d+)\\.mlp\\.fc2\\.(.*)", L + fc2 + ".$2"}};
  nn::NamedTensors out;
  for (const auto& [name, t] : state) out.emplace_back(rename(name, rules), t);
  return sorted(out);
}

/// Ours -> Hugging Face's ViTModel (prefix "vit." for ViTForImageClassification's body), or
/// Dinov2Model's block names; qkv split into query, key and value.
nn::NamedTensors to_hf(const nn::NamedTensors& state, const std::string& prefix = "",
                       bool dinov2 = false) {
  const std::string L = prefix + "encoder.layer.$1.";
  std::vector<std::pair<std::string, std::string>> rules = {
      {"cls_token", prefix + "embeddings.cls_token"},
      {"pos_embed", prefix + "embeddings.position_embeddings"},
      {"register_tokens", prefix + "embeddings.register_tokens"},
      {"patch_embed\\.proj\\.(.*)", prefix + "embeddings.patch_embeddings.projection.$1"},
      {"norm\\.(.*)", prefix + "layernorm.$1"},
      {"head\\.(.*)", "classifier.$1"},
      {"pre_logits\\.fc\\.(.*)", prefix + "pooler.dense.$1"},
      {"blocks\\.(\\d+)\\.norm1\\.(.*)", L + (dinov2 ? "norm1.$2" : "layernorm_before.$2")},
      {"blocks\\.(\\d+)\\.norm2\\.(.*)", L + (dinov2 ? "norm2.$2" : "layernorm_after.$2")},
      {"blocks\\.(\\d+)\\.attn\\.proj\\.(.*)", L + "attention.output.dense.$2"},
      {"blocks\\.(\\d+)\\.mlp\\.fc1\\.(.*)", L + (dinov2 ? "mlp.fc1.$2" : "intermediate.dense.$2")},
      {"blocks\\.(\\d+)\\.mlp\\.fc2\\.(.*)", L + (dinov2 ? "mlp.fc2.$2" : "output.dense.$2")},
      {"blocks\\.(\\d+)\\.ls1\\.gamma", L + "layer_scale1.lambda1"},
      {"blocks\\.(\\d+)\\.ls2\\.gamma", L + "layer_scale2.lambda1"}};
  nn::NamedTensors out;
  std::regex qkv("blocks\\.(\\d+)\\.attn\\.qkv\\.(.*)");
  for (const auto& [name, t] : state) {
    std::smatch m;
    if (std::regex_match(name, m, qkv)) {
      int64_t d = t.size(0) / 3;
      const char* parts[] = {"query", "key", "value"};
      for (int i = 0; i < 3; ++i)
        out.emplace_back(fmt::format("{}encoder.layer.{}.attention.attention.{}.{}", prefix,
                                     m[1].str(), parts[i], m[2].str()),
                         t.narrow(0, i * d, d).contiguous());
    } else {
      out.emplace_back(rename(name, rules), t);
    }
  }
  return sorted(out);
}

/// Ours -> timm's (registers as reg_token).
nn::NamedTensors to_timm(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state)
    out.emplace_back(name == "register_tokens" ? "reg_token" : name, t);
  return sorted(out);
}

/// Ours -> DINOv2's training checkpoints: chunked blocks (two per chunk) and a mask token.
nn::NamedTensors to_dinov2_chunked(const nn::NamedTensors& state, int64_t dim) {
  nn::NamedTensors out;
  std::regex block("blocks\\.(\\d+)\\.(.*)");
  for (const auto& [name, t] : state) {
    std::smatch m;
    if (std::regex_match(name, m, block))
      out.emplace_back(fmt::format("blocks.{}.{}.{}", std::stoi(m[1]) / 2, m[1].str(), m[2].str()),
                       t);
    else
      out.emplace_back(name, t);
  }
  out.emplace_back("mask_token", ops::zeros({1, dim}));
  return sorted(out);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * dtype_size(x.dtype())) == 0;
}

/// Two models' forwards that take the same path with the same shapes from the same weights (the
/// weights themselves are compared bit for bit): the products go through BLAS, which promises no
/// bits even then (separate buffers, kernels picked per core type), so a few float32 ulps of
/// outputs of order 1.
void check_same_forward(const Tensor& a, const Tensor& b) { check_close(a, b, 1e-6, 1e-6); }

/// Every tensor of want is in got under the same name with the same bits, and nothing else is.
void check_same_state(const nn::NamedTensors& got, const nn::NamedTensors& want) {
  std::map<std::string, Tensor> g(got.begin(), got.end());
  CHECK(g.size() == got.size());
  CHECK(got.size() == want.size());
  for (const auto& item : want) {
    const auto& name = item.first;
    const auto& t = item.second;
    INFO(name);
    auto it = g.find(name);
    REQUIRE(it != g.end());
    CHECK(same_bits(it->second, t));
  }
}

std::string write(const TempDir& dir, const std::string& name, const nn::NamedTensors& state,
                  const nn::Metadata& md = {}) {
  std::string path = dir / name;
  nn::write_safetensors(path, state, md);
  return path;
}

nn::Metadata with_config(const ViTConfig& c) {
  nn::Metadata md;
  nn::set_metadata_json(md, nn::kConfigKey, c.to_json());
  return md;
}

Tensor images(const ViTConfig& c, uint64_t seed, int64_t batch = 2) {
  Generator g(seed);
  return ops::randn({batch, c.channels, c.image_h, c.image_w}, g);
}

}  // namespace

TEST_CASE("vit import: detect_naming recognises each naming") {
  ViTConfig c = tiny();
  auto m = random_model(c, 1);
  nn::NamedTensors ours = m->state_dict();
  CHECK(models::detect_naming(ours) == ViTNaming::Timm);
  CHECK(models::detect_naming(to_torchvision(ours)) == ViTNaming::Torchvision);
  CHECK(models::detect_naming(to_torchvision(ours, true)) == ViTNaming::Torchvision);
  CHECK(models::detect_naming(to_hf(ours)) == ViTNaming::HuggingFace);
  CHECK(models::detect_naming(to_hf(ours, "vit.")) == ViTNaming::HuggingFace);

  ViTConfig r = c;
  r.registers = 2, r.layer_scale = true, r.num_classes = 0;
  nn::NamedTensors reg = random_model(r, 2)->state_dict();
  CHECK(models::detect_naming(reg) == ViTNaming::Dinov2);  // register_tokens, ls1.gamma
  CHECK(models::detect_naming(to_dinov2_chunked(reg, r.dim)) == ViTNaming::Dinov2);
  CHECK(models::detect_naming(to_hf(reg, "dinov2.", true)) == ViTNaming::HuggingFace);
  ViTConfig t = c;
  t.registers = 2, t.no_embed_class = true, t.pool = "mean", t.fc_norm = true;
  CHECK(models::detect_naming(to_timm(random_model(t, 3)->state_dict())) == ViTNaming::Timm);

  nn::NamedTensors with_opt = ours;
  with_opt.emplace_back("optimizer.0.exp_avg", ops::zeros({2}));
  CHECK(models::detect_naming(with_opt) == ViTNaming::Vitrine);

  CHECK(models::naming_name(ViTNaming::HuggingFace) == "Hugging Face");
  CHECK(models::naming_name(ViTNaming::Torchvision) == "torchvision");
  CHECK(models::naming_name(ViTNaming::Dinov2) == "DINOv2");
}

TEST_CASE("vit import: an unknown naming names the first unknown key") {
  auto m = random_model(tiny(), 1);
  nn::NamedTensors tv = to_torchvision(m->state_dict());
  tv.insert(tv.begin() + 3, {"encoder.layers.encoder_layer_0.ln_3.weight", ops::zeros({8})});
  tv.emplace_back("zzz_unknown", ops::zeros({1}));
  CHECK_ERROR_CONTAINS(models::detect_naming(tv), "detect_naming",
                       "'encoder.layers.encoder_layer_0.ln_3.weight'", "torchvision",
                       "expected names like");
  nn::NamedTensors resnet = {{"conv1.weight", ops::zeros({4, 3, 3, 3})},
                             {"fc.weight", ops::zeros({2, 4})}};
  CHECK_ERROR_CONTAINS(models::detect_naming(resnet), "'conv1.weight'", "any supported ViT naming");
  CHECK_ERROR_CONTAINS(models::detect_naming({}), "no tensors");
  // A key of another naming is unknown to an explicitly chosen one.
  CHECK_ERROR_CONTAINS(models::to_vitrine_names(m->state_dict(), ViTNaming::HuggingFace),
                       "'cls_token'", "Hugging Face");

  TempDir dir;
  std::string path = write(dir, "mixed.safetensors", tv);
  CHECK_ERROR_CONTAINS(models::load_vit(path, tiny()), path.c_str(),
                       "'encoder.layers.encoder_layer_0.ln_3.weight'");
}

TEST_CASE("vit import: to_vitrine_names round trips every naming exactly") {
  ViTConfig c = tiny();
  c.representation = 6;
  nn::NamedTensors ours = random_model(c, 4)->state_dict();
  check_same_state(models::to_vitrine_names(ours, ViTNaming::Timm), ours);
  check_same_state(models::to_vitrine_names(to_torchvision(ours), ViTNaming::Torchvision), ours);
  check_same_state(models::to_vitrine_names(to_torchvision(ours, true), ViTNaming::Torchvision),
                   ours);

  // Hugging Face: query, key and value join into qkv (rows q, k, v) bit for bit; a pooler next to
  // a classifier is dropped (HF's classifier reads the class token, not the pooler).
  nn::NamedTensors hf = to_hf(ours, "vit.");
  nn::NamedTensors without_pre_logits;
  for (const auto& nt : ours)
    if (!nt.first.starts_with("pre_logits.")) without_pre_logits.push_back(nt);
  check_same_state(models::to_vitrine_names(hf, ViTNaming::HuggingFace), without_pre_logits);
  ViTConfig f = tiny();
  f.num_classes = 0, f.representation = f.dim;  // ViTModel with its pooler
  nn::NamedTensors feat = random_model(f, 5)->state_dict();
  check_same_state(models::to_vitrine_names(to_hf(feat), ViTNaming::HuggingFace), feat);
  auto joined = models::to_vitrine_names(to_hf(feat), ViTNaming::HuggingFace);
  for (const auto& [name, t] : joined)
    if (name == "blocks.1.attn.qkv.weight") CHECK(t.shape() == Dims{24, 8});

  ViTConfig r = tiny();
  r.registers = 3, r.layer_scale = true, r.num_classes = 0;
  nn::NamedTensors reg = random_model(r, 6)->state_dict();
  nn::NamedTensors dv2 = to_dinov2_chunked(reg, r.dim);
  CHECK(models::detect_naming(dv2) == ViTNaming::Dinov2);
  check_same_state(models::to_vitrine_names(dv2, ViTNaming::Dinov2), reg);  // mask_token dropped
  check_same_state(models::to_vitrine_names(to_hf(reg, "", true), ViTNaming::HuggingFace), reg);
  check_same_state(models::to_vitrine_names(to_timm(reg), ViTNaming::Timm), reg);

  // Query, key and value must come together and agree.
  nn::NamedTensors broken = to_hf(feat);
  std::erase_if(broken, [](const auto& nt) {
    return nt.first == "encoder.layer.0.attention.attention.key.bias";
  });
  CHECK_ERROR_CONTAINS(models::to_vitrine_names(broken, ViTNaming::HuggingFace),
                       "'blocks.0.attn.qkv.bias'", "no key part");
}

TEST_CASE("vit import: config_from_hf") {
  // google/vit-base-patch16-224's config.json (id2label shortened to three classes).
  json vit = json::parse(R"({
    "architectures": ["ViTForImageClassification"], "attention_probs_dropout_prob": 0.0,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "image_size": 224,
    "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
    "model_type": "vit", "num_attention_heads": 12, "num_channels": 3, "num_hidden_layers": 12,
    "patch_size": 16, "qkv_bias": true, "transformers_version": "4.13.0.dev0",
    "id2label": {"0": "tench", "1": "goldfish", "2": "great white shark"},
    "label2id": {"tench": 0, "goldfish": 1, "great white shark": 2}})");
  ViTConfig c = models::config_from_hf(vit);
  CHECK(c.image_h == 224);
  CHECK(c.image_w == 224);
  CHECK(c.patch == 16);
  CHECK(c.channels == 3);
  CHECK(c.dim == 768);
  CHECK(c.depth == 12);
  CHECK(c.heads == 12);
  CHECK(c.mlp_dim == 3072);
  CHECK(c.num_classes == 3);
  CHECK(c.eps == 1e-12);
  CHECK(c.dropout == 0.1);
  CHECK(c.attn_dropout == 0.0);
  CHECK(c.qkv_bias);
  CHECK(c.pool == "cls");
  CHECK(c.representation == 0);
  CHECK_FALSE(c.layer_scale);

  // Defaults: eps 1e-12, qkv_bias true; num_labels without id2label; [h, w] sizes.
  c = models::config_from_hf({{"hidden_size", 64},
                              {"num_attention_heads", 4},
                              {"num_labels", 5},
                              {"image_size", {32, 48}},
                              {"patch_size", 8},
                              {"qkv_bias", false}});
  CHECK(c.eps == 1e-12);
  CHECK(c.num_classes == 5);
  CHECK(c.image_h == 32);
  CHECK(c.image_w == 48);
  CHECK_FALSE(c.qkv_bias);
  // ViTModel (google/vit-base-patch16-224-in21k): no classifier, so a feature extractor.
  c = models::config_from_hf({{"architectures", {"ViTModel"}}, {"hidden_size", 768}});
  CHECK(c.num_classes == 0);
  // DINOv2 (facebook/dinov2-small).
  c = models::config_from_hf(json::parse(R"({"architectures": ["Dinov2Model"], "hidden_act": "gelu",
    "hidden_size": 384, "image_size": 518, "layer_norm_eps": 1e-06, "layerscale_value": 1.0,
    "mlp_ratio": 4, "model_type": "dinov2", "num_attention_heads": 6, "num_hidden_layers": 12,
    "patch_size": 14, "qkv_bias": true, "use_swiglu_ffn": false})"));
  CHECK(c.image_h == 518);
  CHECK(c.patch == 14);
  CHECK(c.mlp_dim == 1536);
  CHECK(c.layer_scale);
  CHECK(c.layer_scale_init == 1.0);
  CHECK(c.eps == 1e-6);
  CHECK(c.num_classes == 0);
  CHECK(c.registers == 0);

  CHECK_ERROR_CONTAINS(models::config_from_hf({{"model_type", "vit"}, {"hidden_act", "gelu_new"}}),
                       "config_from_hf", "hidden_act 'gelu_new'", "\"gelu\"");
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"model_type", "swin"}}), "model_type 'swin'");
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"hidden_size", "768"}}), "'hidden_size'",
                       "must be an integer, got \"768\"");
  // Sizes are whole numbers in range: 16.7 is not truncated, 1e300 not converted (UB before).
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"hidden_size", 16.7}}), "'hidden_size'",
                       "must be an integer, got 16.7");
  CHECK_ERROR_CONTAINS(
      models::config_from_hf({{"model_type", "vit"}, {"num_hidden_layers", 1e300}}),
      "'num_hidden_layers'", "must be an integer");
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"hidden_size", 65536 * 3}}), "dim is 196608",
                       "over the limit of 65536");
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"hidden_size", 100}, {"num_attention_heads", 12}}),
                       "config_from_hf", "not divisible");
}

TEST_CASE("vit import: load_vit reads every naming, with the config from metadata or the caller") {
  ViTConfig c = tiny();
  auto src = random_model(c, 7);
  Tensor x = images(c, 8);
  Tensor want = src->forward(x);
  TempDir dir;
  struct Case {
    const char* name;
    nn::NamedTensors state;
  };
  std::vector<Case> cases = {{"timm", sorted(src->state_dict())},
                             {"torchvision", to_torchvision(src->state_dict())},
                             {"hf", to_hf(src->state_dict(), "vit.")}};
  for (const Case& k : cases) {
    INFO(k.name);
    std::string bare = write(dir, std::string(k.name) + ".safetensors", k.state);
    CHECK_ERROR_CONTAINS(models::load_vit(bare), bare.c_str(), "cannot be read from its weights",
                         "preset", "vit_base_patch16_224");
    auto m = models::load_vit(bare, c);
    check_same_state(m->state_dict(), src->state_dict());
    m->eval();
    check_same_forward(m->forward(x), want);

    std::string meta =
        write(dir, std::string(k.name) + "_meta.safetensors", k.state, with_config(c));
    auto n = models::load_vit(meta);
    CHECK(n->config().to_json() == c.to_json());
    check_same_state(n->state_dict(), src->state_dict());

    // A caller's config must agree with the file's, except in training-only fields and the
    // head: the checkpoint's own classes win (a preset's 1000 against a fine-tuned file's 3).
    ViTConfig other = c;
    other.num_classes = 4;
    CHECK(models::load_vit(meta, other)->config().num_classes == 3);
    ViTConfig wider = c;
    wider.mlp_dim = c.mlp_dim + 8;
    CHECK_ERROR_CONTAINS(models::load_vit(meta, wider), meta.c_str(), "'mlp_dim'",
                         fmt::format("{} in the file", c.mlp_dim),
                         fmt::format("{} given", c.mlp_dim + 8));
    ViTConfig regularised = c;
    regularised.dropout = 0.1, regularised.drop_path = 0.2;
    CHECK(models::load_vit(meta, regularised)->config().drop_path == 0.2);
  }
}

TEST_CASE("vit import: 16-bit and float64 checkpoints convert on load") {
  ViTConfig c = tiny();
  auto src = random_model(c, 9);
  TempDir dir;
  for (DType dt : {kFloat16, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    nn::NamedTensors state;
    for (const auto& [name, t] : to_hf(src->state_dict())) state.emplace_back(name, t.to(dt));
    std::string path = write(dir, fmt::format("{}.safetensors", dtype_name(dt)), state);
    auto m = models::load_vit(path, c);
    std::map<std::string, Tensor> got;
    for (const auto& [name, t] : m->state_dict()) got[name] = t;
    for (const auto& item : src->state_dict()) {
      const auto& name = item.first;
      const auto& t = item.second;
      INFO(name);
      CHECK(got[name].dtype() == kFloat32);
      CHECK(same_bits(got[name], t.to(dt).to(kFloat32)));  // exactly the rounded values
    }
  }
}

TEST_CASE(
    "vit import: a shape that does not fit names the first offending tensor and the expected "
    "shape") {
  ViTConfig c = tiny();
  auto src = random_model(c, 10);
  TempDir dir;
  std::string tv = write(dir, "tv.safetensors", to_torchvision(src->state_dict()));
  std::string hf = write(dir, "hf.safetensors", to_hf(src->state_dict()));
  std::string timm = write(dir, "timm.safetensors", src->state_dict());

  ViTConfig wide = c;
  wide.mlp_dim = 32;  // first in file order: encoder_layer_0's mlp.0.bias
  CHECK_ERROR_CONTAINS(models::load_vit(tv, wide), tv.c_str(),
                       "'encoder.layers.encoder_layer_0.mlp.0.bias'",
                       "loads as 'blocks.0.mlp.fc1.bias'", "shape [16], expected [32]");
  ViTConfig dim = c;
  dim.dim = 12, dim.heads = 3;  // first in file order: classifier.bias is [3] either way
  CHECK_ERROR_CONTAINS(models::load_vit(hf, dim), "'classifier.weight'", "loads as 'head.weight'",
                       "shape [3, 8], expected [3, 12]");
  ViTConfig wide_hf = c;
  wide_hf.mlp_dim = 32;  // query/key/value come after intermediate.dense in file order
  CHECK_ERROR_CONTAINS(models::load_vit(hf, wide_hf), "'encoder.layer.0.intermediate.dense.bias'",
                       "expected [32]");
  ViTConfig big = c;
  big.image_h = 16;  // 4x3 patches instead of 2x3
  CHECK_ERROR_CONTAINS(models::load_vit(timm, big), "'pos_embed'",
                       "shape [1, 7, 8], expected [1, 13, 8]", "image 16x12");
  ViTConfig shallow = c;
  shallow.depth = 1;
  CHECK_ERROR_CONTAINS(models::load_vit(timm, shallow), "'blocks.1.attn.proj.bias'", "depth is 1");
  ViTConfig deep = c;
  deep.depth = 3;
  CHECK_ERROR_CONTAINS(models::load_vit(timm, deep), "no tensor for 'blocks.2.", "expected shape");
  ViTConfig no_bias = c;
  no_bias.qkv_bias = false;
  CHECK_ERROR_CONTAINS(models::load_vit(hf, no_bias),
                       "'encoder.layer.0.attention.attention.key.bias'",
                       "the key rows of 'blocks.0.attn.qkv.bias'", "qkv_bias off");

  // Hugging Face's query with the wrong width: named with its rows of qkv.
  nn::NamedTensors bad = to_hf(src->state_dict());
  for (auto& [name, t] : bad)
    if (name.find("attention.attention.") != std::string::npos && name.ends_with(".weight"))
      t = ops::zeros({8, 4});
  std::string hf_bad = write(dir, "hf_bad.safetensors", bad);
  CHECK_ERROR_CONTAINS(
      models::load_vit(hf_bad, c), "'encoder.layer.0.attention.attention.key.weight'",
      "the key rows of 'blocks.0.attn.qkv.weight'", "shape [8, 4], expected [8, 8]");

  nn::NamedTensors ints = src->state_dict();
  for (auto& [name, t] : ints)
    if (name == "cls_token") t = ops::zeros({1, 1, 8}, kInt64);
  std::string int_path = write(dir, "int.safetensors", ints);
  CHECK_ERROR_CONTAINS(models::load_vit(int_path, c), "'cls_token'", "dtype int64", "floating");
}

TEST_CASE("vit import: a checkpoint without a head loads as a feature extractor") {
  ViTConfig c = tiny();
  c.num_classes = 0;
  auto src = random_model(c, 11);
  TempDir dir;
  std::string path = write(dir, "dino.safetensors", src->state_dict());
  // A given config (a preset, a file) names the architecture; the head is the file's: none here,
  // whatever num_classes the config says (DINO's backbones with vit_small_patch8_224).
  ViTConfig with_head = c;
  with_head.num_classes = 1000;
  Tensor x = images(c, 12, 3);
  for (const ViTConfig& given : {c, with_head}) {
    auto m = models::load_vit(path, given);
    m->eval();
    CHECK(m->config().num_classes == 0);
    CHECK(!m->head);
    Tensor f = m->forward(x);
    CHECK(f.shape() == Dims{3, 8});
    check_same_forward(f, src->forward(x));
  }
  // The other way round: the file's head (3 classes) wins over a config without one.
  ViTConfig cls = tiny();
  std::string with = write(dir, "cls.safetensors", random_model(cls, 13)->state_dict());
  CHECK(models::load_vit(with, c)->config().num_classes == 3);
  // With Vitrine's own metadata the stored config decides, and a head it lacks is an error.
  ViTConfig stored = c;
  auto headless = random_model(stored, 16);
  const std::string own = (dir.dir / "own.safetensors").string();
  nn::Metadata md;
  nn::set_metadata_json(md, nn::kConfigKey, cls.to_json());
  nn::write_safetensors(own, headless->state_dict(), md);
  CHECK_ERROR_CONTAINS(models::load_vit(own), own.c_str(), "no head", "'head.weight'",
                       "num_classes = 0", "feature extractor");
}

TEST_CASE("vit import: Hugging Face's pooler loads as pre_logits only when the config has one") {
  ViTConfig f = tiny();
  f.num_classes = 0, f.representation = f.dim;
  auto src = random_model(f, 14);
  TempDir dir;
  std::string path = write(dir, "vitmodel.safetensors", to_hf(src->state_dict()));
  Tensor x = images(f, 15);
  auto pooled = models::load_vit(path, f);  // output = HF's pooler_output
  pooled->eval();
  check_same_forward(pooled->forward(x), src->forward(x));
  ViTConfig plain = f;
  plain.representation = 0;  // output = HF's last_hidden_state[:, 0]
  auto features = models::load_vit(path, plain);
  CHECK_FALSE(features->pre_logits);
  features->eval();
  const Tensor got = features->forward(x);
  // The same weights without the pooler, through the same forward (the last block computes the
  // class token's row only): the same products of the same shapes.
  auto reference = random_model(plain, 14);
  {
    nn::NamedTensors state;
    for (const auto& [name, t] : src->state_dict())
      if (!name.starts_with("pre_logits.")) state.emplace_back(name, t);
    nn::load_state_dict(*reference, state);
  }
  reference->eval();
  check_same_forward(got, reference->forward(x));
  // And the class token of every token's forward: the same sums, but the last block's products
  // have other shapes (B rows, not B x tokens), for which BLAS may pick other kernels and
  // blockings (OpenBLAS by core type and shape), so not the same bits. float32 rounding over
  // sums of 8 to 32 terms of order-1 values, through one block and the final norm: a few ulps of
  // outputs of order 1; 1e-5 absolute and relative holds that with room and is far below what a
  // pooler applied by mistake changes (tanh of a random projection: order 1).
  const Tensor cls = src->forward_features(x).select(1, 0);
  check_close(got, cls, 1e-5, 1e-5);
  CHECK(ops::max(ops::abs(pooled->forward(x) - got)).item() > 0.1);
  ViTConfig other = f;
  other.representation = 4;
  CHECK_ERROR_CONTAINS(models::load_vit(path, other), "'pooler.dense.bias'", "expected [4]");
}

TEST_CASE("vit import: a Vitrine training checkpoint loads without its optimizer state") {
  ViTConfig c = tiny();
  auto m = random_model(c, 16);
  m->train();
  nn::optim::Adam opt(m->parameters());
  Tensor loss = m->forward(images(c, 17)).pow(2).sum();
  loss.backward();
  opt.step();
  TempDir dir;
  std::string path = dir / "ckpt.safetensors";
  nn::save_checkpoint(path, *m, with_config(c), &opt);
  auto loaded = models::load_vit(path);
  check_same_state(loaded->state_dict(), m->state_dict());
}

TEST_CASE(
    "vit import: a checkpoint with a convolutional stem loads with its BatchNorm statistics") {
  ViTConfig c = tiny();
  c.stem = {3, 5};
  auto m = random_model(c, 19);
  m->train();
  {
    NoGradGuard no_grad;
    m->forward(images(c, 20));  // the stem's BatchNorms update their running statistics
  }
  TempDir dir;
  std::string path = dir / "stem.safetensors";
  nn::save_checkpoint(path, *m, with_config(c));
  auto loaded = models::load_vit(path);
  CHECK(loaded->config().stem == std::vector<int64_t>{3, 5});
  check_same_state(loaded->state_dict(), m->state_dict());
  CHECK(loaded->named_buffers().at(1).first == "patch_embed.stem.1.running_var");
  // A stem tensor the config does not build, and a batch count in the wrong dtype, are named.
  nn::NamedTensors state = m->state_dict();
  nn::NamedTensors extra = state;
  extra.emplace_back("patch_embed.stem.9.running_mean", ops::zeros({5}));
  write(dir, "extra.safetensors", extra, with_config(c));
  CHECK_ERROR_CONTAINS(models::load_vit(dir / "extra.safetensors"),
                       "patch_embed.stem.9.running_mean", "the config's stem has 2 stages");
  for (auto& [name, t] : state)
    if (name.ends_with("num_batches_tracked")) t = t.to(DType::Float32);
  write(dir, "float_count.safetensors", state, with_config(c));
  CHECK_ERROR_CONTAINS(models::load_vit(dir / "float_count.safetensors"),
                       "patch_embed.stem.1.num_batches_tracked", "dtype float32; expected int64");
}

TEST_CASE("vit import: save_vit_timm -> load_vit is bit-exact") {
  TempDir dir;
  ViTConfig c = tiny();
  c.registers = 2, c.no_embed_class = true, c.layer_scale = true, c.pool = "mean", c.fc_norm = true;
  c.qkv_bias = false;
  auto src = random_model(c, 18);
  std::string path = dir / "timm.safetensors";
  models::save_vit_timm(path, *src, {{"vitrine.classes", "[\"a\", \"b\", \"c\"]"}});
  nn::SafetensorsFile file = nn::read_safetensors(path);
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.metadata.at("vitrine.classes") == "[\"a\", \"b\", \"c\"]");
  CHECK(json::parse(file.metadata.at("vitrine.config")) == c.to_json());
  std::map<std::string, Tensor> names(file.tensors.begin(), file.tensors.end());
  CHECK(names.count("reg_token"));  // timm's name for the registers
  CHECK_FALSE(names.count("register_tokens"));
  CHECK(names.count("blocks.1.ls2.gamma"));
  CHECK(names.count("fc_norm.weight"));
  auto back = models::load_vit(path);
  CHECK(back->config().to_json() == c.to_json());
  check_same_state(back->state_dict(), src->state_dict());

  CHECK_ERROR_CONTAINS(models::save_vit_timm(dir / "x.safetensors", *src, {{"format", "np"}}),
                       "save_vit_timm", "'format'");

  // DINOv2-style registers (after the class token's position embedding) are saved as timm converts
  // DINOv2: the class token's position embedding folded into cls_token, no_embed_class on.
  ViTConfig d = tiny();
  d.registers = 2, d.layer_scale = true;
  auto dino = random_model(d, 19);
  std::string dpath = dir / "dinov2.safetensors";
  models::save_vit_timm(dpath, *dino);
  auto folded = models::load_vit(dpath);
  CHECK(folded->config().no_embed_class);
  CHECK(folded->pos_embed.shape() == Dims{1, 6, 8});
  folded->eval();
  Tensor x = images(d, 20);
  check_close(folded->forward(x), dino->forward(x), 1e-5, 1e-5);
}

TEST_CASE("vit import: config_from_hf refuses what is not a ViT config.json") {
  CHECK_ERROR_CONTAINS(models::config_from_hf({{"dim", 3}}), "config_from_hf", "model_type");
  CHECK_ERROR_CONTAINS(
      models::config_from_hf(
          {{"model_type", "dinov2"}, {"architectures", {"Dinov2ForImageClassification"}}}),
      "Dinov2ForImageClassification", "num_classes 0");
}

TEST_CASE("vit import: a tiny checkpoint whose config asks for a huge model is refused unbuilt") {
  // The finding: a 268-byte checkpoint whose config said dim 2048, depth 24 made load_vit build
  // and initialise that model (5.7 GB, 2.5 minutes) before any tensor was compared.
  vt_test::TempDir dir;
  const std::string path = dir / "tiny.safetensors";
  models::ViTConfig c;
  c.dim = 2048;
  c.depth = 24;
  c.heads = 16;
  c.mlp_dim = 8192;
  nn::Metadata md;
  nn::set_metadata_json(md, nn::kConfigKey, c.to_json());
  nn::write_safetensors(path, {{"cls_token", ops::zeros({1, 1, 4})}}, md);
  CHECK_ERROR_CONTAINS(models::load_vit(path), path, "dim 2048, depth 24",
                       "at least 1207959552 weights", "refused before building the model");
  CHECK_ERROR_CONTAINS(models::load_classifier(path), path, "refused before building");
  // A ResNet's config too.
  nn::Metadata rd;
  nn::set_metadata_json(rd, nn::kConfigKey,
                        {{"arch", "resnet"},
                         {"depth", 110},
                         {"width", 1024},
                         {"channels", 3},
                         {"num_classes", 10},
                         {"image_size", 32}});
  nn::write_safetensors(path, {{"x", ops::zeros({1})}}, rd);
  CHECK_ERROR_CONTAINS(models::load_classifier(path), path, "ResNet-110 of width 1024",
                       "refused before building");
}
