// The ViT model itself: config JSON and presets (parameter counts as timm's), shapes, token layout
// with registers, position-embedding interpolation, cropping, introspection, and a float64
// gradcheck of a tiny model. PyTorch parity is in test_vit_parity.cpp, loading in
// test_vit_import.cpp.
#include <filesystem>
#include <fstream>

#include "models/vit.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using models::PosInterp;
using models::VisionTransformer;
using models::ViTConfig;

namespace {
ViTConfig tiny(int64_t h = 8, int64_t w = 8) {
  ViTConfig c;
  c.image_h = h, c.image_w = w, c.patch = 4, c.channels = 2, c.num_classes = 3;
  c.dim = 8, c.depth = 2, c.heads = 2, c.mlp_dim = 16;
  return c;
}
}  // namespace

TEST_CASE("vit config: JSON round trip, errors, presets") {
  ViTConfig c = ViTConfig::preset("fmnist");
  c.registers = 2;
  c.pool = "mean";
  ViTConfig back = ViTConfig::from_json(c.to_json());
  CHECK(back.to_json() == c.to_json());
  CHECK(ViTConfig::from_json({{"image_size", 32}, {"patch", 8}}).image_w == 32);
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"imgsize", 32}}), "ViTConfig",
                       "unknown key 'imgsize'");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"image_size", 30}, {"patch", 4}}), "30x30",
                       "patch size 4");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"dim", 10}, {"heads", 3}}), "not divisible");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"patch", 4}, {"patch_kernel", 7}}), "patch_kernel 7",
                       "patch size 4 plus an even number");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"patch", 4}, {"patch_kernel", 2}}), "patch_kernel 2");
  CHECK_ERROR_CONTAINS(ViTConfig::preset("vit_huge"), "unknown preset", "vit_base_patch16_224");
  CHECK(ViTConfig::preset_names().size() == 14);
  ViTConfig k = ViTConfig::preset("fmnist");
  CHECK(k.kernel() == 4);
  k.patch_kernel = 8;
  CHECK(ViTConfig::from_json(k.to_json()).kernel() == 8);
}

TEST_CASE("vit: overlapping patch embedding (patch_kernel) keeps the grid") {
  // patch 4 seen through 8x8 kernels: Conv2d(kernel 8, stride 4, padding 2), still 7x7 patches
  Generator g(0);
  ViTConfig c = ViTConfig::preset("fmnist");
  c.depth = 1;
  c.patch_kernel = 8;
  VisionTransformer m(c, g);
  CHECK(m.patch_embed->weight.shape() == Dims{128, 1, 8, 8});
  CHECK(m.patch_embed->padding == std::pair<int64_t, int64_t>{2, 2});
  CHECK(m.forward_features(ops::randn({2, 1, 28, 28}, g)).shape() == Dims{2, 50, 128});
  CHECK(m.last_grid() == std::pair<int64_t, int64_t>{7, 7});
}

TEST_CASE("vit presets: parameter counts equal timm's") {
  // timm.create_model(name).num_parameters, num_classes 1000
  CHECK(VisionTransformer(ViTConfig::preset("vit_tiny_patch16_224")).num_parameters() == 5717416);
  CHECK(VisionTransformer(ViTConfig::preset("vit_small_patch16_224")).num_parameters() == 22050664);
  VisionTransformer fm(ViTConfig::preset("fmnist"));
  CHECK(fm.named_parameters().front().first == "cls_token");  // own parameters first, as timm
  CHECK(fm.pos_embed.shape() == Dims{1, 50, 128});
}

TEST_CASE("vit: forward shapes, token layout with registers and no_embed_class") {
  Generator g(0);
  ViTConfig c = tiny();
  VisionTransformer m(c, g);
  Tensor x = ops::randn({3, 2, 8, 8}, g);
  CHECK(m.forward(x).shape() == Dims{3, 3});
  CHECK(m.forward_features(x).shape() == Dims{3, 5, 8});
  c.registers = 2;
  VisionTransformer r(c, g);
  CHECK(r.forward_features(x).shape() == Dims{3, 7, 8});
  CHECK(r.pos_embed.shape() == Dims{1, 5, 8});  // cls + patches; registers carry none
  c.no_embed_class = true;
  c.pool = "mean";
  c.fc_norm = true;
  VisionTransformer t(c, g);
  CHECK(t.pos_embed.shape() == Dims{1, 4, 8});
  CHECK(t.forward(x).shape() == Dims{3, 3});
  CHECK(t.norm == nullptr);
  c.num_classes = 0;  // a feature extractor
  CHECK(VisionTransformer(c, g).forward(x).shape() == Dims{3, 8});
}

TEST_CASE("vit: registers come right after the class token, after the position embedding") {
  Generator g(1);
  ViTConfig c = tiny();
  c.registers = 1;
  Tensor x = ops::randn({1, 2, 8, 8}, g);
  for (bool no_embed_class : {false, true}) {
    INFO("no_embed_class " << no_embed_class);
    c.no_embed_class = no_embed_class;
    VisionTransformer m(c, g);
    m.eval();
    {
      NoGradGuard ng;
      m.register_tokens.fill_(5.0);
    }
    Tensor t = m.embed(x);  // [1, cls + register + 4 patches, 8]
    CHECK(t.shape() == Dims{1, 6, 8});
    Tensor patches = m.patch_embed->forward(x).flatten(2).transpose(1, 2);  // [1, 4, 8]
    const int64_t p0 = no_embed_class ? 0 : 1;  // where the patches start in pos_embed
    // Class token: with its own position only when the pos_embed covers it.
    check_close(t.slice(1, 0, 1),
                no_embed_class ? m.cls_token : m.cls_token + m.pos_embed.slice(1, 0, 1), 1e-6);
    check_close(t.slice(1, 1, 2), std::vector<double>(8, 5.0));  // the register, no position
    check_close(t.slice(1, 2, 6), patches + m.pos_embed.slice(1, p0, p0 + 4), 1e-6);
  }
}

TEST_CASE("vit: other input sizes interpolate the position embedding, bad sizes fail or crop") {
  Generator g(2);
  VisionTransformer m(tiny(), g);
  CHECK(m.pos_embed_for(2, 2, PosInterp::Size).same(m.pos_embed));
  Tensor p = m.pos_embed_for(3, 5, PosInterp::Size);
  CHECK(p.shape() == Dims{1, 16, 8});
  check_close(p.slice(1, 0, 1), m.pos_embed.slice(1, 0, 1), 0, 0);  // class position kept
  CHECK(m.pos_embed_for(3, 5, PosInterp::Dino).shape() == Dims{1, 16, 8});
  Tensor big = ops::randn({1, 2, 12, 20}, g);
  CHECK(m.forward(big).shape() == Dims{1, 3});
  CHECK(m.last_grid() == std::pair<int64_t, int64_t>{3, 5});
  Tensor odd = ops::randn({1, 2, 10, 9}, g);
  CHECK_ERROR_CONTAINS(m.forward(odd), "10x9", "patch size 4", "crop to 8x8");
  models::ViTForwardOptions crop;
  crop.crop = true;
  check_close(m.forward(odd, crop), m.forward(odd.slice(2, 0, 8).slice(3, 0, 8)), 1e-6);
  CHECK_ERROR_CONTAINS(m.forward(ops::randn({1, 3, 8, 8}, g)), "expected images [B, 2, H, W]");
}

TEST_CASE("vit: introspection (attention, gradients, last self-attention, one head's output)") {
  Generator g(3);
  VisionTransformer m(tiny(), g);
  m.eval();
  Tensor x = ops::randn({2, 2, 8, 8}, g);
  m.capture(true, true);
  Tensor logits = m.forward(x);
  auto attn = m.attentions();
  REQUIRE(attn.size() == 2);
  CHECK(attn[1].shape() == Dims{2, 2, 5, 5});
  check_close(ops::sum(attn[0], {-1}), std::vector<double>(20, 1.0), 1e-5);
  ops::sum(logits.select(1, 0)).backward();
  auto grads = m.attention_grads();
  REQUIRE(grads[0].defined());
  CHECK(grads[0].shape() == Dims{2, 2, 5, 5});
  CHECK(m.block_outputs().size() == 2);
  check_close(m.get_last_selfattention(x), attn[1], 1e-6);
  // One head's output equals that head's probabilities times its values.
  auto blk = m.blocks->at<models::ViTBlock>(1);
  Tensor h1 = m.get_attention_output(x, 1, 1);
  CHECK(h1.shape() == Dims{2, 5, 4});
  Tensor y = blk->norm1->forward(m.block_outputs()[0]);
  Tensor v =
      blk->attn->qkv->forward(y).reshape({2, 5, 3, 2, 4}).select(2, 2).select(2, 1);  // [B, N, Dh]
  check_close(h1, ops::matmul(attn[1].select(1, 1), v), 1e-5);
  CHECK_ERROR_CONTAINS(m.get_attention_output(x, 2, 0), "layer 2", "depth 2");
}

TEST_CASE("vit: gradcheck of a tiny model in float64 (input and a parameter)") {
  Generator g(4);
  ViTConfig c = tiny(4, 8);
  c.depth = 1;
  c.registers = 1;
  c.layer_scale = true;
  c.layer_scale_init = 0.5;
  VisionTransformer m(c, g);
  m.to(kFloat64);
  m.eval();
  Tensor x = rand64({1, 2, 4, 8}, 5);
  check_grad([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, {x});
  Tensor pos = m.pos_embed;
  check_grad([&](const std::vector<Tensor>&) { return m.forward(x.detach()); }, {pos});
}

TEST_CASE("vit: summary table and a new head for transfer learning") {
  Generator g(6);
  VisionTransformer m(ViTConfig::preset("fmnist"), g);
  std::string s = m.summary_table();
  CHECK(s.find("patch_embed.proj (Conv2d)") != std::string::npos);
  CHECK(s.find("[1, 128, 7, 7]") != std::string::npos);
  CHECK(s.find("blocks.5 (Block)") != std::string::npos);
  CHECK(s.find("[1, 10]") != std::string::npos);
  CHECK(s.find(fmt::format("total params: {}", m.num_parameters())) != std::string::npos);
  m.requires_grad_(false);
  m.reset_head(4, g);
  CHECK(m.config().num_classes == 4);
  CHECK(m.num_parameters(true) == 128 * 4 + 4);
  CHECK(m.forward(ops::zeros({1, 1, 28, 28})).shape() == Dims{1, 4});
}

TEST_CASE("vit config: resolve_config takes a preset, our JSON or a Hugging Face config.json") {
  CHECK(models::resolve_config("fmnist").dim == 128);
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  CHECK(models::resolve_config(write("ours.json", R"({"image_size": [16, 24], "patch": 8, "dim": 32,
      "heads": 2, "depth": 1, "mlp_dim": 64})"))
            .image_w == 24);
  ViTConfig hf =
      models::resolve_config(write("config.json", R"({"model_type": "vit", "image_size": 32,
      "patch_size": 8, "num_channels": 3, "hidden_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 3, "intermediate_size": 96, "hidden_act": "gelu",
      "layer_norm_eps": 1e-12, "qkv_bias": true, "num_labels": 5})"));
  CHECK(hf.dim == 48);
  CHECK(hf.eps == 1e-12);
  CHECK(hf.num_classes == 5);
  CHECK_ERROR_CONTAINS(models::resolve_config("no_such_thing"), "no_such_thing", "not a preset",
                       "fmnist");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("bad.json", "{")), "bad.json", "invalid JSON");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("odd.json", R"({"dim": 10, "heads": 3})")),
                       "odd.json", "not divisible");
}

TEST_CASE("vit: summary_table leaves the last forward's captures alone") {
  Generator g(7);
  VisionTransformer m(tiny(), g);
  m.capture(true);
  m.forward(ops::randn({2, 2, 12, 8}, g));
  Tensor a = m.attentions()[0];
  m.summary_table();
  CHECK(m.attentions()[0].same(a));
  CHECK(m.last_grid() == std::pair<int64_t, int64_t>{3, 2});
  CHECK(m.block_outputs().size() == 2);
}
