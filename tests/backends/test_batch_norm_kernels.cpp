// Batch norm's backend kernels (backend.h): the CPU's fused ones (backends/cpu/batch_norm.cpp)
// against the Backend's defaults composed from reduce and binary (backends/batch_norm_default.cpp,
// what a backend without fused kernels runs), in float64 and float32, on a shape whose rows are
// not a multiple of the vector width; and the op in float32 against float64.
#include "backends/backend.h"
#include "test_util.h"
#include "vitrine.h"

using namespace vitrine;
using namespace vt_test;

namespace {
/// t (contiguous [B, C, *]) as the kernels see it: [B, C, L].
Strided bcl(const Tensor& t) {
  Strided s = t.strided();
  const int64_t B = t.size(0), C = t.size(1), L = t.numel() / (B * C);
  s.shape = {B, C, L};
  s.strides = {C * L, L, 1};
  return s;
}
}  // namespace

TEST_CASE("batch_norm kernels: the CPU's fused kernels match the composed defaults") {
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
    Tensor x = rand64({4, 3, 5, 7}, 11, 2.0, 0.7).to(dt);
    Tensor dy = rand64({4, 3, 5, 7}, 12, 1.0, -0.2).to(dt);
    Backend& be = x.backend();
    auto per_c = [&](double a, double b) { return (rand64({3}, 13, a, b)).to(dt); };
    Tensor mean = ops::zeros({3}, dt), var = ops::zeros({3}, dt);
    Tensor mean_d = ops::zeros({3}, dt), var_d = ops::zeros({3}, dt);
    be.batch_norm_stats(bcl(x), mean.strided(), var.strided());
    be.Backend::batch_norm_stats(bcl(x), mean_d.strided(), var_d.strided());
    check_close(mean, mean_d, tol, tol);
    check_close(var, var_d, tol, tol);
    // against the definition, in double
    Tensor x64 = x.to(kFloat64);
    check_close(mean.to(kFloat64), ops::mean(x64, {0, 2, 3}), tol, tol);
    check_close(var.to(kFloat64),
                ops::mean(ops::pow(x64 - ops::mean(x64, {0, 2, 3}, true), 2.0), {0, 2, 3}), tol,
                tol);

    Tensor s = ops::zeros({3}, dt), d = ops::zeros({3}, dt);
    Tensor s_d = ops::zeros({3}, dt), d_d = ops::zeros({3}, dt);
    be.batch_norm_backward_reduce(bcl(x), mean.strided(), bcl(dy), s.strided(), d.strided());
    be.Backend::batch_norm_backward_reduce(bcl(x), mean.strided(), bcl(dy), s_d.strided(),
                                           d_d.strided());
    check_close(s, s_d, tol, tol);
    check_close(d, d_d, tol, tol);

    Tensor a = per_c(1.0, 0.5), zc = per_c(-2.0, 0.1), off = per_c(0.3, -1.0);
    for (bool with_z : {false, true}) {
      CAPTURE(with_z);
      Tensor y = ops::empty(x.shape(), dt), y_d = ops::empty(x.shape(), dt);
      const Strided z = with_z ? bcl(dy) : Strided(), zs = with_z ? zc.strided() : Strided();
      be.channel_affine(bcl(x), a.strided(), z, zs, off.strided(), bcl(y));
      be.Backend::channel_affine(bcl(x), a.strided(), z, zs, off.strided(), bcl(y_d));
      check_close(y, y_d, tol, tol);
      Tensor ref = x * a.reshape({1, 3, 1, 1}) + off.reshape({1, 3, 1, 1});
      if (with_z) ref = ref + dy * zc.reshape({1, 3, 1, 1});
      check_close(y, ref, tol, tol);
    }
  }
}

TEST_CASE("batch_norm: float32 matches float64 in training and eval, forward and backward") {
  Tensor x = rand64({6, 4, 9, 5}, 21, 3.0, 1.0), dy = rand64({6, 4, 9, 5}, 22);
  Tensor w = rand64({4}, 23, 1.0, 0.5), b = rand64({4}, 24);
  Tensor rm = rand64({4}, 25), rv = rand64({4}, 26, 1.0, 0.5);
  for (bool training : {true, false}) {
    CAPTURE(training);
    std::vector<Tensor> out[2];
    for (int k = 0; k < 2; ++k) {
      const DType dt = k == 0 ? kFloat64 : kFloat32;
      Tensor xi = x.to(dt).detach().requires_grad_(), wi = w.to(dt).detach().requires_grad_(),
             bi = b.to(dt).detach().requires_grad_();
      Tensor y = ops::batch_norm(xi, rm.to(dt), rv.to(dt), wi, bi, training, 0.1, 1e-5);
      ops::sum(y * dy.to(dt)).backward();
      out[k] = {y, xi.grad(), wi.grad(), bi.grad()};
    }
    for (int i = 0; i < 4; ++i) check_close(out[1][i].to(kFloat64), out[0][i], 1e-4, 1e-4);
  }
}
