// Linear layers under matmul precision "medium" on bfloat16 operands (ops/bf16_operands.cpp):
// x, the weights and dy rounded once, the MLP's GELU output and pre-activation written as
// bfloat16 by fc1's epilogue, dpre's copy by the backward's. The reference is float64 on the CPU
// with the same roundings. Run on CUDA by tests/backends (cuBLASLt and the epilogue kernels) and
// on the CPU by tests/ops (the same layers' logic, the CPU multiplying float32 copies).
// Tolerances: float32 sums differ from float64 by ~1e-6 relative, but a value computed in float32
// and then rounded to bfloat16 (GELU's output, dpre) can land one bfloat16 step (2^-8 relative)
// from the reference's rounding, which moves a 96-term product by about |w| 2^-8: 3e-2 absolute
// on outputs of order 10.
#pragma once
#include "backends/matmul_precision.h"
#include "ops/helpers.h"
#include "test_util.h"

namespace vt_test {

inline void check_bf16_layers(const vitrine::Device& dev) {
  using namespace vitrine;
  auto randn = [](const Dims& shape, uint64_t seed) {
    Generator g(seed);
    return ops::randn(shape, g, kFloat64);
  };
  struct Restore {
    ~Restore() { set_float32_matmul_precision("highest"); }
  } restore;
  auto r = [](const Tensor& t) { return t.to(kFloat32).to(kBFloat16).to(kFloat64); };
  auto leaf = [&dev](const Tensor& t) { return t.to(kFloat32).to(dev).detach().requires_grad_(); };
  auto cpu64 = [](const Tensor& t) { return t.to(kCPU).to(kFloat64); };
  const int64_t M = 150, K = 96, H = 200, N = 72;
  const Tensor x = randn({3, 50, K}, 70), w1 = randn({H, K}, 71) * 0.2, b1 = randn({H}, 72),
               w2 = randn({N, H}, 73) * 0.2, b2 = randn({N}, 74), res = randn({3, 50, N}, 75),
               dy = randn({3, 50, N}, 76);
  set_float32_matmul_precision("medium");
  SUBCASE("linear with bias and residual") {
    Tensor xg = leaf(x), wg = leaf(w2.narrow(1, 0, K)), bg = leaf(b2), rg = leaf(res);
    const Tensor y = ops::linear(xg, wg, bg, rg);
    const Tensor w = w2.narrow(1, 0, K);
    check_close(
        cpu64(y),
        ops::matmul(r(x), r(w).mT()) + b2.to(kFloat32).to(kFloat64) + res.to(kFloat32).to(kFloat64),
        1e-3, 1e-4);
    y.backward(dy.to(kFloat32).to(dev));
    const Tensor d = r(dy).reshape({M, N});
    check_close(cpu64(xg.grad()), ops::matmul(d, r(w)).reshape({3, 50, K}), 1e-3, 1e-4);
    check_close(cpu64(wg.grad()), ops::matmul(d.mT(), r(x).reshape({M, K})), 1e-3, 1e-4);
    check_close(cpu64(bg.grad()), ops::sum(d, {0}), 1e-3, 1e-4);
    check_close(cpu64(rg.grad()), dy.to(kFloat32).to(kFloat64), 0, 0);
  }
  SUBCASE("mlp_gelu with its residual") {
    Tensor xg = leaf(x), w1g = leaf(w1), b1g = leaf(b1), w2g = leaf(w2), b2g = leaf(b2),
           rg = leaf(res);
    const Tensor y = ops::mlp_gelu(xg, w1g, b1g, w2g, b2g, rg);
    // The reference, rounding where the GPU rounds.
    const Tensor x2 = r(x).reshape({M, K});
    Tensor pre = (ops::matmul(x2, r(w1).mT()) + b1.to(kFloat32).to(kFloat64)).detach();
    const Tensor act = r(ops::gelu(pre));
    check_close(cpu64(y),
                (ops::matmul(act, r(w2).mT()) + b2.to(kFloat32).to(kFloat64)).reshape({3, 50, N}) +
                    res.to(kFloat32).to(kFloat64),
                3e-2, 1e-2);
    y.backward(dy.to(kFloat32).to(dev));
    const Tensor d = r(dy).reshape({M, N});
    check_close(cpu64(w2g.grad()), ops::matmul(d.mT(), act), 3e-2, 1e-2);
    check_close(cpu64(b2g.grad()), ops::sum(d, {0}), 1e-3, 1e-4);
    check_close(cpu64(rg.grad()), dy.to(kFloat32).to(kFloat64), 0, 0);
    // dpre = (d W2) gelu'(pre rounded), rounded.
    Tensor pr = r(pre).detach().requires_grad_();
    ops::gelu(pr).backward(ops::matmul(d, r(w2)));
    const Tensor dpre = r(pr.grad());
    check_close(cpu64(xg.grad()), ops::matmul(dpre, r(w1)).reshape({3, 50, K}), 3e-2, 1e-2);
    check_close(cpu64(w1g.grad()), ops::matmul(dpre.mT(), x2), 3e-2, 1e-2);
    check_close(cpu64(b1g.grad()), ops::sum(dpre, {0}), 3e-2, 1e-2);
  }
  SUBCASE("a weight changed in place is rounded again") {
    const Tensor xg = x.to(kFloat32).to(dev), wg = w1.to(kFloat32).to(dev);
    const Tensor y1 = cpu64(ops::linear(xg, wg));
    {
      NoGradGuard ng;
      Tensor wm = wg;
      wm.mul_(2.0);
    }
    check_close(cpu64(ops::linear(xg, wg)), y1 * 2.0, 1e-3, 1e-4);
  }
}

}  // namespace vt_test
