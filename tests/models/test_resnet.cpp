// The CIFAR ResNet (models/resnet.h) against PyTorch on the same weights
// (tests/fixtures/resnet_parity.json, made by tests/fixtures/make_resnet_fixtures.py): logits and
// input gradients in eval mode (running statistics) and in training mode (batch statistics, which
// it updates as PyTorch does); names, presets, config errors.
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
