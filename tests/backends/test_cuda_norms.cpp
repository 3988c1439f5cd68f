// The normalisation and pooling pieces of issue 61 on CUDA against the CPU (as test_cuda_ops.cpp,
// ggml's test-backend-ops): rms_norm (CUDA inherits Backend's composed rms_norm kernels),
// group_norm and instance_norm (batch norm's kernels), max_pool2d_with_indices, max_unpool2d,
// weight_norm / spectral_norm, and a gradient penalty's second derivative through group_norm and
// layer_norm. Forward and backward, float64 at 1e-9 and float32 at 1e-4. Without a GPU every case
// says it is skipped, and why.
#include <memory>

#include "nn/layers.h"
#include "nn/weight_norm.h"
#include "ops/norms.h"
#include "ops/pool.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {

const Device kGpu = Device::parse("cuda");

Tensor twin(const Tensor& x, const Device& d, DType dtype) {
  Tensor t = (is_float(x.dtype()) ? x.to(dtype) : x).to(d).detach();
  if (is_float(t.dtype())) t.requires_grad_();
  return t;
}

Tensor randn(const Dims& shape, uint64_t seed, double scale = 1, double shift = 0) {
  Generator g(seed);
  return (ops::randn(shape, g, kFloat64) * scale + shift).detach();
}

/// fn on the CPU and the GPU from the same inputs: the outputs and every floating input's
/// gradient under one random upstream gradient, in float64 and float32.
void both(const std::string& name, const Fn& fn, const std::vector<Tensor>& inputs) {
  for (DType dtype : {kFloat64, kFloat32}) {
    const double tol = dtype == kFloat64 ? 1e-9 : 1e-4;
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
}

}  // namespace

TEST_CASE("cuda norms: rms_norm, group_norm, instance_norm against the CPU") {
  if (!gpu_or_skip()) return;
  both("rms_norm with weight", [](auto v) { return ops::rms_norm(v[0], {7}, v[1], 1e-5); },
       {randn({4, 5, 7}, 1), randn({7}, 2, 0.5, 1)});
  both("rms_norm over two dims",
       [](auto v) {
         return ops::rms_norm(v[0], {5, 7}, v[1]);
       },
       {randn({4, 5, 7}, 3), randn({5, 7}, 4, 0.5, 1)});
  both("rms_norm without weight", [](auto v) { return ops::rms_norm(v[0], {7}); },
       {randn({9, 7}, 5)});
  both("group_norm affine", [](auto v) { return ops::group_norm(v[0], 3, v[1], v[2]); },
       {randn({2, 6, 5, 3}, 6, 1.5, 0.3), randn({6}, 7, 0.5, 1), randn({6}, 8)});
  both("group_norm plain", [](auto v) { return ops::group_norm(v[0], 2); }, {randn({3, 4, 7}, 9)});
  both("instance_norm", [](auto v) { return ops::instance_norm(v[0], {}, {}, v[1], v[2]); },
       {randn({2, 3, 4, 5}, 10), randn({3}, 11, 0.5, 1), randn({3}, 12)});
}

TEST_CASE("cuda norms: max_pool2d_with_indices and max_unpool2d against the CPU") {
  if (!gpu_or_skip()) return;
  const Tensor x = randn({2, 3, 8, 9}, 20);
  const ops::ValuesIndices c = ops::max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1});
  const ops::ValuesIndices g = ops::max_pool2d_with_indices(x.to(kGpu), {3, 3}, {2, 2}, {1, 1});
  CHECK(g.indices.to(kCPU).to_vector<int64_t>() == c.indices.to_vector<int64_t>());
  check_close(g.values.to(kCPU), c.values, 1e-12, 1e-12);
  both("max_pool2d_with_indices then max_unpool2d",
       [](auto v) {
         const ops::ValuesIndices p = ops::max_pool2d_with_indices(v[0], {2, 2}, {2, 2}, {0, 0});
         return ops::max_unpool2d(p.values, p.indices, {2, 2}, {2, 2}, {0, 0}, {8, 9});
       },
       {x});
}

TEST_CASE("cuda norms: weight_norm and spectral_norm on the GPU against the CPU") {
  if (!gpu_or_skip()) return;
  for (bool spectral : {false, true}) {
    INFO("spectral " << spectral);
    auto make = [&] {
      Generator g(31);
      auto lin = std::make_shared<nn::Linear>(5, 3, true, g);
      lin->to(kFloat64);
      std::shared_ptr<nn::Reparametrized> m;
      Generator gu(32);
      if (spectral)
        m = nn::utils::spectral_norm(lin, "weight", 1, 1e-12, std::nullopt, gu);
      else
        m = nn::utils::weight_norm(lin);
      return m;
    };
    auto mc = make(), mg = make();
    mg->to(kGpu);
    Tensor xc = randn({4, 5}, 33).requires_grad_(), xg = xc.detach().to(kGpu).requires_grad_();
    Tensor yc = (*mc)(xc), yg = (*mg)(xg);
    check_close(yg.to(kCPU), yc, 1e-9, 1e-9);
    ops::sum(yc * yc).backward();
    ops::sum(yg * yg).backward();
    check_close(xg.grad().to(kCPU), xc.grad(), 1e-9, 1e-9);
    const auto pc = mc->named_parameters(), pg = mg->named_parameters();
    REQUIRE(pc.size() == pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      INFO(pc[i].first);
      check_close(pg[i].second.grad().to(kCPU), pc[i].second.grad(), 1e-9, 1e-9);
    }
  }
}

TEST_CASE("cuda norms: a gradient penalty through group_norm and layer_norm matches the CPU") {
  if (!gpu_or_skip()) return;
  for (bool group : {true, false}) {
    INFO((group ? "group_norm" : "layer_norm"));
    const Tensor x0 = randn({2, 4, 3, 5}, 40), w0 = randn({4}, 41, 0.5, 1), b0 = randn({4}, 42),
                 r0 = randn({2, 4, 3, 5}, 43);
    const Tensor wl = randn({3, 5}, 44, 0.5, 1), bl = randn({3, 5}, 45);
    std::vector<Tensor> grads[2];
    for (int k = 0; k < 2; ++k) {
      const Device d = k == 0 ? kCPU : kGpu;
      Tensor x = x0.to(d).requires_grad_();
      Tensor w = (group ? w0 : wl).to(d).requires_grad_(), b = (group ? b0 : bl).to(d);
      Tensor y = group ? ops::group_norm(x, 2, w, b) : ops::layer_norm(x, {3, 5}, w, b, 1e-5);
      Tensor g = grad({ops::sum(y * r0.to(d))}, {x}, {}, false, true)[0];
      ops::sum(g * g).backward();
      grads[k] = {x.grad().to(kCPU), w.grad().to(kCPU)};
    }
    check_close(grads[1][0], grads[0][0], 1e-9, 1e-9);
    check_close(grads[1][1], grads[0][1], 1e-9, 1e-9);
  }
}
