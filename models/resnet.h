// A ResNet for small images (He et al., 2016, section 4.2: the CIFAR-10 networks), with
// torchvision's module names (conv1, bn1, layer1.0.conv1, ..., fc):
//   stem:   3x3 conv (width channels, stride 1) -> BatchNorm -> ReLU
//   stages: layer1, layer2, layer3 of n basic blocks each, width, 2 width, 4 width channels; the
//           first block of layer2 and layer3 halves the resolution (stride 2)
//   head:   global average pool -> fc (num_classes)
// A basic block: y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), both convs 3x3, the
// shortcut the identity or, where the shape changes, a 1x1 conv with the stride and a BatchNorm
// ("downsample", torchvision's option B). depth = 6 n + 2: ResNet-8, -14, -20, -32, -44, -56.
// Convolutions have no bias; init as torchvision (convs kaiming normal, fan_out, ReLU gain; the
// BatchNorms weight 1, bias 0; fc as nn::Linear).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/nn.h"

namespace vitrine::models {

struct ResNetConfig {
  int64_t depth = 20;  // 6 n + 2
  int64_t channels = 3;
  int64_t num_classes = 10;
  int64_t width = 16;  // the first stage's channels
  /// The input size the data pipeline should give (the network itself takes any size >= 4).
  int64_t image_h = 32, image_w = 32;

  int64_t blocks_per_stage() const { return (depth - 2) / 6; }
  /// Throws Error naming the first inconsistent field.
  void validate() const;
  /// A lower bound on the weights this config's model has, computed without building it: one
  /// 3x3 convolution per residual block at each stage's width (width, 2 width, 4 width).
  int64_t min_parameters() const { return (depth - 2) / 6 * 9 * width * width * (1 + 4 + 16); }
  /// {"arch": "resnet", ...}
  nlohmann::json to_json() const;
  /// Our own JSON (unknown keys are errors; "arch" may be "resnet"); "image_size" one number or
  /// [h, w].
  static ResNetConfig from_json(const nlohmann::json& j);
  /// resnet8, resnet14, resnet20, resnet32, resnet44, resnet56 (3 channels, 10 classes, 32x32).
  static ResNetConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
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
  /// The pooled features [B, 4 width] before fc.
  Tensor forward_features(const Tensor& x);
  std::string type_name() const override { return "ResNet"; }
  std::string extra_repr() const override;
  const ResNetConfig& config() const { return config_; }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;

 private:
  ResNetConfig config_;
};

}  // namespace vitrine::models
