// conv2d_add_relu (ops/conv.cpp): relu(conv2d(x, w, b) + residual) written in one pass by the CPU's
// batched convolution in inference, against its composition bit for bit on every path that
// writes y (Winograd, the direct convolution and its Winograd, the implicit GEMM, im2col in
// groups, im2col in bands of rows), with and without the residual and the clamp, NaN included; the
// composition where a gradient is wanted (a float64 gradcheck); its bad input.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "backends/cpu/sgemm.h"
#include "conv_test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

TEST_CASE("conv2d_add_relu: one pass gives the composition's bits on every CPU path") {
  struct Shape {
    Dims x, w;
    std::pair<int64_t, int64_t> stride, padding;
    const char* path;
  };
  const std::vector<Shape> shapes = {
      {{2, 64, 14, 14}, {64, 64, 3, 3}, {1, 1}, {1, 1}, "Winograd"},
      {{3, 64, 9, 7}, {64, 64, 3, 3}, {1, 1}, {1, 1}, "direct, Winograd, 4 rows of tiles a vector"},
      {{4, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}, {1, 1}, "direct, Winograd F(2x2, 3x3)"},
      {{3, 32, 14, 14},
       {24, 32, 3, 3},
       {1, 1},
       {1, 1},
       "direct, Winograd, 2 rows of tiles a vector"},
      {{4, 8, 28, 28}, {8, 8, 3, 3}, {1, 1}, {1, 1}, "direct"},
      {{3, 8, 14, 14}, {24, 8, 3, 3}, {1, 1}, {1, 1}, "direct, a last panel of one vector"},
      {{4, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}, {0, 0}, "implicit GEMM"},
      {{4, 16, 28, 28}, {32, 16, 3, 3}, {2, 2}, {1, 1}, "direct, phase planes"},
      {{20, 8, 14, 14}, {16, 8, 3, 3}, {2, 2}, {1, 1}, "direct, phase planes of 2 images"},
      {{4, 32, 14, 14}, {64, 32, 3, 3}, {2, 2}, {1, 1}, "im2col in groups"},
      {{4, 32, 14, 14}, {64, 32, 1, 1}, {2, 2}, {0, 0}, "im2col in groups, 1x1"},
      {{1, 3, 72, 72}, {8, 3, 3, 3}, {2, 2}, {1, 1}, "im2col in bands of rows"}};
  uint64_t seed = 700;
  NoGradGuard no_grad;
  for (const Shape& s : shapes) {
    const Tensor x = rand64(s.x, seed++).to(kFloat32);
    const Tensor w = rand64(s.w, seed++, 0.2).to(kFloat32),
                 b = rand64({s.w[0]}, seed++).to(kFloat32);
    const Tensor y0 = ops::conv2d(x, w, b, s.stride, s.padding);
    Tensor res = rand64(y0.shape(), seed++).to(kFloat32);
    // A NaN in the residual: the clamp gives 0 (ops::relu's rule), the sum NaN.
    const Tensor u = rand64(y0.shape(), seed++).to(kFloat32);
    res = ops::where(ops::gt(u, ops::full_like(u, 0.95)),
                     ops::full_like(res, std::numeric_limits<double>::quiet_NaN()), res);
    {  // the backend writes it in one pass where the batched path runs (the own GEMM's)
      const ConvGeometry g{s.x[1],           s.x[2],         s.x[3],          s.w[2],
                           s.w[3],           s.stride.first, s.stride.second, s.padding.first,
                           s.padding.second, y0.size(2),     y0.size(3)};
      Tensor y = ops::empty(y0.shape());
      const Tensor wc = w.contiguous();
      CHECK(x.backend().conv2d_batched_add_relu(x.strided(), wc.strided(), b.strided(),
                                                res.strided(), true, y.strided(),
                                                g) == (cpu::gemm_policy() != cpu::GemmPolicy::Off));
    }
    for (const bool relu : {true, false})
      for (const bool with_res : {true, false}) {
        INFO(s.path << ", relu " << relu << ", residual " << with_res);
        const Tensor r = with_res ? res : Tensor();
        const Tensor fused = ops::conv2d_add_relu(x, w, b, r, relu, s.stride, s.padding);
        Tensor ref = ops::conv2d(x, w, b, s.stride, s.padding);
        if (with_res) ref = ops::add(ref, r);
        if (relu) ref = ops::relu(ref);
        check_equal_bits(fused, ref);
      }
  }
}

TEST_CASE("conv2d_add_relu: with a gradient wanted it is the composition (float64 gradcheck)") {
  auto fn = [](const V& in) {
    return ops::conv2d_add_relu(in[0], in[1], in[2], in[3], true, {1, 1}, {1, 1});
  };
  // (values away from the ReLU's kink: the residual shifted up)
  check_grad(fn, {rand64({2, 3, 5, 4}, 1), rand64({4, 3, 3, 3}, 2), rand64({4}, 3),
                  rand64({2, 4, 5, 4}, 4, 1.0, 3.0)});
  Tensor x = rand64({2, 3, 5, 4}, 5).requires_grad_();
  const Tensor y =
      ops::conv2d_add_relu(x, rand64({4, 3, 3, 3}, 6), Tensor(), Tensor(), false, {1, 1}, {1, 1});
  CHECK(y.requires_grad());
}

TEST_CASE("conv2d_add_relu: bad input") {
  const Tensor x = ops::zeros({2, 3, 8, 8}), w = ops::zeros({4, 3, 3, 3});
  CHECK_ERROR_CONTAINS(
      ops::conv2d_add_relu(x, w, Tensor(), ops::zeros({2, 4, 8, 7}), true, {1, 1}, {1, 1}),
      "conv2d_add_relu", "output's shape [2, 4, 8, 8]", "[2, 4, 8, 7]");
  CHECK_ERROR_CONTAINS(
      ops::conv2d_add_relu(x, ops::zeros({4, 2, 3, 3}), Tensor(), Tensor(), true, {1, 1}, {1, 1}),
      "conv2d", "input has 3 channels");
}
