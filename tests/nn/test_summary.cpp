// nn::summary on a CNN a user builds from nn layers: every row (pre-order, output shapes of a
// forward on zeros, own parameters) and the totals against hand counts; the module is left as it
// was (training flags, no hooks). The ViT's and the ResNet's tables are in tests/models.
#include <tuple>

#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {

/// features (conv, batch norm, ReLU, max pool, conv, ReLU, global average pool, flatten), then
/// fc, times a learned scale the top module owns itself (a Parameter row).
struct SmallCNN : nn::Module {
  explicit SmallCNN(Generator& gen) {
    features = register_module(
        "features",
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1, true, gen),
            std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::MaxPool2d>(2),
            std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1, true, gen), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>()}));
    fc = register_module("fc", std::make_shared<nn::Linear>(16, 10, true, gen));
    scale = register_parameter("scale", ops::ones({1}));
  }
  Tensor forward(const Tensor& x) override { return (*fc)((*features)(x)) * scale; }
  std::string type_name() const override { return "SmallCNN"; }
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> fc;
  Tensor scale;
};

}  // namespace

TEST_CASE("nn summary: a CNN built from nn layers, its rows and its totals by hand") {
  Generator gen(0);
  SmallCNN m(gen);
  m.features->child("0")->requires_grad_(false);  // the first convolution frozen
  const std::string s = nn::summary(m, {2, 1, 12, 12});
  INFO(s);
  const auto rows = summary_rows(s);
  const int64_t conv1 = 8 * 1 * 3 * 3 + 8, bn = 2 * 8, conv2 = 16 * 8 * 3 * 3 + 16;
  const int64_t fc = 16 * 10 + 10;
  const std::vector<std::tuple<int, std::string, std::string, int64_t>> expected{
      {0, "SmallCNN", "[2, 10]", 0},
      {1, "scale (Parameter)", "[1]", 1},
      {1, "features (Sequential)", "[2, 16]", 0},
      {2, "features.0 (Conv2d)", "[2, 8, 12, 12]", conv1},
      {2, "features.1 (BatchNorm2d)", "[2, 8, 12, 12]", bn},
      {2, "features.2 (ReLU)", "[2, 8, 12, 12]", 0},
      {2, "features.3 (MaxPool2d)", "[2, 8, 6, 6]", 0},
      {2, "features.4 (Conv2d)", "[2, 16, 6, 6]", conv2},
      {2, "features.5 (ReLU)", "[2, 16, 6, 6]", 0},
      {2, "features.6 (AdaptiveAvgPool2d)", "[2, 16, 1, 1]", 0},
      {2, "features.7 (Flatten)", "[2, 16]", 0},
      {1, "fc (Linear)", "[2, 10]", fc}};
  REQUIRE(rows.size() == expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i << ": " << rows[i].label);
    CHECK(rows[i].depth == std::get<0>(expected[i]));
    CHECK(rows[i].label == std::get<1>(expected[i]));
    CHECK(rows[i].shape == std::get<2>(expected[i]));
    CHECK(rows[i].params == std::get<3>(expected[i]));
  }
  const int64_t total = conv1 + bn + conv2 + fc + 1;
  CHECK(total == 1435);
  CHECK(m.num_parameters() == total);
  CHECK(sum_params(rows) == total);
  CHECK(count(s, "Total params: 1,435\nTrainable params: 1,355\nNon-trainable params: 80\n") == 1);
  // float32: input 2*1*12*12 values = 1,152 bytes; leaf outputs (3 maps of 2*8*12*12, 2*8*6*6,
  // 2 of 2*16*6*6, 2 of 2*16, 2*10 values) 39,504 bytes; parameters 1,435*4 = 5,740 bytes
  CHECK(count(s, "Input size (MB): 0.00\n") == 1);
  CHECK(count(s, "Forward pass size (MB): 0.04 (the leaf modules' outputs)\n") == 1);
  CHECK(count(s, "Params size (MB): 0.01\n") == 1);
  CHECK(count(s, "Estimated total size (MB): 0.05\n") == 1);

  // Left as it was: training flags, no hooks; a later forward records gradients again.
  CHECK(m.is_training());
  CHECK(m.features->is_training());
  CHECK_FALSE(m.has_forward_hooks_below());
  Tensor y = m(ops::ones({1, 1, 12, 12}));
  CHECK(y.requires_grad());
  CHECK_ERROR_CONTAINS(nn::summary(m, {0, 1, 12, 12}), "summary", "batch must be positive");
}
