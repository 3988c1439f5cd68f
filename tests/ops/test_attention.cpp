// Tests of ops/attention.cpp (the fused multi-head self-attention kernel): forward and gradient
// against the composition of views, matmuls and softmax that defines it, a float64 gradcheck,
// independence of the thread count, and bad input.
#include <omp.h>

#include <array>
#include <cmath>

#include "test_util.h"

namespace {

using namespace vitrine;
using namespace vt_test;

/// q, k, v [B, H, N, Dh] of qkv [B, N, 3 H Dh].
std::array<Tensor, 3> split_heads(const Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  Tensor t = qkv.reshape({B, N, 3, heads, D / heads}).permute({2, 0, 3, 1, 4});
  return {t.select(0, 0), t.select(0, 1), t.select(0, 2)};
}

/// The definition of the probabilities: softmax(scale q k^T), [B, H, N, N].
Tensor reference_probs(const Tensor& qkv, int64_t heads, double scale) {
  const auto [q, k, v] = split_heads(qkv, heads);
  return ops::softmax(ops::matmul(q, k.mT()) * scale, -1);
}

/// The definition of their application: P v with the heads merged, [B, N, H Dh].
Tensor reference_apply(const Tensor& p, const Tensor& qkv) {
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3;
  const auto [q, k, v] = split_heads(qkv, p.size(1));
  return ops::matmul(p, v).transpose(1, 2).reshape({B, N, D});
}

/// The definition: qkv [B, N, 3 H Dh] -> [B, N, H Dh] through reshape, permute, matmul, softmax.
Tensor reference(const Tensor& qkv, int64_t heads, double scale) {
  return reference_apply(reference_probs(qkv, heads, scale), qkv);
}

}  // namespace

TEST_CASE("attention: forward equals the composition (float64 and float32)") {
  struct Case {
    int64_t B, N, heads, Dh;
  };
  for (Case c : {Case{2, 5, 3, 4}, Case{1, 1, 1, 2}, Case{3, 17, 2, 8}, Case{2, 50, 4, 32},
                 Case{1, 65, 3, 64}}) {
    CAPTURE(c.N);
    CAPTURE(c.heads);
    const double scale = 1 / std::sqrt(static_cast<double>(c.Dh));
    Tensor qkv = rand64({c.B, c.N, 3 * c.heads * c.Dh}, 3, 2.0).detach();
    check_close(ops::attention(qkv, c.heads, scale), reference(qkv, c.heads, scale), 1e-12, 1e-12);
    // Float32: the fused kernel and the composition each against the float64 result. The two
    // sum in different orders (the composition's through OpenBLAS, whose kernels, chosen by CPU
    // model, sum in their own order), so each is held to float32's error, not to the other.
    Tensor q32 = qkv.to(kFloat32), ref = reference(qkv, c.heads, scale);
    check_close(ops::attention(q32, c.heads, scale), ref, 1e-5, 1e-5);
    check_close(reference(q32, c.heads, scale), ref, 1e-5, 1e-5);
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
  // 20 tokens go through OpenBLAS, 50 through the own GEMM (sgemm.h) where it runs. Either way
  // each (image, head) product is computed by one thread with the same shape (OpenBLAS runs
  // single-threaded inside the tasks): the same computation on 1 or 2 threads, the same bits.
  for (int64_t tokens : {20, 50}) {
    CAPTURE(tokens);
    Tensor base = rand64({4, tokens, 3 * 128}, 9).detach().to(kFloat32);
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
}

TEST_CASE("attention_probs, attention_apply: forward equals the composition, and the fused op") {
  for (const Dims& shape : {Dims{2, 5, 3 * 12}, Dims{2, 50, 3 * 128}, Dims{1, 65, 3 * 192}}) {
    CAPTURE(shape);
    const int64_t heads = shape[2] / 3 / 32 > 0 ? shape[2] / 3 / 32 : 3;
    const double scale = 0.17;
    Tensor qkv = rand64(shape, 11, 2.0).detach();
    for (DType t : {kFloat64, kFloat32}) {
      Tensor x = qkv.to(t);
      const double tol = t == kFloat64 ? 1e-12 : 2e-6;
      Tensor p = ops::attention_probs(x, heads, scale);
      check_close(p, reference_probs(x, heads, scale), tol, tol);
      check_close(ops::attention_apply(p, x), reference_apply(p, x), tol, tol);
      // The two halves are the fused op's own pieces: the same bits.
      Tensor fused_p;
      Tensor fused = ops::attention(x, heads, scale, &fused_p);
      CHECK(ops::attention_apply(p, x).to(kFloat64).to_vector<double>() ==
            fused.to(kFloat64).to_vector<double>());
      CHECK(p.to(kFloat64).to_vector<double>() == fused_p.to(kFloat64).to_vector<double>());
    }
  }
}

TEST_CASE("attention_probs, attention_apply: gradcheck") {
  check_grad([](const std::vector<Tensor>& in) { return ops::attention_probs(in[0], 2, 0.5); },
             {rand64({2, 4, 12}, 12)});
  // apply takes any [B, H, N, N] (dropped-out probabilities, say), and differentiates both inputs.
  check_grad([](const std::vector<Tensor>& in) { return ops::attention_apply(in[0], in[1]); },
             {rand64({2, 3, 4, 4}, 13), rand64({2, 4, 18}, 14)});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::attention_apply(ops::attention_probs(in[0], 3, 0.7), in[0]);
      },
      {rand64({1, 5, 18}, 15)});
}

TEST_CASE(
    "attention_probs, attention_apply: gradients equal the fused op's, and the composition's") {
  for (int64_t tokens : {7, 50}) {
    CAPTURE(tokens);
    Tensor base = rand64({2, tokens, 3 * 128}, 16).detach().to(kFloat32);
    Tensor w = rand64({2, tokens, 128}, 17).detach().to(kFloat32);
    Tensor a = base.detach().requires_grad_(), b = base.detach().requires_grad_(),
           c = base.detach().requires_grad_();
    Tensor pa = ops::attention_probs(a, 4, 0.125);
    Tensor pc = reference_probs(c, 4, 0.125);
    Tensor wp = rand64(pa.shape(), 18).detach().to(kFloat32);  // a loss that reads P as well
    ((ops::attention_apply(pa, a) * w).sum() + (pa * wp).sum()).backward();
    ((reference_apply(pc, c) * w).sum() + (pc * wp).sum()).backward();
    check_close(a.grad(), c.grad(), 2e-5, 2e-5);
    (ops::attention(b, 4, 0.125) * w).sum().backward();
    Tensor a2 = base.detach().requires_grad_();
    (ops::attention_apply(ops::attention_probs(a2, 4, 0.125), a2) * w).sum().backward();
    check_close(a2.grad(), b.grad(), 1e-6, 1e-6);  // the sum of two halves, not one kernel
  }
}

TEST_CASE("attention: bad input") {
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({2, 3, 10}), 2, 1.0), "attention",
                       "3 * heads * head_dim", "[2, 3, 10]");
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({3, 12}), 2, 1.0), "attention", "[3, 12]");
  CHECK_ERROR_CONTAINS(ops::attention(ops::zeros({1, 2, 12}, kInt64), 2, 1.0), "attention",
                       "int64");
  CHECK_ERROR_CONTAINS(ops::attention_probs(ops::zeros({2, 3, 10}), 2, 1.0), "attention_probs",
                       "3 * heads * head_dim", "[2, 3, 10]");
  CHECK_ERROR_CONTAINS(ops::attention_apply(ops::zeros({2, 2, 3}), ops::zeros({2, 3, 12})),
                       "attention_apply", "[B, heads, N, N]", "[2, 2, 3]");
  CHECK_ERROR_CONTAINS(ops::attention_apply(ops::zeros({2, 2, 4, 4}), ops::zeros({2, 3, 12})),
                       "attention_apply", "[2, 2, 4, 4]", "[2, 3, 12]", "[2, 2, 3, 3]");
  CHECK_ERROR_CONTAINS(ops::attention_apply(ops::zeros({2, 5, 3, 3}), ops::zeros({2, 3, 12})),
                       "attention_apply", "3 * heads * head_dim", "heads = 5");
}
