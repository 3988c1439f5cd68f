#include "models/resnet.h"

#include <cmath>
#include <limits>
#include <typeinfo>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

constexpr size_t kMaxStages = 8;
constexpr int64_t kMaxBlocks = 600;      // depth <= 1202
constexpr int64_t kMaxFeatures = 16384;  // the last stage's channels (4 x 4096 in the CIFAR nets)

/// model.layers: 1 to kMaxStages stages of 1 to kMaxBlocks blocks each.
void check_layers(const std::vector<int64_t>& layers) {
  VT_CHECK(!layers.empty() && layers.size() <= kMaxStages,
           "resnet: model.layers must list the basic blocks of 1 to {} stages (as [2, 2, 2, 2] "
           "for ResNet-18), got {} stages",
           kMaxStages, layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    VT_CHECK(layers[i] >= 1 && layers[i] <= kMaxBlocks,
             "resnet: model.layers[{}] must be a number of blocks in [1, {}], got {} (model.layers "
             "[{}])",
             i, kMaxBlocks, layers[i], fmt::join(layers, ", "));
}

/// 2 sum(layers) + 2: the convolutions of the blocks, the stem's and fc. layers are checked.
int64_t depth_of(const std::vector<int64_t>& layers) {
  int64_t blocks = 0;
  for (int64_t b : layers) blocks += b;
  return 2 * blocks + 2;
}

/// Whether layers are what depth names without them: [n, n, n] for 6 n + 2, torchvision's
/// [2, 2, 2, 2] for 18 and [3, 4, 6, 3] for 34.
bool usual_layers(int64_t depth, const std::vector<int64_t>& layers) {
  if (layers.empty() || layers == std::vector<int64_t>(3, (depth - 2) / 6)) return true;
  return (depth == 18 && layers == std::vector<int64_t>{2, 2, 2, 2}) ||
         (depth == 34 && layers == std::vector<int64_t>{3, 4, 6, 3});
}
}  // namespace

std::vector<int64_t> ResNetConfig::stage_blocks() const {
  return layers.empty() ? std::vector<int64_t>(3, (depth - 2) / 6) : layers;
}

int64_t ResNetConfig::features() const { return width << (stage_blocks().size() - 1); }

std::string ResNetConfig::last_stage() const {
  return fmt::format("layer{}", stage_blocks().size());
}

int64_t ResNetConfig::min_parameters() const {
  int64_t n = 0, w = width;
  for (int64_t blocks : stage_blocks()) {
    n += blocks * 9 * w * w;
    w *= 2;
  }
  return n;
}

void ResNetConfig::validate() const {
  VT_CHECK(stem == "cifar" || stem == "imagenet",
           "resnet: model.stem must be \"cifar\" (a 3x3 convolution of stride 1) or \"imagenet\" "
           "(a 7x7 convolution of stride 2, then a 3x3 max pool, as torchvision's ResNets), got "
           "\"{}\"",
           stem);
  if (layers.empty()) {
    VT_CHECK(depth >= 8 && (depth - 2) % 6 == 0,
             "resnet: model.depth must be 6 n + 2 (8, 14, 20, 32, 44, 56, ...), got {}; or give "
             "model.layers, the blocks of each stage (as [2, 2, 2, 2] for ResNet-18)",
             depth);
  } else {
    check_layers(layers);
    VT_CHECK(depth == depth_of(layers),
             "resnet: model.depth {} disagrees with model.layers [{}]: basic blocks make depth 2 x "
             "{} blocks + 2 = {} (leave model.depth out, or set it to {})",
             depth, fmt::join(layers, ", "), (depth_of(layers) - 2) / 2, depth_of(layers),
             depth_of(layers));
  }
  VT_CHECK(channels > 0, "resnet: model.channels must be positive, got {}", channels);
  VT_CHECK(num_classes > 0, "resnet: model.num_classes must be positive, got {}", num_classes);
  VT_CHECK(width > 0, "resnet: model.width must be positive, got {}", width);
  VT_CHECK(image_h >= 4 && image_w >= 4, "resnet: model.image_size must be at least 4, got {}x{}",
           image_h, image_w);
  // Upper bounds, so that a tiny hostile config cannot ask for an absurd model.
  VT_CHECK(depth <= 1202 && channels <= 4096 && num_classes <= (1 << 24) && width <= 4096 &&
               image_h <= 16384 && image_w <= 16384,
           "resnet: the model is over the limits (depth <= 1202, channels <= 4096, num_classes <= "
           "16777216, width <= 4096, image_size <= 16384): depth {}, channels {}, num_classes {}, "
           "width {}, image {}x{}",
           depth, channels, num_classes, width, image_h, image_w);
  VT_CHECK(features() <= kMaxFeatures,
           "resnet: the last stage would have model.width {} x 2^{} = {} channels, over the limit "
           "{} (a smaller model.width, or fewer stages in model.layers)",
           width, stage_blocks().size() - 1, features(), kMaxFeatures);
}

json ResNetConfig::to_json() const {
  json j = {{"arch", "resnet"},     {"depth", depth},
            {"channels", channels}, {"num_classes", num_classes},
            {"width", width},       {"image_size", json::array({image_h, image_w})}};
  if (!layers.empty()) j["layers"] = layers;
  if (stem != "cifar") j["stem"] = stem;
  return j;
}

json ResNetConfig::fields() {
  json j = ResNetConfig{}.to_json();
  j["layers"] = json::array({3, 3, 3});
  j["stem"] = "cifar";
  return j;
}

ResNetConfig ResNetConfig::from_json(const json& j) {
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();  // validate() checks the ranges
  VT_CHECK(j.is_object(), "resnet: the model config must be a JSON object, got {}", j.dump());
  ResNetConfig c;
  bool depth_given = false;
  for (const auto& [key, v] : j.items()) {
    if (!key.empty() && key[0] == '_') continue;  // comments
    try {
      if (key == "arch") {
        VT_CHECK(v.get<std::string>() == "resnet", "resnet: model.arch is {}, not resnet",
                 v.dump());
      } else if (key == "depth") {
        c.depth = nn::json_integer(v, "resnet: model.depth", kAny);
        depth_given = true;
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
      } else if (key == "layers") {
        VT_CHECK(v.is_array() && !v.empty() && v.size() <= kMaxStages,
                 "resnet: model.layers must list the basic blocks of 1 to {} stages (as [2, 2, 2, "
                 "2] for ResNet-18), got {}",
                 kMaxStages, v.is_array() && v.empty() ? std::string("[]") : nn::json_brief(v));
        c.layers.clear();
        for (size_t i = 0; i < v.size(); ++i)
          c.layers.push_back(
              nn::json_integer(v[i], fmt::format("resnet: model.layers[{}]", i), kAny));
      } else if (key == "stem") {
        c.stem = v.get<std::string>();
      } else {
        fail(
            "resnet: unknown model key '{}' (known: arch, depth, channels, num_classes, width, "
            "image_size, layers, stem)",
            key);
      }
    } catch (const json::exception& e) {
      fail("resnet: model.{} has the wrong type ({}): {}", key, v.dump(), e.what());
    }
  }
  if (!c.layers.empty() && !depth_given) {
    check_layers(c.layers);
    c.depth = depth_of(c.layers);
  }
  c.validate();
  return c;
}

std::vector<std::string> ResNetConfig::preset_names() {
  return {"resnet8",  "resnet14", "resnet20", "resnet32",
          "resnet44", "resnet56", "resnet18", "resnet34"};
}

ResNetConfig ResNetConfig::preset(const std::string& name) {
  ResNetConfig c;
  if (name == "resnet18" || name == "resnet34") {  // torchvision's, for ImageNet
    c.layers =
        name == "resnet18" ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
    c.depth = depth_of(c.layers);
    c.num_classes = 1000;
    c.width = 64;
    c.image_h = c.image_w = 224;
    c.stem = "imagenet";
    return c;
  }
  for (const std::string& n : preset_names())
    if (n == name) {
      c.depth = std::stoll(name.substr(6));
      return c;
    }
  fail("resnet: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

std::string ResNetConfig::describe() const {
  std::vector<std::string> notes;
  if (stem == "imagenet") notes.push_back("ImageNet stem");
  if (!usual_layers(depth, layers))
    notes.push_back(fmt::format("layers [{}]", fmt::join(layers, ", ")));
  const std::string note =
      notes.empty() ? std::string() : fmt::format(" ({})", fmt::join(notes, ", "));
  return fmt::format("ResNet-{}{}, {}x{}x{} input, {} classes, width {}", depth, note, channels,
                     image_h, image_w, num_classes, width);
}

namespace {
/// Whether bn may be folded into c in inference (BatchNorm2d::foldable, a plain Conv2d without a
/// forward hook).
bool can_fold(const nn::Conv2d& c, const nn::BatchNorm2d& bn) {
  return bn.foldable() && !c.has_forward_hooks() && typeid(c) == typeid(nn::Conv2d);
}

/// relu(bn(c(x)) + residual) (residual may be undefined; relu false: no clamp) with bn folded into
/// c's weight and bias (nn::fuse_conv_bn_weights): one pass over the output
/// (ops::conv2d_add_relu). For can_fold(c, bn).
Tensor fold(const nn::Conv2d& c, const nn::BatchNorm2d& bn, const Tensor& x, const Tensor& residual,
            bool relu) {
  const auto [w, b] = nn::fuse_conv_bn_weights(c.weight, c.bias, bn.running_mean, bn.running_var,
                                               bn.eps, bn.weight, bn.bias);
  return ops::conv2d_add_relu(x, w, b, residual, relu, c.stride, c.padding, c.dilation, c.groups);
}
}  // namespace

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
  // In inference, each batch norm folded into the convolution before it, and the ReLU and the
  // shortcut's add done as the convolution writes its output (fold()).
  std::shared_ptr<nn::Conv2d> dc;  // the shortcut's modules (a Sequential of the two)
  std::shared_ptr<nn::BatchNorm2d> dbn;
  if (downsample && downsample->size() == 2 && !downsample->has_forward_hooks()) {
    dc = std::dynamic_pointer_cast<nn::Conv2d>((*downsample)[0]);
    dbn = std::dynamic_pointer_cast<nn::BatchNorm2d>((*downsample)[1]);
  }
  if (can_fold(*conv1, *bn1) && can_fold(*conv2, *bn2) &&
      (!downsample || (dc && dbn && can_fold(*dc, *dbn)))) {
    const Tensor y = fold(*conv1, *bn1, x, Tensor(), true);
    return fold(*conv2, *bn2, y, downsample ? fold(*dc, *dbn, x, Tensor(), false) : x, true);
  }
  // relu(bn(conv(x))) and relu(bn(conv(y)) + shortcut) as one op each (BatchNorm2d::forward_relu).
  const Tensor y = bn1->forward_relu((*conv1)(x));
  const Tensor h = (*conv2)(y);
  return bn2->forward_relu(h, downsample ? (*downsample)(x) : x);
}

ResNet::ResNet(const ResNetConfig& config, Generator& gen) : config_(config) {
  config_.validate();
  const int64_t w = config_.width;
  const bool imagenet = config_.stem == "imagenet";
  conv1 = register_module("conv1", imagenet ? conv(config_.channels, w, 7, 2, gen)
                                            : conv(config_.channels, w, 3, 1, gen));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(w));
  if (imagenet)
    maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, nn::Size2(2), 1));
  const std::vector<int64_t> blocks = config_.stage_blocks();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int64_t out = w << i, in = i == 0 ? w : out / 2, stride = i == 0 ? 1 : 2;
    auto s = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < blocks[i]; ++b)
      s->push_back(std::make_shared<BasicBlock>(b == 0 ? in : out, out, b == 0 ? stride : 1, gen));
    stages.push_back(register_module(fmt::format("layer{}", i + 1), s));
  }
  const auto stage = [this](size_t i) { return i < stages.size() ? stages[i] : nullptr; };
  layer1 = stage(0);
  layer2 = stage(1);
  layer3 = stage(2);
  layer4 = stage(3);
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module(
      "fc", std::make_shared<nn::Linear>(config_.features(), config_.num_classes, true, gen));
}

Tensor ResNet::forward_features(const Tensor& x) {
  VT_CHECK(x.dim() == 4 && x.size(1) == config_.channels,
           "ResNet: expected images [B, {}, H, W], got shape {}", config_.channels, x.shape());
  Tensor y = can_fold(*conv1, *bn1) ? fold(*conv1, *bn1, x, Tensor(), true)  // (inference)
                                    : bn1->forward_relu((*conv1)(x));
  if (maxpool) y = (*maxpool)(y);
  for (const auto& s : stages) y = (*s)(y);
  return ops::flatten((*avgpool)(y), 1);
}

Tensor ResNet::forward(const Tensor& x) { return (*fc)(forward_features(x)); }

std::string ResNet::extra_repr() const {
  std::string extra;
  if (!config_.layers.empty())
    extra += fmt::format(", layers=[{}]", fmt::join(config_.layers, ", "));
  if (config_.stem != "cifar") extra += fmt::format(", stem={}", config_.stem);
  return fmt::format("depth={}, channels={}, num_classes={}, width={}{}", config_.depth,
                     config_.channels, config_.num_classes, config_.width, extra);
}

}  // namespace vitrine::models
