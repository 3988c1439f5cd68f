// Linear layers on bfloat16 operands (ops/bf16_operands.cpp, docs/cuda.md), checked on the CPU:
// the CPU takes the path under a test switch and multiplies float32 copies of the bfloat16
// operands, so the layers' logic (what is rounded where, what the backward reads) is proven here
// without a GPU; tests/backends runs the same checks on CUDA's kernels.
#include "backends/gpu_paths.h"
#include "bf16_layers.h"
#include "models/vit.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

namespace {
Tensor randn(const Dims& shape, uint64_t seed) {
  Generator g(seed);
  return ops::randn(shape, g, kFloat64);
}

/// The CPU on bfloat16 operands under "medium" while it lives (the path switched on: it is
/// opt-in, backends/gpu_paths.h).
struct Bf16OnCpu {
  GpuPathGuard path{GpuPath::Bf16Operands, true};
  Bf16OnCpu() {
    ops::detail::set_bf16_operands_on_cpu(true);
    set_float32_matmul_precision("medium");
  }
  ~Bf16OnCpu() {
    ops::detail::set_bf16_operands_on_cpu(false);
    set_float32_matmul_precision("highest");
  }
};
}  // namespace

TEST_CASE("bf16 operands: linear and mlp_gelu against float64 with the same roundings") {
  const Bf16OnCpu on;
  check_bf16_layers(kCPU);
}

TEST_CASE("bf16 operands: a weight is rounded once per version") {
  const Bf16OnCpu on;
  Tensor w = randn({4, 3}, 1).to(kFloat32);
  const Tensor a = ops::detail::bf16_weight(w), b = ops::detail::bf16_weight(w);
  CHECK(a.dtype() == kBFloat16);
  CHECK(a.same(b));  // the same copy: no second conversion
  w.mul_(2.0);       // a new version
  const Tensor c = ops::detail::bf16_weight(w);
  CHECK_FALSE(c.same(a));
  check_close(c.to(kFloat64), a.to(kFloat64) * 2.0, 0, 0);  // doubling is exact in bfloat16
  // Another tensor over the same storage with another shape gets its own copy.
  const Tensor v = w.reshape({12});
  CHECK(ops::detail::bf16_weight(v).shape() == Dims{12});
}

TEST_CASE("bf16 operands: only float32 layers under medium take them") {
  const Bf16OnCpu on;
  CHECK(ops::detail::bf16_operands(ops::zeros({2, 2})));
  CHECK_FALSE(ops::detail::bf16_operands(ops::zeros({2, 2}, kFloat64)));
  set_float32_matmul_precision("high");
  CHECK_FALSE(ops::detail::bf16_operands(ops::zeros({2, 2})));
}

TEST_CASE("bf16 operands: double backward is refused with a clear message") {
  const Bf16OnCpu on;
  Tensor x = randn({5, 4}, 2).to(kFloat32).requires_grad_(),
         w = randn({3, 4}, 3).to(kFloat32).requires_grad_();
  Tensor y = ops::sum(ops::linear(x, w, Tensor()));
  CHECK_ERROR_CONTAINS(grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true), "linear",
                       "create_graph", "VITRINE_BF16_OPERANDS=0");
}

// A whole model on bfloat16 operands: the fmnist ViT's loss and every gradient stay within
// bfloat16's error of float32's (inputs rounded to 8 mantissa bits: ~0.4% per product, a few
// percent after two blocks), and the model's linear layers did take the path (the results
// differ from float32's).
TEST_CASE("bf16 operands: a ViT training step stays within bfloat16's error of float32") {
  models::ViTConfig c = models::ViTConfig::preset("fmnist");
  c.depth = 2;
  Generator gd(51);
  const Tensor x = ops::randn({8, 1, 28, 28}, gd), y = ops::randint(0, 10, {8}, gd);
  auto step = [&](bool bf16) {
    const Bf16OnCpu on;
    if (!bf16) set_float32_matmul_precision("highest");
    Generator g(50);
    auto m = std::make_shared<models::VisionTransformer>(c, g);
    ops::cross_entropy(m->forward(x), y, ops::Reduction::Mean, 0.1).backward();
    return m;
  };
  const auto m32 = step(false), m16 = step(true);
  const auto p32 = m32->named_parameters(), p16 = m16->named_parameters();
  REQUIRE(p32.size() == p16.size());
  double worst = 0;
  for (size_t i = 0; i < p32.size(); ++i) {
    const Tensor a = p32[i].second.grad().to(kFloat64), b = p16[i].second.grad().to(kFloat64);
    const double scale = ops::max(ops::abs(a)).item() + 1e-12;
    const double err = ops::max(ops::abs(a - b)).item() / scale;
    INFO(p32[i].first << ": max |g32 - g16| / max |g32| = " << err);
    CHECK(err < 0.1);
    worst = std::max(worst, err);
  }
  CHECK(worst > 1e-4);  // the bfloat16 path ran
  MESSAGE("worst relative gradient difference: " << worst);
}

TEST_CASE("bf16 operands: a frozen weight's linear gives the bias its gradient alone") {
  // (the weight needs none: db is dy's column sums of its bfloat16 copy, no product computed)
  const Bf16OnCpu on;
  const Tensor x = randn({6, 5}, 11).to(kFloat32), w = randn({4, 5}, 12).to(kFloat32);
  Tensor b = randn({4}, 13).to(kFloat32).requires_grad_(true);
  Tensor xg = x.detach().requires_grad_(true);
  const Tensor dy = randn({6, 4}, 14).to(kFloat32);
  ops::sum(ops::linear(xg, w, b) * dy).backward();
  REQUIRE(b.grad().defined());
  const Tensor want = ops::sum(dy.to(kBFloat16).to(kFloat64), {0});
  check_close(b.grad().to(kFloat64), want, 1e-6, 1e-6);
  CHECK(xg.grad().defined());
}
