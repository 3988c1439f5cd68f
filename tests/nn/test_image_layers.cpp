// The activation modules (nn/activations.h), resampling and padding layers (nn/resampling.h,
// ops/padding.h), the init additions (nn/init.h) and parameters_to_vector (nn/utils.h) against
// PyTorch 1.13 (tests/fixtures/image_layers.json, made by make_image_layers_fixtures.py): each
// case's output, input gradient and PReLU's weight gradient of sum(y * r) in float64 (1e-10) and
// a few in float32 (1e-5); a float64 gradcheck per differentiable layer; Dropout2d's masks, the
// initialisers' statistics, calculate_gain, orthogonal_'s Q; bad inputs and their messages.
#include <cmath>
#include <memory>
#include <set>

#include "nn/activations.h"
#include "nn/init.h"
#include "nn/resampling.h"
#include "nn/utils.h"
#include "ops/padding.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "image_layers.json";

nn::Padding2d padding_of(const json& p) {
  if (p.is_number()) return nn::Padding2d(p.get<int64_t>());
  return nn::Padding2d(p[0].get<int64_t>(), p[1].get<int64_t>(), p[2].get<int64_t>(),
                       p[3].get<int64_t>());
}

/// The case's module, built from its torch.nn class name and keyword options.
std::shared_ptr<nn::Module> make(const json& c) {
  const std::string m = c["module"];
  const json& o = c["options"];
  if (m == "LeakyReLU") return std::make_shared<nn::LeakyReLU>(o.value("negative_slope", 0.01));
  if (m == "ELU") return std::make_shared<nn::ELU>(o.value("alpha", 1.0));
  if (m == "PReLU")
    return std::make_shared<nn::PReLU>(o.value("num_parameters", int64_t{1}),
                                       o.value("init", 0.25));
  if (m == "ReLU6") return std::make_shared<nn::ReLU6>();
  if (m == "Hardswish") return std::make_shared<nn::Hardswish>();
  if (m == "Hardsigmoid") return std::make_shared<nn::Hardsigmoid>();
  if (m == "Mish") return std::make_shared<nn::Mish>();
  if (m == "Softplus")
    return std::make_shared<nn::Softplus>(o.value("beta", 1.0), o.value("threshold", 20.0));
  if (m == "Softmax") return std::make_shared<nn::Softmax>(o["dim"].get<int64_t>());
  if (m == "LogSoftmax") return std::make_shared<nn::LogSoftmax>(o["dim"].get<int64_t>());
  if (m == "PixelShuffle")
    return std::make_shared<nn::PixelShuffle>(o["upscale_factor"].get<int64_t>());
  if (m == "PixelUnshuffle")
    return std::make_shared<nn::PixelUnshuffle>(o["downscale_factor"].get<int64_t>());
  if (m == "Upsample") {
    nn::UpsampleOptions u;
    if (o.contains("size")) u.size(o["size"][0].get<int64_t>(), o["size"][1].get<int64_t>());
    if (o.contains("scale_factor")) {
      const json& s = o["scale_factor"];
      s.is_number() ? u.scale_factor(s.get<double>())
                    : u.scale_factor(s[0].get<double>(), s[1].get<double>());
    }
    u.mode(o.value("mode", std::string("nearest")));
    if (o.contains("align_corners")) u.align_corners(o["align_corners"].get<bool>());
    return std::make_shared<nn::Upsample>(u);
  }
  if (m == "ReflectionPad2d")
    return std::make_shared<nn::ReflectionPad2d>(padding_of(o["padding"]));
  if (m == "ReplicationPad2d")
    return std::make_shared<nn::ReplicationPad2d>(padding_of(o["padding"]));
  if (m == "ZeroPad2d") return std::make_shared<nn::ZeroPad2d>(padding_of(o["padding"]));
  REQUIRE(m == "Unflatten");
  return std::make_shared<nn::Unflatten>(o["dim"].get<int64_t>(),
                                         o["unflattened_size"].get<std::vector<int64_t>>());
}

/// One case in dtype: output, input gradient and (PReLU) weight gradient against PyTorch's.
void check_case(const std::string& name, DType dtype, double atol, double rtol) {
  INFO(name << ", " << dtype_name(dtype));
  const json& c = fixture_case(kFile, name);
  auto m = make(c);
  m->to(dtype);
  if (c.contains("weight")) {  // PReLU: its init (made in float32), then PyTorch's exact values
    auto& prelu = dynamic_cast<nn::PReLU&>(*m);
    check_close(prelu.weight, fixture_tensor(c["weight"]).to_vector<double>(), 1e-7, 1e-7);
    NoGradGuard no_grad;
    prelu.weight.copy_(fixture_tensor(c["weight"], dtype));
  }
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  Tensor y = (*m)(x);
  CHECK(y.dtype() == dtype);
  Tensor want = fixture_tensor(c["output"]);
  REQUIRE(y.shape() == want.shape());
  check_close(y, want.to_vector<double>(), atol, rtol);
  ops::sum(y * fixture_tensor(c["r"], dtype)).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), atol, rtol);
  if (c.contains("weight_grad"))
    check_close(dynamic_cast<nn::PReLU&>(*m).weight.grad(),
                fixture_tensor(c["weight_grad"]).to_vector<double>(), atol, rtol);
}

/// Every case of the given modules in float64 at 1e-10; returns how many ran.
int check_modules(const std::set<std::string>& modules) {
  int n = 0;
  for (const auto& [name, c] : fixture_json(kFile).at("cases").items())
    if (modules.count(c["module"].get<std::string>())) {
      check_case(name, kFloat64, 1e-10, 1e-10);
      ++n;
    }
  return n;
}

/// gradcheck of a module's forward at a float64 input.
void check_module_grad(nn::Module& m, const Tensor& x) {
  m.to(kFloat64);
  check_grad([&](const std::vector<Tensor>& in) { return m(in[0]); }, {x});
}

/// The mean and (biased) standard deviation of t's values.
std::pair<double, double> mean_std(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double s = 0, s2 = 0;
  for (double e : v) s += e;
  double mean = s / static_cast<double>(v.size());
  for (double e : v) s2 += (e - mean) * (e - mean);
  return {mean, std::sqrt(s2 / static_cast<double>(v.size()))};
}

/// The n x n identity in float64.
Tensor identity(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n * n), 0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * n + i)] = 1;
  return ops::from_vector(v, {n, n}, kFloat64);
}

/// a^T a for a [m, n] (float64).
Tensor gram(const Tensor& a) { return ops::matmul(ops::transpose(a, 0, 1), a); }

}  // namespace

TEST_CASE("image layers: activations against PyTorch in float64, kinks included") {
  int n = check_modules({"LeakyReLU", "ELU", "PReLU", "ReLU6", "Hardswish", "Hardsigmoid", "Mish",
                         "Softplus", "Softmax", "LogSoftmax"});
  CHECK(n == 18);
}

TEST_CASE("image layers: PixelShuffle, PixelUnshuffle and Unflatten against PyTorch") {
  CHECK(check_modules({"PixelShuffle", "PixelUnshuffle", "Unflatten"}) == 7);
}

TEST_CASE("image layers: Upsample (nearest, bilinear, bicubic, size, scale) against PyTorch") {
  CHECK(check_modules({"Upsample"}) == 7);
}

TEST_CASE("image layers: ReflectionPad2d, ReplicationPad2d and ZeroPad2d against PyTorch") {
  CHECK(check_modules({"ReflectionPad2d", "ReplicationPad2d", "ZeroPad2d"}) == 9);
}

TEST_CASE("image layers: float32 against PyTorch's float64 at 1e-5") {
  for (const char* name :
       {"leaky_relu_slope", "elu_default", "prelu_channels", "hardswish", "hardsigmoid", "mish",
        "softplus_beta", "softmax_dim1", "pixel_shuffle_2", "upsample_bilinear",
        "reflection_pad_int", "replication_pad_tuple", "zero_pad_negative"})
    check_case(name, kFloat32, 1e-6, 1e-5);
}

TEST_CASE("image layers: the gradient at each kink is PyTorch's") {
  auto grad_at = [](const std::function<Tensor(const Tensor&)>& f, std::vector<double> xs) {
    Tensor x = ops::from_vector(xs, {}, kFloat64).requires_grad_();
    ops::sum(f(x)).backward();
    return x.grad().to_vector<double>();
  };
  CHECK(grad_at([](const Tensor& x) { return nn::leaky_relu(x, 0.2); }, {0.0}) ==
        std::vector<double>{0.2});
  CHECK(grad_at([](const Tensor& x) { return nn::elu(x, 0.7); }, {0.0})[0] ==
        doctest::Approx(0.7).epsilon(1e-15));
  CHECK(grad_at(nn::relu6, {0.0, 6.0, 3.0}) == std::vector<double>{0, 0, 1});
  std::vector<double> hs = grad_at(nn::hardswish, {-3.0, 3.0, -3.5, 3.5});
  CHECK(hs[0] == doctest::Approx(-0.5).epsilon(1e-15));
  CHECK(hs[1] == 1);  // PyTorch's vectorised kernel (its scalar tail gives 1.5)
  CHECK(hs[2] == 0);
  CHECK(hs[3] == 1);
  CHECK(grad_at(nn::hardsigmoid, {-3.0, 3.0, 0.0}) ==
        std::vector<double>{0, 0, static_cast<double>(1.0f / 6.0f)});
  // Softplus: the threshold itself is on the smooth side, above it the identity.
  std::vector<double> sp = grad_at([](const Tensor& x) { return nn::softplus(x, 2, 6); },
                                   {3.0, 3.0 + 1e-9, 800.0, -800.0});
  CHECK(sp[0] == doctest::Approx(1 / (1 + std::exp(-6.0))).epsilon(1e-14));
  CHECK(sp[1] == 1);
  CHECK(sp[2] == 1);
  CHECK(sp[3] == 0);
  // Large inputs on the branch not taken leave no NaN in the gradient.
  for (double g : grad_at([](const Tensor& x) { return nn::elu(x); }, {800.0, -800.0}))
    CHECK(std::isfinite(g));
  for (double g : grad_at(nn::mish, {800.0, -800.0})) CHECK(std::isfinite(g));
}

TEST_CASE("image layers: float64 gradchecks of the activations") {
  Tensor x = rand64({3, 5}, 11, 3.0);  // values on both sides of every kink, none near one
  nn::LeakyReLU leaky(0.2);
  nn::ELU elu(0.7);
  nn::ReLU6 relu6;
  nn::Hardswish hardswish;
  nn::Hardsigmoid hardsigmoid;
  nn::Mish mish;
  nn::Softplus softplus(2, 3);
  nn::Softmax softmax(1);
  nn::LogSoftmax log_softmax(0);
  for (nn::Module* m : std::initializer_list<nn::Module*>{
           &leaky, &elu, &hardswish, &hardsigmoid, &mish, &softplus, &softmax, &log_softmax}) {
    INFO(m->type_name());
    check_module_grad(*m, x);
  }
  check_module_grad(relu6, rand64({3, 5}, 12, 4.0, 3.0));
  // PReLU: the input and the weight [C] against x [N, C, L].
  check_grad([](const std::vector<Tensor>& in) { return nn::prelu(in[0], in[1]); },
             {rand64({2, 3, 4}, 13), rand64({3}, 14, 0.3)});
  check_grad([](const std::vector<Tensor>& in) { return nn::prelu(in[0], in[1]); },
             {rand64({5}, 15), rand64({1}, 16, 0.3)});
}

TEST_CASE("image layers: float64 gradchecks of the resampling and padding layers") {
  nn::PixelShuffle shuffle(2);
  check_module_grad(shuffle, rand64({2, 8, 2, 3}, 21));
  nn::PixelUnshuffle unshuffle(3);
  check_module_grad(unshuffle, rand64({1, 2, 3, 6}, 22));
  nn::Upsample bilinear(nn::UpsampleOptions().scale_factor(1.7).mode("bilinear"));
  check_module_grad(bilinear, rand64({1, 2, 3, 4}, 23));
  nn::Upsample nearest(nn::UpsampleOptions().size(5, 7));
  check_module_grad(nearest, rand64({2, 1, 3, 4}, 24));
  nn::ReflectionPad2d reflect({2, 1, 3, 2});
  check_module_grad(reflect, rand64({1, 2, 4, 3}, 25));
  nn::ReplicationPad2d replicate({1, 3, 0, 2});
  check_module_grad(replicate, rand64({2, 3, 2}, 26));
  nn::ZeroPad2d zero({-1, 2, 1, -1});
  check_module_grad(zero, rand64({1, 1, 3, 4}, 27));
  nn::Unflatten unflatten(-2, {2, -1});
  check_module_grad(unflatten, rand64({3, 6, 2}, 28));
  // The ops over three padded dims, PyTorch's pad order.
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::reflection_pad(in[0], {1, 2, 2, 0, 1, 1});
      },
      {rand64({2, 3, 4}, 29)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::replication_pad(in[0], {0, 3, 2, 1, 0, 2});
      },
      {rand64({2, 3, 4}, 30)});
}

TEST_CASE("image layers: reflection_pad and replication_pad by hand") {
  Tensor x = ops::arange(0, 4, 1, kFloat64);  // [0, 1, 2, 3]
  check_close(ops::reflection_pad(x, {3, 2}), {3, 2, 1, 0, 1, 2, 3, 2, 1}, 0, 0);
  check_close(ops::replication_pad(x, {2, 1}), {0, 0, 0, 1, 2, 3, 3}, 0, 0);
  check_close(ops::reflection_pad(x, {-1, 1}), {1, 2, 3, 2}, 0, 0);
  // A border element takes the gradient of each of its copies.
  Tensor leaf = x.detach().requires_grad_();
  ops::sum(ops::replication_pad(leaf, {2, 1})).backward();
  check_close(leaf.grad(), {3, 1, 1, 2}, 0, 0);
}

TEST_CASE("image layers: Dropout2d drops whole channels, scaled by 1 / (1 - p), in training only") {
  Generator gen(5);
  nn::Dropout2d drop(0.3, gen);
  Tensor x = ops::ones({40, 50, 2, 3}, kFloat64).requires_grad_();
  Tensor y = drop(x);
  std::vector<double> v = y.to_vector<double>();
  int dropped = 0;
  for (size_t ch = 0; ch < 40 * 50; ++ch) {
    double first = v[ch * 6];
    CHECK((first == 0 || std::fabs(first - 1 / 0.7) < 1e-15));
    for (size_t k = 1; k < 6; ++k) CHECK(v[ch * 6 + k] == first);
    dropped += first == 0;
  }
  CHECK(dropped / 2000.0 == doctest::Approx(0.3).epsilon(0.1));  // 2000 draws: 0.3 +- 0.03
  ops::sum(y).backward();
  check_close(x.grad(), y.detach());  // the gradient is the mask
  // [C, H, W]: one mask per channel.
  Tensor y3 = drop(ops::ones({200, 2, 2}, kFloat64));
  std::vector<double> v3 = y3.to_vector<double>();
  for (size_t ch = 0; ch < 200; ++ch)
    for (size_t k = 1; k < 4; ++k) CHECK(v3[ch * 4 + k] == v3[ch * 4]);
  // The same generator state gives the same mask; eval is the identity.
  Generator g1(9), g2(9);
  Tensor z = rand64({2, 3, 2, 2}, 31);
  check_close(nn::dropout2d(z, 0.5, true, g1), nn::dropout2d(z, 0.5, true, g2), 0, 0);
  drop.eval();
  CHECK(drop(z).same(z));
  drop.train();
  check_close(nn::dropout2d(z, 1.0, true, gen), ops::zeros({2, 3, 2, 2}, kFloat64), 0, 0);
  CHECK(nn::dropout2d(z, 0.0, true, gen).same(z));
  // gradcheck with the mask fixed by a fresh generator per call.
  check_grad(
      [](const std::vector<Tensor>& in) {
        Generator g(3);
        return nn::dropout2d(in[0], 0.4, true, g);
      },
      {rand64({2, 4, 2, 3}, 32)});
}

TEST_CASE("image layers: PReLU's parameter, modules' extra_repr") {
  nn::PReLU prelu(3, 0.1);
  auto params = prelu.named_parameters();
  REQUIRE(params.size() == 1);
  CHECK(params[0].first == "weight");
  CHECK(params[0].second.shape() == Dims{3});
  check_close(params[0].second, {0.1, 0.1, 0.1});
  CHECK(prelu.extra_repr() == "num_parameters=3");
  CHECK(nn::LeakyReLU(0.2).extra_repr() == "negative_slope=0.2");
  CHECK(nn::Softplus(2, 6).extra_repr() == "beta=2, threshold=6");
  CHECK(nn::ReflectionPad2d(2).extra_repr() == "(2, 2, 2, 2)");
  CHECK(nn::ZeroPad2d({1, 2, 3, 4}).extra_repr() == "(1, 2, 3, 4)");
  CHECK(nn::Unflatten(1, {2, 3}).extra_repr() == "dim=1, unflattened_size=[2, 3]");
  CHECK(nn::Upsample(nn::UpsampleOptions().scale_factor(2).mode("bilinear").align_corners(true))
            .extra_repr() == "scale_factor=(2, 2), mode='bilinear', align_corners=true");
  CHECK(nn::PixelShuffle(3).extra_repr() == "upscale_factor=3");
}

TEST_CASE("image layers: bad inputs name the layer, what was given and what was expected") {
  Tensor x = ops::zeros({1, 5, 2, 2}, kFloat64);
  CHECK_ERROR_CONTAINS(nn::PixelShuffle(2)(x), "pixel_shuffle", "[1, 5, 2, 2]", "is 5",
                       "not divisible by upscale_factor^2 = 4");
  CHECK_ERROR_CONTAINS(nn::pixel_shuffle(ops::zeros({4, 2}), 2), "pixel_shuffle", "at least 3 dims",
                       "[4, 2]");
  CHECK_ERROR_CONTAINS(nn::PixelShuffle(0), "PixelShuffle", "positive", "0");
  CHECK_ERROR_CONTAINS(nn::PixelUnshuffle(2)(ops::zeros({1, 3, 4, 5})), "pixel_unshuffle",
                       "width 5", "divisible by downscale_factor 2");
  Tensor small = ops::zeros({1, 1, 3, 3});
  CHECK_ERROR_CONTAINS(nn::ReflectionPad2d(3)(small), "reflection_pad", "padding (3, 3)", "dim 3",
                       "less than its size 3");
  CHECK_ERROR_CONTAINS(nn::ReflectionPad2d({1, 1, 3, 0})(small), "padding (3, 0)", "dim 2");
  CHECK_ERROR_CONTAINS(nn::ReflectionPad2d(1)(ops::zeros({3, 3})), "ReflectionPad2d",
                       "3-D [C, H, W] or 4-D [N, C, H, W]", "[3, 3]");
  CHECK_ERROR_CONTAINS(nn::ReplicationPad2d(-2)(small), "replication_pad", "size -1",
                       "expected >= 1");
  CHECK_ERROR_CONTAINS(nn::ZeroPad2d({0, 0, -3, 0})(small), "ZeroPad2d", "padding -3",
                       "all 3 elements");
  CHECK_ERROR_CONTAINS(nn::Upsample(nn::UpsampleOptions()), "Upsample",
                       "exactly one of size and scale_factor", "neither");
  CHECK_ERROR_CONTAINS(nn::Upsample(nn::UpsampleOptions().size(3).scale_factor(2)), "both");
  CHECK_ERROR_CONTAINS(nn::Upsample(nn::UpsampleOptions().scale_factor(2).align_corners(false)),
                       "align_corners", "mode 'nearest'");
  CHECK_ERROR_CONTAINS(nn::Upsample(nn::UpsampleOptions().scale_factor(2).mode("trilinear")),
                       "mode 'trilinear'");
  CHECK_ERROR_CONTAINS(nn::Upsample(nn::UpsampleOptions().scale_factor(2))(ops::zeros({1, 3, 4})),
                       "Upsample", "4-D input", "[1, 3, 4]");
  nn::PReLU prelu(3);
  CHECK_ERROR_CONTAINS(prelu(ops::zeros({2, 4})), "prelu", "3 parameters", "4 channels",
                       "expected 1 or 4");
  CHECK_ERROR_CONTAINS(prelu(ops::zeros({3})), "3 parameters", "1 channels");
  CHECK_ERROR_CONTAINS(nn::leaky_relu(ops::zeros({2}, kInt64)), "leaky_relu", "float32 or float64",
                       "int64");
  CHECK_ERROR_CONTAINS(nn::Unflatten(1, {2, 3})(ops::zeros({2, 7})), "unflatten", "[2, 3]",
                       "size of dim 1 (7)");
  CHECK_ERROR_CONTAINS(nn::Unflatten(1, {-1, -1}), "Unflatten", "only one size may be -1");
  CHECK_ERROR_CONTAINS(nn::Dropout2d(1.5), "Dropout2d", "[0, 1]", "1.5");
  CHECK_ERROR_CONTAINS(nn::dropout2d(ops::zeros({2, 3}), 0.5, true), "dropout2d", "[2, 3]");
}

TEST_CASE("init: calculate_gain against PyTorch's") {
  const json& gains = fixture_json(kFile).at("gains");
  REQUIRE(gains.size() == 15);
  for (const json& g : gains) {
    INFO(g.dump());
    std::optional<double> param;
    if (!g[1].is_null()) param = g[1].get<double>();
    CHECK(nn::init::calculate_gain(g[0].get<std::string>(), param) ==
          doctest::Approx(g[2].get<double>()).epsilon(1e-15));
  }
  CHECK_ERROR_CONTAINS(nn::init::calculate_gain("gelu"), "calculate_gain", "'gelu'", "leaky_relu");
}

TEST_CASE("init: xavier_normal_ and kaiming_normal_ draw with the stated standard deviation") {
  Generator gen(1);
  Tensor w = ops::empty({300, 200}, kFloat64);
  nn::init::xavier_normal_(w, 1.5, gen);
  auto [mean, std] = mean_std(w);
  double want = 1.5 * std::sqrt(2.0 / 500);
  CHECK(std::fabs(mean) < 4 * want / std::sqrt(60000.0));
  CHECK(std == doctest::Approx(want).epsilon(0.02));

  Tensor conv = ops::empty({200, 30, 3, 3}, kFloat32);  // fan_in 270, fan_out 1800
  nn::init::kaiming_normal_(conv, 0, "fan_out", "relu", gen);
  CHECK(conv.dtype() == kFloat32);
  std::tie(mean, std) = mean_std(conv);
  CHECK(std::fabs(mean) < 4 * std / std::sqrt(54000.0));
  CHECK(std == doctest::Approx(std::sqrt(2.0 / 1800)).epsilon(0.02));
  nn::init::kaiming_normal_(conv, 0.2, "FAN_IN", "leaky_relu", gen);  // mode in any case
  CHECK(mean_std(conv).second ==
        doctest::Approx(std::sqrt(2.0 / 1.04) / std::sqrt(270.0)).epsilon(0.02));
  nn::init::kaiming_normal_(w, 0, "fan_in", "linear", gen);
  CHECK(mean_std(w).second == doctest::Approx(1 / std::sqrt(200.0)).epsilon(0.02));
}

TEST_CASE("init: kaiming_uniform_ with mode and nonlinearity, the old signature unchanged") {
  Generator gen(2);
  Tensor w = ops::empty({400, 150}, kFloat64);
  nn::init::kaiming_uniform_(w, 0, "fan_out", "tanh", gen);
  double bound = std::sqrt(3.0) * (5.0 / 3) / std::sqrt(400.0);
  std::vector<double> v = w.to_vector<double>();
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(lo < -0.99 * bound);
  CHECK(hi > 0.99 * bound);
  CHECK(mean_std(w).second == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  // kaiming_uniform_(t, a, gen) is mode fan_in, leaky_relu: the same draws from the same seed.
  Tensor a = ops::empty({7, 5}, kFloat64), b = ops::empty({7, 5}, kFloat64);
  Generator g1(4), g2(4);
  nn::init::kaiming_uniform_(a, std::sqrt(5.0), g1);
  nn::init::kaiming_uniform_(b, std::sqrt(5.0), "fan_in", "leaky_relu", g2);
  check_close(a, b, 0, 0);
  CHECK(mean_std(a).second < 1 / std::sqrt(5.0));  // bound 1 / sqrt(fan_in) = 1 / sqrt(5)
  CHECK_ERROR_CONTAINS(nn::init::kaiming_uniform_(a, 0, "fan_avg"), "kaiming_uniform_", "'fan_avg'",
                       "fan_in or fan_out");
  CHECK_ERROR_CONTAINS(nn::init::kaiming_normal_(a, 0, "fan_in", "swish"), "calculate_gain",
                       "'swish'");
}

TEST_CASE("init: householder_q is torch.linalg.qr's Q times sign(diag R)") {
  for (const auto& item : fixture_json(kFile).at("qr").items()) {
    const std::string name = item.key();
    const auto& c = item.value();
    INFO(name);
    Tensor q = nn::init::householder_q(fixture_tensor(c["a"]));
    Tensor want = fixture_tensor(c["q"]);
    REQUIRE(q.shape() == want.shape());
    check_close(q, want.to_vector<double>(), 1e-12, 1e-12);
  }
  CHECK_ERROR_CONTAINS(nn::init::householder_q(ops::zeros({2, 3}, kFloat64)), "householder_q",
                       "m >= n", "[2, 3]");
}

TEST_CASE("init: orthogonal_ gives Q^T Q = I (tall) and Q Q^T = I (wide), times gain") {
  Generator gen(6);
  Tensor tall = ops::empty({7, 4}, kFloat64);
  nn::init::orthogonal_(tall, 1, gen);
  check_close(gram(tall), identity(4), 1e-12, 0);
  Tensor wide = ops::empty({3, 8}, kFloat32);
  nn::init::orthogonal_(wide, 2, gen);
  check_close(gram(ops::transpose(wide, 0, 1).to(kFloat64)), identity(3) * 4.0, 1e-5, 0);
  Tensor conv = ops::empty({6, 2, 2, 2}, kFloat64);  // rows 6, cols 8
  nn::init::orthogonal_(conv, 1, gen);
  Tensor flat = ops::reshape(conv, {6, 8});
  check_close(gram(ops::transpose(flat, 0, 1)), identity(6), 1e-12, 0);
  Tensor square = ops::empty({5, 5}, kFloat64);
  nn::init::orthogonal_(square, 1, gen);
  check_close(gram(square), identity(5), 1e-12, 0);
  // Deterministic in the generator's seed.
  Tensor a = ops::empty({4, 3}, kFloat64), b = ops::empty({4, 3}, kFloat64);
  Generator g1(8), g2(8);
  nn::init::orthogonal_(a, 1, g1);
  nn::init::orthogonal_(b, 1, g2);
  check_close(a, b, 1e-12, 0);  // the same draws; the QR's products may run on OpenBLAS
  CHECK_ERROR_CONTAINS(nn::init::orthogonal_(ops::empty({4})), "orthogonal_",
                       "2 or more dimensions", "[4]");
}

TEST_CASE("nn::utils: parameters_to_vector and vector_to_parameters") {
  Tensor a = rand64({2, 3}, 41), b = rand64({4}, 42);
  Tensor v = nn::utils::parameters_to_vector({a, b});
  REQUIRE(v.shape() == Dims{10});
  std::vector<double> want = a.to_vector<double>();
  for (double e : b.to_vector<double>()) want.push_back(e);
  check_close(v, want, 0, 0);
  // A gradient of the vector reaches the parameters.
  ops::sum(v * ops::arange(0, 10, 1, kFloat64)).backward();
  check_close(a.grad(), {0, 1, 2, 3, 4, 5}, 0, 0);
  check_close(b.grad(), {6, 7, 8, 9}, 0, 0);
  // Back: the values land in order, shapes kept, no graph recorded.
  nn::utils::vector_to_parameters(ops::arange(10, 20, 1, kFloat64), {a, b});
  check_close(a, {10, 11, 12, 13, 14, 15}, 0, 0);
  check_close(b, {16, 17, 18, 19}, 0, 0);
  CHECK(a.requires_grad());
  CHECK(!a.grad_fn());
  // A model's parameters round trip.
  nn::PReLU m(3, 0.5);
  Tensor mv = nn::utils::parameters_to_vector(m.parameters());
  nn::utils::vector_to_parameters(mv.detach() * 2.0, m.parameters());
  check_close(m.weight, {1.0, 1.0, 1.0});
  CHECK_ERROR_CONTAINS(nn::utils::vector_to_parameters(ops::zeros({9}, kFloat64), {a, b}),
                       "vector_to_parameters", "9 elements", "hold 10");
  CHECK_ERROR_CONTAINS(nn::utils::vector_to_parameters(ops::zeros({10}), {a, b}),
                       "vector_to_parameters", "float64", "float32");
  CHECK_ERROR_CONTAINS(nn::utils::parameters_to_vector({a, ops::zeros({2})}),
                       "parameters_to_vector", "parameter 1 is float32");
}
