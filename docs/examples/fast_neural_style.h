// pytorch/examples' fast_neural_style models and helpers in Vitrine (neural_style/
// transformer_net.py, vgg.py and utils.py; the program, neural_style.py, is
// fast_neural_style.cpp). Parameter names are upstream's and torchvision's, so PyTorch's state
// dicts load by name after tools/convert/convert.py --by-name:
//   TransformerNet  conv1.conv2d.weight, in1.weight, res1.conv1.conv2d.weight, deconv1.conv2d.bias
//   Vgg16           features.0.weight ... features.21.bias: torchvision's vgg16().features up to
//                   relu4_3 (index 22), where upstream names the same layers slice1.0 ... slice4.21
// Images are [B, 3, H, W] float32 with values in [0, 255], as upstream's (ToTensor, then * 255).
#pragma once
#include <vitrine.h>

#include <array>
#include <memory>
#include <optional>
#include <string>

namespace fast_neural_style {

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

// Reflection padding of kernel_size / 2, then a convolution without padding: the output keeps
// the size (stride 1) or halves it (stride 2).
class ConvLayer : public nn::Module {
 public:
  ConvLayer(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
            vt::Generator& gen) {
    reflection_pad =
        register_module("reflection_pad", std::make_shared<nn::ReflectionPad2d>(kernel_size / 2));
    conv2d = register_module(
        "conv2d", std::make_shared<nn::Conv2d>(in_channels, out_channels, kernel_size, stride,
                                               /*padding=*/0, /*bias=*/true, gen));
  }
  Tensor forward(const Tensor& x) override { return (*conv2d)((*reflection_pad)(x)); }
  std::string type_name() const override { return "ConvLayer"; }

  std::shared_ptr<nn::ReflectionPad2d> reflection_pad;
  std::shared_ptr<nn::Conv2d> conv2d;
};

// x + in2(conv2(relu(in1(conv1(x))))), channels kept (He et al.'s block, with instance norm).
class ResidualBlock : public nn::Module {
 public:
  ResidualBlock(int64_t channels, vt::Generator& gen) {
    conv1 = register_module("conv1", std::make_shared<ConvLayer>(channels, channels, 3, 1, gen));
    in1 = register_module("in1", std::make_shared<nn::InstanceNorm2d>(channels, 1e-5, 0.1, true));
    conv2 = register_module("conv2", std::make_shared<ConvLayer>(channels, channels, 3, 1, gen));
    in2 = register_module("in2", std::make_shared<nn::InstanceNorm2d>(channels, 1e-5, 0.1, true));
  }
  Tensor forward(const Tensor& x) override {
    Tensor out = ops::relu((*in1)((*conv1)(x)));
    return (*in2)((*conv2)(out)) + x;
  }
  std::string type_name() const override { return "ResidualBlock"; }

  std::shared_ptr<ConvLayer> conv1, conv2;
  std::shared_ptr<nn::InstanceNorm2d> in1, in2;
};

// Nearest upsampling by `upsample` (none: the identity), then a ConvLayer: upstream's
// replacement for a transposed convolution, which leaves checkerboard artifacts
// (http://distill.pub/2016/deconv-checkerboard/).
class UpsampleConvLayer : public nn::Module {
 public:
  UpsampleConvLayer(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
                    std::optional<double> upsample, vt::Generator& gen)
      : upsample(upsample) {
    reflection_pad =
        register_module("reflection_pad", std::make_shared<nn::ReflectionPad2d>(kernel_size / 2));
    conv2d = register_module(
        "conv2d", std::make_shared<nn::Conv2d>(in_channels, out_channels, kernel_size, stride,
                                               /*padding=*/0, /*bias=*/true, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor x_in = x;
    if (upsample) {
      ops::InterpolateOptions nearest;  // mode "nearest"
      nearest.scale_factor = std::pair{*upsample, *upsample};
      x_in = ops::interpolate(x, nearest);
    }
    return (*conv2d)((*reflection_pad)(x_in));
  }
  std::string type_name() const override { return "UpsampleConvLayer"; }

  std::optional<double> upsample;
  std::shared_ptr<nn::ReflectionPad2d> reflection_pad;
  std::shared_ptr<nn::Conv2d> conv2d;
};

// Johnson et al.'s image transformation network: images [B, 3, H, W] -> [B, 3, H, W] (H and W
// multiples of 4 keep the size; the downsampled maps must stay larger than the padding).
class TransformerNet : public nn::Module {
 public:
  explicit TransformerNet(vt::Generator& gen) {
    auto norm = [](int64_t c) { return std::make_shared<nn::InstanceNorm2d>(c, 1e-5, 0.1, true); };
    // Initial convolution layers
    conv1 = register_module("conv1", std::make_shared<ConvLayer>(3, 32, 9, 1, gen));
    in1 = register_module("in1", norm(32));
    conv2 = register_module("conv2", std::make_shared<ConvLayer>(32, 64, 3, 2, gen));
    in2 = register_module("in2", norm(64));
    conv3 = register_module("conv3", std::make_shared<ConvLayer>(64, 128, 3, 2, gen));
    in3 = register_module("in3", norm(128));
    // Residual layers
    for (int i = 0; i < 5; ++i)
      res[i] =
          register_module("res" + std::to_string(i + 1), std::make_shared<ResidualBlock>(128, gen));
    // Upsampling layers
    deconv1 =
        register_module("deconv1", std::make_shared<UpsampleConvLayer>(128, 64, 3, 1, 2, gen));
    in4 = register_module("in4", norm(64));
    deconv2 = register_module("deconv2", std::make_shared<UpsampleConvLayer>(64, 32, 3, 1, 2, gen));
    in5 = register_module("in5", norm(32));
    deconv3 = register_module("deconv3", std::make_shared<ConvLayer>(32, 3, 9, 1, gen));
  }
  Tensor forward(const Tensor& X) override {
    Tensor y = ops::relu((*in1)((*conv1)(X)));  // [B, 32, H, W]
    y = ops::relu((*in2)((*conv2)(y)));         // [B, 64, H / 2, W / 2]
    y = ops::relu((*in3)((*conv3)(y)));         // [B, 128, H / 4, W / 4]
    for (auto& block : res) y = (*block)(y);
    y = ops::relu((*in4)((*deconv1)(y)));  // [B, 64, H / 2, W / 2]
    y = ops::relu((*in5)((*deconv2)(y)));  // [B, 32, H, W]
    return (*deconv3)(y);                  // [B, 3, H, W]
  }
  std::string type_name() const override { return "TransformerNet"; }

  std::shared_ptr<ConvLayer> conv1, conv2, conv3, deconv3;
  std::shared_ptr<nn::InstanceNorm2d> in1, in2, in3, in4, in5;
  std::array<std::shared_ptr<ResidualBlock>, 5> res;
  std::shared_ptr<UpsampleConvLayer> deconv1, deconv2;
};

// The activations the losses compare (upstream's namedtuple VggOutputs).
struct VggOutputs {
  Tensor relu1_2, relu2_2, relu3_3, relu4_3;
  std::array<Tensor, 4> all() const { return {relu1_2, relu2_2, relu3_3, relu4_3}; }
};

// torchvision's vgg16().features up to relu4_3 (indices 0..22: 10 convolutions 3x3 padding 1,
// each followed by a ReLU, and 3 max pools), initialised as torchvision's (kaiming_normal_,
// fan_out, relu; bias 0) until weights are loaded. Without requires_grad the weights are frozen:
// the gradient flows through to the image, not into them.
class Vgg16 : public nn::Module {
 public:
  explicit Vgg16(vt::Generator& gen, bool requires_grad = false) {
    features = register_module("features", std::make_shared<nn::Sequential>());
    int64_t in = 3;
    for (int64_t v : {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512}) {
      if (v == 0) {  // "M" in torchvision's configuration D
        features->push_back(std::make_shared<nn::MaxPool2d>(2, 2));
        continue;
      }
      auto conv = std::make_shared<nn::Conv2d>(in, v, 3, 1, 1, true, gen);
      nn::init::kaiming_normal_(conv->weight, 0, "fan_out", "relu", gen);
      nn::init::zeros_(conv->bias);
      features->push_back(conv);
      features->push_back(std::make_shared<nn::ReLU>());
      in = v;
    }
    if (!requires_grad) requires_grad_(false);
  }
  // x [B, 3, H, W], normalised as ImageNet's (normalize_batch) -> relu1_2 [B, 64, H, W],
  // relu2_2 [B, 128, H / 2, W / 2], relu3_3 [B, 256, H / 4, W / 4], relu4_3 [B, 512, H / 8, W / 8]
  VggOutputs slices(const Tensor& x) const {
    auto run = [this](Tensor h, size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) h = (*(*features)[i])(h);
      return h;
    };
    VggOutputs out;
    out.relu1_2 = run(x, 0, 4);
    out.relu2_2 = run(out.relu1_2, 4, 9);
    out.relu3_3 = run(out.relu2_2, 9, 16);
    out.relu4_3 = run(out.relu3_3, 16, 23);
    return out;
  }
  std::string type_name() const override { return "Vgg16"; }

  std::shared_ptr<nn::Sequential> features;
};

// y [B, C, H, W] -> [B, C, C]: F F^T / (C H W) with F = y viewed as [B, C, H W].
inline Tensor gram_matrix(const Tensor& y) {
  const int64_t b = y.size(0), ch = y.size(1), h = y.size(2), w = y.size(3);
  Tensor features = y.reshape({b, ch, w * h});
  return ops::matmul(features, features.transpose(1, 2)) / double(ch * h * w);
}

// Images in [0, 255] -> (x / 255 - mean) / std with ImageNet's mean and std per channel.
inline Tensor normalize_batch(const Tensor& batch) {
  const Tensor mean = ops::from_vector(std::vector<float>{0.485f, 0.456f, 0.406f}, {3, 1, 1});
  const Tensor std = ops::from_vector(std::vector<float>{0.229f, 0.224f, 0.225f}, {3, 1, 1});
  return (batch / 255.0 - mean) / std;
}

}  // namespace fast_neural_style
