// Second derivatives through the normalisation layers and their fused kernels:
// - d(sum(g^2))/dx and /dparams with g = d sum(m(x) r) / dx (a WGAN-GP gradient penalty's form)
//   for GroupNorm, LayerNorm, InstanceNorm2d and RMSNorm against PyTorch 1.13
//   (tests/fixtures/norm_extras.json, make_norm_extras_fixtures.py), float64 and float32;
// - float64 second-order gradchecks (gradcheck of the create_graph gradient), fused and composed;
// - the fused rms_norm / group_norm (ops::fused_norms) against the compositions they replace, the
//   Backend's composed default rms_norm kernels against the CPU's, float64 gradchecks of the fused
//   path, and results independent of the thread count.
#include <memory>

#include "nn/layers.h"
#include "nn/norms.h"
#include "ops/norms.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;
using nlohmann::json;

namespace {

const char* kFile = "norm_extras.json";

/// Restores ops::fused_norms() at scope exit.
struct FusedNorms {
  explicit FusedNorms(bool on) : before(ops::fused_norms()) { ops::set_fused_norms(on); }
  ~FusedNorms() { ops::set_fused_norms(before); }
  FusedNorms(const FusedNorms&) = delete;
  FusedNorms& operator=(const FusedNorms&) = delete;
  bool before;
};

Dims dims_of(const json& j) {
  if (j.is_number()) return Dims{j.get<int64_t>()};
  return Dims(j.get<std::vector<int64_t>>());
}

std::shared_ptr<nn::Module> make(const json& c) {
  const std::string m = c["module"];
  const json& o = c["options"];
  if (m == "GroupNorm")
    return std::make_shared<nn::GroupNorm>(o["num_groups"].get<int64_t>(),
                                           o["num_channels"].get<int64_t>(), o.value("eps", 1e-5),
                                           o.value("affine", true));
  if (m == "LayerNorm")
    return std::make_shared<nn::LayerNorm>(dims_of(o["normalized_shape"]), o.value("eps", 1e-5),
                                           o.value("elementwise_affine", true));
  if (m == "InstanceNorm2d")
    return std::make_shared<nn::InstanceNorm2d>(
        o["num_features"].get<int64_t>(), o.value("eps", 1e-5), 0.1, o.value("affine", false));
  REQUIRE(m == "RMSNorm");
  return std::make_shared<nn::RMSNorm>(dims_of(o["normalized_shape"]), o["eps"].get<double>());
}

/// The largest |value| of a fixture tensor (the scale of a tolerance).
double scale_of(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s = std::max(s, std::abs(v));
  return s;
}

/// One double-backward case in dtype against PyTorch: the penalty, its input and parameter
/// gradients, within rtol of each value plus rtol of the tensor's largest value.
void check_double_backward(const std::string& name, DType dtype, double rtol) {
  INFO(name << ", " << dtype_name(dtype));
  const json& c = fixture_json(kFile).at("double_backward").at(name);
  auto m = make(c);
  m->to(dtype);
  load_fixture_state(*m, c["state"]);
  Tensor x = fixture_tensor(c["input"], dtype).requires_grad_();
  Tensor y = (*m)(x);
  Tensor g = grad({ops::sum(y * fixture_tensor(c["r"], dtype))}, {x}, {}, false, true)[0];
  Tensor penalty = ops::sum(g * g);
  const double want = c["penalty"].get<double>();
  CHECK(std::abs(penalty.item<double>() - want) <= rtol * std::abs(want));
  penalty.backward();
  const Tensor gx = fixture_tensor(c["grad"]);
  REQUIRE(x.grad().defined());
  check_close(x.grad(), gx.to_vector<double>(), rtol * scale_of(gx), rtol);
  for (const auto& item : m->named_parameters()) {
    INFO("parameter " << item.first);
    const Tensor gp = fixture_tensor(c["param_grads"][item.first]);
    const Tensor got =
        item.second.grad().defined() ? item.second.grad() : ops::zeros(gp.shape(), dtype);
    check_close(got, gp.to_vector<double>(), rtol * std::max(scale_of(gp), 1.0), rtol);
  }
}

/// Second-order gradcheck: gradcheck of in -> d sum(fn(in) r) / d(in) made with create_graph
/// (every input's gradient, flattened and concatenated), r a fixed random tensor.
void check_gradgrad(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                    const std::vector<Tensor>& inputs, uint64_t seed) {
  Tensor r;
  {
    NoGradGuard no_grad;
    r = rand64(fn(inputs).shape(), seed).detach();
  }
  check_grad(
      [&](const std::vector<Tensor>& in) {
        const Tensor y = fn(in);
        const std::vector<Tensor> gs = grad({ops::sum(y * r)}, in, {}, false, true, true);
        std::vector<Tensor> flat;
        for (const Tensor& t : gs) flat.push_back(ops::reshape(t, {-1}));
        return ops::cat(flat, 0);
      },
      inputs);
}

}  // namespace

TEST_CASE(
    "norm extras: gradient penalties through GroupNorm, LayerNorm, InstanceNorm2d, RMSNorm "
    "against PyTorch") {
  int n = 0;
  for (const auto& item : fixture_json(kFile).at("double_backward").items()) {
    for (bool fused : {true, false}) {
      FusedNorms f(fused);
      INFO("fused " << fused);
      check_double_backward(item.key(), kFloat64, 1e-10);
      check_double_backward(item.key(), kFloat32, 1e-5);
    }
    ++n;
  }
  CHECK(n == 7);
}

TEST_CASE(
    "norm extras: float64 second-order gradchecks of layer_norm, group_norm, rms_norm, "
    "instance_norm") {
  for (bool fused : {true, false}) {
    FusedNorms f(fused);
    INFO("fused " << fused);
    Tensor x = rand64({2, 6, 3}, 1, 1.5, 0.2), w = rand64({6}, 2, 0.5, 1.0),
           b = rand64({6}, 3, 0.5);
    for (int64_t g : {1, 3, 6})
      check_gradgrad(
          [g](const std::vector<Tensor>& in) { return ops::group_norm(in[0], g, in[1], in[2]); },
          {x, w, b}, 10 + g);
    check_gradgrad([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 2); },
                   {rand64({3, 4, 2}, 4)}, 20);
    Tensor xr = rand64({2, 3, 4}, 8), wr = rand64({3, 4}, 9, 0.5, 1.0), br = rand64({3, 4}, 10);
    check_gradgrad(
        [](const std::vector<Tensor>& in) {
          return ops::layer_norm(in[0], {3, 4}, in[1], in[2], 1e-5);
        },
        {xr, wr, br}, 21);
    check_gradgrad(
        [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], {4}, {}, {}, 1e-3); },
        {xr}, 22);
    check_gradgrad(
        [](const std::vector<Tensor>& in) {
          return ops::rms_norm(in[0], {3, 4}, in[1], 1e-3);
        },
        {xr, wr}, 23);
    check_gradgrad([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {4}); }, {xr},
                   24);
    Tensor x4 = rand64({2, 3, 2, 3}, 5), w3 = rand64({3}, 6, 0.5, 1.0), b3 = rand64({3}, 7);
    check_gradgrad(
        [](const std::vector<Tensor>& in) {
          return ops::instance_norm(in[0], Tensor(), Tensor(), in[1], in[2]);
        },
        {x4, w3, b3}, 25);
  }
}

TEST_CASE("norm extras: float64 gradchecks of the fused rms_norm and group_norm") {
  FusedNorms f(true);
  // More rows than the backward's 256 row blocks, so that blocks hold several rows.
  Tensor x = rand64({300, 5}, 31), w = rand64({5}, 32, 0.5, 1.0);
  check_grad([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {5}, in[1], 1e-4); },
             {x, w});
  Tensor x3 = rand64({2, 3, 7}, 33), w2 = rand64({3, 7}, 34, 0.5, 1.0);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::rms_norm(in[0], {3, 7}, in[1], 1e-4);
      },
      {x3, w2});
  check_grad([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {7}); }, {x3});
  Tensor xg = rand64({3, 6, 5}, 35, 1.3, 0.4), wg = rand64({6}, 36, 0.5, 1.0), bg = rand64({6}, 37);
  for (int64_t g : {1, 2, 6})
    check_grad(
        [g](const std::vector<Tensor>& in) { return ops::group_norm(in[0], g, in[1], in[2]); },
        {xg, wg, bg});
  check_grad([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 3, in[1]); },
             {xg, wg});
  check_grad([](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 3); }, {xg});
}

TEST_CASE("norm extras: the fused rms_norm and group_norm equal their compositions") {
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == kFloat64 ? 1e-12 : 2e-5;
    struct Case {
      std::string name;
      std::function<Tensor(const std::vector<Tensor>&)> fn;
      std::vector<Dims> shapes;
    };
    const std::vector<Case> cases = {
        {"rms_norm weight",
         [](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {33}, in[1]); },
         {{5, 7, 33}, {33}}},
        {"rms_norm two dims",
         [](const std::vector<Tensor>& in) {
           return ops::rms_norm(in[0], {3, 5}, in[1], 1e-5);
         },
         {{4, 3, 5}, {3, 5}}},
        {"rms_norm no weight",
         [](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {9}); },
         {{300, 9}}},
        {"group_norm affine",
         [](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 4, in[1], in[2]); },
         {{3, 8, 5, 7}, {8}, {8}}},
        {"group_norm plain",
         [](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 3); },
         {{2, 9, 11}}},
    };
    for (const Case& c : cases) {
      INFO(c.name);
      std::vector<Tensor> in;
      for (size_t i = 0; i < c.shapes.size(); ++i)
        in.push_back(rand64(c.shapes[i], 40 + i, 1.2, i == 1 ? 1.0 : 0.3).to(dtype).detach());
      const Tensor r = rand64(c.fn(in).shape(), 50).to(dtype).detach();
      std::vector<Tensor> outs, grads;
      for (bool fused : {true, false}) {
        FusedNorms f(fused);
        std::vector<Tensor> leaves;
        for (const Tensor& t : in) leaves.push_back(t.clone().requires_grad_());
        Tensor y = c.fn(leaves);
        outs.push_back(y.detach());
        ops::sum(y * r).backward();
        for (const Tensor& l : leaves) grads.push_back(l.grad());
      }
      check_close(outs[0], outs[1], tol, tol);
      const size_t k = in.size();
      for (size_t i = 0; i < k; ++i) check_close(grads[i], grads[k + i], tol, tol);
    }
  }
}

TEST_CASE("norm extras: the Backend's composed default rms_norm kernels equal the CPU's") {
  Backend& be = backend_for(kCPU);
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
    const Tensor x = rand64({7, 13}, 60).to(dtype).detach(),
                 w = rand64({13}, 61).to(dtype).detach();
    const Tensor dy = rand64({7, 13}, 62).to(dtype).detach();
    for (bool with_w : {true, false}) {
      INFO("weight " << with_w);
      const Strided ws = with_w ? w.strided() : Strided();
      Tensor y[2], rstd[2], dx[2], dw[2];
      for (int k = 0; k < 2; ++k) {
        y[k] = ops::empty({7, 13}, dtype);
        rstd[k] = ops::empty({7}, dtype);
        dx[k] = ops::empty({7, 13}, dtype);
        dw[k] = ops::empty({13}, dtype);
      }
      be.rms_norm(x.strided(), ws, 1e-3, y[0].strided(), rstd[0].strided());
      be.Backend::rms_norm(x.strided(), ws, 1e-3, y[1].strided(), rstd[1].strided());
      be.rms_norm_backward(x.strided(), ws, rstd[0].strided(), dy.strided(), dx[0].strided(),
                           dw[0].strided());
      be.Backend::rms_norm_backward(x.strided(), ws, rstd[1].strided(), dy.strided(),
                                    dx[1].strided(), dw[1].strided());
      check_close(y[0], y[1], tol, tol);
      check_close(rstd[0], rstd[1], tol, tol);
      check_close(dx[0], dx[1], tol, tol);
      check_close(dw[0], dw[1], tol, tol);
    }
  }
}

TEST_CASE("norm extras: fused rms_norm and group_norm give the same bits on 1 and 2 threads") {
  FusedNorms f(true);
  const Tensor x = rand64({600, 37}, 70).to(kFloat32).detach();
  const Tensor w = rand64({37}, 71).to(kFloat32).detach();
  const Tensor xg = rand64({6, 8, 19, 17}, 72).to(kFloat32).detach();
  const Tensor wg = rand64({8}, 73).to(kFloat32).detach(),
               bg = rand64({8}, 74).to(kFloat32).detach();
  std::vector<std::vector<float>> runs[2];
  for (int t : {1, 2}) {
    Threads threads(t);
    Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_();
    Tensor y = ops::rms_norm(xl, {37}, wl);
    ops::sum(y * y).backward();
    Tensor xgl = xg.clone().requires_grad_(), wgl = wg.clone().requires_grad_(),
           bgl = bg.clone().requires_grad_();
    Tensor yg = ops::group_norm(xgl, 4, wgl, bgl);
    ops::sum(yg * yg).backward();
    for (const Tensor& v : {y, xl.grad(), wl.grad(), yg, xgl.grad(), wgl.grad(), bgl.grad()})
      runs[t - 1].push_back(v.contiguous().to_vector<float>());
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    INFO("result " << i);
    CHECK(runs[0][i] == runs[1][i]);
  }
}

TEST_CASE("norm extras: create_graph through the fused norms keeps a graph, without it none") {
  Tensor x = rand64({2, 4, 3}, 80);
  nn::GroupNorm gn(2, 4);
  gn.to(kFloat64);
  Tensor g = grad({ops::sum(gn(x) * rand64({2, 4, 3}, 81).detach())}, {x}, {}, false, true)[0];
  CHECK(g.requires_grad());
  Tensor g2 = grad({ops::sum(gn(x) * rand64({2, 4, 3}, 81).detach())}, {x})[0];
  CHECK_FALSE(g2.requires_grad());
}
