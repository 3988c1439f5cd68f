// The normalisation layers (nn/norms.h: GroupNorm, InstanceNorm1d/2d, BatchNorm1d, RMSNorm; and
// nn::LayerNorm over several dims) and their ops (ops/norms.h) against PyTorch 1.13
// (tests/fixtures/norms.json, made by make_norms_fixtures.py; RMSNorm by PyTorch 2.4's formula):
// each case's output, input and parameter gradients of sum(y * r) and the running statistics
// after its training steps, in float64 at 1e-10 and some in float32 at 1e-5; a float64 gradcheck
// per op; bad inputs and their messages.
#include <memory>
#include <set>

#include "nn/layers.h"
#include "nn/norms.h"
#include "ops/norms.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "norms.json";

Dims dims_of(const json& j) {
  if (j.is_number()) return Dims{j.get<int64_t>()};
  return Dims(j.get<std::vector<int64_t>>());
}

/// The case's module, built from its torch.nn class name and keyword options.
std::shared_ptr<nn::Module> make(const json& c) {
  const std::string m = c["module"];
  const json& o = c["options"];
  if (m == "GroupNorm")
    return std::make_shared<nn::GroupNorm>(o["num_groups"].get<int64_t>(),
                                           o["num_channels"].get<int64_t>(), o.value("eps", 1e-5),
                                           o.value("affine", true));
  if (m == "InstanceNorm1d" || m == "InstanceNorm2d") {
    const int64_t c_ = o["num_features"].get<int64_t>();
    const double eps = o.value("eps", 1e-5), momentum = o.value("momentum", 0.1);
    const bool affine = o.value("affine", false), track = o.value("track_running_stats", false);
    if (m == "InstanceNorm1d")
      return std::make_shared<nn::InstanceNorm1d>(c_, eps, momentum, affine, track);
    return std::make_shared<nn::InstanceNorm2d>(c_, eps, momentum, affine, track);
  }
  if (m == "BatchNorm1d") {
    std::optional<double> momentum = 0.1;
    if (o.contains("momentum"))
      momentum = o["momentum"].is_null() ? std::nullopt
                                         : std::optional<double>(o["momentum"].get<double>());
    return std::make_shared<nn::BatchNorm1d>(o["num_features"].get<int64_t>(), o.value("eps", 1e-5),
                                             momentum, o.value("affine", true),
                                             o.value("track_running_stats", true));
  }
  if (m == "LayerNorm")
    return std::make_shared<nn::LayerNorm>(dims_of(o["normalized_shape"]), o.value("eps", 1e-5),
                                           o.value("elementwise_affine", true));
  REQUIRE(m == "RMSNorm");
  std::optional<double> eps;
  if (o.contains("eps") && !o["eps"].is_null()) eps = o["eps"].get<double>();
  return std::make_shared<nn::RMSNorm>(dims_of(o["normalized_shape"]), eps,
                                       o.value("elementwise_affine", true));
}

/// One case in dtype: the training steps, then the checked call's output, input and parameter
/// gradients, and the buffers after it, against PyTorch's.
void check_case(const std::string& name, DType dtype, double atol, double rtol) {
  INFO(name << ", " << dtype_name(dtype));
  const json& c = fixture_case(kFile, name);
  auto m = make(c);
  m->to(dtype);
  load_fixture_state(*m, c["state"]);
  m->train();
  for (const json& s : c["steps"]) (*m)(fixture_tensor(s, dtype));
  m->train(c["training"].get<bool>());
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  Tensor y = (*m)(x);
  CHECK(y.dtype() == dtype);
  Tensor want = fixture_tensor(c["output"]);
  REQUIRE(y.shape() == want.shape());
  check_close(y, want.to_vector<double>(), atol, rtol);
  ops::sum(y * fixture_tensor(c["r"], dtype)).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), atol, rtol);
  const auto params = m->named_parameters();
  CHECK(params.size() == c["param_grads"].size());
  for (const auto& item : params) {
    const auto& pname = item.first;
    const auto& p = item.second;
    INFO("parameter " << pname);
    REQUIRE(c["param_grads"].contains(pname));
    REQUIRE(p.grad().defined());
    check_close(p.grad(), fixture_tensor(c["param_grads"][pname]).to_vector<double>(), atol, rtol);
  }
  const auto buffers = m->named_buffers();
  CHECK(buffers.size() == c["state_after"].size());
  for (const auto& item : buffers) {
    const auto& bname = item.first;
    const auto& b = item.second;
    INFO("buffer " << bname);
    REQUIRE(c["state_after"].contains(bname));
    check_close(b, fixture_tensor(c["state_after"][bname]).to_vector<double>(), atol, rtol);
  }
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

}  // namespace

TEST_CASE("norms: GroupNorm against PyTorch (groups 1, C and between, affine on and off)") {
  CHECK(check_modules({"GroupNorm"}) == 5);
}

TEST_CASE("norms: InstanceNorm1d and InstanceNorm2d against PyTorch (tracking, eval, unbatched)") {
  CHECK(check_modules({"InstanceNorm1d", "InstanceNorm2d"}) == 11);
}

TEST_CASE("norms: BatchNorm1d on [N, C] and [N, C, L] against PyTorch") {
  CHECK(check_modules({"BatchNorm1d"}) == 6);
}

TEST_CASE("norms: LayerNorm over several trailing dims and RMSNorm against PyTorch") {
  CHECK(check_modules({"LayerNorm"}) == 3);
  CHECK(check_modules({"RMSNorm"}) == 4);
}

TEST_CASE("norms: float32 against PyTorch's float64 at 1e-5") {
  int n = 0;
  for (const auto& name : fixture_json(kFile).at("float32_cases")) {
    check_case(name.get<std::string>(), kFloat32, 1e-5, 1e-5);
    ++n;
  }
  CHECK(n == 9);
}

TEST_CASE("norms: RMSNorm's default eps is finfo(float32).eps in float32") {
  const json& c = fixture_json(kFile).at("rms_norm_float32_default_eps");
  nn::RMSNorm m(5);
  CHECK(!m.eps.has_value());
  Tensor x = fixture_tensor(c["input"], kFloat32).requires_grad_();
  Tensor y = m(x);
  check_close(y, fixture_tensor(c["output"]).to_vector<double>(), 1e-5, 1e-5);
  ops::sum(y * fixture_tensor(c["r"], kFloat32)).backward();
  check_close(x.grad(), fixture_tensor(c["grad"]).to_vector<double>(), 1e-5, 1e-5);
  check_close(m.weight.grad(), fixture_tensor(c["weight_grad"]).to_vector<double>(), 1e-5, 1e-5);
  CHECK(ops::finfo_eps(kFloat32) == 1.1920928955078125e-07);  // 2^-23, exactly
  CHECK(ops::finfo_eps(kFloat64) == 2.220446049250313e-16);   // 2^-52
}

TEST_CASE("norms: parameter and buffer names and shapes are PyTorch's") {
  auto names = [](const nn::NamedTensors& ts) {
    std::vector<std::string> v;
    for (const auto& [n, t] : ts) v.push_back(n);
    return v;
  };
  using V = std::vector<std::string>;
  CHECK(names(nn::GroupNorm(2, 4).state_dict()) == V{"weight", "bias"});
  CHECK(nn::GroupNorm(2, 4, 1e-5, false).state_dict().empty());
  CHECK(nn::InstanceNorm2d(3).state_dict().empty());
  CHECK(names(nn::InstanceNorm1d(3, 1e-5, 0.1, true, true).state_dict()) ==
        V{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(names(nn::BatchNorm1d(3).state_dict()) ==
        V{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  nn::LayerNorm ln(Dims{3, 4});
  CHECK(ln.weight.shape() == Dims{3, 4});
  CHECK(ln.bias.shape() == Dims{3, 4});
  CHECK(nn::LayerNorm(7).weight.shape() == Dims{7});
  nn::RMSNorm rms(Dims{2, 3});
  CHECK(names(rms.state_dict()) == V{"weight"});
  CHECK(rms.weight.shape() == Dims{2, 3});
  CHECK(nn::RMSNorm(5, 1e-6, false).state_dict().empty());
  CHECK(nn::GroupNorm(3, 6).extra_repr() == "3, 6, eps=1e-05, affine=true");
  CHECK(nn::RMSNorm(Dims{3, 4}).extra_repr() == "(3, 4), eps=None, elementwise_affine=true");
}

TEST_CASE("norms: float64 gradchecks of group_norm, instance_norm, rms_norm, layer_norm") {
  Tensor x = rand64({2, 6, 3}, 1, 1.5, 0.2), w = rand64({6}, 2, 0.5, 1.0), b = rand64({6}, 3, 0.5);
  for (int64_t g : {1, 2, 3, 6})
    check_grad(
        [g](const std::vector<Tensor>& in) { return ops::group_norm(in[0], g, in[1], in[2]); },
        {x, w, b});
  check_grad([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 2); },
             {rand64({3, 4}, 4)});
  Tensor x4 = rand64({2, 3, 2, 3}, 5), w3 = rand64({3}, 6, 0.5, 1.0), b3 = rand64({3}, 7);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::instance_norm(in[0], Tensor(), Tensor(), in[1], in[2]);
      },
      {x4, w3, b3});
  // Eval with running statistics (batch_norm's path).
  Tensor rm = ops::from_vector(std::vector<double>{0.1, -0.2, 0.3}, {3}, kFloat64);
  Tensor rv = ops::from_vector(std::vector<double>{1.5, 0.7, 2.0}, {3}, kFloat64);
  check_grad(
      [&](const std::vector<Tensor>& in) {
        return ops::instance_norm(in[0], rm, rv, in[1], in[2], false);
      },
      {x4, w3, b3});
  Tensor xr = rand64({2, 3, 4}, 8), wr = rand64({3, 4}, 9, 0.5, 1.0);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::rms_norm(in[0], {3, 4}, in[1], 1e-3);
      },
      {xr, wr});
  check_grad([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {4}); }, {xr});
  Tensor bl = rand64({3, 4}, 10);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::layer_norm(in[0], {3, 4}, in[1], in[2], 1e-5);
      },
      {xr, wr, bl});
}

TEST_CASE("norms: float64 gradchecks of the modules in training (BatchNorm1d 2D and 3D)") {
  for (const Dims& shape : {Dims{5, 3}, Dims{3, 3, 4}}) {
    nn::BatchNorm1d bn(3, 1e-5, 0.1, true, false);
    bn.to(kFloat64);
    Tensor w = rand64({3}, 11, 0.5, 1.0), b = rand64({3}, 12);
    {
      NoGradGuard no_grad;
      bn.weight.copy_(w);
      bn.bias.copy_(b);
    }
    check_grad([&](const std::vector<Tensor>& in) { return bn(in[0]); },
               {rand64(shape, 13, 1.3, 0.4)});
  }
  nn::InstanceNorm1d in1(3, 1e-5, 0.1, true);
  in1.to(kFloat64);
  check_grad([&](const std::vector<Tensor>& in) { return in1(in[0]); }, {rand64({3, 5}, 14)});
  nn::GroupNorm gn(3, 6);
  gn.to(kFloat64);
  check_grad([&](const std::vector<Tensor>& in) { return gn(in[0]); }, {rand64({2, 6, 2, 2}, 15)});
}

TEST_CASE("norms: bad arguments and inputs name the op, what was given and what was expected") {
  CHECK_ERROR_CONTAINS(nn::GroupNorm(4, 6), "GroupNorm", "num_channels 6",
                       "divisible by num_groups 4");
  Tensor x = ops::zeros({2, 6, 3});
  CHECK_ERROR_CONTAINS(ops::group_norm(x, 4), "group_norm", "number of channels 6",
                       "divisible by num_groups 4");
  CHECK_ERROR_CONTAINS(ops::group_norm(x, 3, ops::ones({5})), "group_norm", "weight",
                       "expected [6]");
  CHECK_ERROR_CONTAINS(nn::GroupNorm(2, 4)(x), "GroupNorm(2, 4)", "[N, 4, *]", "[2, 6, 3]");
  CHECK_ERROR_CONTAINS(nn::InstanceNorm1d(6)(ops::zeros({2, 6, 3, 3})), "InstanceNorm1d",
                       "2D (unbatched) or 3D (batched)", "[2, 6, 3, 3]");
  CHECK_ERROR_CONTAINS(nn::InstanceNorm2d(4, 1e-5, 0.1, true)(ops::zeros({2, 6, 3, 3})),
                       "InstanceNorm2d(4)", "num_features 4", "[2, 6, 3, 3]");
  CHECK_ERROR_CONTAINS(nn::InstanceNorm1d(6)(ops::zeros({2, 6, 1})), "instance_norm",
                       "more than 1 spatial element", "[2, 6, 1]");
  CHECK_ERROR_CONTAINS(nn::BatchNorm1d(6)(ops::zeros({2, 6, 3, 3})), "BatchNorm1d",
                       "[N, C] or [N, C, L]", "[2, 6, 3, 3]");
  CHECK_ERROR_CONTAINS(nn::BatchNorm1d(5)(x), "BatchNorm1d(5)", "6 channels");
  CHECK_ERROR_CONTAINS(nn::RMSNorm(Dims{3, 4})(x), "rms_norm", "normalized_shape [3, 4]",
                       "[2, 6, 3]");
  CHECK_ERROR_CONTAINS(nn::LayerNorm(Dims{6, 4})(x), "layer_norm", "[6, 4]", "[2, 6, 3]");
  CHECK_ERROR_CONTAINS(ops::rms_norm(x, {3}, ops::ones({4})), "rms_norm", "weight has shape [4]");
  // Without affine or tracking, PyTorch normalises whatever channel count it is given.
  CHECK(nn::InstanceNorm1d(4)(x).shape() == x.shape());
}
