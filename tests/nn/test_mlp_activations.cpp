// ops::mlp and nn::MLP with each activation of backend.h's Activation (exact GELU, tanh GELU,
// ReLU, SiLU): the fused op against linear, activation, linear (float32, forward and every
// gradient, with and without biases and residual), a float64 gradcheck, PyTorch 1.13's
// Sequential(Linear, act, Linear) (tests/fixtures/make_mlp_activations_fixture.py), which
// module act is and when the MLP runs fused, the activations' config names.
#include <array>
#include <string>
#include <vector>

#include "nn/mlp.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
constexpr std::array<Activation, 4> kActs = {Activation::GELU, Activation::GELUTanh,
                                             Activation::ReLU, Activation::SiLU};

/// The activation as its module computes it when not fused (nn::SiLU: x sigmoid(x)).
Tensor act_ops(Activation act, const Tensor& x) { return nn::activation_module(act)->forward(x); }

/// ops::mlp on x, w1, b1, w2, b2 (+ residual x[5] when given): undefined biases when args holds
/// undefined tensors.
Tensor fused(Activation act, const V& a) {
  return ops::mlp(a[0], a[1], a[2], a[3], a[4], act, a.size() > 5 ? a[5] : Tensor());
}
/// What ops::mlp fuses: linear, the activation, linear (+ residual).
Tensor composite(Activation act, const V& a) {
  Tensor y = ops::linear(act_ops(act, ops::linear(a[0], a[1], a[2])), a[3], a[4]);
  return a.size() > 5 ? y + a[5] : y;
}
}  // namespace

TEST_CASE("mlp: float32 fused equals linear, activation, linear for each activation") {
  // 2 x 50 rows of 64: large enough for the CPU's own GEMM and its epilogues where it runs
  // (AVX-512), else OpenBLAS with the activation's pass over the rows (CpuBackend::gemm_fused).
  for (Activation act : kActs) {
    for (bool full : {true, false}) {  // biases and residual, or neither
      const std::string what = nn::activation_name(act) + (full ? " with" : " without");
      INFO(what << " biases and residual");
      Generator g(11);
      V leaves = {ops::randn({2, 50, 64}, g), ops::randn({96, 64}, g) * 0.15,
                  ops::randn({96}, g) * 0.5,  ops::randn({40, 96}, g) * 0.1,
                  ops::randn({40}, g),        ops::randn({2, 50, 40}, g)};
      if (!full) leaves = {leaves[0], leaves[1], leaves[3]};
      for (Tensor& t : leaves) t.requires_grad_();
      const V args = full ? leaves : V{leaves[0], leaves[1], Tensor(), leaves[2], Tensor()};
      Tensor y = fused(act, args), ref = composite(act, args);
      CHECK(y.shape() == Dims{2, 50, 40});
      check_close(y, ref, 1e-5, 1e-5);
      const Tensor w = ops::randn({2, 50, 40}, g);
      const V gy = grad({ops::sum(y * w)}, leaves, {}, false, false, true);
      const V gr = grad({ops::sum(ref * w)}, leaves, {}, false, false, true);
      for (size_t i = 0; i < leaves.size(); ++i) {
        INFO("gradient of leaf " << i);
        check_close(gy[i], gr[i], 3e-5, 3e-5);
      }
      NoGradGuard no_grad;  // the activation then overwrites the pre-activation in place
      check_close(fused(act, args), ref, 1e-5, 1e-5);
    }
  }
}

TEST_CASE("mlp: float32 at small sizes (products OpenBLAS takes) for each activation") {
  for (Activation act : kActs) {
    INFO(nn::activation_name(act));
    Generator g(3);
    V leaves = {ops::randn({5, 6}, g), ops::randn({9, 6}, g), ops::randn({9}, g),
                ops::randn({3, 9}, g), ops::randn({3}, g),    ops::randn({5, 3}, g)};
    for (Tensor& t : leaves) t.requires_grad_();
    Tensor y = fused(act, leaves), ref = composite(act, leaves);
    check_close(y, ref, 1e-5, 1e-5);
    const V gy = grad({ops::sum(y * y)}, leaves), gr = grad({ops::sum(ref * ref)}, leaves);
    for (size_t i = 0; i < leaves.size(); ++i) check_close(gy[i], gr[i], 1e-4, 1e-5);
  }
}

TEST_CASE("mlp: float64 gradcheck for each activation, with and without biases and residual") {
  for (Activation act : kActs) {
    INFO(nn::activation_name(act));
    // (ReLU: seeds whose pre-activations stay away from 0 by more than the finite step)
    const V full = {rand64({2, 3, 4}, 1), rand64({5, 4}, 2), rand64({5}, 3),
                    rand64({3, 5}, 4),    rand64({3}, 5),    rand64({2, 3, 3}, 6)};
    check_grad([act](const V& v) { return fused(act, v); }, full);
    const V plain = {rand64({4, 4}, 7), rand64({6, 4}, 8), rand64({2, 6}, 9)};
    check_grad([act](const V& v) { return ops::mlp(v[0], v[1], Tensor(), v[2], Tensor(), act); },
               plain);
    // the same values as the composition in float64 (the default steps, libm's functions)
    check_close(fused(act, full), composite(act, full), 1e-12, 1e-12);
  }
}

TEST_CASE("mlp: Backend::gemm_fused's default steps compute each activation as the CPU's do") {
  // The default (one elementwise op per step) is what CUDA runs for the tanh GELU, ReLU and SiLU
  // unless VITRINE_CUDA_FUSED_ACT=1; the CPU's own path applies simd.h's kernels to the rows.
  Generator g(7);
  const Tensor a = ops::randn({60, 24}, g), b = ops::randn({24, 40}, g) * 0.3,
               pre = ops::randn({60, 40}, g) * 2;
  for (Activation act : kActs) {
    INFO(nn::activation_name(act));
    Tensor c1 = ops::empty({60, 40}), c2 = ops::empty({60, 40});
    Tensor o1 = ops::empty({60, 40}), o2 = ops::empty({60, 40});
    Backend& be = a.backend();
    const Strided s1 = o1.strided(), s2 = o2.strided(), ps = pre.strided();
    Backend::GemmEpilogue e1, e2;  // fc1's: act(c) written beside c
    e1.gelu_out = &s1;
    e2.gelu_out = &s2;
    e1.act = e2.act = act;
    be.gemm_fused(a.strided(), b.strided(), c1.strided(), e1);
    be.Backend::gemm_fused(a.strided(), b.strided(), c2.strided(), e2);
    check_close(c1, c2, 1e-6, 1e-6);
    check_close(o1, o2, 1e-6, 1e-6);
    check_close(o2, act_ops(act, c2), 1e-6, 1e-6);
    Backend::GemmEpilogue d1, d2;  // the backward's: c *= act'(pre)
    d1.gelu_pre = d2.gelu_pre = &ps;
    d1.act = d2.act = act;
    be.gemm_fused(a.strided(), b.strided(), c1.strided(), d1);
    be.Backend::gemm_fused(a.strided(), b.strided(), c2.strided(), d2);
    check_close(c1, c2, 1e-5, 1e-5);
    Tensor p = pre.detach().requires_grad_();  // (a b) act'(pre) by autograd through the module
    check_close(c2, grad({ops::sum(act_ops(act, p) * ops::matmul(a, b))}, {p})[0], 1e-5, 1e-5);
  }
}

TEST_CASE("mlp: bad shapes name the op, and a second derivative is refused") {
  Tensor x = ops::zeros({2, 4}), w1 = ops::zeros({6, 4}), w2 = ops::zeros({3, 6});
  CHECK_ERROR_CONTAINS(ops::mlp(x, ops::zeros({6, 5}), Tensor(), w2, Tensor(), Activation::ReLU),
                       "mlp: input shape [2, 4]", "[6, 5]");
  CHECK_ERROR_CONTAINS(
      ops::mlp(x, w1, Tensor(), w2, Tensor(), Activation::SiLU, ops::zeros({2, 4})),
      "mlp: residual has shape [2, 4], expected [2, 3]");
  Tensor xg = rand64({2, 4}, 1);
  const V p = {rand64({6, 4}, 2), rand64({3, 6}, 3)};
  Tensor gx = grad({ops::sum(ops::mlp(xg, p[0], Tensor(), p[1], Tensor(), Activation::GELUTanh))},
                   {xg}, {}, false, true)[0];
  CHECK_ERROR_CONTAINS(ops::sum(gx).backward(), "mlp_backward", "double backward");
}

TEST_CASE("MLP: PyTorch parity of Sequential(Linear, act, Linear) for each activation") {
  for (Activation act : kActs) {
    const std::string name = nn::activation_name(act);
    INFO(name);
    const nlohmann::json& c = fixture_case("mlp_activations.json", name);
    for (DType dt : {kFloat64, kFloat32}) {
      INFO(dtype_name(dt));
      const double tol = dt == kFloat64 ? 1e-10 : 2e-5;
      nn::MLP m(c.at("in").get<int64_t>(), c.at("hidden").get<int64_t>(),
                c.at("out").get<int64_t>(), act);
      CHECK(m.activation() == act);
      CHECK(m.fused());
      m.to(dt);
      load_fixture_state(m, c.at("state"));
      Tensor x = fixture_tensor(c.at("input"), dt).requires_grad_();
      Tensor y = m.forward(x);
      check_close(y, fixture_tensor(c.at("output")), tol, tol);
      ops::sum(y * fixture_tensor(c.at("r"), dt)).backward();
      check_close(x.grad(), fixture_tensor(c.at("grad")), tol, tol);
      for (const auto& item : m.named_parameters()) {
        INFO(item.first);
        check_close(item.second.grad(), fixture_tensor(c.at("param_grads").at(item.first)), tol,
                    tol);
      }
    }
  }
}

TEST_CASE("MLP: the act module, what fused() reads from it, and a GELU switched to tanh") {
  Generator g(2);
  CHECK(nn::MLP(4, 8).act->type_name() == "GELU");
  CHECK(nn::MLP(4, 8, -1, Activation::GELUTanh).act->type_name() == "GELU");
  CHECK(nn::MLP(4, 8, -1, Activation::ReLU).act->type_name() == "ReLU");
  CHECK(nn::MLP(4, 8, -1, Activation::SiLU).act->type_name() == "SiLU");
  CHECK(nn::MLP(4, 8, 3, Activation::SiLU).fc2->out_features == 3);
  CHECK(nn::MLP(4, 8, -1, Activation::SiLU).fc2->out_features == 4);

  nn::MLP m(6, 12, 5, 0.0, g);  // the exact GELU, as before
  m.to(kFloat64);
  const Tensor x = rand64({3, 6}, 4), r = rand64({3, 5}, 5);
  CHECK(m.activation() == Activation::GELU);
  const V p = {m.fc1->weight, m.fc1->bias, m.fc2->weight, m.fc2->bias};
  const auto as = [&](Activation act) {
    return ops::mlp(x, p[0], p[1], p[2], p[3], act, r).detach();
  };
  check_close(m.forward_add(x, r), as(Activation::GELU), 0, 0);
  std::dynamic_pointer_cast<nn::GELU>(m.act)->tanh_approx = true;
  CHECK(m.activation() == Activation::GELUTanh);
  CHECK(m.fused());  // the tanh GELU fused, not the exact one and not the composition
  check_close(m.forward_add(x, r), as(Activation::GELUTanh), 0, 0);
  CHECK(ops::max(ops::abs(as(Activation::GELUTanh) - as(Activation::GELU))).item() > 1e-6);
  // a hook on act sees the tanh GELU's output, and the values stay the same
  int calls = 0;
  m.act->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    return Tensor();
  });
  CHECK_FALSE(m.fused());
  check_close(m.forward(x), as(Activation::GELUTanh) - r, 1e-12, 1e-12);
  CHECK(calls == 1);

  // Another module in act's place (here a subclass of GELU, which could compute anything) runs
  // as the composition.
  struct ScaledGELU : nn::GELU {
    Tensor forward(const Tensor& x) override { return nn::GELU::forward(x) * 2.0; }
  };
  nn::MLP other(6, 12, 5, Activation::ReLU, 0.0, g);
  other.to(kFloat64);
  other.act = other.set_module("act", std::make_shared<ScaledGELU>());
  CHECK_FALSE(other.activation().has_value());
  CHECK_FALSE(other.fused());
  const Tensor want =
      ops::linear(nn::GELU().forward(ops::linear(x, other.fc1->weight, other.fc1->bias)) * 2.0,
                  other.fc2->weight, other.fc2->bias);
  check_close(other.forward(x), want, 1e-12, 1e-12);
  check_close(other.forward_add(x, r), want + r, 1e-12, 1e-12);

  nn::MLP dropping(6, 12, 5, Activation::SiLU, 0.1, g);
  CHECK_FALSE(dropping.fused());  // dropout at work between the layers
  dropping.eval();
  CHECK(dropping.fused());
}

TEST_CASE("MLP: activations by config name") {
  for (Activation act : kActs) CHECK(nn::activation_from_name(nn::activation_name(act)) == act);
  CHECK(nn::activation_name(Activation::GELUTanh) == "gelu_tanh");
  CHECK(nn::activation_from_name("silu") == Activation::SiLU);
  CHECK_ERROR_CONTAINS(nn::activation_from_name("swish"), "'swish'", "gelu, gelu_tanh, relu",
                       "silu");
  CHECK_ERROR_CONTAINS(nn::activation_from_name("GELU"), "'GELU'");
  nn::MLP m(4, 8, 4, nn::activation_from_name("relu"));
  CHECK(m.activation() == Activation::ReLU);
}
