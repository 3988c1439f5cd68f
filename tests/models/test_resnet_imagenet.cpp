// The ImageNet ResNets of models/resnet.h (the imagenet stem, four stages) against torchvision
// (tests/fixtures/resnet_parity.json, made by make_resnet_fixtures.py): torchvision's own
// ResNet-18 narrowed to width 2, loaded by name from a safetensors file as a converted
// torchvision state_dict is, its logits in eval and training mode and every parameter's
// gradient; the presets resnet18 and resnet34 against torchvision's state_dict names, shapes
// and parameter counts; the layers / stem / depth fields and their errors.
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "models/classifier.h"
#include "models/resnet.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const json& width2_case() { return fixture_case("resnet_parity.json", "resnet18_width2"); }

/// The fixture's state as a safetensors file holds it: torchvision's names, floats in dtype.
std::string write_torchvision_state(const TempDir& dir, DType dtype) {
  nn::NamedTensors state;
  for (const auto& [name, t] : width2_case().at("state").items()) {
    const bool count = name.ends_with("num_batches_tracked");
    state.emplace_back(name, fixture_tensor(t, count ? kInt64 : dtype));
  }
  const std::string path = dir / "resnet18_width2.safetensors";
  nn::write_safetensors(path, state);
  return path;
}

/// {name: shape} of every state_dict entry (a safetensors file is a map of names).
json names_and_shapes(const nn::Module& m) {
  json out = json::object();
  for (const auto& item : m.state_dict()) out[item.first] = item.second.shape().vec();
  return out;
}

/// The same from the fixture's [[name, shape], ...] (torchvision's state_dict order).
json names_and_shapes(const json& state) {
  json out = json::object();
  for (const json& entry : state) out[entry.at(0).get<std::string>()] = entry.at(1);
  return out;
}

}  // namespace

TEST_CASE("resnet imagenet: torchvision's ResNet-18 at width 2, logits and parameter gradients") {
  const json& c = width2_case();
  const models::ResNetConfig config = models::ResNetConfig::from_json(c.at("config"));
  CHECK(config.depth == 18);
  CHECK(config.stem == "imagenet");
  TempDir dir;
  // float64 holds PyTorch's float64 to rounding; float32 to 1e-4 (gradients: below).
  for (const auto& run : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 1e-4}}) {
    const DType dtype = run.first;
    const double tol = run.second;
    INFO(dtype_name(dtype));
    models::ResNet m(config);
    m.to(dtype);
    const nn::LoadResult loaded = nn::load_checkpoint(write_torchvision_state(dir, dtype), m);
    CHECK(loaded.ok());
    const Tensor x = fixture_tensor(c.at("input"), dtype);

    m.eval();
    {
      NoGradGuard no_grad;
      check_close(m(x).to(kFloat64), fixture_tensor(c.at("eval").at("logits")), tol, tol);
    }

    m.train();
    const Tensor y = m(x);
    CHECK(y.shape() == Dims{2, 5});
    check_close(y.to(kFloat64), fixture_tensor(c.at("train").at("logits")), tol, tol);
    ops::sum(y * fixture_tensor(c.at("r"), dtype)).backward();
    const json& grads = c.at("train").at("grads");
    const auto params = m.named_parameters();
    CHECK(params.size() == grads.size());
    for (const auto& item : params) {
      INFO(item.first);
      REQUIRE(grads.contains(item.first));
      REQUIRE(item.second.grad().defined());
      const Tensor got = item.second.grad().to(kFloat64),
                   want = fixture_tensor(grads.at(item.first));
      if (std::getenv("VITRINE_PARITY_REPORT"))
        MESSAGE(item.first << ": max error " << ops::max(ops::abs(got - want)).item()
                           << ", max |grad| " << ops::max(ops::abs(want)).item());
      // float32 gradients: batch norm in training mode on 2 images mixes every position's terms
      // into each gradient, and float32 sums round relative to their largest terms, not to the
      // result (a bias gradient of 0.07 from terms of order 1). Against float64, over OpenBLAS's
      // Haswell, Sandybridge, Nehalem, Prescott, Barcelona and Core2 kernels: at most 1.8e-4
      // absolute (conv1.weight, whose gradients reach 13). Hence 5e-4 absolute for gradients.
      check_close(got, want, dtype == kFloat64 ? tol : 5e-4, tol);
    }
    for (const auto& item : m.named_buffers()) {  // the running statistics training updated
      INFO(item.first);
      check_close(item.second.to(kFloat64),
                  fixture_tensor(c.at("train").at("buffers").at(item.first)), tol, tol);
    }
  }
}

TEST_CASE("resnet imagenet: the presets resnet18 and resnet34 are torchvision's, name for name") {
  const json& tv = fixture_case("resnet_parity.json", "torchvision");
  for (const auto& preset :
       {std::pair<std::string, int64_t>{"resnet18", 11689512}, {"resnet34", 21797672}}) {
    const std::string name = preset.first;
    const int64_t count = preset.second;  // torchvision's
    INFO(name);
    const models::ResNetConfig config = models::ResNetConfig::preset(name);
    Generator g(0);
    models::ResNet m(config, g);
    CHECK(m.num_parameters() == count);
    CHECK(tv.at(name).at("parameters").get<int64_t>() == count);
    CHECK(names_and_shapes(m) == names_and_shapes(tv.at(name).at("state")));
    CHECK(config.min_parameters() <= m.num_parameters());
    CHECK(config.last_stage() == "layer4");
    CHECK(m.layer4 == m.stages.back());
    CHECK(m.maxpool != nullptr);
    CHECK(models::ResNetConfig::from_json(config.to_json()).to_json() == config.to_json());
  }
  const models::ResNetConfig r18 = models::ResNetConfig::preset("resnet18");
  CHECK(r18.to_json() == json{{"arch", "resnet"},
                              {"depth", 18},
                              {"channels", 3},
                              {"num_classes", 1000},
                              {"width", 64},
                              {"image_size", {224, 224}},
                              {"layers", {2, 2, 2, 2}},
                              {"stem", "imagenet"}});
  CHECK(r18.describe() == "ResNet-18 (ImageNet stem), 3x224x224 input, 1000 classes, width 64");
  CHECK(
      models::ClassifierSpec::from_json({{"arch", "resnet"}, {"preset", "resnet34"}}).describe() ==
      "ResNet-34 (ImageNet stem), 3x224x224 input, 1000 classes, width 64");

  // 224 / 32: a 7x7 map after layer4; the network takes small images too (1x1 after layer4).
  Generator g(1);
  models::ResNetConfig small = r18;
  small.width = 8;
  small.num_classes = 7;
  models::ResNet m(small, g);
  CHECK(m(ops::randn({2, 3, 224, 224}, g)).shape() == Dims{2, 7});
  CHECK(m.forward_features(ops::randn({2, 3, 28, 28}, g)).shape() == Dims{2, 64});
  CHECK(m.extra_repr() ==
        "depth=18, channels=3, num_classes=7, width=8, layers=[2, 2, 2, 2], stem=imagenet");
}

TEST_CASE("resnet imagenet: nn::summary of ResNet-18 at 224x224, torchvision's total") {
  Generator g(0);
  models::ResNet m(models::ResNetConfig::preset("resnet18"), g);
  const std::string s = nn::summary(m, {1, 3, 224, 224});
  INFO(s);
  const auto rows = summary_rows(s);
  CHECK(sum_params(rows) == 11689512);  // torchvision's resnet18
  CHECK(count(s, "Total params: 11,689,512\nTrainable params: 11,689,512\n") == 1);
  CHECK(row_of(rows, "conv1 (Conv2d)").shape == "[1, 64, 112, 112]");
  CHECK(row_of(rows, "conv1 (Conv2d)").params == 64 * 3 * 7 * 7);
  CHECK(row_of(rows, "maxpool (MaxPool2d)").shape == "[1, 64, 56, 56]");
  CHECK(row_of(rows, "layer1.1 (BasicBlock)").shape == "[1, 64, 56, 56]");
  CHECK(row_of(rows, "layer4 (Sequential)").shape == "[1, 512, 7, 7]");
  CHECK(row_of(rows, "layer4.0.conv1 (Conv2d)").params == 512 * 256 * 3 * 3);
  CHECK(row_of(rows, "avgpool (AdaptiveAvgPool2d)").shape == "[1, 512, 1, 1]");
  CHECK(row_of(rows, "fc (Linear)").params == 512 * 1000 + 1000);
  CHECK(rows.front().shape == "[1, 1000]");
  // float32 input 3*224*224 values = 602,112 bytes; parameters 11,689,512*4 bytes
  CHECK(count(s, "Input size (MB): 0.60\n") == 1);
  CHECK(count(s, "Params size (MB): 46.76\n") == 1);
}

TEST_CASE("resnet imagenet: layers and stem in the config, a CIFAR config unchanged") {
  // The CIFAR networks' JSON is what it has always been: no layers, no stem.
  const models::ResNetConfig r20 = models::ResNetConfig::preset("resnet20");
  CHECK(r20.to_json() == json{{"arch", "resnet"},
                              {"depth", 20},
                              {"channels", 3},
                              {"num_classes", 10},
                              {"width", 16},
                              {"image_size", {32, 32}}});
  CHECK(r20.stage_blocks() == std::vector<int64_t>{3, 3, 3});
  CHECK(r20.last_stage() == "layer3");
  CHECK(r20.describe() == "ResNet-20, 3x32x32 input, 10 classes, width 16");
  models::ResNet cifar(r20);
  CHECK(cifar.maxpool == nullptr);
  CHECK(cifar.layer4 == nullptr);
  CHECK(cifar.stages.size() == 3);
  CHECK(cifar.extra_repr() == "depth=20, channels=3, num_classes=10, width=16");

  // depth follows layers when absent; any number of stages, either stem.
  const models::ResNetConfig two = models::ResNetConfig::from_json(
      {{"layers", {1, 2}}, {"width", 4}, {"channels", 1}, {"image_size", 28}});
  CHECK(two.depth == 8);
  CHECK(two.stem == "cifar");
  CHECK(two.describe() == "ResNet-8 (layers [1, 2]), 1x28x28 input, 10 classes, width 4");
  Generator g(2);
  models::ResNet m2(two, g);
  CHECK(m2.layer3 == nullptr);
  CHECK(m2.forward_features(ops::randn({2, 1, 28, 28}, g)).shape() == Dims{2, 8});
  CHECK(m2.num_parameters() >= two.min_parameters());
  const models::ResNetConfig wide =
      models::ResNetConfig::from_json({{"depth", 8}, {"stem", "imagenet"}, {"width", 4}});
  CHECK(wide.describe() == "ResNet-8 (ImageNet stem), 3x32x32 input, 10 classes, width 4");
  CHECK(models::ResNet(wide, g).num_parameters() >= wide.min_parameters());

  // A preset with layers given takes their depth; depth given alone must agree.
  CHECK(models::ClassifierSpec::from_json(
            {{"arch", "resnet"}, {"preset", "resnet18"}, {"layers", {3, 4, 6, 3}}})
            .describe() == "ResNet-34 (ImageNet stem), 3x224x224 input, 1000 classes, width 64");
  CHECK_ERROR_CONTAINS(models::ClassifierSpec::from_json(
                           {{"arch", "resnet"}, {"preset", "resnet18"}, {"depth", 34}}),
                       "model.depth 34 disagrees with model.layers [2, 2, 2, 2]", "= 18");
  CHECK_ERROR_CONTAINS(models::ClassifierSpec::from_json({{"preset", "resnet18"}}),
                       "preset 'resnet18' is a ResNet's", "--set model.arch=resnet");
}

TEST_CASE("resnet imagenet: bad layers, stem and depth are refused with what was given") {
  using models::ResNetConfig;
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", json::array()}}), "model.layers",
                       "1 to 8 stages", "[2, 2, 2, 2]");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {2, 0, 2, 2}}}), "model.layers[1]",
                       "in [1, 600]", "got 0");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {2, -3}}, {"depth", 8}}),
                       "model.layers[1]", "got -3");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {1, 1, 1, 1, 1, 1, 1, 1, 1}}}),
                       "model.layers", "1 to 8 stages");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {2, 2.5}}}), "model.layers[1]",
                       "integer", "2.5");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", "2,2,2,2"}}), "model.layers");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"stem", "resnet"}}), "model.stem", "\"cifar\"",
                       "\"imagenet\"", "got \"resnet\"");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"stem", 7}}), "model.stem", "wrong type");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {2, 2, 2, 2}}, {"depth", 20}}),
                       "model.depth 20 disagrees with model.layers [2, 2, 2, 2]",
                       "2 x 8 blocks + 2 = 18", "set it to 18");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"layers", {1, 1, 1, 1, 1, 1}}, {"width", 1024}}),
                       "last stage", "1024 x 2^5 = 32768", "16384");
  CHECK_ERROR_CONTAINS(ResNetConfig::from_json({{"depth", 18}}), "6 n + 2", "got 18",
                       "model.layers");
  models::ResNetConfig c = ResNetConfig::preset("resnet18");
  c.depth = 34;  // a config built in C++ is checked as well
  CHECK_ERROR_CONTAINS(models::ResNet(c), "model.depth 34 disagrees");
  CHECK_ERROR_CONTAINS(ResNetConfig::preset("resnet50"), "unknown preset 'resnet50'", "resnet18",
                       "resnet34");
}
