// ViTConfig: validation, JSON, presets and the stem's strides (see vit_config.h).
#include "models/vit_config.h"

#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/error.h"
#include "nn/json.h"

namespace vitrine::models {

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
  VT_CHECK(init == "timm" || init == "torchvision" || init == "vit-pytorch" || init == "dino",
           "ViTConfig: init '{}' is not an initialisation (expected timm, torchvision, "
           "vit-pytorch or dino)",
           init);
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
          {"final_norm", final_norm},
          {"init", init}};
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
      else if (k == "init")
        c.init = v.get<std::string>();
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

}  // namespace vitrine::models
