#include "models/resnet.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "autograd/grad_mode.h"
#include "nn/json.h"
#include "ops/ops.h"

namespace vitrine::models {

using nlohmann::json;

namespace {
/// torchvision's kaiming_normal_(w, mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out),
/// fan_out = out_channels * kh * kw.
void kaiming_normal_fan_out(const Tensor& w, Generator& gen) {
  const double fan_out = static_cast<double>(w.size(0) * w.size(2) * w.size(3));
  nn::init::normal_(w, 0, std::sqrt(2.0 / fan_out), gen);
}

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride,
                                 Generator& gen) {
  auto c = std::make_shared<nn::Conv2d>(in, out, k, stride, k / 2, false, gen);
  kaiming_normal_fan_out(c->weight, gen);
  return c;
}
}  // namespace

void ResNetConfig::validate() const {
  VT_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
           "resnet: model.depth must be 6 n + 2 (8, 14, 20, 32, 44, 56, ...), got {}", depth);
  VT_CHECK(channels > 0, "resnet: model.channels must be positive, got {}", channels);
  VT_CHECK(num_classes > 0, "resnet: model.num_classes must be positive, got {}", num_classes);
  VT_CHECK(width > 0, "resnet: model.width must be positive, got {}", width);
  VT_CHECK(image_h >= 4 && image_w >= 4,
           "resnet: model.image_size must be at least 4 (two stride-2 stages), got {}x{}", image_h,
           image_w);
  // Upper bounds, so that a tiny hostile config cannot ask for an absurd model.
  VT_CHECK(depth <= 1202 && channels <= 4096 && num_classes <= (1 << 24) && width <= 4096 &&
               image_h <= 16384 && image_w <= 16384,
           "resnet: the model is over the limits (depth <= 1202, channels <= 4096, num_classes <= "
           "16777216, width <= 4096, image_size <= 16384): depth {}, channels {}, num_classes {}, "
           "width {}, image {}x{}",
           depth, channels, num_classes, width, image_h, image_w);
}

json ResNetConfig::to_json() const {
  return {{"arch", "resnet"},     {"depth", depth},
          {"channels", channels}, {"num_classes", num_classes},
          {"width", width},       {"image_size", json::array({image_h, image_w})}};
}

ResNetConfig ResNetConfig::from_json(const json& j) {
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();  // validate() checks the ranges
  VT_CHECK(j.is_object(), "resnet: the model config must be a JSON object, got {}", j.dump());
  ResNetConfig c;
  for (const auto& [key, v] : j.items()) {
    if (!key.empty() && key[0] == '_') continue;  // comments
    try {
      if (key == "arch") {
        VT_CHECK(v.get<std::string>() == "resnet", "resnet: model.arch is {}, not resnet",
                 v.dump());
      } else if (key == "depth") {
        c.depth = nn::json_integer(v, "resnet: model.depth", kAny);
      } else if (key == "channels") {
        c.channels = nn::json_integer(v, "resnet: model.channels", kAny);
      } else if (key == "num_classes") {
        c.num_classes = nn::json_integer(v, "resnet: model.num_classes", kAny);
      } else if (key == "width") {
        c.width = nn::json_integer(v, "resnet: model.width", kAny);
      } else if (key == "image_size") {
        if (v.is_array()) {
          VT_CHECK(v.size() == 2, "resnet: model.image_size must be a number or [h, w], got {}",
                   v.dump());
          c.image_h = nn::json_integer(v[0], "resnet: model.image_size", kAny);
          c.image_w = nn::json_integer(v[1], "resnet: model.image_size", kAny);
        } else {
          c.image_h = c.image_w = nn::json_integer(v, "resnet: model.image_size", kAny);
        }
      } else {
        fail(
            "resnet: unknown model key '{}' (known: arch, depth, channels, num_classes, width, "
            "image_size)",
            key);
      }
    } catch (const json::exception& e) {
      fail("resnet: model.{} has the wrong type ({}): {}", key, v.dump(), e.what());
    }
  }
  c.validate();
  return c;
}

std::vector<std::string> ResNetConfig::preset_names() {
  return {"resnet8", "resnet14", "resnet20", "resnet32", "resnet44", "resnet56"};
}

ResNetConfig ResNetConfig::preset(const std::string& name) {
  for (const std::string& n : preset_names())
    if (n == name) {
      ResNetConfig c;
      c.depth = std::stoll(name.substr(6));
      return c;
    }
  fail("resnet: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, Generator& gen) {
  conv1 = register_module("conv1", conv(in, out, 3, stride, gen));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
  conv2 = register_module("conv2", conv(out, out, 3, 1, gen));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  if (stride != 1 || in != out)
    downsample = register_module(
        "downsample",
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            conv(in, out, 1, stride, gen), std::make_shared<nn::BatchNorm2d>(out)}));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = ops::relu((*bn1)((*conv1)(x)));
  y = (*bn2)((*conv2)(y));
  return ops::relu(y + (downsample ? (*downsample)(x) : x));
}

ResNet::ResNet(const ResNetConfig& config, Generator& gen) : config_(config) {
  config_.validate();
  const int64_t w = config_.width, n = config_.blocks_per_stage();
  conv1 = register_module("conv1", conv(config_.channels, w, 3, 1, gen));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(w));
  auto stage = [&](int64_t in, int64_t out, int64_t stride) {
    auto s = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < n; ++i)
      s->push_back(std::make_shared<BasicBlock>(i == 0 ? in : out, out, i == 0 ? stride : 1, gen));
    return s;
  };
  layer1 = register_module("layer1", stage(w, w, 1));
  layer2 = register_module("layer2", stage(w, 2 * w, 2));
  layer3 = register_module("layer3", stage(2 * w, 4 * w, 2));
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<nn::Linear>(4 * w, config_.num_classes, true, gen));
}

Tensor ResNet::forward_features(const Tensor& x) {
  VT_CHECK(x.dim() == 4 && x.size(1) == config_.channels,
           "ResNet: expected images [B, {}, H, W], got shape {}", config_.channels, x.shape());
  Tensor y = ops::relu((*bn1)((*conv1)(x)));
  y = (*layer3)((*layer2)((*layer1)(y)));
  return ops::flatten((*avgpool)(y), 1);
}

Tensor ResNet::forward(const Tensor& x) { return (*fc)(forward_features(x)); }

std::string ResNet::extra_repr() const {
  return fmt::format("depth={}, channels={}, num_classes={}, width={}", config_.depth,
                     config_.channels, config_.num_classes, config_.width);
}

}  // namespace vitrine::models
