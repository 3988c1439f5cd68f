// conv2d's other paths: dilation, groups and depthwise against PyTorch (conv_interp.json, made by
// make_conv_interp_fixtures.py) and float64 gradchecks; the CPU's batched path
// (backends/cpu/conv_batched.cpp) against the image-by-image one (ops/conv.cpp), which it must
// equal, in float64 and float32 on a ResNet's shapes; the same bits on 1 and 2 threads; and
// nn::Conv2d's dilation and groups.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_implicit.h"
#include "backends/cpu/sgemm.h"
#include "backends/threads.h"
#include "conv_test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {

const char* kFile = "conv_interp.json";

Fn conv_fn(const std::string& name) {
  const auto& p = fixture_case(kFile, name).at("params");
  const std::pair<int64_t, int64_t> stride{p.at("stride")[0], p.at("stride")[1]};
  const std::pair<int64_t, int64_t> padding{p.at("padding")[0], p.at("padding")[1]};
  const std::pair<int64_t, int64_t> dilation{p.at("dilation")[0], p.at("dilation")[1]};
  const int64_t groups = p.at("groups");
  return [stride, padding, dilation, groups](const V& in) {
    return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), stride, padding, dilation,
                       groups);
  };
}

const char* kCases[] = {"conv2d_dilation2", "conv2d_dilation_s2_rect", "conv2d_groups2",
                        "conv2d_depthwise", "conv2d_depthwise_s2",     "conv2d_depthwise_x2_dil",
                        "conv2d_1x1_s2"};

struct ConvRun {
  Tensor y, dx, dw, db;
};

/// y = conv2d(x, w, b) and the gradients of sum(y r), under algorithm a.
ConvRun run_conv(ConvAlgorithm a, const Tensor& x0, const Tensor& w0, const Tensor& b0,
                 const Tensor& r, std::pair<int64_t, int64_t> stride,
                 std::pair<int64_t, int64_t> padding, bool input_grad = true,
                 std::pair<int64_t, int64_t> dilation = {1, 1}) {
  Algorithm use(a);
  Tensor x = x0.detach(), w = w0.detach().requires_grad_();
  if (input_grad) x.requires_grad_();
  Tensor b = b0.defined() ? b0.detach().requires_grad_() : Tensor();
  Tensor y = ops::conv2d(x, w, b, stride, padding, dilation);
  ops::sum(y * r).backward();
  return {y.detach(), input_grad ? x.grad() : Tensor(), w.grad(),
          b.defined() ? b.grad() : Tensor()};
}

}  // namespace

TEST_CASE("conv2d: dilation, groups and depthwise match PyTorch, forward and backward") {
  for (const char* name : kCases) {
    INFO(name);
    check_forward(kFile, name, conv_fn(name), 1e-10, 1e-5);
    RefCase c = load_case(kFile, name);
    for (Tensor& t : c.inputs) t.requires_grad_();
    const Tensor r = fixture_tensor(fixture_case(kFile, name).at("r"));
    ops::sum(conv_fn(name)(c.inputs) * r).backward();
    const auto& grads = fixture_case(kFile, name).at("grads");
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      INFO("input " << i);
      check_close(c.inputs[i].grad(), fixture_tensor(grads[i]), 1e-10, 1e-10);
    }
  }
}

TEST_CASE("conv2d: dilation, groups and depthwise pass a float64 gradcheck") {
  for (const char* name : kCases) {
    INFO(name);
    check_grad_at(kFile, name, conv_fn(name));
  }
  // A depthwise convolution with a channel multiplier of 3 and stride 2 (rectangular).
  auto dw = [](const V& in) { return ops::conv2d(in[0], in[1], in[2], {2, 1}, {1, 2}, {1, 2}, 2); };
  check_grad(dw, {rand64({2, 2, 5, 6}, 1), rand64({6, 1, 3, 2}, 2), rand64({6}, 3)});
}

TEST_CASE("conv2d: the batched path passes a float64 gradcheck and equals the per-image path") {
  struct Shape {
    Dims x, w;
    std::pair<int64_t, int64_t> stride, padding;
    bool bias;
  };
  // Stride 1 and 2, padding, 1x1, a batch the groups do not divide (17 = 2 x 8 + 1), one input
  // channel (a 9-deep weight gradient: the plain loops), fewer output channels than a GEMM tile.
  const std::vector<Shape> shapes = {{{3, 2, 5, 6}, {4, 2, 3, 3}, {1, 1}, {1, 1}, true},
                                     {{2, 3, 7, 6}, {5, 3, 3, 3}, {2, 2}, {1, 1}, false},
                                     {{17, 4, 4, 4}, {3, 4, 1, 1}, {1, 1}, {0, 0}, true},
                                     {{2, 1, 6, 6}, {2, 1, 3, 3}, {2, 1}, {0, 1}, true}};
  uint64_t seed = 20;
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " w " << fmt::format("{}", s.w));
    const Tensor x = rand64(s.x, seed++), w = rand64(s.w, seed++);
    const Tensor b = s.bias ? rand64({s.w[0]}, seed++) : Tensor();
    {
      Algorithm batched(ConvAlgorithm::Batched);
      auto fn = [&s](const V& in) {
        return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), s.stride, s.padding);
      };
      check_grad(fn, s.bias ? V{x, w, b} : V{x, w});
    }
    const Tensor y0 = ops::conv2d(x.detach(), w.detach(), b.defined() ? b.detach() : Tensor(),
                                  s.stride, s.padding);
    const Tensor r = rand64(y0.shape(), seed++).detach();
    const ConvRun a = run_conv(ConvAlgorithm::Batched, x, w, b, r, s.stride, s.padding);
    const ConvRun p = run_conv(ConvAlgorithm::PerImage, x, w, b, r, s.stride, s.padding);
    check_close(a.y, p.y, 1e-12, 1e-12);
    check_close(a.dx, p.dx, 1e-12, 1e-12);
    check_close(a.dw, p.dw, 1e-12, 1e-12);
    if (s.bias) check_close(a.db, p.db, 1e-12, 1e-12);
  }
}

TEST_CASE("conv2d: the batched path on a ResNet's float32 shapes equals the per-image path") {
  struct Shape {
    Dims x, w;
    std::pair<int64_t, int64_t> stride, padding, dilation = {1, 1};
  };
  // vitrine-train's ResNet-8 on Fashion-MNIST (batch cut to 10): the stem, a 3x3 at 28x28, the
  // stride-2 3x3 and 1x1 shortcut, a 64-channel 3x3 at 7x7. Auto takes Winograd for the 64-channel
  // 3x3 (conv_winograd.cpp), the implicit GEMM (conv_implicit.cpp) where its phase planes waste
  // little (the 28x28 and 14x14 ones at stride 1, the 7x7 stem at stride 2 and a 3x5 at stride
  // 1x2: phase planes; other paddings and dilations), im2col elsewhere (the stride-2 3x3s and
  // 1x1s); Batched im2col everywhere, in bands of output rows above 1024 outputs an image.
  const std::vector<Shape> shapes = {{{10, 1, 28, 28}, {16, 1, 3, 3}, {1, 1}, {1, 1}},
                                     {{10, 16, 28, 28}, {16, 16, 3, 3}, {1, 1}, {1, 1}},
                                     {{10, 16, 28, 28}, {32, 16, 3, 3}, {2, 2}, {1, 1}},
                                     {{10, 16, 28, 28}, {32, 16, 1, 1}, {2, 2}, {0, 0}},
                                     {{10, 64, 7, 7}, {64, 64, 3, 3}, {1, 1}, {1, 1}},
                                     {{3, 5, 37, 19}, {20, 5, 3, 5}, {1, 1}, {2, 0}},
                                     {{4, 3, 9, 8}, {5, 3, 3, 3}, {2, 1}, {1, 1}},
                                     {{3, 16, 14, 14}, {24, 16, 3, 3}, {1, 1}, {1, 1}},
                                     {{2, 5, 20, 17}, {7, 5, 5, 3}, {1, 1}, {2, 1}},
                                     {{4, 16, 16, 16}, {8, 16, 1, 1}, {1, 1}, {0, 0}},
                                     {{2, 3, 40, 40}, {8, 3, 7, 7}, {2, 2}, {3, 3}},
                                     {{2, 4, 24, 20}, {6, 4, 3, 5}, {1, 2}, {0, 2}},
                                     {{2, 4, 20, 20}, {6, 4, 3, 3}, {1, 1}, {2, 2}, {2, 2}},
                                     {{2, 4, 23, 21}, {6, 4, 3, 3}, {2, 2}, {1, 2}, {2, 1}},
                                     {{2, 64, 36, 36}, {8, 64, 3, 3}, {1, 1}, {1, 1}},
                                     {{2, 8, 72, 72}, {8, 8, 3, 3}, {2, 2}, {1, 1}},
                                     {{2, 3, 40, 40}, {16, 3, 7, 7}, {2, 2}, {3, 3}},
                                     {{2, 4, 20, 20}, {16, 4, 3, 3}, {1, 1}, {2, 2}, {2, 2}}};
  uint64_t seed = 40;
  int64_t implicit = 0, implicit_dw = 0;  // shapes Auto takes through the implicit GEMM
  for (const Shape& s : shapes) {
    INFO("x " << fmt::format("{}", s.x) << " w " << fmt::format("{}", s.w) << " stride "
              << s.stride.first << "x" << s.stride.second << " dilation " << s.dilation.first << "x"
              << s.dilation.second);
    const Tensor x = rand64(s.x, seed++).to(kFloat32), w = rand64(s.w, seed++, 0.2).to(kFloat32);
    const Tensor b = rand64({s.w[0]}, seed++).to(kFloat32);
    const Tensor y0 = ops::conv2d(x, w, b, s.stride, s.padding, s.dilation);
    const Tensor r = rand64(y0.shape(), seed++).detach().to(kFloat32);
    {
      Algorithm use(ConvAlgorithm::Auto);
      const ConvGeometry g{s.x[1],           s.x[2],         s.x[3],          s.w[2],
                           s.w[3],           s.stride.first, s.stride.second, s.padding.first,
                           s.padding.second, y0.size(2),     y0.size(3),      s.dilation.first,
                           s.dilation.second};
      implicit += cpu::implicit_conv_runs(x.strided(), g) ? 1 : 0;
      implicit_dw += cpu::implicit_weight_grad_runs(x.strided(), g, s.w[0]) ? 1 : 0;
    }
    const ConvRun a =
        run_conv(ConvAlgorithm::Auto, x, w, b, r, s.stride, s.padding, true, s.dilation);
    const ConvRun p =
        run_conv(ConvAlgorithm::PerImage, x, w, b, r, s.stride, s.padding, true, s.dilation);
    const ConvRun bt =
        run_conv(ConvAlgorithm::Batched, x, w, b, r, s.stride, s.padding, true, s.dilation);
    for (const ConvRun* o : {&a, &bt}) {
      check_close(o->y, p.y, 1e-4, 1e-4);
      check_close(o->dx, p.dx, 1e-4, 1e-4);
      check_close(o->dw, p.dw, 1e-3, 1e-4);
      check_close(o->db, p.db, 1e-3, 1e-4);
    }
    // Against the same convolution in float64 (the plain loops).
    const ConvRun d =
        run_conv(ConvAlgorithm::PerImage, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64),
                 r.to(kFloat64), s.stride, s.padding, true, s.dilation);
    check_close(a.y, d.y, 1e-4, 1e-4);
    check_close(a.dx, d.dx, 1e-4, 1e-4);
    check_close(a.dw, d.dw, 1e-3, 1e-4);
    // The first layer's input needs no gradient: the weight's alone.
    const ConvRun first =
        run_conv(ConvAlgorithm::Auto, x, w, b, r, s.stride, s.padding, false, s.dilation);
    check_equal_bits(first.dw, a.dw);
  }
  // The 11 shapes the comment names take the implicit path where the own GEMM runs (else every
  // float32 shape goes image by image, and Auto is the per-image path).
  // Their weight gradients too where they have 16 to 64 output channels: the ResNet-8 stem's, its
  // 3x3 at 28x28, the 14x14 one, and the last two (a 7x7 at stride 2 in phase planes, a dilated
  // 3x3); the other six have 6 to 8.
  if (cpu::gemm_policy() != cpu::GemmPolicy::Off) {
    CHECK(implicit == 11);
    CHECK(implicit_dw == 5);
  }
}

TEST_CASE("conv2d: the batched and depthwise paths give the same bits on 1 and 2 threads") {
  const Tensor x = rand64({12, 16, 14, 14}, 60).to(kFloat32);
  const Tensor w = rand64({32, 16, 3, 3}, 61, 0.2).to(kFloat32), b = rand64({32}, 62).to(kFloat32);
  const Tensor r = rand64({12, 32, 7, 7}, 63).detach().to(kFloat32);
  // (Without the own GEMM, VITRINE_GEMM=openblas or no AVX-512, Auto is the per-image path on
  // OpenBLAS, whose threads split the products their own way: no such promise there.)
  if (cpu::gemm_policy() != cpu::GemmPolicy::Off) {
    // y, dx and dW of one convolution on 1 and on 2 threads, bit for bit.
    auto same_on_1_and_2 = [&](const Tensor& dy, std::pair<int64_t, int64_t> stride) {
      ConvRun one, two;
      {
        Threads t(1);
        one = run_conv(ConvAlgorithm::Auto, x, w, b, dy, stride, {1, 1});
      }
      {
        Threads t(2);
        two = run_conv(ConvAlgorithm::Auto, x, w, b, dy, stride, {1, 1});
      }
      check_equal_bits(one.y, two.y);
      check_equal_bits(one.dx, two.dx);
      check_equal_bits(one.dw, two.dw);
    };
    same_on_1_and_2(r, {2, 2});
    // Stride 1, "same" padding: the implicit GEMM forward and input gradient.
    {
      Algorithm use(ConvAlgorithm::Auto);
      CHECK(cpu::implicit_input_grad_runs(x.strided(),
                                          ConvGeometry{16, 14, 14, 3, 3, 1, 1, 1, 1, 14, 14}));
    }
    same_on_1_and_2(rand64({12, 32, 14, 14}, 65).detach().to(kFloat32), {1, 1});
  }
  // Depthwise, 16 channels, multiplier 2.
  const Tensor wd = rand64({32, 1, 3, 3}, 64).to(kFloat32);
  auto depthwise = [&](int threads) {
    Threads t(threads);
    Tensor xi = x.detach().requires_grad_(), wi = wd.detach().requires_grad_();
    Tensor y = ops::conv2d(xi, wi, Tensor(), {2, 2}, {1, 1}, {1, 1}, 16);
    ops::sum(y * r).backward();
    return std::vector<Tensor>{y.detach(), xi.grad(), wi.grad()};
  };
  const auto d1 = depthwise(1), d2 = depthwise(2);
  for (size_t i = 0; i < d1.size(); ++i) check_equal_bits(d1[i], d2[i]);
}

TEST_CASE("conv2d: groups and dilation bad input") {
  Tensor x = ops::zeros({1, 4, 5, 5});
  CHECK_ERROR_CONTAINS(
      ops::conv2d(x, ops::zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {1, 1}, {1, 1}, 2), "conv2d",
      "groups (2) must divide", "output channels (3");
  CHECK_ERROR_CONTAINS(
      ops::conv2d(x, ops::zeros({4, 4, 3, 3}), Tensor(), {1, 1}, {1, 1}, {1, 1}, 2), "conv2d",
      "expects 8", "4 per group of 2");
  CHECK_ERROR_CONTAINS(
      ops::conv2d(x, ops::zeros({4, 4, 3, 3}), Tensor(), {1, 1}, {1, 1}, {1, 1}, 0), "conv2d",
      "groups must be positive");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({4, 4, 3, 3}), Tensor(), {1, 1}, {0, 0}, {0, 1}),
                       "conv2d", "dilation must be positive", "(0, 1)");
  CHECK_ERROR_CONTAINS(ops::conv2d(x, ops::zeros({4, 4, 3, 3}), Tensor(), {1, 1}, {0, 0}, {3, 1}),
                       "conv2d", "larger than the padded input", "dilation (3, 1)", "7x3");
  CHECK_ERROR_CONTAINS(set_conv_algorithm("fast"), "set_conv_algorithm", "'fast'", "per-image");
}

TEST_CASE("nn::Conv2d: dilation and groups as torch.nn.Conv2d") {
  nn::Conv2d depthwise(nn::Conv2dOptions(8, 16, 3).padding(1).groups(8));
  CHECK(depthwise.weight.shape() == Dims{16, 1, 3, 3});
  CHECK(depthwise.extra_repr() == "8, 16, kernel=3x3, stride=1x1, padding=1x1, groups=8");
  Tensor y = depthwise(ops::randn({2, 8, 5, 5}));
  CHECK(y.shape() == Dims{2, 16, 5, 5});
  nn::Conv2d dilated(nn::Conv2dOptions(3, 4, 3).padding(2).dilation(2).bias(false));
  CHECK_FALSE(dilated.bias.defined());
  CHECK(dilated.extra_repr() == "3, 4, kernel=3x3, stride=1x1, padding=2x2, dilation=2x2");
  CHECK(dilated(ops::randn({1, 3, 6, 7})).shape() == Dims{1, 4, 6, 7});
  // PyTorch's init: weight and bias uniform within 1 / sqrt(fan_in), fan_in = in / groups kh kw
  // = 9 here. 144 weights reach past 1 / sqrt(72) (the bound without groups) but never past 1/3.
  const double weight_max = ops::max(ops::abs(depthwise.weight)).item<float>();
  CHECK(weight_max <= 1.0 / 3.0 + 1e-7);
  CHECK(weight_max > 1.0 / std::sqrt(72.0));
  CHECK(ops::max(ops::abs(depthwise.bias)).item<float>() <= 1.0 / 3.0 + 1e-7);
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(6, 4, 3).groups(4)), "Conv2d", "groups", "6 in",
                       "4 out");
  CHECK_ERROR_CONTAINS(nn::Conv2d(nn::Conv2dOptions(6, 4, 3).dilation(0)), "Conv2d",
                       "dilation 0x0");
}
