// The ResNets of He et al. (2016) with basic blocks, with torchvision's module names (conv1, bn1,
// layer1.0.conv1, ..., fc), so that a torchvision ResNet-18 or -34 state_dict loads as it is:
//   stem:   "cifar" (section 4.2, the CIFAR-10 networks): 3x3 conv (width channels, stride 1)
//           -> BatchNorm -> ReLU;
//           "imagenet" (torchvision's resnet18/34): 7x7 conv (stride 2, padding 3) -> BatchNorm
//           -> ReLU -> maxpool (3x3, stride 2, padding 1)
//   stages: layer1, layer2, ... of layers[i] basic blocks and width * 2^i channels; the first
//           block of every stage but layer1 halves the resolution (stride 2)
//   head:   avgpool (global average) -> fc (num_classes)
// A basic block: y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), both convs 3x3, the
// shortcut the identity or, where the shape changes, a 1x1 conv with the stride and a BatchNorm
// ("downsample", torchvision's option B). depth = 2 sum(layers) + 2. The CIFAR networks have
// three stages of n blocks, depth 6 n + 2: ResNet-8, -14, -20, -32, -44, -56. ResNet-18 is
// [2, 2, 2, 2] and ResNet-34 [3, 4, 6, 3], width 64 (64, 128, 256, 512 channels).
// Convolutions have no bias; init as torchvision (convs kaiming normal, fan_out, ReLU gain; the
// BatchNorms weight 1, bias 0; fc as nn::Linear).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/nn.h"

namespace vitrine::models {

struct ResNetConfig {
  int64_t depth = 20;  // 2 sum(layers) + 2; without layers 6 n + 2
  int64_t channels = 3;
  int64_t num_classes = 10;
  int64_t width = 16;  // the first stage's channels
  /// The input size the data pipeline should give (the network itself takes any size >= 4).
  int64_t image_h = 32, image_w = 32;
  /// Basic blocks per stage (1 to 8 stages); empty: [n, n, n] with depth = 6 n + 2.
  std::vector<int64_t> layers;
  /// "cifar" (3x3 conv, stride 1) or "imagenet" (7x7 conv, stride 2, then a 3x3 max pool).
  std::string stem = "cifar";

  /// layers, or [n, n, n] from depth when it is empty.
  std::vector<int64_t> stage_blocks() const;
  /// The channels of the last stage (width * 2^(stages - 1)), which fc reads.
  int64_t features() const;
  /// "layer3", "layer4": the last stage's module name (where Grad-CAM looks).
  std::string last_stage() const;
  /// Throws Error naming the first inconsistent field.
  void validate() const;
  /// A lower bound on the weights this config's model has, computed without building it: one
  /// 3x3 convolution per residual block at its stage's width (width, 2 width, 4 width, ...).
  int64_t min_parameters() const;
  /// {"arch": "resnet", ...}; "layers" and "stem" only where they are not the CIFAR network's
  /// ([n, n, n] from depth, "cifar"), so that those configs read as they always have.
  nlohmann::json to_json() const;
  /// Every key from_json reads, each with a value of its type (to_json's and layers, stem).
  static nlohmann::json fields();
  /// Our own JSON (unknown keys are errors; "arch" may be "resnet"); "image_size" one number or
  /// [h, w]; "depth" may be left out when "layers" is given.
  static ResNetConfig from_json(const nlohmann::json& j);
  /// resnet8, resnet14, resnet20, resnet32, resnet44, resnet56 (the CIFAR networks: 3 channels,
  /// 10 classes, 32x32); resnet18, resnet34 (torchvision's: 3 channels, 1000 classes, 224x224,
  /// width 64, the imagenet stem).
  static ResNetConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  /// "ResNet-20, 1x28x28 input, 10 classes, width 16",
  /// "ResNet-18 (ImageNet stem), 3x224x224 input, 1000 classes, width 64".
  std::string describe() const;
};

/// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, Generator& gen);
  Tensor forward(const Tensor& x) override;  // [B, in, H, W] -> [B, out, H / stride, W / stride]
  std::string type_name() const override { return "BasicBlock"; }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null: the identity
};

/// x [B, channels, H, W] -> logits [B, num_classes]
class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetConfig& config, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  /// The pooled features [B, config().features()] before fc.
  Tensor forward_features(const Tensor& x);
  std::string type_name() const override { return "ResNet"; }
  std::string extra_repr() const override;
  const ResNetConfig& config() const { return config_; }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::MaxPool2d> maxpool;  // the imagenet stem's; null for the cifar stem
  /// layer1, layer2, ... in order.
  std::vector<std::shared_ptr<nn::Sequential>> stages;
  /// stages[0..3] by torchvision's names; null where the network has fewer stages.
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;

 private:
  ResNetConfig config_;
};

}  // namespace vitrine::models
