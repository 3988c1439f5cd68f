// nn::utils::weight_norm / spectral_norm (nn/weight_norm.h) against PyTorch 1.13
// (tests/fixtures/norm_extras.json, make_norm_extras_fixtures.py): on a Linear, a Conv2d and a
// ConvTranspose2d, the state_dict's keys in PyTorch's order, the training output, the input and
// parameter gradients of sum(y * r), the power iteration's buffers after it, and an eval output,
// in float64 and float32; remove_*; float64 gradchecks; errors.
#include <memory>

#include "nn/containers.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/recurrent.h"
#include "nn/state.h"
#include "nn/weight_norm.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "norm_extras.json";

std::optional<int64_t> dim_option(const json& o) {
  if (!o.contains("dim")) return std::nullopt;
  return o["dim"].is_null() ? std::nullopt : std::optional<int64_t>(o["dim"].get<int64_t>());
}

/// The case's module wrapped by its utility.
std::shared_ptr<nn::Reparametrized> make(const json& c) {
  const std::string m = c["module"], util = c["util"];
  const json& o = c["options"];
  const json& u = c["util_options"];
  auto wrap = [&](auto module) -> std::shared_ptr<nn::Reparametrized> {
    if (util == "weight_norm")  // no "dim": PyTorch's default 0; "dim": null: the whole tensor
      return nn::utils::weight_norm(module, "weight",
                                    u.contains("dim") ? dim_option(u) : std::optional<int64_t>(0));
    return nn::utils::spectral_norm(module, "weight", u.value("n_power_iterations", 1),
                                    u.value("eps", 1e-12), dim_option(u));
  };
  if (m == "Linear")
    return wrap(std::make_shared<nn::Linear>(o["in_features"].get<int64_t>(),
                                             o["out_features"].get<int64_t>()));
  if (m == "Conv2d")
    return wrap(std::make_shared<nn::Conv2d>(
        o["in_channels"].get<int64_t>(), o["out_channels"].get<int64_t>(),
        o["kernel_size"].get<int64_t>(), 1, o.value("padding", int64_t{0})));
  REQUIRE(m == "ConvTranspose2d");
  return wrap(std::make_shared<nn::ConvTranspose2d>(
      o["in_channels"].get<int64_t>(), o["out_channels"].get<int64_t>(),
      o["kernel_size"].get<int64_t>(), o.value("stride", int64_t{1})));
}

void check_case(const std::string& name, DType dtype, double tol) {
  INFO(name << ", " << dtype_name(dtype));
  const json& c = fixture_json(kFile).at("reparam").at(name);
  auto m = make(c);
  m->to(dtype);
  std::vector<std::string> keys;
  for (const auto& item : m->state_dict()) keys.push_back(item.first);
  CHECK(keys == c["state"]["keys"].get<std::vector<std::string>>());
  load_fixture_state(*m, c["state"]["values"]);
  m->train();
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  Tensor y = (*m)(x);
  check_close(y, fixture_tensor(c["output"]).to_vector<double>(), tol, tol);
  ops::sum(y * fixture_tensor(c["r"], dtype)).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), tol, tol);
  const auto params = m->named_parameters();
  CHECK(params.size() == c["param_grads"].size());
  for (const auto& item : params) {
    INFO("parameter " << item.first);
    REQUIRE(c["param_grads"].contains(item.first));
    REQUIRE(item.second.grad().defined());
    check_close(item.second.grad(),
                fixture_tensor(c["param_grads"][item.first]).to_vector<double>(), tol, tol);
  }
  const auto buffers = m->named_buffers();
  CHECK(buffers.size() == c["state_after"].size());
  for (const auto& item : buffers) {
    INFO("buffer " << item.first);
    REQUIRE(c["state_after"].contains(item.first));
    check_close(item.second, fixture_tensor(c["state_after"][item.first]).to_vector<double>(), tol,
                tol);
  }
  m->eval();
  NoGradGuard no_grad;
  check_close((*m)(fixture_tensor(c["eval_input"], dtype)),
              fixture_tensor(c["eval_output"]).to_vector<double>(), tol, tol);
}

}  // namespace

TEST_CASE(
    "weight norm: weight_norm and spectral_norm on Linear, Conv2d, ConvTranspose2d against "
    "PyTorch") {
  int n = 0;
  for (const auto& item : fixture_json(kFile).at("reparam").items()) {
    check_case(item.key(), kFloat64, 1e-10);
    check_case(item.key(), kFloat32, 1e-5);
    ++n;
  }
  CHECK(n == 7);
}

TEST_CASE("weight norm: names, repr, the wrapped module's parameters shared, Sequential keys") {
  auto lin = std::make_shared<nn::Linear>(4, 3);
  const Tensor bias = lin->bias, w0 = lin->weight.clone();
  auto wn = nn::utils::weight_norm(lin);
  CHECK(wn->type_name() == "Linear");
  CHECK(wn->extra_repr() == lin->extra_repr());
  CHECK(wn->weight_g.shape() == Dims{3, 1});
  CHECK(wn->weight_v.shape() == Dims{3, 4});
  CHECK(wn->named_parameters()[0].second.impl_ptr() == bias.impl_ptr());
  // At the start, the recomputed weight is the old one.
  check_close(wn->compute_weight(), w0, 1e-6, 1e-6);
  check_close(lin->weight, w0, 1e-6, 1e-6);
  nn::Sequential seq{wn, std::make_shared<nn::ReLU>()};
  std::vector<std::string> keys;
  for (const auto& item : seq.state_dict()) keys.push_back(item.first);
  CHECK(keys == std::vector<std::string>{"0.bias", "0.weight_g", "0.weight_v"});
  auto sn = nn::utils::spectral_norm(std::make_shared<nn::Conv2d>(2, 3, 3));
  keys.clear();
  for (const auto& item : sn->state_dict()) keys.push_back(item.first);
  CHECK(keys == std::vector<std::string>{"bias", "weight_orig", "weight_u", "weight_v"});
  CHECK(sn->weight_u.shape() == Dims{3});
  CHECK(sn->weight_v.shape() == Dims{18});
  auto snt = nn::utils::spectral_norm(std::make_shared<nn::ConvTranspose2d>(2, 3, 3));
  CHECK(snt->dim == 1);
  CHECK(snt->weight_u.shape() == Dims{3});
  CHECK(snt->weight_v.shape() == Dims{18});
  // train/eval reaches the wrapped module.
  sn->eval();
  CHECK_FALSE(sn->module()->is_training());
}

TEST_CASE("weight norm: remove_weight_norm and remove_spectral_norm give the weight back") {
  auto lin = std::make_shared<nn::Linear>(5, 3);
  lin->to(kFloat64);
  auto wn = nn::utils::weight_norm(lin, "weight", 0);
  {
    NoGradGuard no_grad;
    wn->weight_g.copy_(ops::mul(wn->weight_g, 1.7));
  }
  const Tensor x = rand64({2, 5}, 1).detach();
  const Tensor want = (*wn)(x).detach();
  auto back = std::dynamic_pointer_cast<nn::Linear>(nn::utils::remove_weight_norm(wn));
  REQUIRE(back != nullptr);
  CHECK(back->weight.is_leaf());
  CHECK(back->weight.requires_grad());
  std::vector<std::string> keys;
  for (const auto& item : back->state_dict()) keys.push_back(item.first);
  CHECK(keys == std::vector<std::string>{"weight", "bias"});
  check_close((*back)(x), want, 1e-12, 1e-12);

  auto conv = std::make_shared<nn::Conv2d>(2, 3, 3);
  conv->to(kFloat64);
  auto sn = nn::utils::spectral_norm(conv);
  const Tensor xc = rand64({1, 2, 5, 5}, 2).detach();
  (*sn)(xc);  // one power iteration
  sn->eval();
  const Tensor want_c = (*sn)(xc).detach();
  auto back_c = std::dynamic_pointer_cast<nn::Conv2d>(nn::utils::remove_spectral_norm(sn));
  REQUIRE(back_c != nullptr);
  check_close((*back_c)(xc), want_c, 1e-12, 1e-12);
  keys.clear();
  for (const auto& item : back_c->state_dict()) keys.push_back(item.first);
  CHECK(keys == std::vector<std::string>{"weight", "bias"});
}

TEST_CASE("weight norm: float64 gradchecks through weight_norm and spectral_norm") {
  // The wrapper's tensors replaced by the gradcheck's inputs (its members are handles).
  for (std::optional<int64_t> dim :
       {std::optional<int64_t>(0), std::optional<int64_t>(1), std::optional<int64_t>()}) {
    INFO("dim " << dim.value_or(-1));
    auto conv = std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1);
    conv->to(kFloat64);
    auto wn = nn::utils::weight_norm(conv, "weight", dim);
    const Dims gshape = wn->weight_g.shape();
    check_grad(
        [&](const std::vector<Tensor>& in) {
          wn->weight_g = in[1];
          wn->weight_v = in[2];
          return (*wn)(in[0]);
        },
        {rand64({1, 2, 4, 3}, 3), rand64(gshape, 4, 0.5, 1.0), rand64({3, 2, 3, 3}, 5)});
  }
  auto conv = std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1);
  conv->to(kFloat64);
  auto sn = nn::utils::spectral_norm(conv);
  sn->eval();  // u and v as they are: sigma = u^T W v
  check_grad(
      [&](const std::vector<Tensor>& in) {
        sn->weight_orig = in[1];
        return (*sn)(in[0]);
      },
      {rand64({1, 2, 4, 3}, 6), rand64({3, 2, 3, 3}, 7)});
}

TEST_CASE("weight norm: bad arguments name the utility, what was given and what was expected") {
  auto lin = std::make_shared<nn::Linear>(4, 3);
  CHECK_THROWS_WITH_AS(nn::utils::weight_norm(lin, "bias"),
                       doctest::Contains("weight_norm: for the parameter 'bias' pass the member"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::utils::weight_norm(lin, &nn::Linear::weight, "weights"),
                       doctest::Contains("Linear has no parameter 'weights' (its parameters: "
                                         "weight, bias)"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::utils::weight_norm(lin, &nn::Linear::bias, "weight"),
                       doctest::Contains("the member given does not hold Linear's parameter"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::utils::weight_norm(lin, "weight", 2),
                       doctest::Contains("dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(nn::utils::spectral_norm(lin, "weight", 0),
                       doctest::Contains("expected n_power_iterations to be positive, got 0"),
                       Error);
  // A member of a base class (RNNCellBase's weight_hh).
  auto cell = std::make_shared<nn::RNNCell>(3, 4);
  auto wc = nn::utils::weight_norm(cell, &nn::RNNCell::weight_hh, "weight_hh");
  CHECK(wc->weight_g.shape() == Dims{4, 1});
  CHECK((*wc)(ops::ones({2, 3})).shape() == Dims{2, 4});
  // Wrapping by the member overload works for a parameter of another name.
  auto by_bias = nn::utils::weight_norm(lin, &nn::Linear::bias, "bias");
  std::vector<std::string> keys;
  for (const auto& item : by_bias->state_dict()) keys.push_back(item.first);
  CHECK(keys == std::vector<std::string>{"weight", "bias_g", "bias_v"});
}
