// The ViT model itself: config JSON and presets (parameter counts as timm's), shapes, token layout
// with registers, position-embedding interpolation, cropping, introspection, and a float64
// gradcheck of a tiny model. PyTorch parity is in test_vit_parity.cpp, loading in
// test_vit_import.cpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "autograd/node.h"
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

/// The names of the ops in y's autograd graph, with how often each occurs.
std::multiset<std::string> graph_ops(const Tensor& y) {
  std::multiset<std::string> names;
  std::set<const Node*> seen;
  std::vector<const Node*> todo{y.grad_fn().get()};
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    names.emplace(n->name);
    for (const Edge& e : n->inputs) todo.push_back(e.node.get());
  }
  return names;
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

TEST_CASE("vit: convolutional stem: strides, modules, grid and config errors") {
  Generator g(0);
  ViTConfig c = ViTConfig::preset("fmnist");
  c.depth = 1;
  c.stem = {8, 16, 24};  // patch 4: strides 2, 2, then 1; a 1x1 projection
  CHECK(c.stem_strides() == std::vector<int64_t>{2, 2, 1});
  CHECK(c.kernel() == 1);
  CHECK(c.stride() == 1);
  VisionTransformer m(c, g);
  CHECK(m.patch_embed->weight.shape() == Dims{128, 24, 1, 1});
  CHECK(m.patch_embed->padding == std::pair<int64_t, int64_t>{0, 0});
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict())
    if (name.starts_with("patch_embed.")) names.push_back(name);
  CHECK(names.front() == "patch_embed.stem.0.weight");
  CHECK(std::count(names.begin(), names.end(), "patch_embed.stem.7.running_mean") == 1);
  CHECK(m.stem->size() == 9);
  CHECK(std::dynamic_pointer_cast<nn::Conv2d>((*m.stem)[3])->stride ==
        std::pair<int64_t, int64_t>{2, 2});
  CHECK(std::dynamic_pointer_cast<nn::Conv2d>((*m.stem)[6])->stride ==
        std::pair<int64_t, int64_t>{1, 1});
  CHECK(m.forward_features(ops::randn({2, 1, 28, 28}, g)).shape() == Dims{2, 50, 128});
  CHECK(m.last_grid() == std::pair<int64_t, int64_t>{7, 7});
  CHECK(ViTConfig::from_json(c.to_json()).stem == c.stem);

  ViTConfig odd = ViTConfig::preset("fmnist");  // patch 7: no stride-2 stage fits
  odd.patch = 7, odd.stem = {4};
  CHECK(odd.stem_strides() == std::vector<int64_t>{1});
  CHECK(odd.kernel() == 7);
  CHECK(VisionTransformer(odd, g).forward_features(ops::randn({1, 1, 28, 28}, g)).shape() ==
        Dims{1, 17, 128});

  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"stem", 32}}), "stem must be a list", "32");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"stem", {32, 0}}}), "stem widths", "got 0");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"stem", {1, 2, 3, 4, 5, 6, 7, 8, 9}}}),
                       "at most 8 widths");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"stem", {2.5}}}), "'stem'");
  CHECK_ERROR_CONTAINS(ViTConfig::from_json({{"patch", 4}, {"patch_kernel", 8}, {"stem", {16}}}),
                       "a stem and patch_kernel 8 cannot be combined");
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
  CHECK(m.class_token_only());  // the last block computes the class token's row only
  Tensor x = rand64({1, 2, 4, 8}, 5);
  check_grad([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, {x});
  Tensor pos = m.pos_embed;
  check_grad([&](const std::vector<Tensor>&) { return m.forward(x.detach()); }, {pos});
}

TEST_CASE(
    "vit: blocks add their residuals in the products, and with hooks the module path gives the "
    "same values") {
  // Without layer scale and drop-path the blocks add each residual as proj's and fc2's products
  // are written (MultiheadSelfAttention::forward_add, MLP::forward_add); a hook on any module
  // between them takes the module-by-module path. Both give the same logits and gradients.
  Generator g(6);
  ViTConfig c = tiny();
  c.drop_path = 0.2;  // on in training, off in eval
  VisionTransformer m(c, g);
  m.to(kFloat64);
  m.eval();
  Tensor x = rand64({2, 2, 8, 8}, 7);
  check_grad([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, {x});
  const auto run = [&] {
    Tensor xl = x.detach().requires_grad_();
    Tensor y = m.forward(xl);
    return std::pair{y, grad({ops::sum(y * y)}, {xl, m.pos_embed})};
  };
  const auto [fused, fused_grads] = run();
  auto& block = *m.blocks->at<models::ViTBlock>(1);
  int calls = 0;
  const auto count = [&](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  };
  for (nn::Module* hooked : std::vector<nn::Module*>{block.attn.get(), block.attn->proj.get(),
                                                     block.mlp.get(), block.mlp->fc2.get()}) {
    const int64_t h = hooked->register_forward_hook(count);
    const auto [y, grads] = run();
    hooked->remove_forward_hook(h);
    check_close(y, fused, 1e-12, 1e-12);
    check_close(grads[0], fused_grads[0], 1e-12, 1e-12);
    check_close(grads[1], fused_grads[1], 1e-12, 1e-12);
  }
  CHECK(calls == 4);  // every hook saw its module's call
}

TEST_CASE(
    "vit: with class-token pooling the last block computes the class token's row only, with the "
    "same logits and gradients, and not when anything could tell") {
  // forward runs the last block as ViTBlock::forward_first(x, 1): keys and values of every
  // token, everything else for the class token. Compared in float64 with the full block
  // (class_token_shortcut off), in eval mode and in training mode with drop-path at work (two
  // models from one seed, so their drop-path draws are the same).
  const auto compare = [](ViTConfig c, bool training) {
    Generator g1(11), g2(11);
    VisionTransformer a(c, g1), b(c, g2);
    b.class_token_shortcut = false;
    for (VisionTransformer* m : {&a, &b}) {
      m->to(kFloat64);
      m->train(training);
    }
    CHECK(a.class_token_only());
    CHECK_FALSE(b.class_token_only());
    const Tensor x = rand64({3, 2, 8, 8}, 12);
    const auto run = [&](VisionTransformer& m) {
      Tensor xl = x.detach().requires_grad_();
      Tensor y = m.forward(xl);
      std::vector<Tensor> wrt{xl};
      for (const Tensor& p : m.parameters()) wrt.push_back(p);
      return std::pair{y, grad({ops::sum(y * ops::arange(1, 4, 1, kFloat64))}, wrt)};
    };
    const auto [ya, ga] = run(a);
    const auto [yb, gb] = run(b);
    // Which path ran: the full block's attention is the fused op; the class token's row is
    // scaled_dot_product_attention's composition (its softmax).
    const auto ops_of = [&](VisionTransformer& m) {
      return graph_ops(m.forward(x.detach().requires_grad_()));
    };
    CHECK(ops_of(a).count("softmax") == 1);
    CHECK(ops_of(b).count("softmax") == 0);
    CHECK(ops_of(b).count("attention") == static_cast<size_t>(c.depth));
    REQUIRE(ya.shape() == Dims{3, 3});
    check_close(ya, yb, 1e-12, 1e-12);
    REQUIRE(ga.size() == gb.size());
    for (size_t i = 0; i < ga.size(); ++i) {
      INFO("gradient " << i);
      check_close(ga[i], gb[i], 1e-12, 1e-12);
    }
  };
  ViTConfig c = tiny();
  compare(c, false);
  c.registers = 2;
  c.layer_scale = true;
  c.layer_scale_init = 0.5;
  c.qkv_bias = false;
  compare(c, false);
  c = tiny();
  c.drop_path = 0.5;
  compare(c, true);

  // The block on its own: forward_first(x, rows) is forward(x)'s first rows, for any rows.
  Generator g(13);
  VisionTransformer m(tiny(), g);
  m.to(kFloat64);
  m.eval();
  auto& last = *m.blocks->at<models::ViTBlock>(1);
  const Tensor tokens = rand64({2, 5, 8}, 14);
  const Tensor full = last.forward(tokens);
  for (int64_t rows : {1, 3, 5})
    check_close(last.forward_first(tokens, rows), full.slice(1, 0, rows), 1e-12, 1e-12);
  CHECK_THROWS_WITH(last.attn->forward_first(tokens, 0),
                    "MultiheadSelfAttention::forward_first: rows 0 not in [1, 5]");
  CHECK_THROWS_WITH(last.attn->forward_first(tokens, 6),
                    "MultiheadSelfAttention::forward_first: rows 6 not in [1, 5]");

  // Not taken when the rows could be seen or the draws would differ.
  CHECK(m.class_token_only());
  m.capture(true);  // attention maps and block outputs of every row
  CHECK_FALSE(m.class_token_only());
  m.capture(false);
  CHECK(m.class_token_only());
  for (nn::Module* hooked :
       std::vector<nn::Module*>{&last, last.norm1.get(), last.mlp->fc1.get(), m.norm.get()}) {
    const int64_t h = hooked->register_forward_hook(
        [](nn::Module&, const Tensor&, const Tensor&) { return Tensor(); });
    CHECK_FALSE(m.class_token_only());  // Grad-CAM hooks norm1 of the last block
    hooked->remove_forward_hook(h);
  }
  const int64_t h = m.blocks->at<models::ViTBlock>(0)->norm1->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor&) { return Tensor(); });
  CHECK(m.class_token_only());  // an earlier block's hook sees all its rows either way
  m.blocks->at<models::ViTBlock>(0)->norm1->remove_forward_hook(h);
  ViTConfig drop = tiny();
  drop.attn_dropout = 0.1;
  VisionTransformer d(drop, g);
  CHECK_FALSE(d.class_token_only());  // training: the attention dropout's mask
  d.eval();
  CHECK(d.class_token_only());
  CHECK_THROWS_WITH(
      [&] {
        d.train();
        auto& b = *d.blocks->at<models::ViTBlock>(1);
        (void)b.attn->forward_first(ops::zeros({1, 5, 8}), 1);
      }(),
      "MultiheadSelfAttention::forward_first: needs dropout off and no attention capture");
  ViTConfig mean = tiny();
  mean.pool = "mean";
  VisionTransformer mm(mean, g);
  CHECK_FALSE(mm.class_token_only());  // the head reads every patch token
}

TEST_CASE("vit: summary table lists every module with its output shape and own parameters") {
  Generator g(6);
  ViTConfig c = tiny();
  c.depth = 1;
  VisionTransformer m(c, g);
  const std::string s = m.summary_table(2);
  const auto rows = summary_rows(s);
  // pre-order, children in registration order; the top module's tokens are Parameter rows
  const std::vector<std::tuple<int, std::string, std::string, int64_t>> expected{
      {0, "VisionTransformer", "[2, 3]", 0},
      {1, "cls_token (Parameter)", "[1, 1, 8]", 8},
      {1, "pos_embed (Parameter)", "[1, 5, 8]", 40},
      {1, "patch_embed (PatchEmbed)", "--", 0},  // VisionTransformer calls proj itself
      {2, "patch_embed.proj (Conv2d)", "[2, 8, 2, 2]", 8 * 2 * 4 * 4 + 8},
      {1, "pos_drop (Dropout)", "[2, 5, 8]", 0},
      {1, "blocks (ModuleList)", "--", 0},
      {2, "blocks.0 (Block)", "[2, 5, 8]", 0},
      {3, "blocks.0.norm1 (LayerNorm)", "[2, 5, 8]", 16},
      {3, "blocks.0.attn (MultiheadSelfAttention)", "[2, 5, 8]", 0},
      {4, "blocks.0.attn.qkv (Linear)", "[2, 5, 24]", 8 * 24 + 24},
      {4, "blocks.0.attn.attn_drop (Dropout)", "--", 0},  // the fused attention skips it
      {4, "blocks.0.attn.proj (Linear)", "[2, 5, 8]", 8 * 8 + 8},
      {4, "blocks.0.attn.proj_drop (Dropout)", "[2, 5, 8]", 0},
      {3, "blocks.0.drop_path1 (DropPath)", "[2, 5, 8]", 0},
      {3, "blocks.0.norm2 (LayerNorm)", "[2, 5, 8]", 16},
      {3, "blocks.0.mlp (MLP)", "[2, 5, 8]", 0},
      {4, "blocks.0.mlp.fc1 (Linear)", "[2, 5, 16]", 8 * 16 + 16},
      {4, "blocks.0.mlp.act (GELU)", "[2, 5, 16]", 0},
      {4, "blocks.0.mlp.drop1 (Dropout)", "[2, 5, 16]", 0},
      {4, "blocks.0.mlp.fc2 (Linear)", "[2, 5, 8]", 16 * 8 + 8},
      {4, "blocks.0.mlp.drop2 (Dropout)", "[2, 5, 8]", 0},
      {3, "blocks.0.drop_path2 (DropPath)", "[2, 5, 8]", 0},
      {1, "norm (LayerNorm)", "[2, 5, 8]", 16},
      {1, "head (Linear)", "[2, 3]", 8 * 3 + 3}};
  REQUIRE(rows.size() == expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [depth, label, shape, params] = expected[i];
    INFO("row " << i << ": " << rows[i].label);
    CHECK(rows[i].depth == depth);
    CHECK(rows[i].label == label);
    CHECK(rows[i].shape == shape);
    CHECK(rows[i].params == params);
  }
  CHECK(sum_params(rows) == m.num_parameters());
  CHECK(s.find(fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: 0\n",
                           m.num_parameters(), m.num_parameters())) != std::string::npos);
  CHECK(s.find("so the rows add up to Total params") != std::string::npos);  // the convention
  // float32 input 2*2*8*8 = 256 values = 1024 bytes
  CHECK(s.find("Input size (MB): 0.00\n") != std::string::npos);
  CHECK(s.find("Forward pass size (MB): ") != std::string::npos);
  CHECK_ERROR_CONTAINS(m.summary_table(0), "summary_table", "batch must be positive");
}

TEST_CASE("vit: summary table of ViT-Ti/16 at batch 1 (timm's parameter count)") {
  Generator g(0);
  VisionTransformer m(ViTConfig::preset("vit_tiny_patch16_224"), g);
  const auto rows = summary_rows(m.summary_table());
  CHECK(row_of(rows, "patch_embed.proj (Conv2d)").shape == "[1, 192, 14, 14]");
  CHECK(row_of(rows, "pos_embed (Parameter)").shape == "[1, 197, 192]");
  CHECK(row_of(rows, "pos_embed (Parameter)").params == 197 * 192);
  CHECK(row_of(rows, "blocks.11 (Block)").shape == "[1, 197, 192]");
  CHECK(row_of(rows, "blocks.11.attn.qkv (Linear)").shape == "[1, 197, 576]");
  CHECK(row_of(rows, "blocks.11.mlp.fc1 (Linear)").shape == "[1, 197, 768]");
  CHECK(row_of(rows, "blocks.11.mlp.fc1 (Linear)").params == 192 * 768 + 768);
  CHECK(row_of(rows, "head (Linear)").shape == "[1, 1000]");
  CHECK(row_of(rows, "VisionTransformer").shape == "[1, 1000]");
  CHECK(rows.size() == 1 + 2 + 2 + 1 + 1 + 12 * 16 + 2);
  CHECK(sum_params(rows) == 5717416);  // timm's vit_tiny_patch16_224
  CHECK(m.num_parameters() == 5717416);
}

TEST_CASE("vit: summary table without a head, with registers, layer scale and frozen parts") {
  Generator g(6);
  ViTConfig c = tiny();
  c.depth = 1, c.num_classes = 0, c.registers = 2, c.layer_scale = true;
  VisionTransformer m(c, g);
  m.patch_embed->requires_grad_(false);
  const std::string s = m.summary_table();
  const auto rows = summary_rows(s);
  CHECK(row_of(rows, "VisionTransformer").shape == "[1, 8]");  // the class token's features
  CHECK(row_of(rows, "register_tokens (Parameter)").shape == "[1, 2, 8]");
  CHECK(row_of(rows, "register_tokens (Parameter)").params == 16);
  CHECK(rows[2].label == "register_tokens (Parameter)");  // after cls_token, before pos_embed
  CHECK(row_of(rows, "pos_embed (Parameter)").shape == "[1, 5, 8]");  // no rows for registers
  CHECK(row_of(rows, "blocks.0 (Block)").shape == "[1, 7, 8]");       // cls, 2 registers, 4 patches
  CHECK(row_of(rows, "blocks.0.ls1 (LayerScale)").params == 8);    // its gamma, read as a tensor:
  CHECK(row_of(rows, "blocks.0.ls1 (LayerScale)").shape == "--");  // the module is not called
  CHECK(rows.back().label == "norm (LayerNorm)");
  for (const SummaryRow& r : rows) CHECK(r.label != "head (Linear)");
  CHECK(sum_params(rows) == m.num_parameters());
  const int64_t frozen = 8 * 2 * 4 * 4 + 8;
  CHECK(s.find(fmt::format("Total params: {}\nTrainable params: {}\nNon-trainable params: {}\n",
                           m.num_parameters(), m.num_parameters() - frozen, frozen)) !=
        std::string::npos);
}

TEST_CASE("vit: a new head for transfer learning") {
  Generator g(6);
  VisionTransformer m(ViTConfig::preset("fmnist"), g);
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
  // A vitrine-train config: its model section, a preset with keys changed.
  const ViTConfig from_train = models::resolve_config(write("train.json", R"({"_comment": "x",
      "model": {"preset": "fmnist", "depth": 3, "stem": [32, 64, 128]}, "optim": {"lr": 1e-3}})"));
  ViTConfig expected = ViTConfig::preset("fmnist");
  expected.depth = 3;
  expected.stem = {32, 64, 128};
  CHECK(from_train.to_json() == expected.to_json());
  CHECK(models::resolve_config(write("section.json", R"({"arch": "vit", "preset": "cifar10",
      "dim": 96})"))
            .to_json() == [] {
    ViTConfig c = ViTConfig::preset("cifar10");
    c.dim = 96;
    return c.to_json();
  }());
  CHECK_ERROR_CONTAINS(
      models::resolve_config(write("resnet.json", R"({"model": {"arch": "resnet"}})")),
      "resnet.json", "this needs a Vision Transformer; this model is a resnet");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("p.json", R"({"preset": 3})")), "p.json",
                       "\"preset\" must be a preset name, got 3");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("q.json", R"({"preset": "vit_huge"})")),
                       "q.json", "vit_huge");
  CHECK_ERROR_CONTAINS(models::resolve_config("no_such_thing"), "no_such_thing", "not a preset",
                       "fmnist");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("bad.json", "{")), "bad.json", "invalid JSON");
  CHECK_ERROR_CONTAINS(models::resolve_config(write("odd.json", R"({"dim": 10, "heads": 3})")),
                       "odd.json", "not divisible");
}

TEST_CASE("vit: summary_table leaves captures, training flags and hooks as they were") {
  Generator g(7);
  VisionTransformer m(tiny(), g);
  m.capture(true, true);
  m.forward(ops::randn({2, 2, 12, 8}, g));
  Tensor a = m.attentions()[0];
  Tensor b = m.block_outputs()[1];
  auto mlp = m.blocks->at<models::ViTBlock>(1)->mlp;
  mlp->eval();  // a mixed state: the model trains, one MLP does not
  int calls = 0;
  m.head->register_forward_hook([&calls](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  m.summary_table();
  CHECK(calls == 1);  // the user's hook sees the table's forward
  CHECK(m.attentions()[0].same(a));
  CHECK(m.block_outputs()[1].same(b));
  CHECK(m.last_grid() == std::pair<int64_t, int64_t>{3, 2});
  CHECK(m.block_outputs().size() == 2);
  auto attn = m.blocks->at<models::ViTBlock>(0)->attn;
  CHECK(attn->capturing_probs());
  CHECK(attn->capturing_grads());
  CHECK(m.is_training());
  CHECK(m.blocks->at<models::ViTBlock>(0)->mlp->is_training());
  CHECK(!mlp->is_training());
  CHECK(!mlp->fc1->is_training());
  CHECK(m.blocks->at<models::ViTBlock>(1)->attn->is_training());
  m.forward(ops::randn({1, 2, 8, 8}, g));
  CHECK(calls == 2);
}

TEST_CASE(
    "vit: inference runs a batch in chunks side by side, with the same logits, and not when "
    "anything could tell") {
  // Eval mode, grad mode off, on the CPU: forward cuts the batch into chunks
  // (nn::forward_in_chunks). Each image's logits are computed as in the whole batch, except
  // that a product of fewer rows (the class token's in the last block, the head) may go to
  // another GEMM kernel, which sums in another order: equal to a few float32 (float64) ulps.
  // With the fmnist preset (two blocks), with a convolutional stem (batch norm's running
  // statistics), and with mean pooling.
  const int threads = get_num_threads();
  set_num_threads(2);
  const auto compare = [](ViTConfig c, DType dtype, int64_t batch) {
    Generator g1(21), g2(21);
    VisionTransformer a(c, g1), b(c, g2);
    b.inference_in_chunks = false;
    Tensor x = ops::randn({batch, c.channels, c.image_h, c.image_w}, g1).to(dtype);
    for (VisionTransformer* m : {&a, &b}) {
      m->to(dtype);
      m->eval();
    }
    const NoGradGuard no_grad;
    const int64_t chunks = a.inference_chunks(x);
    CHECK(chunks > 1);
    CHECK(chunks <= batch);
    CHECK(chunks % 2 == 0);  // a multiple of the thread count
    CHECK(b.inference_chunks(x) == 1);
    const Tensor ya = a.forward(x), yb = b.forward(x);
    REQUIRE(ya.shape() == Dims{batch, c.num_classes});
    const double ulp = dtype == kFloat32 ? 1.2e-7 : 2.3e-16;
    const double scale = 1 + ops::max(ops::abs(yb)).item();
    CHECK(ops::max(ops::abs(ya - yb)).item() <= 8 * ulp * scale);
    CHECK(a.last_grid() == b.last_grid());
    CHECK(a.last_grid() == std::pair<int64_t, int64_t>{c.grid_h(), c.grid_w()});
  };
  ViTConfig f = ViTConfig::preset("fmnist");
  f.depth = 2;
  compare(f, kFloat32, 40);
  compare(f, kFloat64, 7);
  ViTConfig s = f;
  s.stem = {8, 16};
  compare(s, kFloat32, 9);
  ViTConfig mean = f;
  mean.pool = "mean";
  compare(mean, kFloat32, 12);

  // Not taken when something could tell, or with one image.
  Generator g(22);
  VisionTransformer m(f, g);
  const Tensor x = ops::randn({40, 1, 28, 28}, g);
  {
    // The chunks read every Linear's weight stored transposed, a copy made for the call; the
    // modules hold their own weights again afterwards, also when a chunk throws.
    m.eval();
    const NoGradGuard no_grad;
    const Tensor w = m.head->weight, qkv = m.blocks->at<models::ViTBlock>(1)->attn->qkv->weight;
    const Dims strides = qkv.strides();
    (void)m.forward(x);
    CHECK(m.head->weight.same(w));
    CHECK(m.blocks->at<models::ViTBlock>(1)->attn->qkv->weight.same(qkv));
    CHECK(qkv.strides() == strides);
    CHECK_THROWS_WITH((void)m.forward(ops::zeros({40, 1, 30, 30}).narrow(2, 0, 29)),
                      doctest::Contains("not a multiple of the patch size"));
    CHECK(m.head->weight.same(w));
    CHECK(m.blocks->at<models::ViTBlock>(1)->attn->qkv->weight.same(qkv));
    m.train();
  }
  CHECK(m.inference_chunks(x) == 1);  // grad mode on (and training mode)
  const NoGradGuard no_grad;
  CHECK(m.inference_chunks(x) == 1);  // training mode: dropout and drop-path draws
  m.eval();
  CHECK(m.inference_chunks(x) > 1);
  CHECK(m.inference_chunks(x.slice(0, 0, 1)) == 1);
  m.blocks->at<models::ViTBlock>(1)->mlp->train();  // one module in training mode
  CHECK(m.inference_chunks(x) == 1);
  m.eval();
  const int64_t h = m.blocks->at<models::ViTBlock>(0)->norm1->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor&) { return Tensor(); });
  CHECK(m.inference_chunks(x) == 1);  // a hook sees the batch it was given
  m.blocks->at<models::ViTBlock>(0)->norm1->remove_forward_hook(h);
  m.capture(true);
  CHECK(m.inference_chunks(x) == 1);  // the captured maps are the whole batch's
  m.capture(false);
  m.blocks->at<models::ViTBlock>(0)->attn->capture(true);
  CHECK(m.inference_chunks(x) == 1);
  m.blocks->at<models::ViTBlock>(0)->attn->capture(false);
  m.inference_in_chunks = false;
  CHECK(m.inference_chunks(x) == 1);
  m.inference_in_chunks = true;
  CHECK(m.inference_chunks(x) > 1);
  // A stem's batch norm without running statistics normalises by the batch's, in eval too.
  ViTConfig sc = f;
  sc.stem = {8, 16};
  VisionTransformer st(sc, g);
  st.eval();
  CHECK(st.inference_chunks(x) > 1);
  std::dynamic_pointer_cast<nn::BatchNorm2d>((*st.stem)[1])->track_running_stats = false;
  CHECK(st.inference_chunks(x) == 1);
  set_num_threads(threads);
}

TEST_CASE("vit: intermediate_layers gives the last n blocks' tokens, normed as DINO's") {
  Generator g(4);
  VisionTransformer m(tiny(), g);
  m.eval();
  const Tensor x = ops::randn({2, 2, 8, 8}, g);
  m.capture(true);
  (void)m.forward_features(x);
  const std::vector<Tensor> blocks = m.block_outputs();  // every block's tokens, unnormed
  m.capture(false);
  REQUIRE(blocks.size() == 2);
  const std::vector<Tensor> both = m.intermediate_layers(x, 2);
  REQUIRE(both.size() == 2);
  CHECK(both[0].shape() == Dims{2, 5, 8});
  check_close(both[0], m.norm->forward(blocks[0]), 1e-6);
  check_close(both[1], m.forward_features(x), 1e-6);
  const std::vector<Tensor> raw = m.intermediate_layers(x, 1, false);
  REQUIRE(raw.size() == 1);
  check_close(raw[0], blocks[1], 1e-6);
  CHECK_ERROR_CONTAINS(m.intermediate_layers(x, 3), "n = 3", "depth = 2");
  // Without a final norm (final_norm false) there is nothing to norm with.
  ViTConfig c = tiny();
  c.final_norm = false;
  VisionTransformer bare(c, g);
  bare.eval();
  CHECK(bare.norm == nullptr);
  check_close(bare.intermediate_layers(x, 1)[0], bare.forward_features(x), 1e-6);
}
