// The backend comparison, in the spirit of ggml's test-backend-ops: every op runs on the CPU and
// on CUDA with the same random inputs, forward and backward, in float32 and float64, and the
// results must agree within the tolerances stated per case (float64: 1e-9, summation order only;
// float32: 1e-4 relative, plus more where a long reduction or an approximate exp is involved).
// Then gradcheck in float64 on the GPU, random numbers bit for bit, dtype conversions, the
// optimizers, and a whole ViT training step. Without a GPU every case says it is skipped, and why.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/gpu_paths.h"
#include "backends/matmul_precision.h"
#include "bf16_layers.h"
#include "models/vit.h"
#include "nn/optim/adam.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

namespace {

const Device kGpu = Device::parse("cuda");

struct Tol {
  double f32 = 1e-4, f64 = 1e-9;
};

/// The same values on device d (floating values cast to dtype), a leaf that requires grad when
/// floating.
Tensor twin(const Tensor& x, const Device& d, DType dtype) {
  Tensor t = (is_float(x.dtype()) ? x.to(dtype) : x).to(d).detach();
  if (is_float(t.dtype())) t.requires_grad_();
  return t;
}

/// Runs fn on the CPU and the GPU from the same inputs (float64 masters, cast to dtype), compares
/// the outputs and, when grad, the gradients of every floating input under one random upstream
/// gradient.
void compare(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs, DType dtype,
             double tol, bool grad = true) {
  INFO(name << " (" << dtype_name(dtype) << ")");
  std::vector<Tensor> xc, xg;
  for (const Tensor& x : inputs) {
    xc.push_back(twin(x, kCPU, dtype));
    xg.push_back(twin(x, kGpu, dtype));
  }
  Tensor yc = fn(xc), yg = fn(xg);
  REQUIRE(yg.device() == kGpu);
  REQUIRE(yc.shape() == yg.shape());
  check_close(yg.to(kCPU), yc, tol, tol);
  if (!grad || !yc.requires_grad()) return;
  Generator gen(99);
  Tensor up = ops::randn(yc.shape(), gen, yc.dtype());
  yc.backward(up);
  yg.backward(up.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!xc[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(xc[i].grad().defined() == xg[i].grad().defined());
    if (xc[i].grad().defined()) check_close(xg[i].grad().to(kCPU), xc[i].grad(), tol, tol);
  }
}

/// compare() in float32 and float64.
void both(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs, Tol tol = {},
          bool grad = true) {
  compare(name, fn, inputs, kFloat64, tol.f64, grad);
  compare(name, fn, inputs, kFloat32, tol.f32, grad);
}

Tensor randn(const Dims& shape, uint64_t seed, double scale = 1, double shift = 0) {
  Generator g(seed);
  return (ops::randn(shape, g, kFloat64) * scale + shift).detach();
}

}  // namespace

TEST_CASE("cuda ops: unary, forward and backward against the CPU") {
  if (!gpu_or_skip()) return;
  const Tensor x = randn({3, 5, 7}, 1), pos = randn({3, 5, 7}, 2, 0.5, 2.0);
  both("neg", [](auto v) { return ops::neg(v[0]); }, {x});
  both("exp", [](auto v) { return ops::exp(v[0]); }, {x});
  both("log", [](auto v) { return ops::log(v[0]); }, {pos});
  both("sqrt", [](auto v) { return ops::sqrt(v[0]); }, {pos});
  both("rsqrt", [](auto v) { return ops::rsqrt(v[0]); }, {pos});
  both("abs", [](auto v) { return ops::abs(v[0]); }, {x});
  both("tanh", [](auto v) { return ops::tanh(v[0]); }, {x});
  both("sigmoid", [](auto v) { return ops::sigmoid(v[0]); }, {x});
  both("softplus", [](auto v) { return ops::softplus(v[0] * 12.0); }, {x});  // both sides of 20
  both("relu", [](auto v) { return ops::relu(v[0]); }, {x});
  both("gelu", [](auto v) { return ops::gelu(v[0]); }, {x});
  both("gelu tanh", [](auto v) { return ops::gelu(v[0], true); }, {x});
  both(
      "sign", [](auto v) { return ops::sign(v[0]); }, {x}, {}, false);
  both("pow 3", [](auto v) { return ops::pow(v[0], 3.0); }, {x});
  both("clamp", [](auto v) { return ops::clamp(v[0], -0.5, 0.7); }, {x});
  both("scalar ops", [](auto v) { return v[0] * 1.5 + 2.0; }, {x});
  // A non-contiguous input: the strided read.
  both("exp of a transpose", [](auto v) { return ops::exp(v[0].transpose(0, 2)); }, {x});
}

TEST_CASE("cuda ops: binary with broadcasting, comparisons and where") {
  if (!gpu_or_skip()) return;
  const Tensor a = randn({4, 1, 6}, 3), b = randn({5, 1}, 4), pb = randn({5, 1}, 5, 0.3, 1.5);
  const Tensor pa = randn({4, 1, 6}, 6, 0.3, 1.5);
  both("add", [](auto v) { return ops::add(v[0], v[1], 0.5); }, {a, b});
  both("sub", [](auto v) { return v[0] - v[1]; }, {a, b});
  both("mul", [](auto v) { return v[0] * v[1]; }, {a, b});
  both("div", [](auto v) { return v[0] / v[1]; }, {a, pb});
  both("pow", [](auto v) { return ops::pow(v[0], v[1]); }, {pa, b});
  both("maximum", [](auto v) { return ops::maximum(v[0], v[1]); }, {a, b});
  both("minimum", [](auto v) { return ops::minimum(v[0], v[1]); }, {a, b});
  for (auto item : std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)>>{
           {"eq", ops::eq},
           {"ne", ops::ne},
           {"lt", ops::lt},
           {"le", ops::le},
           {"gt", ops::gt},
           {"ge", ops::ge}}) {
    const auto name = item.first;
    const auto op = item.second;
    both(
        name, [op](auto v) { return op(v[0], ops::sign(v[1])).to(kFloat64); }, {ops::sign(a), b},
        {}, false);
  }
  both("where", [](auto v) { return ops::where(ops::gt(v[0], v[1]), v[0], v[1]); }, {a, b});
}

TEST_CASE("cuda ops: reductions") {
  if (!gpu_or_skip()) return;
  const Tensor x = randn({6, 7, 300}, 7);
  const Tol sum_tol{1e-4, 1e-9};
  both(
      "sum all", [](auto v) { return ops::sum(v[0]); }, {x}, sum_tol);
  both(
      "sum last", [](auto v) { return ops::sum(v[0], {2}); }, {x}, sum_tol);
  both(
      "sum first two",
      [](auto v) {
        return ops::sum(v[0], {0, 1}, true);
      },
      {x}, sum_tol);
  both("mean middle", [](auto v) { return ops::mean(v[0], {1}); }, {x});
  both("var", [](auto v) { return ops::var(v[0], {2}); }, {x});
  both("max dim", [](auto v) { return ops::max(v[0], 1).values; }, {x});
  both("min dim", [](auto v) { return ops::min(v[0], 2, true).values; }, {x});
  both("max all", [](auto v) { return ops::max(v[0]); }, {x});
  both(
      "argmax", [](auto v) { return ops::argmax(v[0], 2).to(kFloat64); }, {x}, {}, false);
  both(
      "argmin", [](auto v) { return ops::argmin(v[0], 0).to(kFloat64); }, {x}, {}, false);
  both("logsumexp", [](auto v) { return ops::logsumexp(v[0], {2}); }, {x});
  // Sums over the rows of a [R, C] block (a bias's gradient): strips of rows, then their partials.
  const Tensor rows = randn({40, 50, 300}, 8), tall = randn({700, 130}, 9);
  both(
      "sum over 2000 rows",
      [](auto v) {
        return ops::sum(v[0], {0, 1});
      },
      {rows}, sum_tol);
  both("mean over 700 rows", [](auto v) { return ops::mean(v[0], {0}, true); }, {tall});
  both(
      "sum over the rows of a column slice (row stride 130, 100 columns)",
      [](auto v) { return ops::sum(v[0].narrow(1, 20, 100), {0}); }, {tall}, sum_tol);
  both(
      "sum of a permute",
      [](auto v) {
        return ops::sum(v[0].permute({2, 0, 1}), {1});
      },
      {x}, sum_tol);
}

TEST_CASE("cuda ops: matmul and linear through cuBLAS") {
  if (!gpu_or_skip()) return;
  const Tol t{2e-4, 1e-9};
  both(
      "2-D", [](auto v) { return ops::matmul(v[0], v[1]); },
      {randn({33, 17}, 8), randn({17, 9}, 9)}, t);
  both(
      "batched, broadcast", [](auto v) { return ops::matmul(v[0], v[1]); },
      {randn({2, 3, 5, 8}, 10), randn({8, 4}, 11)}, t);
  both(
      "batched, broadcast batch dims", [](auto v) { return ops::matmul(v[0], v[1]); },
      {randn({2, 1, 5, 8}, 12), randn({1, 3, 8, 4}, 13)}, t);
  both(
      "transposed operand", [](auto v) { return ops::matmul(v[0].mT(), v[1]); },
      {randn({4, 8, 5}, 14), randn({4, 8, 6}, 15)}, t);
  both(
      "vector", [](auto v) { return ops::matmul(v[0], v[1]); }, {randn({7}, 16), randn({7, 3}, 17)},
      t);
  both(
      "linear", [](auto v) { return ops::linear(v[0], v[1], v[2]); },
      {randn({2, 10, 12}, 18), randn({6, 12}, 19), randn({6}, 20)}, t);
}

// "medium": each input of a float32 product rounded to bfloat16 (nearest even), products and
// sums in float32; "high": TF32. The references are float64 products on the CPU, of the rounded
// inputs for "medium".
TEST_CASE("cuda ops: float32 products under the high and medium matmul precisions") {
  if (!gpu_or_skip()) return;
  struct Restore {
    ~Restore() { set_float32_matmul_precision("highest"); }
  } restore;
  const Tensor a = randn({3, 70, 96}, 60).to(kFloat32), b = randn({96, 130}, 61).to(kFloat32),
               w = randn({130, 96}, 62).to(kFloat32), bias = randn({130}, 63).to(kFloat32),
               res = randn({3, 70, 130}, 64).to(kFloat32);
  // VITRINE_CUDA_BF16_COPIES=0: cuBLAS's FAST_16BF on float32 inputs, which may run TF32, so
  // only bfloat16's error bound holds.
  const char* copies = std::getenv("VITRINE_CUDA_BF16_COPIES");
  const bool exact = !(copies && std::string(copies) == "0");
  auto rounded = [exact](const Tensor& t) {
    return exact ? t.to(kBFloat16).to(kFloat64) : t.to(kFloat64);
  };
  const double tol = exact ? 1e-4 : 0.3;
  const Tensor full = ops::matmul(a.to(kFloat64), b.to(kFloat64));
  set_float32_matmul_precision("medium");
  const Tensor got = ops::matmul(a.to(kGpu), b.to(kGpu)).to(kCPU).to(kFloat64);
  check_close(got, ops::matmul(rounded(a), rounded(b)), tol, 1e-4);
  if (exact) CHECK(ops::max(ops::abs(got - full)).item() > 1e-3);  // the inputs were rounded
  // Both operands batched ([3, 70, 96] @ [3, 96, 130]), the second read transposed.
  const Tensor b3 = randn({3, 130, 96}, 66).to(kFloat32);
  check_close(ops::matmul(a.to(kGpu), b3.to(kGpu).mT()).to(kCPU).to(kFloat64),
              ops::matmul(rounded(a), rounded(b3).mT()), tol, 1e-4);
  // A transposed operand (x w^T), a bias and a residual: a linear layer's fused product.
  const Tensor lin = ops::linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu), res.to(kGpu));
  check_close(lin.to(kCPU).to(kFloat64),
              ops::matmul(rounded(a), rounded(w).mT()) + bias.to(kFloat64) + res.to(kFloat64), 1e-4,
              1e-4);
  // Its backward: dx = dy w and dw = dy^T x, inputs rounded alike.
  Tensor xg = a.to(kGpu).detach().requires_grad_(), wg = w.to(kGpu).detach().requires_grad_();
  const Tensor dy = randn({3, 70, 130}, 65).to(kFloat32);
  ops::linear(xg, wg, bias.to(kGpu)).backward(dy.to(kGpu));
  const Tensor dy2 = rounded(dy).reshape({210, 130});
  check_close(xg.grad().to(kCPU).to(kFloat64), ops::matmul(dy2, rounded(w)).reshape({3, 70, 96}),
              1e-4, 1e-4);
  check_close(wg.grad().to(kCPU).to(kFloat64), ops::matmul(dy2.mT(), rounded(a).reshape({210, 96})),
              1e-3, 1e-4);
  set_float32_matmul_precision("high");
  check_close(ops::matmul(a.to(kGpu), b.to(kGpu)).to(kCPU).to(kFloat64), full, 5e-2, 1e-2);
}

// The layers on bfloat16 operands (tests/bf16_layers.h, also run on the CPU by tests/ops), with
// cuBLASLt's epilogues and with the epilogue pass instead. Both paths are opt-in until a GPU run
// has passed them (backends/gpu_paths.h): the test switches them on.
TEST_CASE("cuda ops: linear layers on bfloat16 operands (cuBLASLt epilogues)") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard bf16(GpuPath::Bf16Operands, true);
  for (bool lt : {true, false}) {
    INFO("cuBLASLt " << (lt ? "on" : "off"));
    const GpuPathGuard lt_path(GpuPath::CudaLt, lt);
    check_bf16_layers(kGpu);
  }
}

TEST_CASE("cuda ops: shapes, copies, cat, index_select, gather") {
  if (!gpu_or_skip()) return;
  const Tensor x = randn({4, 5, 6}, 21), y = randn({4, 2, 6}, 22);
  both("contiguous of a permute", [](auto v) { return v[0].permute({2, 0, 1}).contiguous(); }, {x});
  both("slice with step", [](auto v) { return v[0].slice(2, 1, 6, 2).contiguous(); }, {x});
  both("cat", [](auto v) { return ops::cat({v[0], v[1]}, 1); }, {x, y});
  both("pad", [](auto v) { return ops::pad(v[0], {1, 2, 0, 1}, 0.5); }, {x});
  const Tensor idx = ops::from_vector(std::vector<int64_t>{3, 0, 3, 1});
  both("index_select (repeated indices: index_add backward)",
       [idx](auto v) { return ops::index_select(v[0], 1, idx.to(v[0].device())); }, {x});
  Generator g(23);
  const Tensor gidx = ops::randint(0, 6, {4, 5, 3}, g);
  both("gather (scatter_add backward)",
       [gidx](auto v) { return ops::gather(v[0], 2, gidx.to(v[0].device())); }, {x});
  both("to float32 and back", [](auto v) { return v[0].to(kFloat32).to(kFloat64) * 1.0; }, {x});
}

TEST_CASE("cuda ops: out-of-range indices and targets are the CPU's errors") {
  if (!gpu_or_skip()) return;
  Tensor x = ops::zeros({3, 4}, kFloat32, kGpu);
  Tensor bad = ops::from_vector(std::vector<int64_t>{0, 4, 1}).to(kGpu);
  CHECK_ERROR_CONTAINS(ops::index_select(x, 1, bad), "index_select: index 4 is out of range",
                       "size 4");
  Tensor target = ops::from_vector(std::vector<int64_t>{1, -100, 7}).to(kGpu);
  CHECK_ERROR_CONTAINS(ops::cross_entropy(x, target), "cross_entropy: target 7 (at index 2)",
                       "4 classes");
  // ignore_index is not out of range:
  Tensor ok = ops::from_vector(std::vector<int64_t>{1, -100, 3}).to(kGpu);
  CHECK(std::isfinite(ops::cross_entropy(x, ok).item()));
}

TEST_CASE("cuda ops: random numbers are the CPU's (Philox at the same counters)") {
  if (!gpu_or_skip()) return;
  for (DType t : {kFloat32, kFloat64}) {
    Generator a(5), b(5);
    check_close(ops::rand({1000}, b, t, -2, 3, kGpu).to(kCPU), ops::rand({1000}, a, t, -2, 3), 0,
                0);
    check_close(ops::randn({1000}, b, t, kGpu).to(kCPU), ops::randn({1000}, a, t), 1e-12, 1e-6);
  }
  Generator a(6), b(6);
  CHECK(ops::randint(-3, 100, {1000}, b, kGpu).to(kCPU).to_vector<int64_t>() ==
        ops::randint(-3, 100, {1000}, a).to_vector<int64_t>());
}

TEST_CASE("cuda ops: 16-bit conversions round as on the CPU") {
  if (!gpu_or_skip()) return;
  const Tensor x = randn({1000}, 24, 100.0);
  for (DType t : {kBFloat16, kFloat16}) {
    Tensor c = x.to(kFloat32).to(t).to(kFloat32);
    Tensor g = x.to(kFloat32).to(kGpu).to(t).to(kFloat32).to(kCPU);
    check_close(g, c, 0, 0);
  }
}

TEST_CASE("cuda ops: softmax, layer norm, cross-entropy, attention") {
  if (!gpu_or_skip()) return;
  const Tol t{2e-4, 1e-9};
  const Tensor x = randn({5, 3, 200}, 25, 3.0);
  both(
      "softmax", [](auto v) { return ops::softmax(v[0], -1); }, {x}, t);
  both(
      "softmax, middle dim", [](auto v) { return ops::softmax(v[0], 1); }, {x}, t);
  both(
      "log_softmax", [](auto v) { return ops::log_softmax(v[0], -1); }, {x}, t);
  both(
      "layer_norm", [](auto v) { return ops::layer_norm(v[0], {200}, v[1], v[2], 1e-6); },
      {x, randn({200}, 26), randn({200}, 27)}, t);
  both(
      "layer_norm without affine",
      [](auto v) { return ops::layer_norm(v[0], {200}, Tensor(), Tensor()); }, {x}, t);
  // 600 rows: the weight and bias gradients summed in strips of rows, then the strips in order.
  both("layer_norm over 600 rows",
       [](auto v) { return ops::layer_norm(v[0], {96}, v[1], v[2], 1e-5); },
       {randn({600, 96}, 38, 2.0, 0.5), randn({96}, 39), randn({96}, 40)}, {2e-4, 1e-9});
  const Tensor target = ops::from_vector(std::vector<int64_t>{3, 7, -100, 0, 9, 7});
  for (double s : {0.0, 0.1}) {
    both(
        "cross_entropy, label smoothing " + std::to_string(s),
        [target, s](auto v) {
          return ops::cross_entropy(v[0], target.to(v[0].device()), ops::Reduction::Mean, s);
        },
        {randn({6, 10}, 28, 2.0)}, t);
  }
  both(
      "cross_entropy, no reduction",
      [target](auto v) {
        return ops::cross_entropy(v[0], target.to(v[0].device()), ops::Reduction::None, 0.1);
      },
      {randn({6, 10}, 29)}, t);
  // Fused attention: B 2, N 17, H 3, Dh 8, with its probabilities.
  both(
      "attention", [](auto v) { return ops::attention(v[0], 3, 0.35); }, {randn({2, 17, 72}, 30)},
      t);
  compare(
      "attention probabilities",
      [](auto v) {
        Tensor p;
        ops::attention(v[0], 3, 0.35, &p);
        return p;
      },
      {randn({2, 17, 72}, 31)}, kFloat32, 1e-5, false);
  // The same attention in two ops (the probabilities in the graph), and apply on any probs.
  both(
      "attention_probs", [](auto v) { return ops::attention_probs(v[0], 3, 0.35); },
      {randn({2, 17, 72}, 35)}, t);
  both(
      "attention_apply", [](auto v) { return ops::attention_apply(v[0], v[1]); },
      {randn({2, 3, 17, 17}, 36), randn({2, 17, 72}, 37)}, t);
}

TEST_CASE("cuda ops: conv2d (patch embedding), interpolate, dropout") {
  if (!gpu_or_skip()) return;
  const Tol t{2e-4, 1e-9};
  both(
      "conv2d, patch 4",
      [](auto v) {
        return ops::conv2d(v[0], v[1], v[2], {4, 4});
      },
      {randn({2, 3, 16, 12}, 32), randn({8, 3, 4, 4}, 33), randn({8}, 34)}, t);
  both(
      "conv2d, 3x3 padded",
      [](auto v) {
        return ops::conv2d(v[0], v[1], v[2], {1, 1}, {1, 1});
      },
      {randn({1, 2, 7, 6}, 35), randn({4, 2, 3, 3}, 36), randn({4}, 37)}, t);
  // The CPU's batched, depthwise and grouped paths against CUDA's image-by-image im2col.
  both(
      "conv2d, a batch of 20, stride 2, dilation 2",
      [](auto v) {
        return ops::conv2d(v[0], v[1], v[2], {2, 2}, {2, 2}, {2, 2});
      },
      {randn({20, 4, 9, 8}, 130), randn({6, 4, 3, 3}, 131), randn({6}, 132)}, t);
  both(
      "conv2d, depthwise x2",
      [](auto v) {
        return ops::conv2d(v[0], v[1], v[2], {1, 1}, {1, 1}, {1, 1}, 3);
      },
      {randn({2, 3, 7, 6}, 133), randn({6, 1, 3, 3}, 134), randn({6}, 135)}, t);
  both(
      "conv2d, groups 2",
      [](auto v) {
        return ops::conv2d(v[0], v[1], Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);
      },
      {randn({2, 4, 5, 5}, 136), randn({6, 2, 3, 3}, 137)}, t);
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    for (bool ac : {false, true}) {
      if (std::string(mode) == "nearest" && ac) continue;
      ops::InterpolateOptions o;
      o.size = std::make_pair<int64_t, int64_t>(11, 7);
      o.mode = mode;
      o.align_corners = ac;
      both(
          std::string("interpolate ") + mode + (ac ? ", align_corners" : ""),
          [o](auto v) { return ops::interpolate(v[0], o); }, {randn({2, 3, 5, 9}, 38)}, t);
    }
  }
  // Dropout's mask is Philox at (seed, offset + i) on both devices: the same mask.
  both("dropout",
       [](auto v) {
         Generator g(40);
         return ops::dropout(v[0], 0.3, true, g);
       },
       {randn({4, 50}, 39)});
}

TEST_CASE("cuda ops: pooling, batch norm, embedding, masked attention (compositions)") {
  if (!gpu_or_skip()) return;
  const Tol t{2e-4, 1e-9};
  const Tensor x = randn({2, 3, 7, 6}, 60);
  both(
      "max_pool2d 3, 2, 1",
      [](auto v) {
        return ops::max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1});
      },
      {x}, t);
  both(
      "avg_pool2d 3, 2, 1, exclude pad",
      [](auto v) {
        return ops::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, false);
      },
      {x}, t);
  both(
      "adaptive_avg_pool2d 3x2",
      [](auto v) {
        return ops::adaptive_avg_pool2d(v[0], {3, 2});
      },
      {x}, t);
  both(
      "batch_norm, training",
      [](auto v) { return ops::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
      {x, randn({3}, 61), randn({3}, 62)}, t);
  both(
      "batch_norm, eval",
      [](auto v) {
        return ops::batch_norm(v[0], v[3].detach(), ops::abs(v[4]).detach() + 0.5, v[1], v[2],
                               false);
      },
      {x, randn({3}, 63), randn({3}, 64), randn({3}, 65), randn({3}, 66)}, t);
  both(
      "batch_norm_relu with a residual, training",
      [](auto v) {
        return ops::batch_norm_relu(v[0], Tensor(), Tensor(), v[1], v[2], true, 0.1, 1e-5, v[3]);
      },
      {x, randn({3}, 68), randn({3}, 69), randn({2, 3, 7, 6}, 70)}, t);
  const Tensor idx = ops::from_vector(std::vector<int64_t>{1, 3, 3, 0, 6, 1}, {2, 3});
  both(
      "embedding", [&](auto v) { return ops::embedding(v[0], idx.to(v[0].device())); },
      {randn({7, 4}, 67)}, t);
  both(
      "scaled_dot_product_attention, causal",
      [](auto v) { return ops::scaled_dot_product_attention(v[0], v[1], v[2], Tensor(), 0, true); },
      {randn({2, 2, 5, 4}, 68), randn({2, 2, 5, 4}, 69), randn({2, 2, 5, 3}, 70)}, t);
  both(
      "scaled_dot_product_attention, bool mask",
      [](auto v) {
        const Tensor keep =
            ops::lt(ops::arange(5, kInt64), ops::scalar(3, kInt64)).to(v[0].device());
        return ops::scaled_dot_product_attention(v[0], v[1], v[2], keep);
      },
      {randn({2, 4, 4}, 71), randn({2, 5, 4}, 72), randn({2, 5, 3}, 73)}, t);
}

TEST_CASE("cuda ops: float64 gradcheck on the GPU") {
  if (!gpu_or_skip()) return;
  auto on_gpu = [](Tensor t) { return t.to(kGpu).detach().requires_grad_(); };
  check_grad([](auto v) { return ops::softmax(v[0], -1) * v[1]; },
             {on_gpu(randn({3, 6}, 41)), on_gpu(randn({3, 6}, 42))});
  check_grad([](auto v) { return ops::layer_norm(v[0], {6}, v[1], v[2]); },
             {on_gpu(randn({3, 6}, 43)), on_gpu(randn({6}, 44)), on_gpu(randn({6}, 45))});
  check_grad([](auto v) { return ops::gelu(ops::matmul(v[0], v[1])); },
             {on_gpu(randn({3, 4}, 46)), on_gpu(randn({4, 5}, 47))});
  check_grad([](auto v) { return ops::attention(v[0], 2, 0.5); }, {on_gpu(randn({1, 5, 12}, 48))});
  check_grad([](auto v) { return ops::attention_probs(v[0], 2, 0.5); },
             {on_gpu(randn({1, 5, 12}, 49))});
  check_grad([](auto v) { return ops::attention_apply(v[0], v[1]); },
             {on_gpu(randn({1, 2, 5, 5}, 50)), on_gpu(randn({1, 5, 12}, 51))});
}

// In float64, so that the comparison sees the kernels and not Adam's first step, which divides each
// gradient by its own magnitude: an element whose float32 gradient is rounding noise (-7e-9 here,
// where the largest is 0.13) moves by lr times the noise's sign, which CPU and GPU draw apart.
// float32 is checked on the gradients of one step instead.
TEST_CASE("cuda ops: AdamW and a ViT training step match the CPU") {
  if (!gpu_or_skip()) return;
  models::ViTConfig c = models::ViTConfig::preset("fmnist");
  c.depth = 2;
  Generator gd(51);
  Tensor x = ops::randn({8, 1, 28, 28}, gd);
  Tensor y = ops::randint(0, 10, {8}, gd);
  // Every parameter of the GPU model (or its gradient) against the CPU model's, by name.
  auto same_params = [](nn::Module& mc, nn::Module& mg, bool grads, double atol, double rtol) {
    auto pc = mc.named_parameters(), pg = mg.named_parameters();
    REQUIRE(pc.size() == pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      INFO(pc[i].first);
      const Tensor& g = pg[i].second;
      CHECK(g.dtype() == pc[i].second.dtype());
      check_close((grads ? g.grad() : g).to(kCPU), grads ? pc[i].second.grad() : pc[i].second, atol,
                  rtol);
    }
  };
  // The float64 steps run twice: on the paths that have run on a GPU, then with the opt-in
  // fewer-launches paths on (multi-tensor AdamW, the batched convolution of the patch embedding,
  // attention's kept pointer lists, which the second and third steps find again).
  SUBCASE("float64: three AdamW steps") {
    for (bool fast : {false, true}) {
      INFO("fewer-launches paths " << (fast ? "on" : "off"));
      const GpuPathGuard multi(GpuPath::MultiTensorAdam, fast), conv(GpuPath::BatchedConv, fast),
          lists(GpuPath::PointerLists, fast);
      Generator gc(50), gg(50);
      models::VisionTransformer mc(c, gc), mg(c, gg);
      mc.to(kFloat64);
      mg.to(kFloat64);
      mg.to(kGpu);
      nn::optim::AdamW oc(mc.parameters(), {.lr = 1e-3}), og(mg.parameters(), {.lr = 1e-3});
      Tensor x64 = x.to(kFloat64);
      for (int step = 0; step < 3; ++step) {
        oc.zero_grad();
        og.zero_grad();
        Tensor lc = ops::cross_entropy(mc.forward(x64), y, ops::Reduction::Mean, 0.1);
        Tensor lg =
            ops::cross_entropy(mg.forward(x64.to(kGpu)), y.to(kGpu), ops::Reduction::Mean, 0.1);
        CHECK(lg.item() == doctest::Approx(lc.item()).epsilon(1e-12));
        lc.backward();
        lg.backward();
        oc.step();
        og.step();
      }
      CHECK(mg.parameters().front().dtype() == kFloat64);
      same_params(mc, mg, false, 1e-10, 1e-9);
      MemoryStats m = memory_stats(kGpu);  // the model and AdamW's moments are on the GPU
      CHECK(m.peak >= m.current);
      CHECK(m.current > 0);
    }
  }
  SUBCASE("float32: the loss and every gradient of one step") {
    Generator gc(50), gg(50);
    models::VisionTransformer mc(c, gc), mg(c, gg);
    mg.to(kGpu);
    Tensor lc = ops::cross_entropy(mc.forward(x), y, ops::Reduction::Mean, 0.1);
    Tensor lg = ops::cross_entropy(mg.forward(x.to(kGpu)), y.to(kGpu), ops::Reduction::Mean, 0.1);
    CHECK(lg.item() == doctest::Approx(lc.item()).epsilon(1e-5));
    lc.backward();
    lg.backward();
    // float32 sums in another order: 2e-6 against the largest gradients' 0.13, plus 1e-3 relative.
    same_params(mc, mg, true, 2e-6, 1e-3);
  }
}

namespace {

/// Whether a and b hold the same bits (same dtype and shape; any devices).
bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor ca = a.to(kCPU).contiguous(), cb = b.to(kCPU).contiguous();
  return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * dtype_size(ca.dtype())) == 0;
}

}  // namespace

TEST_CASE("cuda ops: multi-tensor AdamW equals the per-tensor kernel bit for bit") {
  if (!gpu_or_skip()) return;
  // 53 tensors (two launches of at most 48), odd sizes on both sides of the 4096-element chunk,
  // an empty one and a scalar-sized one.
  std::vector<int64_t> sizes = {1, 7, 0, 4095, 4096, 4097, 3 * 4096 + 5, 100003};
  for (int64_t k = 0; sizes.size() < 53; ++k) sizes.push_back(17 + 389 * k);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (bool decoupled : {true, false}) {
      for (double wd : {0.0, 0.05}) {
        INFO(dtype_name(dtype) << (decoupled ? " AdamW" : " Adam") << " weight decay " << wd);
        Generator gen(61);
        // Per tensor: p, m, v for the per-tensor kernel (a) and the multi-tensor one (b).
        std::vector<Tensor> initial, pa, pb, ma, mb, va, vb;
        for (int64_t n : sizes) {
          Tensor p = ops::randn({n}, gen, dtype);
          initial.push_back(p);
          pa.push_back(p.to(kGpu));
          pb.push_back(p.to(kGpu));
          ma.push_back(ops::zeros({n}, dtype, kGpu));
          mb.push_back(ops::zeros({n}, dtype, kGpu));
          va.push_back(ops::zeros({n}, dtype, kGpu));
          vb.push_back(ops::zeros({n}, dtype, kGpu));
        }
        Backend& be = pa.front().backend();
        for (int64_t step = 1; step <= 4; ++step) {
          const AdamStep o{1e-2, 0.9, 0.999, 1e-8, wd, step, decoupled};
          std::vector<Tensor> grads;
          std::vector<AdamTensors> multi;
          for (size_t i = 0; i < sizes.size(); ++i) {
            grads.push_back(ops::randn({sizes[i]}, gen, dtype).to(kGpu));
            be.adam_step(pa[i].strided(), grads[i].strided(), ma[i].strided(), va[i].strided(), o);
            multi.push_back(
                {pb[i].strided(), grads[i].strided(), mb[i].strided(), vb[i].strided()});
          }
          be.adam_step_multi(multi, o);
        }
        int mismatched = 0;
        for (size_t i = 0; i < sizes.size(); ++i)
          mismatched +=
              !same_bits(pa[i], pb[i]) + !same_bits(ma[i], mb[i]) + !same_bits(va[i], vb[i]);
        CHECK(mismatched == 0);
        CHECK_FALSE(same_bits(pa[3], initial[3]));  // the steps did update
      }
    }
  }
}

TEST_CASE("cuda ops: AdamW with decay and no-decay groups steps every parameter on the GPU") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard multi(GpuPath::MultiTensorAdam, true);  // opt-in (backends/gpu_paths.h)
  // The optimizer sends each group's parameters to adam_step_multi; the same steps through the
  // per-tensor kernel by hand must give the same bits.
  Generator gen(62);
  std::vector<Tensor> params, copies, grads;
  for (int64_t n : {5, 4097, 300, 1}) {
    Tensor p = ops::randn({n}, gen).to(kGpu);
    p.requires_grad_();
    params.push_back(p);
    copies.push_back(p.detach().clone());
    grads.push_back(ops::randn({n}, gen).to(kGpu));
  }
  std::vector<nn::optim::ParamGroup> groups(2);
  groups[0].params = {params[0], params[1]};
  groups[0].lr = 1e-2;
  groups[0].weight_decay = 0.1;
  groups[1].params = {params[2], params[3]};
  groups[1].lr = 3e-3;
  groups[1].weight_decay = 0;
  nn::optim::AdamW opt(groups, {});
  std::vector<Tensor> m, v;
  for (const Tensor& c : copies) {
    m.push_back(ops::zeros_like(c));
    v.push_back(ops::zeros_like(c));
  }
  Backend& be = copies.front().backend();
  for (int64_t step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
    opt.step();
    for (size_t i = 0; i < copies.size(); ++i) {
      const bool decay = i < 2;
      const AdamStep o{decay ? 1e-2 : 3e-3, 0.9, 0.999, 1e-8, decay ? 0.1 : 0.0, step, true};
      be.adam_step(copies[i].strided(), grads[i].strided(), m[i].strided(), v[i].strided(), o);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(same_bits(params[i].detach(), copies[i]));
  }
}

TEST_CASE("cuda ops: the batched convolution (one im2col a chunk) equals the per-image path") {
  if (!gpu_or_skip()) return;
  const GpuPathGuard batched(GpuPath::BatchedConv, true);  // opt-in (backends/gpu_paths.h)
  // CUDA's conv2d_batched (backends/cuda/cuda_backend.cpp) against ops/conv.cpp's image-by-image
  // im2col and gemm on the same GPU (VITRINE_CONV=per-image), forward and backward: a patch
  // embedding (L < 128, bias), a padded 3x3 (L >= 128), stride and dilation without bias.
  struct Case {
    const char* name;
    Dims x, w;
    std::pair<int64_t, int64_t> stride, pad, dilation;
    bool bias;
  };
  const std::vector<Case> cases = {
      {"patch 8", {5, 3, 32, 24}, {16, 3, 8, 8}, {8, 8}, {0, 0}, {1, 1}, true},
      {"3x3 padded", {3, 4, 13, 11}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {"stride 2, dilation 2", {7, 2, 9, 10}, {5, 2, 3, 3}, {2, 2}, {2, 2}, {2, 2}, false},
  };
  const ConvAlgorithm before = conv_algorithm();
  for (const Case& c : cases) {
    for (DType dtype : {kFloat64, kFloat32}) {
      INFO(c.name << " " << dtype_name(dtype));
      Generator gen(70);
      auto leaf = [&](const Dims& shape) {
        Tensor t = ops::randn(shape, gen, dtype).to(kGpu);
        t.requires_grad_();
        return t;
      };
      Tensor x = leaf(c.x), w = leaf(c.w), b = c.bias ? leaf({c.w[0]}) : Tensor();
      Tensor r;  // a fixed random upstream gradient
      std::vector<Tensor> out[2];
      for (int k = 0; k < 2; ++k) {
        set_conv_algorithm(k == 0 ? ConvAlgorithm::PerImage : ConvAlgorithm::Auto);
        for (Tensor* t : {&x, &w, &b})
          if (t->defined()) t->set_grad(Tensor());
        Tensor y = ops::conv2d(x, w, b, c.stride, c.pad, c.dilation);
        if (!r.defined()) r = ops::randn(y.shape(), gen, dtype).to(kGpu);
        ops::sum(ops::mul(y, r)).backward();
        out[k] = {y.detach(), x.grad(), w.grad()};
        if (c.bias) out[k].push_back(b.grad());
      }
      set_conv_algorithm(before);
      const double tol = dtype == kFloat64 ? 1e-12 : 2e-5;
      for (size_t i = 0; i < out[0].size(); ++i) {
        INFO("output " << i << " (y, dx, dw, db)");
        check_close(out[1][i].to(kCPU), out[0][i].to(kCPU), tol, tol);
      }
    }
  }
  set_conv_algorithm(before);
}
