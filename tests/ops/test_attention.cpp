// Tests of ops/attention.cpp (the fused multi-head self-attention kernel): forward and gradient
// against the composition of views, matmuls and softmax that defines it, a float64 gradcheck,
// independence of the thread count, and bad input.
#include <omp.h>

#include <cmath>

#include "test_util.h"

namespace {

using namespace vitrine;
using namespace vt_test;

/// The definition: qkv [B, N, 3 H Dh] -> [B, N, H Dh] through reshape, permute, matmul, softmax.
Tensor reference(const Tensor& qkv, int64_t heads, double scale) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  Tensor t = qkv.reshape({B, N, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});
  Tensor q = t.select(0, 0), k = t.select(0, 1), v = t.select(0, 2);
  Tensor p = ops::softmax(ops::matmul(q, k.mT()) * scale, -1);
  return ops::matmul(p, v).transpose(1, 2).reshape({B, N, D});
}

}  // namespace

TEST_CASE("attention: forward equals the composition (float64 and float32)") {
  struct Case {
    int64_t B, N, heads, Dh;
  };
  for (Case c : {Case{2, 5, 3, 4}, Case{1, 1, 1, 2}, Case{3, 17, 2, 8}, Case{2, 50, 4, 32}}) {
    CAPTURE(c.N);
    CAPTURE(c.heads);
    const double scale = 1 / std::sqrt(static_cast<double>(c.Dh));
    Tensor qkv = rand64({c.B, c.N, 3 * c.heads * c.Dh}, 3, 2.0).detach();
    check_close(ops::attention(qkv, c.heads, scale), reference(qkv, c.heads, scale), 1e-12, 1e-12);
    Tensor q32 = qkv.to(kFloat32);
    check_close(ops::attention(q32, c.heads, scale), reference(q32, c.heads, scale), 2e-6, 2e-6);
  }
}

TEST_CASE("attention: gradcheck") {
  Tensor qkv = rand64({2, 4, 12}, 5);
  check_grad([](const std::vector<Tensor>& in) { return ops::attention(in[0], 2, 0.5); }, {qkv});
  // A non-contiguous input (a transposed view) is read correctly.
  Tensor t = rand64({2, 18, 4}, 6);
  check_grad(
      [](const std::vector<Tensor>& in) { return ops::attention(in[0].transpose(1, 2), 3, 0.7); },
      {t});
}

TEST_CASE("attention: gradient equals the composition's, float32") {
  Tensor base = rand64({2, 50, 3 * 128}, 7).detach().to(kFloat32);
  Tensor w = rand64({2, 50, 128}, 8).detach().to(kFloat32);
  Tensor a = base.detach().requires_grad_(), b = base.detach().requires_grad_();
  (ops::attention(a, 4, 0.125) * w).sum().backward();
  (reference(b, 4, 0.125) * w).sum().backward();
  check_close(a.grad(), b.grad(), 2e-5, 2e-5);
}

TEST_CASE("attention: the same bits with 1 and 2 threads") {
  Tensor base = rand64({4, 20, 3 * 32}, 9).detach().to(kFloat32);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> out, grad;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Tensor qkv = base.detach().requires_grad_();
    Tensor y = ops::attention(qkv, 4, 0.3);
    (y * y).sum().backward();
    out.push_back(y.contiguous().to_vector<float>());
    grad.push_back(qkv.grad().contiguous().to_vector<float>());
  }
  omp_set_num_threads(before);
  CHECK(out[0] == out[1]);
  CHECK(grad[0] == grad[1]);
}

TEST_CASE("attention: bad input") {
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({2, 3, 10}), 2, 1.0), "attention",
                       "3 * heads * head_dim", "[2, 3, 10]");
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({3, 12}), 2, 1.0), "attention", "[3, 12]");
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({1, 2, 12}, kInt64), 2, 1.0), "attention",
                       "int64");
}
