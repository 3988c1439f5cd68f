// The CIFAR ResNet (models/resnet.h) against PyTorch on the same weights
// (tests/fixtures/resnet_parity.json, made by tests/fixtures/make_resnet_fixtures.py): logits and
// input gradients in eval mode (running statistics) and in training mode (batch statistics, which
// it updates as PyTorch does); inference with the batch norms folded into the convolutions;
// names, presets, config errors.
#include "models/resnet.h"
#include "resnet_fixture.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

TEST_CASE("resnet: PyTorch parity of logits and input gradients, eval and training mode") {
  const auto& c = resnet_case();
  auto m = fixture_resnet();
  for (const char* mode : {"eval", "train"}) {
    INFO(std::string(mode));
    m->train(std::string(mode) == "train");
    Tensor x = fixture_tensor(c.at("input"));
    x.requires_grad_();
    Tensor y = (*m)(x);
    CHECK(y.shape() == Dims{3, 5});
    check_close(y, fixture_tensor(c.at(mode).at("logits")), 1e-10, 1e-10);
    ops::sum(y * fixture_tensor(c.at("r"))).backward();
    check_close(x.grad(), fixture_tensor(c.at(mode).at("input_grad")), 1e-10, 1e-10);
  }
  for (auto& item : m->named_buffers()) {
    auto& n = item.first;
    auto& b = item.second;
    INFO(n);
    check_close(b.to(kFloat64), fixture_tensor(c.at("train").at("buffers").at(n)), 1e-12, 1e-12);
  }
}

TEST_CASE("resnet: torchvision's names, depth 6n + 2, presets and config errors") {
  Generator g(0);
  models::ResNet r20(models::ResNetConfig::preset("resnet20"), g);
  CHECK(r20.num_parameters() == 272474);  // He et al.'s 0.27M
  const auto names = r20.state_dict();
  CHECK(names.front().first == "conv1.weight");
  bool has_downsample = false, has_fc = false;
  for (auto& [n, t] : names) {
    has_downsample |= n == "layer2.0.downsample.0.weight";
    has_fc |= n == "fc.weight";
  }
  CHECK(has_downsample);
  CHECK(has_fc);
  CHECK(r20(ops::randn({2, 3, 32, 32}, g)).shape() == Dims{2, 10});
  CHECK(r20.forward_features(ops::randn({1, 3, 28, 28}, g)).shape() == Dims{1, 64});

  models::ResNetConfig c = models::ResNetConfig::from_json(
      {{"arch", "resnet"}, {"depth", 8}, {"channels", 1}, {"image_size", 28}});
  CHECK(c.image_h == 28);
  CHECK(models::ResNetConfig::from_json(c.to_json()).to_json() == c.to_json());
  CHECK_ERROR_CONTAINS(models::ResNetConfig::from_json({{"depth", 10}}), "model.depth", "6 n + 2",
                       "10");
  CHECK_ERROR_CONTAINS(models::ResNetConfig::from_json({{"dim", 10}}), "unknown model key 'dim'");
  CHECK_ERROR_CONTAINS(models::ResNetConfig::preset("resnet50"), "unknown preset 'resnet50'",
                       "resnet20");
  CHECK_ERROR_CONTAINS(r20(ops::zeros({1, 1, 32, 32})), "ResNet", "[B, 3, H, W]");
}

TEST_CASE("resnet: nn::summary of ResNet-8, every parameter on a row, the total by hand") {
  Generator g(0);
  models::ResNetConfig c = models::ResNetConfig::preset("resnet8");
  c.channels = 1;  // vitrine-train's Fashion-MNIST ResNet-8
  models::ResNet m(c, g);
  const std::string s = nn::summary(m, {1, 1, 28, 28});
  INFO(s);
  const auto rows = summary_rows(s);
  // stem 3x3 conv (no bias) and its batch norm; per block two 3x3 convs and two batch norms, the
  // blocks that halve the map a 1x1 conv and a batch norm more; fc with its bias
  const int64_t stem = 16 * 1 * 9 + 2 * 16;
  const int64_t layer1 = 2 * (16 * 16 * 9 + 2 * 16);
  const int64_t layer2 = 32 * 16 * 9 + 32 * 32 * 9 + 2 * 2 * 32 + 32 * 16 + 2 * 32;
  const int64_t layer3 = 64 * 32 * 9 + 64 * 64 * 9 + 2 * 2 * 64 + 64 * 32 + 2 * 64;
  const int64_t fc = 64 * 10 + 10;
  CHECK(stem + layer1 + layer2 + layer3 + fc == 77754);
  CHECK(m.num_parameters() == 77754);
  int64_t numel = 0;
  for (const Tensor& p : m.parameters()) numel += p.numel();
  CHECK(sum_params(rows) == numel);
  CHECK(count(s, "Total params: 77,754\nTrainable params: 77,754\n") == 1);
  CHECK(rows.front().label == "ResNet");
  CHECK(rows.front().shape == "[1, 10]");
  CHECK(row_of(rows, "conv1 (Conv2d)").shape == "[1, 16, 28, 28]");
  CHECK(row_of(rows, "conv1 (Conv2d)").params == 16 * 9);
  CHECK(row_of(rows, "layer1 (Sequential)").shape == "[1, 16, 28, 28]");
  CHECK(row_of(rows, "layer2.0.downsample.0 (Conv2d)").shape == "[1, 32, 14, 14]");
  CHECK(row_of(rows, "layer2.0.downsample.0 (Conv2d)").depth == 4);
  CHECK(row_of(rows, "layer2.0.downsample.0 (Conv2d)").params == 32 * 16);
  CHECK(row_of(rows, "layer3.0.bn2 (BatchNorm2d)").shape == "[1, 64, 7, 7]");  // hooked: unfused
  CHECK(row_of(rows, "layer3 (Sequential)").shape == "[1, 64, 7, 7]");
  CHECK(row_of(rows, "fc (Linear)").shape == "[1, 10]");
  CHECK(row_of(rows, "fc (Linear)").params == fc);
  CHECK(rows.size() == m.named_modules().size());  // no module owns a tensor beside children
  CHECK(m.is_training());
  CHECK_FALSE(m.has_forward_hooks_below());
}

TEST_CASE("resnet: inference folds batch norm into the convolutions, as PyTorch's eval computes") {
  // float64, the fixture's weights: eval mode without a gradient takes the folded path
  // (nn::fuse_conv_bn_weights, ops::conv2d_add_relu), and gives PyTorch's eval logits.
  const auto& c = resnet_case();
  auto m = fixture_resnet();
  m->eval();
  {
    NoGradGuard no_grad;
    check_close((*m)(fixture_tensor(c.at("input"))), fixture_tensor(c.at("eval").at("logits")),
                1e-10, 1e-10);
  }
  // float32, width 64 (Winograd's 3x3s, the implicit GEMM's stem, im2col's strided ones), batch
  // norms with statistics and affine parameters of their own: the folded model against the
  // modules one by one (BatchNorm2d::fused_relu off), to float32's rounding.
  Generator gen(3);
  models::ResNetConfig cfg = models::ResNetConfig::preset("resnet8");
  cfg.channels = 1;
  cfg.width = 64;
  cfg.image_h = cfg.image_w = 14;
  models::ResNet r(cfg, gen);
  uint64_t seed = 90;
  for (auto& [name, t] : r.named_buffers())
    if (name.find("running_") != std::string::npos)
      t.copy_(rand64(t.shape(), seed++, 0.5, name.find("var") != std::string::npos ? 1.0 : 0.0));
  for (auto& [name, t] : r.named_parameters())
    if (name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos)
      t.detach().copy_(rand64(t.shape(), seed++, 0.5, name.find("weight") != std::string::npos));
  r.eval();
  const Tensor x = rand64({5, 1, 14, 14}, 99).to(kFloat32);
  NoGradGuard no_grad;
  const Tensor folded = r(x);
  nn::BatchNorm2d::fused_relu = false;
  const Tensor modules = r(x);
  nn::BatchNorm2d::fused_relu = true;
  check_close(folded, modules, 1e-4, 1e-4);
  // The folded path ran: its weights round once more, so some logit differs in its last bits
  // (seeded, so this is no coin toss), and the batch norms say they may be folded only here.
  CHECK(ops::max(ops::abs(ops::sub(folded, modules))).item<double>() > 0);
  CHECK(r.bn1->foldable());
  {
    GradModeGuard grad(true);
    CHECK_FALSE(r.bn1->foldable());
  }
  r.train();
  CHECK_FALSE(r.bn1->foldable());
  r.eval();
  // A forward hook on a batch norm is called: that block runs its modules.
  int calls = 0;
  r.layer2->child("0")->child("bn1")->register_forward_hook(
      [&calls](nn::Module&, const Tensor&, const Tensor& y) {
        ++calls;
        return y;
      });
  check_close(r(x), folded, 1e-4, 1e-4);
  CHECK(calls == 1);
}
