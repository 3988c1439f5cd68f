// nn modules: registration and names, train/eval, freezing, init statistics, and PyTorch parity of
// Linear, LayerNorm, Conv2d, MLP and attention (tests/fixtures/nn_modules.json, timm's formulas).
#include <cmath>
#include <fstream>

#include "module_parity.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {

/// A two-level model to test naming.
struct Block : nn::Module {
  Block() {
    attn = register_module("attn", std::make_shared<nn::MultiheadSelfAttention>(8, 2));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(8));
  }
  std::shared_ptr<nn::MultiheadSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> norm;
};
struct Net : nn::Module {
  Net() {
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks->push_back(std::make_shared<Block>());
    blocks->push_back(std::make_shared<Block>());
    head = register_module("head", std::make_shared<nn::Linear>(8, 3));
    pos = register_parameter("pos_embed", ops::zeros({1, 4, 8}));
    register_buffer("counter", ops::zeros({1}));
  }
  std::string type_name() const override { return "Net"; }
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::Linear> head;
  Tensor pos;
};

}  // namespace

TEST_CASE("module: hierarchical names, parameters, buffers, state_dict") {
  Net net;
  auto names = net.named_parameters();
  std::vector<std::string> n;
  for (auto& [k, v] : names) n.push_back(k);
  CHECK(n.front() == "pos_embed");
  CHECK(std::find(n.begin(), n.end(), "blocks.0.attn.qkv.weight") != n.end());
  CHECK(std::find(n.begin(), n.end(), "blocks.1.norm.bias") != n.end());
  CHECK(n.back() == "head.bias");
  CHECK(net.named_buffers().size() == 1);
  CHECK(net.state_dict().size() == names.size() + 1);
  // qkv 8*24+24, proj 8*8+8, norm 16 per block; head 8*3+3; pos 32
  CHECK(net.num_parameters() == 2 * (216 + 72 + 16) + 27 + 32);
  CHECK(net.child("head") == net.head);
  CHECK_ERROR_CONTAINS(net.child("nope"), "Net", "no child module 'nope'", "blocks, head");
  CHECK(net.named_modules().size() == 1 + 1 + 2 * (1 + 1 + 4 + 1) + 1);
  CHECK(net.summary().find("total parameters: 667") != std::string::npos);
}

TEST_CASE("module: apply visits children before parents, as torch.nn.Module.apply") {
  Net net;
  std::vector<std::string> order;
  nn::Module& self = net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  CHECK(&self == &net);
  CHECK(order.size() == net.named_modules().size());
  CHECK(order.back() == "Net");
  CHECK(order[order.size() - 2] == "Linear");  // head, the last child
  // DCGAN's weights_init: every Linear's weight drawn again, through dynamic_cast.
  Generator gen(7);
  int linears = 0;
  net.apply([&](nn::Module& m) {
    if (auto* l = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::normal_(l->weight, 0.0, 0.02, gen);
      nn::init::zeros_(l->bias);
      ++linears;
    }
  });
  CHECK(linears == 2 * 2 + 1);  // qkv and proj per block, head
  CHECK(ops::max(ops::abs(net.head->bias)).item() == 0.0);
  const Tensor qkv = net.blocks->child("0")->named_parameters()[0].second;  // 8 x 24
  CHECK(std::sqrt(ops::var(qkv).item()) == doctest::Approx(0.02).epsilon(0.3));
}

TEST_CASE("module: registration errors") {
  Net net;
  CHECK_ERROR_CONTAINS(net.register_parameter("head", ops::zeros({1})), "already registered");
  CHECK_ERROR_CONTAINS(net.register_parameter("a.b", ops::zeros({1})), "invalid");
  CHECK_ERROR_CONTAINS(nn::Linear(3, 4).forward(ops::zeros({2, 5})), "Linear", "[2, 5]",
                       "in_features = 3");
  CHECK_ERROR_CONTAINS(nn::MultiheadSelfAttention(10, 3), "not divisible");
  CHECK_ERROR_CONTAINS(nn::ModuleList().forward(ops::zeros({1})), "ModuleList",
                       "no single-input forward");
}

TEST_CASE("module: forward hooks see calls through operator(), may replace the output, detach") {
  nn::Sequential seq;
  auto fc = std::make_shared<nn::Linear>(2, 2);
  seq.push_back(fc);
  Tensor x = ops::ones({1, 2});
  int calls = 0;
  Tensor seen;
  const int64_t keep =
      fc->register_forward_hook([&](nn::Module& m, const Tensor& in, const Tensor& out) {
        CHECK(&m == fc.get());
        CHECK(in.same(x));
        ++calls;
        seen = out;
        return Tensor();  // keep the output
      });
  Tensor y = seq.forward(x);
  CHECK(calls == 1);
  CHECK(seen.same(y));
  fc->forward(x);  // a direct forward skips hooks, as in PyTorch
  CHECK(calls == 1);
  const int64_t twice = fc->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) { return out * 2.0; });
  check_close((*fc)(x), fc->forward(x) * 2.0, 0, 0);
  CHECK(calls == 2);
  fc->remove_forward_hook(twice);
  fc->remove_forward_hook(keep);
  fc->remove_forward_hook(keep);  // unknown handles are ignored
  check_close((*fc)(x), fc->forward(x), 0, 0);
  CHECK(calls == 2);
}

TEST_CASE("module: train/eval reaches every descendant, dropout is identity in eval") {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Identity>()});
  CHECK((*seq)[0]->is_training());
  seq->eval();
  CHECK(!(*seq)[0]->is_training());
  Tensor x = ops::ones({100});
  check_close(seq->forward(x), std::vector<double>(100, 1.0));
  seq->train();
  Tensor y = seq->forward(x);
  double zeros = ops::sum(ops::eq(y, ops::zeros_like(y)).to(kFloat32)).item();
  CHECK(zeros > 20);
  CHECK(zeros < 80);
}

TEST_CASE("module: zero_grad and freezing a sub-module") {
  Net net;
  net.blocks->requires_grad_(false);
  CHECK(net.num_parameters(true) == 27 + 32);
  for (auto& [n, p] : net.named_parameters())
    CHECK(p.requires_grad() == (n.rfind("blocks", 0) != 0));
  Tensor x = ops::ones({2, 8});
  ops::sum(net.head->forward(x)).backward();
  CHECK(net.head->weight.grad().defined());
  net.zero_grad(false);
  check_close(net.head->bias.grad(), {0, 0, 0});
  net.zero_grad();
  CHECK(!net.head->weight.grad().defined());
}

TEST_CASE("module: to(dtype) converts in place, keeping the member handles") {
  nn::Linear lin(3, 2);
  Tensor w = lin.weight;
  lin.to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(lin.weight.dtype() == kFloat64);
  CHECK(lin.weight.requires_grad());
  CHECK(lin.forward(ops::ones({1, 3}, kFloat64)).dtype() == kFloat64);
}

TEST_CASE("linear: PyTorch parity (output, input and parameter gradients)") {
  nn::Linear m(5, 3);
  check_parity(m, "linear");
}
TEST_CASE("layer_norm module: PyTorch parity") {
  nn::LayerNorm m(6, 1e-6);
  check_parity(m, "layer_norm");
}
TEST_CASE("conv2d module: PyTorch parity") {
  nn::Conv2d m(3, 4, {2, 2}, {2, 2});
  check_parity(m, "conv2d");
}
TEST_CASE("conv2d module: integer sizes as PyTorch's, the same layer as the pair form") {
  Generator g1(3), g2(3), g3(4);
  nn::Conv2d ints(3, 5, 3, 2, 1, true, g1);  // torch.nn.Conv2d(3, 5, 3, 2, 1)
  nn::Conv2d pairs(3, 5, {3, 3}, {2, 2}, {1, 1}, true, g2);
  CHECK(ints.kernel == std::pair<int64_t, int64_t>{3, 3});
  CHECK(ints.stride == pairs.stride);
  CHECK(ints.padding == pairs.padding);
  CHECK(ints.weight.shape() == Dims{5, 3, 3, 3});
  check_close(ints.weight, pairs.weight, 0, 0);  // the same seed draws the same init
  check_close(ints.bias, pairs.bias, 0, 0);
  Tensor x = ops::randn({2, 3, 7, 9}, g3);
  Tensor yi = ints(x), yp = pairs(x);
  CHECK(yi.shape() == Dims{2, 5, 4, 5});  // (7 + 2 - 3) / 2 + 1, (9 + 2 - 3) / 2 + 1
  CHECK(yp.shape() == yi.shape());
  check_close(yi, yp, 0, 0);
  check_close(yi, ops::conv2d(x, ints.weight, ints.bias, {2, 2}, {1, 1}), 0, 0);

  nn::Conv2d defaults(3, 5, 3);  // stride 1, padding 0, with bias, as PyTorch
  CHECK(defaults.stride == std::pair<int64_t, int64_t>{1, 1});
  CHECK(defaults.padding == std::pair<int64_t, int64_t>{0, 0});
  CHECK(defaults.bias.defined());
  CHECK(defaults(x).shape() == Dims{2, 5, 5, 7});
  nn::Conv2d mixed(3, 5, {3, 5}, 1, {1, 2}, false);  // integers and pairs mixed
  CHECK(mixed.weight.shape() == Dims{5, 3, 3, 5});
  CHECK(!mixed.bias.defined());
  CHECK(mixed(x).shape() == Dims{2, 5, 7, 9});
  const int64_t k = 4;
  CHECK(nn::Conv2d(3, 5, std::pair{k, k}, std::pair{2, 2}).weight.shape() == Dims{5, 3, 4, 4});
  CHECK_ERROR_CONTAINS(nn::Conv2d(3, 5, 3, 0), "Conv2d", "stride must be positive", "0x0");
  CHECK_ERROR_CONTAINS(nn::Conv2d(3, 5, 0), "Conv2d", "kernel sizes must be positive", "0x0");
}
TEST_CASE("activation modules: PyTorch parity (ReLU, Tanh, Sigmoid, SiLU) and gradcheck") {
  nn::ReLU relu;
  nn::Tanh tanh_module;
  nn::Sigmoid sigmoid;
  nn::SiLU silu;
  const std::vector<std::pair<std::string, nn::Module*>> modules = {
      {"relu", &relu}, {"tanh", &tanh_module}, {"sigmoid", &sigmoid}, {"silu", &silu}};
  for (const auto& item : modules) {
    const auto& name = item.first;
    const auto& m = item.second;
    INFO(name);
    check_parity(*m, name);
    CHECK(m->num_parameters() == 0);
    // away from ReLU's kink at 0, where the finite differences straddle it
    Tensor x = rand64({2, 5}, 3, 2.0, 0.25);
    check_grad([m = m](const std::vector<Tensor>& v) { return m->forward(v[0]); }, {x});
  }
  CHECK(relu.type_name() == "ReLU");
  CHECK(silu.type_name() == "SiLU");
}

TEST_CASE("mlp: PyTorch parity (timm's Mlp)") {
  nn::MLP m(8, 16);
  CHECK(m.fused());  // one op, ops::mlp with the exact GELU
  check_parity(m, "mlp");
}
TEST_CASE(
    "mlp: runs as one op only when nothing observes the inside, with the same values either way") {
  Generator g(4);
  nn::MLP m(8, 16, 6, 0.0, g);
  m.to(kFloat64);
  Tensor x = rand64({3, 8}, 1), r = rand64({3, 6}, 2);
  CHECK(m.fused());
  const Tensor fused = m.forward(x), fused_add = m.forward_add(x, r);
  int calls = 0;
  const int64_t h = m.act->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  CHECK_FALSE(m.fused());  // a hook on GELU must see its output
  check_close(m.forward(x), fused, 1e-12, 1e-12);
  check_close(m.forward_add(x, r), fused_add, 1e-12, 1e-12);
  check_close(fused_add, fused + r, 1e-12, 1e-12);
  CHECK(calls == 2);
  m.act->remove_forward_hook(h);
  CHECK(m.fused());
  nn::MLP dropping(8, 16, 6, 0.1, g);
  CHECK_FALSE(dropping.fused());  // dropout at work between the layers
  dropping.eval();
  CHECK(dropping.fused());
  std::dynamic_pointer_cast<nn::GELU>(m.act)->tanh_approx = true;
  CHECK(m.fused());  // the tanh GELU fused too (ops::mlp; tests/nn/test_mlp_activations.cpp)
  check_grad([&](const std::vector<Tensor>& v) { return m.forward_add(v[0], v[1]); }, {x, r});
}
TEST_CASE("attention: PyTorch parity (timm's Attention), probabilities captured") {
  nn::MultiheadSelfAttention m(8, 2, true);
  m.capture(true);
  check_parity(m, "attention");
  check_close(m.attention(), fixture_tensor(module_case("attention").at("attention")), 1e-12,
              1e-12);
}
TEST_CASE("attention: PyTorch parity without qkv bias") {
  nn::MultiheadSelfAttention m(12, 3, false);
  CHECK(!m.qkv->bias.defined());
  check_parity(m, "attention_no_qkv_bias");
}
TEST_CASE("attention: gradcheck, and the captured gradient equals d(target)/d(attention)") {
  nn::MultiheadSelfAttention m(4, 2, true);
  m.to(kFloat64);
  Tensor x = rand64({1, 3, 4}, 1);
  check_grad([&](const std::vector<Tensor>& v) { return m.forward(v[0]); }, {x});
  m.capture(true, true);
  Tensor y = m.forward(x);
  Tensor attn = m.attention();
  CHECK(attn.shape() == Dims{1, 2, 3, 3});
  check_close(ops::sum(attn, {-1}), std::vector<double>(6, 1.0), 1e-12);
  Tensor target = ops::sum(y.select(1, 0));
  Tensor expected = grad({target}, {attn}, {}, true)[0];
  target.backward();
  check_close(m.attention_grad(), expected, 1e-12);
}

TEST_CASE("drop_path: per-sample keep or drop in training, identity in eval") {
  Generator g(3);
  nn::DropPath dp(0.5, g);
  Tensor x = ops::ones({64, 3, 2});
  Tensor y = dp.forward(x);
  int dropped = 0;
  for (int64_t b = 0; b < 64; ++b) {
    Tensor s = y.select(0, b);
    double v = s.at({0, 0});
    CHECK((v == 0.0 || v == 2.0));
    check_close(s, std::vector<double>(6, v));  // the whole sample shares the decision
    dropped += v == 0.0;
  }
  CHECK(dropped > 16);
  CHECK(dropped < 48);
  dp.eval();
  CHECK(dp.forward(x).same(x));
}

TEST_CASE("init: distributions, bounds, and seeded reproducibility") {
  Generator g(11);
  Tensor t = ops::empty({200, 500});
  nn::init::trunc_normal_(t, 0, 0.02, -0.04, 0.04, g);
  CHECK(ops::max(t).item() <= 0.04);
  CHECK(ops::min(t).item() >= -0.04);
  // std of N(0, 1) truncated to [-2, 2] is 0.8796
  CHECK(std::sqrt(ops::var(t.to(kFloat64)).item()) == doctest::Approx(0.02 * 0.8796).epsilon(0.01));
  nn::init::xavier_uniform_(t, 1.0, g);
  double bound = std::sqrt(6.0 / 700.0);
  CHECK(ops::max(ops::abs(t)).item() <= bound);
  CHECK(ops::max(ops::abs(t)).item() > 0.99 * bound);
  nn::init::normal_(t, 1.0, 2.0, g);
  CHECK(ops::mean(t).item() == doctest::Approx(1.0).epsilon(0.01));
  Generator a(5), b(5);
  nn::Linear l1(4, 4, true, a), l2(4, 4, true, b);
  check_close(l1.weight, l2.weight, 0, 0);
  CHECK(nn::init::erfinv(0.5) == doctest::Approx(0.4769362762044699).epsilon(1e-14));
  CHECK(nn::init::erfinv(-0.999) == doctest::Approx(-2.326753765513525).epsilon(1e-13));
}

TEST_CASE("losses: mse and the cross-entropy module") {
  Tensor a = ops::tensor({1, 2, 3}), b = ops::tensor({1, 0, 0});
  CHECK(nn::mse_loss(a, b).item() == doctest::Approx(13.0 / 3));
  CHECK(nn::MSELoss(ops::Reduction::Sum).forward(a, b).item() == doctest::Approx(13.0));
  check_grad([](const std::vector<Tensor>& v) { return nn::mse_loss(v[0], v[1]); },
             {rand64({4}, 1), rand64({4}, 2)});
  nn::CrossEntropyLoss ce(0.1);
  Tensor logits = ops::tensor({2, 0, -1, 0.5, 0, 1, 0, 3}).reshape({2, 4});
  Tensor target = ops::from_vector(std::vector<int64_t>{1, 3});
  double smoothed = ops::cross_entropy(logits, target, ops::Reduction::Mean, 0.1).item();
  CHECK(ce.forward(logits, target).item() == smoothed);
  CHECK(smoothed != doctest::Approx(ops::cross_entropy(logits, target).item()));
  CHECK_ERROR_CONTAINS(nn::mse_loss(a, ops::zeros({2})), "mse_loss", "[3]", "[2]");
}

TEST_CASE("module: a tied parameter is listed once, state_dict keeps both names") {
  struct Owner : nn::Module {
    Owner() {
      w = register_parameter("w", ops::zeros({2}));
      first = register_module("first", std::make_shared<nn::Identity>());
      first->register_parameter("w", w);  // the same tensor under a second name
    }
    Tensor w;
    std::shared_ptr<nn::Identity> first;
  };
  Owner o;
  CHECK(o.named_parameters().size() == 1);
  CHECK(o.state_dict().size() == 2);
  CHECK(o.num_parameters() == 2);
  nn::optim::AdamW opt(o.parameters());  // no "appears more than once"
  CHECK(opt.param_groups()[0].params.size() == 1);
}
