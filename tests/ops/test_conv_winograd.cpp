// The CPU's Winograd convolution (backends/cpu/conv_winograd.cpp, F(2x2, 3x3) for 3x3s at stride
// 1 of 64 channels and more): its forward and input gradient against the implicit GEMM
// (ConvAlgorithm::Implicit, the same path without Winograd) and the float64 convolution, on tiles
// cut by the map's edge, images stacked with the padding between them, every padding it takes and
// a strided input; which shapes it takes; the same bits on 1 and 2 threads.
#include <fmt/format.h>

#include <cmath>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/thread_pool.h"
#include "backends/threads.h"
#include "conv_test_util.h"
#include "ops/batch_invariant.h"

using namespace vitrine;
using namespace vt_test;

namespace {

struct Run {
  Tensor y, dx, dw;
};

/// y = conv2d(x, w, b) (stride 1) and the gradients of sum(y r), under algorithm a.
Run run(ConvAlgorithm a, const Tensor& x0, const Tensor& w0, const Tensor& b,
        std::pair<int64_t, int64_t> padding, const Tensor& r) {
  Algorithm use(a);
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
  Tensor y = ops::conv2d(x, w, b.detach(), {1, 1}, padding);
  ops::sum(y * r).backward();
  return {y.detach(), x.grad(), w.grad()};
}

ConvGeometry geometry(const Tensor& x, int64_t ph, int64_t pw) {
  return ConvGeometry{x.size(1),
                      x.size(2),
                      x.size(3),
                      3,
                      3,
                      1,
                      1,
                      ph,
                      pw,
                      x.size(2) + 2 * ph - 2,
                      x.size(3) + 2 * pw - 2};
}

bool own_gemm() { return cpu::gemm_policy() != cpu::GemmPolicy::Off; }

}  // namespace

TEST_CASE("conv2d: Winograd's forward and input gradient equal the implicit GEMM and float64") {
  struct Shape {
    Dims x;
    int64_t cout, ph, pw;
    bool sliced;  // x is channels 8 .. 8 + C of a wider tensor (strides of a view)
  };
  // An odd width (the last tile half outside the map), a batch of 3 stacked with the padding
  // between them, no padding (a tile row crossing two images), padding 2 by 1, a row of more
  // than 16 tiles (two vectors), more output channels than input, and a view.
  const std::vector<Shape> shapes = {{{3, 64, 9, 7}, 64, 1, 1, false},
                                     {{2, 64, 8, 8}, 72, 0, 0, false},
                                     {{2, 64, 6, 5}, 64, 2, 1, false},
                                     {{2, 64, 12, 36}, 64, 1, 1, false},
                                     {{2, 64, 7, 7}, 128, 1, 1, true}};
  uint64_t seed = 500;
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " out " << s.cout << " padding " << s.ph << "x" << s.pw);
    const Tensor x = conv_input(s.x, seed, s.sliced);
    const Tensor w = rand64({s.cout, s.x[1], 3, 3}, seed++, 0.1).to(kFloat32);
    const Tensor b = rand64({s.cout}, seed++).to(kFloat32);
    const ConvGeometry g = geometry(x, s.ph, s.pw);
    const Tensor r = rand64({s.x[0], s.cout, g.out_h, g.out_w}, seed++).to(kFloat32).detach();
    if (own_gemm()) {
      Algorithm use(ConvAlgorithm::Auto);
      CHECK(cpu::winograd_conv_runs(x.strided(), g, s.cout));
      CHECK(cpu::winograd_input_grad_runs(x.strided(), g, s.cout) == (s.ph == 1 && s.pw == 1));
      Algorithm off(ConvAlgorithm::Implicit);
      CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), g, s.cout));
    }
    const Run a = run(ConvAlgorithm::Auto, x, w, b, {s.ph, s.pw}, r);
    const Run i = run(ConvAlgorithm::Implicit, x, w, b, {s.ph, s.pw}, r);
    const Run d = run(ConvAlgorithm::PerImage, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64),
                      {s.ph, s.pw}, r.to(kFloat64));
    // (outputs of about 1 to 10 in size: 576 products of 0.1 by 1)
    check_close(a.y, d.y, 1e-4, 1e-5);
    check_close(a.y, i.y, 1e-4, 1e-5);
    check_close(a.dx, d.dx, 1e-4, 1e-5);
    check_close(a.dw, d.dw, 1e-3, 1e-5);
    check_equal_bits(a.dw, i.dw);  // (the weight gradient is im2col's on both)
  }
}

TEST_CASE("conv2d: Winograd takes 3x3s at stride 1 of 64 channels and more, in float32") {
  if (!own_gemm()) return;  // (without the own GEMM: the per-image path, and no Winograd)
  Algorithm use(ConvAlgorithm::Auto);
  const Tensor x = ops::zeros({2, 64, 14, 14});
  const ConvGeometry g = geometry(x, 1, 1);
  CHECK(cpu::winograd_conv_runs(x.strided(), g, 64));
  CHECK(cpu::winograd_conv_runs(x.strided(), g, 1024));        // 2^16 channel pairs
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), g, 32));    // too few output channels
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), g, 1025));  // a transformed weight over 4 MiB
  CHECK_FALSE(cpu::winograd_conv_runs(x.to(kFloat64).strided(), g, 64));
  ConvGeometry other = g;
  other.stride_h = 2;
  other.out_h = 7;
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), other, 64));
  other = g;
  other.dilation_w = 2;
  other.out_w = 12;
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), other, 64));
  other = g;
  other.pad_h = other.pad_w = 3;
  other.out_h = other.out_w = 18;
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), other, 64));
  other = g;
  other.kernel_h = other.kernel_w = 5;
  other.out_h = other.out_w = 12;
  CHECK_FALSE(cpu::winograd_conv_runs(x.strided(), other, 64));
  const Tensor narrow = ops::zeros({2, 16, 14, 14});
  CHECK_FALSE(cpu::winograd_conv_runs(narrow.strided(), geometry(narrow, 1, 1), 64));
  // A column stride over 1 (a transposed view) goes to the other paths.
  const Tensor t = ops::transpose(x, 2, 3);
  CHECK_FALSE(cpu::winograd_conv_runs(t.strided(), g, 64));
  // Only the same padding's input gradient: the flipped convolution's is then the same size.
  CHECK_FALSE(cpu::winograd_input_grad_runs(x.strided(), geometry(x, 0, 0), 64));
  set_conv_algorithm("implicit");
  CHECK(conv_algorithm() == ConvAlgorithm::Implicit);
}

TEST_CASE("conv2d: Winograd gives the same bits on 1 and 2 threads") {
  if (!own_gemm()) return;
  const Tensor x = rand64({6, 64, 14, 14}, 600).to(kFloat32);
  const Tensor w = rand64({64, 64, 3, 3}, 601, 0.1).to(kFloat32);
  const Tensor b = rand64({64}, 602).to(kFloat32);
  const Tensor r = rand64({6, 64, 14, 14}, 603).to(kFloat32).detach();
  check_same_bits_on_1_and_2_threads([&] {
    const Run o = run(ConvAlgorithm::Auto, x, w, b, {1, 1}, r);
    return std::vector<Tensor>{o.y, o.dx, o.dw};
  });
}

TEST_CASE("conv2d: a weight changed in place is transformed again (winograd_weight_kept)") {
  const Tensor w = rand64({64, 64, 3, 3}, 610, 0.1).to(kFloat32).detach().contiguous();
  const auto fresh = [&](bool c_major) {
    std::vector<float> u = cpu::winograd_weight(w.data<float>(), 64, 64);
    if (!c_major) return u;
    std::vector<float> t(u.size());  // U[xi][c][co] from U[xi][co][c]
    for (size_t xi = 0; xi < 16; ++xi)
      for (size_t co = 0; co < 64; ++co)
        for (size_t c = 0; c < 64; ++c) t[(xi * 64 + c) * 64 + co] = u[(xi * 64 + co) * 64 + c];
    return t;
  };
  for (bool c_major : {false, true}) {
    CAPTURE(c_major);
    // Outside a parallel loop: made afresh each call.
    const auto once = cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major);
    CHECK(cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major) != once);
    CHECK(*once == fresh(c_major));
    // Inside one (as batch-invariant mode's leaves call it): kept while the values are the same.
    cpu::run_chunks_of(1, 1, 1, [&](int64_t, int64_t) {
      const auto first = cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major);
      CHECK(cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major) == first);
      const float old = w.data<float>()[4000];
      w.data<float>()[4000] = old + 1.0f;  // the same pointer, another value
      const auto changed = cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major);
      CHECK(*changed == fresh(c_major));
      CHECK(*changed != *first);
      w.data<float>()[4000] = old;
      CHECK(*cpu::winograd_weight_kept(w.data<float>(), 64, 64, c_major) == *first);
    });
  }
  // Through the convolution in batch-invariant mode (each leaf of 8 images a call inside a
  // parallel loop): y after an in-place step is the new weight's.
  if (!own_gemm()) return;
  Algorithm use(ConvAlgorithm::Auto);
  const Tensor x = rand64({16, 64, 14, 14}, 611).to(kFloat32).detach();
  Tensor wv = w.clone();
  set_batch_invariant(true);
  const Tensor y0 = ops::conv2d(x, wv, Tensor(), {1, 1}, {1, 1});
  wv.mul_(0.5);
  const Tensor y1 = ops::conv2d(x, wv, Tensor(), {1, 1}, {1, 1});
  const Tensor y2 = ops::conv2d(x, wv.clone(), Tensor(), {1, 1}, {1, 1});
  set_batch_invariant(false);
  check_close(y1, y2, 0, 0);
  check_close(y1, y0 * 0.5, 1e-5, 1e-5);
}
