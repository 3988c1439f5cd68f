// The CPU's direct convolution (backends/cpu/conv_direct.cpp: a stride-1 convolution as wide as its
// input, read from x and written into y in place, lanes outside the image masked): its forward and
// input gradient against the float64 convolution and the implicit GEMM (ConvAlgorithm::Implicit),
// on maps whose 32-position panels cross rows, end in one vector or a few lanes, kernels of 1x1,
// 3x1, 3x3 (dilated too) and 5x5, output channels that leave a short strip, and a strided view;
// which shapes it takes; the same bits on 1 and 2 threads. And its Winograd F(2x2, 3x3) for
// narrow layers (conv_direct_winograd.cpp), against float64, on maps of one, two and four rows of
// tiles a vector, and which shapes it takes. And its weight gradient (tiles of output channels
// by taps, lanes over the positions), against float64, on 1 and 2 threads.
#include <fmt/format.h>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/sgemm.h"
#include "backends/threads.h"
#include "conv_test_util.h"
#include "ops/batch_invariant.h"

using namespace vitrine;
using namespace vt_test;

namespace {

struct Run {
  Tensor y, dx, dw;
};

using Pair = std::pair<int64_t, int64_t>;

/// y = conv2d(x, w, b) and the gradients of sum(y r), under algorithm a.
Run run(ConvAlgorithm a, const Tensor& x0, const Tensor& w0, const Tensor& b, Pair padding,
        Pair dilation, const Tensor& r, Pair stride = {1, 1}) {
  Algorithm use(a);
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
  Tensor y = ops::conv2d(x, w, b.detach(), stride, padding, dilation);
  ops::sum(y * r).backward();
  return {y.detach(), x.grad(), w.grad()};
}

ConvGeometry geometry(const Tensor& x, int64_t kh, int64_t kw, Pair pad, Pair dil = {1, 1},
                      Pair stride = {1, 1}) {
  return ConvGeometry{x.size(1),
                      x.size(2),
                      x.size(3),
                      kh,
                      kw,
                      stride.first,
                      stride.second,
                      pad.first,
                      pad.second,
                      (x.size(2) + 2 * pad.first - dil.first * (kh - 1) - 1) / stride.first + 1,
                      (x.size(3) + 2 * pad.second - dil.second * (kw - 1) - 1) / stride.second + 1,
                      dil.first,
                      dil.second};
}

bool own_gemm() { return cpu::gemm_policy() != cpu::GemmPolicy::Off; }

}  // namespace

TEST_CASE("conv2d: the direct forward and input gradient equal float64 and the implicit GEMM") {
  struct Shape {
    Dims x, w;
    Pair padding, dilation = {1, 1};
    bool sliced = false;  // x is channels 8 .. 8 + C of a wider tensor (strides of a view)
    bool same = true;     // "same" padding at stride 1: the input gradient is direct too
    Pair stride = {1, 1};
  };
  // In place: ResNet-8's 28x28 (784 outputs: 24 panels and a last of one vector) and its stem
  // (one channel), a 14x14 (196: a last vector of 4 lanes) with 24 output channels (two strips),
  // an odd width (panels cross rows at every column) with a 5x5 and 13 output channels (a strip
  // of one), a dilated 3x3, a 3x1 without vertical padding (fewer output rows than input: the
  // input gradient is not "same" and goes to im2col), a 1x1, and a view.
  // In phase planes: 7x7 maps of 2 images a group (vectors that cross from one image into the
  // next; 21 images, so that the last group has one), ResNet-8's stride-2 3x3 and 1x1 (one
  // phase of four), a stride of 2 by 1 with a 5x3, and a 3x3 of 7 by 9 outputs at stride 2 on
  // an odd map (phase planes of unequal sizes).
  const std::vector<Shape> shapes = {
      {{3, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}},
      {{2, 1, 28, 28}, {16, 1, 3, 3}, {1, 1}},
      {{2, 32, 14, 14}, {24, 32, 3, 3}, {1, 1}},
      {{2, 5, 17, 19}, {13, 5, 5, 5}, {2, 2}},
      {{2, 4, 20, 20}, {6, 4, 3, 3}, {2, 2}, {2, 2}},
      {{2, 8, 15, 16}, {8, 8, 3, 1}, {0, 0}, {1, 1}, false, false},
      {{2, 16, 16, 16}, {8, 16, 1, 1}, {0, 0}},
      {{2, 16, 14, 14}, {32, 16, 3, 3}, {1, 1}, {1, 1}, true},
      {{21, 8, 7, 7}, {16, 8, 3, 3}, {1, 1}},
      {{3, 16, 28, 28}, {32, 16, 3, 3}, {1, 1}, {1, 1}, false, false, {2, 2}},
      {{3, 16, 28, 28}, {32, 16, 1, 1}, {0, 0}, {1, 1}, false, false, {2, 2}},
      {{2, 8, 20, 15}, {10, 8, 5, 3}, {2, 1}, {1, 1}, true, false, {2, 1}},
      {{2, 8, 13, 17}, {12, 8, 3, 3}, {1, 1}, {1, 1}, false, false, {2, 2}}};
  uint64_t seed = 800;
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " w " << fmt::format("{}", s.w) << " padding "
              << s.padding.first << "x" << s.padding.second << " dilation " << s.dilation.first
              << " stride " << s.stride.first << "x" << s.stride.second);
    const Tensor x = conv_input(s.x, seed, s.sliced);
    const Tensor w = rand64(s.w, seed++, 0.2).to(kFloat32);
    const Tensor b = rand64({s.w[0]}, seed++).to(kFloat32);
    const ConvGeometry g = geometry(x, s.w[2], s.w[3], s.padding, s.dilation, s.stride);
    const Tensor r = rand64({s.x[0], s.w[0], g.out_h, g.out_w}, seed++).to(kFloat32).detach();
    if (own_gemm()) {
      Algorithm use(ConvAlgorithm::Auto);
      CHECK(cpu::direct_conv_runs(x.strided(), g, s.w[0]));
      const Tensor dy = ops::zeros({s.x[0], s.w[0], g.out_h, g.out_w});
      CHECK(cpu::direct_input_grad_runs(dy.strided(), g, s.w[0]) == s.same);
      Algorithm off(ConvAlgorithm::Implicit);
      CHECK_FALSE(cpu::direct_conv_runs(x.strided(), g, s.w[0]));
    }
    const Run a = run(ConvAlgorithm::Auto, x, w, b, s.padding, s.dilation, r, s.stride);
    const Run i = run(ConvAlgorithm::Implicit, x, w, b, s.padding, s.dilation, r, s.stride);
    // (Direct: no Winograd of either kind, so the tiles run where Auto takes Winograd's)
    const Run dir = run(ConvAlgorithm::Direct, x, w, b, s.padding, s.dilation, r, s.stride);
    const Run d = run(ConvAlgorithm::PerImage, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64),
                      s.padding, s.dilation, r.to(kFloat64), s.stride);
    check_close(a.y, d.y, 1e-4, 1e-5);
    check_close(i.y, d.y, 1e-4, 1e-5);
    check_close(dir.y, d.y, 1e-4, 1e-5);
    check_close(a.dx, d.dx, 1e-4, 1e-5);
    check_close(dir.dx, d.dx, 1e-4, 1e-5);
    check_close(a.dw, d.dw, 1e-3, 1e-5);
    // The weight gradient is the direct tiles' (in place, rows of 16 or more, 3 taps wide) under
    // Auto and Direct, else the implicit GEMM's.
    if (own_gemm() && cpu::direct_weight_grad_runs(x.strided(), g, s.w[0]))
      check_equal_bits(a.dw, dir.dw);
    else
      check_equal_bits(a.dw, i.dw);
  }
}

TEST_CASE("conv2d: the direct weight gradient equals float64, the same bits on 1 and 2 threads") {
  struct Shape {
    Dims x, w;
    Pair padding, dilation = {1, 1};
    bool sliced = false;
  };
  // ResNet-8's 16-channel 28x28 (output channels in tiles of 3, 3, 3, 3, 3 and 1) and its
  // one-channel stem; a dilated 3x3; a 5x3 (taps in rows of 3, then 2); a 1x3 (one row); a view
  // with 14 output channels (a last tile of 2); 37 images of 16x16 (groups of 5, the last of 2).
  const std::vector<Shape> shapes = {{{3, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}},
                                     {{2, 1, 28, 28}, {16, 1, 3, 3}, {1, 1}},
                                     {{2, 4, 20, 20}, {6, 4, 3, 3}, {2, 2}, {2, 2}},
                                     {{2, 6, 18, 24}, {8, 6, 5, 3}, {2, 1}},
                                     {{2, 4, 16, 20}, {5, 4, 1, 3}, {0, 1}},
                                     {{3, 16, 28, 28}, {14, 16, 3, 3}, {1, 1}, {1, 1}, true},
                                     {{37, 8, 16, 16}, {16, 8, 3, 3}, {1, 1}}};
  uint64_t seed = 1400;
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " w " << fmt::format("{}", s.w));
    const Tensor x = conv_input(s.x, seed, s.sliced);
    const Tensor w = rand64(s.w, seed++, 0.2).to(kFloat32);
    const Tensor b = rand64({s.w[0]}, seed++).to(kFloat32);
    const ConvGeometry g = geometry(x, s.w[2], s.w[3], s.padding, s.dilation);
    const Tensor r = rand64({s.x[0], s.w[0], g.out_h, g.out_w}, seed++).to(kFloat32).detach();
    if (own_gemm()) {
      Algorithm use(ConvAlgorithm::Auto);
      CHECK(cpu::direct_weight_grad_runs(x.strided(), g, s.w[0]));
    }
    const Run d = run(ConvAlgorithm::PerImage, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64),
                      s.padding, s.dilation, r.to(kFloat64));
    auto weight_grad = [&] {
      const Run a = run(ConvAlgorithm::Auto, x, w, b, s.padding, s.dilation, r);
      check_close(a.dw, d.dw, 1e-4, 1e-5);
      return std::vector<Tensor>{a.dw};
    };
    // The direct tiles fix the order of every sum; without the own GEMM the weight gradient is
    // OpenBLAS's products, whose threads split them their own way: no promise across counts.
    if (own_gemm())
      check_same_bits_on_1_and_2_threads(weight_grad);
    else
      weight_grad();
  }
  if (!own_gemm()) return;
  Algorithm use(ConvAlgorithm::Auto);
  // Not taken: more than 16 output channels, rows under 16 (14x14), a stride (phase planes), a
  // 1x1 or 5x5, a padding that narrows the output, under Implicit.
  const Tensor x = ops::zeros({2, 16, 14, 14}), big = ops::zeros({2, 16, 28, 28});
  CHECK(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 3, 3, {1, 1}), 16));
  CHECK_FALSE(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 3, 3, {1, 1}), 17));
  CHECK_FALSE(cpu::direct_weight_grad_runs(x.strided(), geometry(x, 3, 3, {1, 1}), 16));
  CHECK_FALSE(
      cpu::direct_weight_grad_runs(big.strided(), geometry(big, 3, 3, {1, 1}, {1, 1}, {2, 2}), 16));
  CHECK_FALSE(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 1, 1, {0, 0}), 16));
  CHECK_FALSE(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 5, 5, {2, 2}), 16));
  CHECK_FALSE(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 3, 3, {1, 0}), 16));
  Algorithm off(ConvAlgorithm::Implicit);
  CHECK_FALSE(cpu::direct_weight_grad_runs(big.strided(), geometry(big, 3, 3, {1, 1}), 16));
}

TEST_CASE("conv2d: the direct path takes stride-1 convolutions as wide as their input") {
  if (!own_gemm()) return;  // (without the own GEMM: the per-image path)
  Algorithm use(ConvAlgorithm::Auto);
  const Tensor x = ops::zeros({2, 16, 14, 14});
  const ConvGeometry g = geometry(x, 3, 3, {1, 1});
  CHECK(cpu::direct_conv_runs(x.strided(), g, 16));
  CHECK(cpu::direct_conv_runs(x.strided(), g, 1000));
  CHECK_FALSE(cpu::direct_conv_runs(x.to(kFloat64).strided(), g, 16));
  // Whether it runs does not depend on the batch: a 7x7 output goes in groups of 21 images'
  // phase planes, however few images there are (a batch cut between ranks takes the same path).
  ConvGeometry other = g;
  other.stride_h = other.stride_w = 2;
  other.out_h = other.out_w = 7;
  CHECK(cpu::direct_conv_runs(x.strided(), other, 16));
  const Tensor small = ops::zeros({2, 16, 7, 7});  // (a 5x5 on a 7x7 map of 2 images: groups)
  CHECK(cpu::direct_conv_runs(small.strided(), geometry(small, 5, 5, {2, 2}), 16));
  // Narrower than the input (no horizontal padding): the shift is not the same for every row.
  CHECK_FALSE(cpu::direct_conv_runs(x.strided(), geometry(x, 3, 3, {1, 0}), 16));
  // Rows not W apart (a transposed view, a column slice) go to the other paths.
  const Tensor t = ops::transpose(x, 2, 3);
  CHECK(t.strided().strides[3] != 1);
  CHECK_FALSE(cpu::direct_conv_runs(t.strided(), g, 16));
  // Rows not W apart (a column slice): copied into planes, as a 7x7 map or a stride of 2.
  const Tensor cols = ops::narrow(ops::zeros({2, 16, 14, 16}), 3, 1, 14);
  CHECK(cpu::direct_conv_runs(cols.strided(), g, 16));
  // Phase planes take 8 channels or more (a 3-channel stem at stride 2 goes to the implicit GEMM).
  const Tensor rgb = ops::zeros({2, 3, 28, 28});
  CHECK_FALSE(
      cpu::direct_conv_runs(rgb.strided(), geometry(rgb, 7, 7, {3, 3}, {1, 1}, {2, 2}), 16));
  const Tensor big = ops::zeros({2, 16, 28, 28});
  CHECK(cpu::direct_conv_runs(big.strided(), geometry(big, 3, 3, {1, 1}, {1, 1}, {2, 2}), 16));
  // A 7x7 map of 17 images: 2 a group, 112 positions computed for 98.
  const Tensor many = ops::zeros({17, 16, 7, 7});
  CHECK(cpu::direct_conv_runs(many.strided(), geometry(many, 3, 3, {1, 1}), 16));
  // Too shallow a product: 1 channel, a 1x1.
  const Tensor one = ops::zeros({2, 1, 14, 14});
  CHECK_FALSE(cpu::direct_conv_runs(one.strided(), geometry(one, 1, 1, {0, 0}), 16));
  set_conv_algorithm("direct");
  CHECK(conv_algorithm() == ConvAlgorithm::Direct);
  CHECK(cpu::direct_conv_runs(x.strided(), g, 16));
  set_conv_algorithm("auto");
}

TEST_CASE("conv2d: Winograd in the direct path equals float64 on narrow layers") {
  struct Shape {
    Dims x;
    int64_t cout;
    bool sliced = false;
  };
  // One row of 14 tiles a vector (28x28), two rows of 7 (14x14, an odd number of tile rows: the
  // last vector half empty), 15 tiles of a 30-wide map with 17 output channels (strips of 9 and
  // 8), 3 rows of 5 tiles (6x10) into 63 channels, a 4x8 map, a view, odd sides (15x13: the last
  // tiles half outside), a 16-wide map, and 7x7 maps of 64 channels (four rows of 4 tiles: an
  // image a vector, 21 images so that the last panel has one).
  const std::vector<Shape> shapes = {
      {{3, 16, 28, 28}, 16}, {{2, 32, 14, 14}, 24}, {{2, 20, 18, 30}, 17},
      {{3, 16, 6, 10}, 63},  {{2, 48, 4, 8}, 16},   {{2, 16, 14, 14}, 32, true},
      {{3, 16, 15, 13}, 17}, {{2, 24, 16, 16}, 16}, {{21, 64, 7, 7}, 64}};
  uint64_t seed = 950;
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " out " << s.cout);
    const Tensor x = conv_input(s.x, seed, s.sliced);
    const Tensor w = rand64({s.cout, s.x[1], 3, 3}, seed++, 0.2).to(kFloat32);
    const Tensor b = rand64({s.cout}, seed++).to(kFloat32);
    const ConvGeometry g = geometry(x, 3, 3, {1, 1});
    const Tensor r = rand64({s.x[0], s.cout, s.x[2], s.x[3]}, seed++).to(kFloat32).detach();
    if (own_gemm()) {
      Algorithm use(ConvAlgorithm::Auto);
      CHECK(cpu::direct_winograd_runs(x.strided(), g, s.cout));
      ConvGeometry gt = g;  // (the input gradient's: dy into x's channels)
      gt.channels = s.cout;
      const Tensor dy = ops::zeros({s.x[0], s.cout, s.x[2], s.x[3]});
      CHECK(cpu::direct_winograd_runs(dy.strided(), gt, s.x[1]));
      Algorithm off(ConvAlgorithm::Direct);
      CHECK_FALSE(cpu::direct_winograd_runs(x.strided(), g, s.cout));
    }
    const Run a = run(ConvAlgorithm::Auto, x, w, b, {1, 1}, {1, 1}, r);
    const Run dir = run(ConvAlgorithm::Direct, x, w, b, {1, 1}, {1, 1}, r);
    const Run d = run(ConvAlgorithm::PerImage, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64),
                      {1, 1}, {1, 1}, r.to(kFloat64));
    // (F(2x2, 3x3)'s transforms add a few roundings: outputs of about 1 to 5.) Its forward runs
    // where no gradient is recorded (conv_for_gradient); the input gradient always.
    Tensor y;
    {
      NoGradGuard no_grad;
      Algorithm use(ConvAlgorithm::Auto);
      y = ops::conv2d(x, w, b, {1, 1}, {1, 1});
    }
    check_close(y, d.y, 1e-4, 1e-5);
    check_close(a.y, d.y, 1e-4, 1e-5);
    check_close(a.dx, d.dx, 1e-4, 1e-5);
    check_equal_bits(a.dw, dir.dw);  // (the weight gradient is not Winograd's)
  }
  if (!own_gemm()) return;
  Algorithm use(ConvAlgorithm::Auto);
  // Not taken: 32 columns (no zero lane past a row), 8 channels, 64 on a map over 7 wide, other
  // paddings and kernels.
  const Tensor wide = ops::zeros({2, 16, 32, 32});
  CHECK_FALSE(cpu::direct_winograd_runs(wide.strided(), geometry(wide, 3, 3, {1, 1}), 16));
  const Tensor x = ops::zeros({2, 16, 14, 14});
  CHECK(cpu::direct_winograd_runs(x.strided(), geometry(x, 3, 3, {1, 1}), 16));
  CHECK_FALSE(cpu::direct_winograd_runs(x.strided(), geometry(x, 3, 3, {1, 1}), 8));
  CHECK_FALSE(cpu::direct_winograd_runs(x.strided(), geometry(x, 3, 3, {1, 1}), 64));
  CHECK_FALSE(cpu::direct_winograd_runs(x.strided(), geometry(x, 5, 5, {2, 2}), 16));
  CHECK_FALSE(cpu::direct_winograd_runs(x.strided(), geometry(x, 3, 3, {2, 2}, {2, 2}), 16));
  const Tensor small = ops::zeros({20, 64, 7, 7});
  CHECK(cpu::direct_winograd_runs(small.strided(), geometry(small, 3, 3, {1, 1}), 64));
  CHECK_FALSE(cpu::direct_winograd_runs(small.strided(), geometry(small, 3, 3, {1, 1}), 65));
}

TEST_CASE("conv2d: the direct path and its Winograd give the same bits on 1 and 2 threads") {
  if (!own_gemm()) return;
  // The direct tiles in place (28x28) and in phase planes (stride 2), under Direct; the narrow
  // Winograd (14x14, two rows of tiles a vector), under Auto.
  struct Case {
    ConvAlgorithm algorithm;
    Dims x;
    int64_t cout;
    Pair stride;
  };
  uint64_t seed = 900;
  for (const Case& k : {Case{ConvAlgorithm::Direct, {5, 16, 28, 28}, 16, {1, 1}},
                        Case{ConvAlgorithm::Direct, {5, 16, 28, 28}, 32, {2, 2}},
                        Case{ConvAlgorithm::Auto, {5, 32, 14, 14}, 24, {1, 1}}}) {
    const Tensor x = rand64(k.x, seed++).to(kFloat32);
    const Tensor w = rand64({k.cout, k.x[1], 3, 3}, seed++, 0.2).to(kFloat32);
    const Tensor b = rand64({k.cout}, seed++).to(kFloat32);
    const Tensor r =
        rand64({k.x[0], k.cout, k.x[2] / k.stride.first, k.x[3] / k.stride.second}, seed++)
            .to(kFloat32)
            .detach();
    check_same_bits_on_1_and_2_threads([&] {
      const Run o = run(k.algorithm, x, w, b, {1, 1}, {1, 1}, r, k.stride);
      NoGradGuard no_grad;  // (the narrow Winograd's forward: where no gradient is recorded)
      Algorithm use(k.algorithm);
      return std::vector<Tensor>{o.y, o.dx, o.dw, ops::conv2d(x, w, b, k.stride, {1, 1})};
    });
  }
}

TEST_CASE("conv2d: a batch's first images alone give their bits in the whole batch") {
  // The path a convolution takes does not depend on the batch size, so that data-parallel ranks,
  // each with part of a batch, compute what one process computes (issue 47: 2 ranks equal one
  // process): ResNet-8's 64-channel 7x7 (the narrow Winograd, not the other one, at any batch),
  // its stride-2 3x3 into 7x7 (phase planes in groups), a 16-channel 28x28, a 5x5 on a 7x7.
  struct Case {
    Dims x, w;
    Pair stride, padding;
  };
  uint64_t seed = 1200;
  for (const Case& k : {Case{{32, 64, 7, 7}, {64, 64, 3, 3}, {1, 1}, {1, 1}},
                        Case{{32, 32, 14, 14}, {64, 32, 3, 3}, {2, 2}, {1, 1}},
                        Case{{32, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}, {1, 1}},
                        Case{{32, 16, 7, 7}, {16, 16, 5, 5}, {1, 1}, {2, 2}}}) {
    INFO("x " << fmt::format("{}", k.x) << " w " << fmt::format("{}", k.w));
    const Tensor x = rand64(k.x, seed++).to(kFloat32);
    const Tensor w = rand64(k.w, seed++, 0.2).to(kFloat32),
                 b = rand64({k.w[0]}, seed++).to(kFloat32);
    const Tensor y = ops::conv2d(x, w, b, k.stride, k.padding);
    const Tensor r = rand64(y.shape(), seed++).to(kFloat32).detach();
    const Run whole = run(ConvAlgorithm::Auto, x, w, b, k.padding, {1, 1}, r, k.stride);
    const Run part = run(ConvAlgorithm::Auto, ops::narrow(x, 0, 0, 16).contiguous(), w, b,
                         k.padding, {1, 1}, ops::narrow(r, 0, 0, 16).contiguous(), k.stride);
    // With the own GEMM every path here is our code: the same bits. Without it the images go
    // side by side through OpenBLAS in chunks that the batch size cuts differently, and OpenBLAS
    // may block a product of another width differently: float32 sums of up to 576 terms of
    // order-1 values then differ in their last bits, within 1e-4 absolute and 1e-5 relative.
    auto same = [](const Tensor& a, const Tensor& b) {
      if (own_gemm())
        check_equal_bits(a, b);
      else
        check_close(a, b, 1e-4, 1e-5);
    };
    same(ops::narrow(whole.y, 0, 0, 16), part.y);
    same(ops::narrow(whole.dx, 0, 0, 16), part.dx);
    NoGradGuard no_grad;  // (and the forward where no gradient is recorded)
    same(ops::narrow(ops::conv2d(x, w, b, k.stride, k.padding), 0, 0, 16),
         ops::conv2d(ops::narrow(x, 0, 0, 16).contiguous(), w, b, k.stride, k.padding));
  }
}

TEST_CASE(
    "conv2d: the narrow Winograd leaves a forward recorded for a gradient to the direct tiles") {
  if (!own_gemm()) return;
  Algorithm use(ConvAlgorithm::Auto);
  const Tensor x = rand64({2, 16, 14, 14}, 1300).to(kFloat32);
  const Tensor w = rand64({16, 16, 3, 3}, 1301, 0.2).to(kFloat32);
  Tensor with_grad, direct;
  {
    Tensor xi = x.detach().requires_grad_();
    with_grad = ops::conv2d(xi, w, Tensor(), {1, 1}, {1, 1}).detach();
  }
  {
    NoGradGuard no_grad;
    Algorithm tiles(ConvAlgorithm::Direct);
    direct = ops::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  }
  check_equal_bits(with_grad, direct);
  CHECK_FALSE(conv_for_gradient());
  {
    ConvForGradient scope(true);
    CHECK(conv_for_gradient());
  }
  CHECK_FALSE(conv_for_gradient());
}

TEST_CASE(
    "conv2d: in batch-invariant mode a forward recorded for a gradient keeps the narrow "
    "Winograd and the phase planes") {
  if (!own_gemm()) return;
  Algorithm use(ConvAlgorithm::Auto);
  const auto same_bits = [](const Tensor& a, const Tensor& b) {
    const Tensor ac = a.contiguous(), bc = b.contiguous();
    return std::memcmp(ac.strided().data, bc.strided().data,
                       static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
  };
  // A 16-channel 3x3 at stride 1 (the narrow Winograd) and a stride-2 3x3 on a 7x7 map (phase
  // planes), 10 images (a leaf of 8 and one of 2).
  for (const int64_t stride : {1, 2}) {
    CAPTURE(stride);
    const int64_t size = stride == 1 ? 14 : 7;
    const Tensor x = rand64({10, 16, size, size}, 1310 + stride).to(kFloat32);
    const Tensor w = rand64({16, 16, 3, 3}, 1320 + stride, 0.2).to(kFloat32);
    const auto forward = [&](bool invariant, bool recorded) {
      set_batch_invariant(invariant);
      Tensor xi = recorded ? x.detach().requires_grad_() : x;
      Tensor y = ops::conv2d(xi, w, Tensor(), {stride, stride}, {1, 1}).detach();
      set_batch_invariant(false);
      return y;
    };
    // In the mode: the inference forward's bits, leaf by leaf; and not the bits of the same
    // forward outside the mode, which leaves the two paths to the direct tiles or the implicit
    // GEMM (the case above).
    const Tensor recorded = forward(true, true);
    CHECK(same_bits(recorded, forward(true, false)));
    CHECK_FALSE(same_bits(recorded, forward(false, true)));
  }
}
