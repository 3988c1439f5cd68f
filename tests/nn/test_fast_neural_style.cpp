// docs/examples/fast_neural_style.h against PyTorch 1.13 and torchvision 0.14
// (tests/fixtures/make_fast_neural_style_fixture.py): the parameter names and shapes that
// convert.py --by-name carries over (torchvision's vgg16 features up to relu4_3, upstream's
// TransformerNet), and, with every weight set by the script's formula, TransformerNet's output
// and the training loss (content and style) with its gradient.
#include <cmath>
#include <map>

#include "../../docs/examples/fast_neural_style.h"
#include "test_util.h"

using namespace vt_test;
namespace fns = fast_neural_style;

namespace {

std::map<std::string, Dims> names_and_shapes(const nn::NamedTensors& state) {
  std::map<std::string, Dims> out;
  for (const auto& [name, t] : state) out[name] = t.shape();
  return out;
}

std::map<std::string, Dims> names_and_shapes(const nlohmann::json& list) {
  std::map<std::string, Dims> out;
  for (const auto& entry : list)
    out[entry[0].get<std::string>()] = Dims(entry[1].get<std::vector<int64_t>>());
  return out;
}

// The fixture script's weights: tensor j of `list` (PyTorch's state_dict order), element k,
// u = ((k 7919 + j 104729) mod 2001 - 1000) / 1000; weights with 2+ dims u sqrt(6 / fan),
// biases u / 10, InstanceNorm weights 1 + u / 10.
void fill(nn::Module& m, const nlohmann::json& list) {
  nn::NamedTensors state;
  for (size_t j = 0; j < list.size(); ++j) {
    const std::string name = list[j][0];
    const Dims shape(list[j][1].get<std::vector<int64_t>>());
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const double u = double((k * 7919 + int64_t(j) * 104729) % 2001 - 1000) / 1000;
      const double value = shape.size() >= 2        ? u * std::sqrt(6.0 / double(n / shape[0]))
                           : name.ends_with("bias") ? u / 10
                                                    : 1 + u / 10;
      v[size_t(k)] = float(value);
    }
    state.emplace_back(name, ops::from_vector(v, shape));
  }
  nn::load_state_dict(m, state);  // strict: every name and shape must fit
}

// (k 37 + seed 101) mod 256 at element k of [n, 3, h, w]
Tensor image(int64_t n, int64_t h, int64_t w, int64_t seed) {
  std::vector<float> v(size_t(n * 3 * h * w));
  for (size_t k = 0; k < v.size(); ++k) v[k] = float((int64_t(k) * 37 + seed * 101) % 256);
  return ops::from_vector(v, {n, 3, h, w});
}

}  // namespace

TEST_CASE("fast_neural_style: Vgg16 has torchvision's vgg16 feature names and shapes") {
  const auto& fx = fixture_json("fast_neural_style.json");
  Generator gen(1);
  fns::Vgg16 vgg(gen);
  const auto ours = names_and_shapes(vgg.state_dict());
  const auto torchvision = names_and_shapes(fx.at("vgg16_features"));
  CHECK(ours.size() == 20);
  CHECK(ours == torchvision);
  for (const Tensor& p : vgg.parameters()) CHECK_FALSE(p.requires_grad());
}

TEST_CASE("fast_neural_style: TransformerNet has upstream's parameter names and shapes") {
  const auto& fx = fixture_json("fast_neural_style.json");
  Generator gen(1);
  fns::TransformerNet net(gen);
  const auto ours = names_and_shapes(net.state_dict());
  CHECK(ours.size() == 62);
  CHECK(ours == names_and_shapes(fx.at("transformer_net")));
  CHECK(ours.count("res3.conv2.conv2d.weight") == 1);
  CHECK(ours.count("in5.bias") == 1);
}

TEST_CASE("fast_neural_style: TransformerNet gives PyTorch's output on a 20 x 24 image") {
  const auto& fx = fixture_json("fast_neural_style.json");
  Generator gen(1);
  fns::TransformerNet net(gen);
  fill(net, fx.at("transformer_net"));
  NoGradGuard no_grad;
  const Tensor y = net(image(1, 20, 24, 1));
  CHECK(y.shape() == Dims{1, 3, 20, 24});
  check_close(y, fixture_tensor(fx.at("forward"), kFloat32), 1e-4, 1e-4);
}

TEST_CASE("fast_neural_style: the content and style losses and their gradient are PyTorch's") {
  const auto& fx = fixture_json("fast_neural_style.json");
  Generator gen(1);
  fns::TransformerNet net(gen);
  fns::Vgg16 vgg(gen);
  fill(net, fx.at("transformer_net"));
  fill(vgg, fx.at("vgg16_features"));
  const Tensor x = image(2, 16, 16, 2), style = image(1, 16, 16, 3);
  std::array<Tensor, 4> gram_style;
  {
    NoGradGuard no_grad;
    const fns::VggOutputs fs = vgg.slices(fns::normalize_batch(style));
    for (size_t i = 0; i < 4; ++i) gram_style[i] = fns::gram_matrix(fs.all()[i]);
  }
  const Tensor y = net(x);
  const fns::VggOutputs features_y = vgg.slices(fns::normalize_batch(y));
  const fns::VggOutputs features_x = vgg.slices(fns::normalize_batch(x));
  const Tensor content_loss = 1e5 * nn::mse_loss(features_y.relu2_2, features_x.relu2_2);
  Tensor style_loss = ops::scalar(0.0);
  for (size_t i = 0; i < 4; ++i) {
    const Tensor gm_y = fns::gram_matrix(features_y.all()[i]);
    CHECK(gm_y.shape() == Dims{2, gram_style[i].size(1), gram_style[i].size(1)});
    style_loss = style_loss + nn::mse_loss(gm_y, gram_style[i].expand(gm_y.shape()));
  }
  style_loss = style_loss * 1e10;
  (content_loss + style_loss).backward();

  const auto& losses = fx.at("losses");
  CHECK(content_loss.item() == doctest::Approx(losses.at("content").get<double>()).epsilon(1e-4));
  CHECK(style_loss.item() == doctest::Approx(losses.at("style").get<double>()).epsilon(1e-4));
  const Tensor expected = fixture_tensor(losses.at("deconv3_bias_grad"), kFloat32);
  check_close(net.deconv3->conv2d->bias.grad(), expected,
              1e-3 * ops::max(ops::abs(expected)).item(), 1e-3);
  for (const Tensor& p : vgg.parameters()) CHECK_FALSE(p.grad().defined());
}
