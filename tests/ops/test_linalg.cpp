// matmul: forward against PyTorch, gradcheck, transposed/broadcast operands without copies, errors.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "core_ops.json";
Tensor mm(const V& x) { return ops::matmul(x[0], x[1]); }
}  // namespace

TEST_CASE("matmul: forward 2-D") { check_forward(kFile, "matmul_2d", mm); }
TEST_CASE("matmul: gradcheck 2-D") { check_grad_at(kFile, "matmul_2d", mm); }
TEST_CASE("matmul: forward batched with broadcast batch dims") {
  check_forward(kFile, "matmul_batched_broadcast", mm);
}
TEST_CASE("matmul: gradcheck batched with broadcast batch dims") {
  check_grad_at(kFile, "matmul_batched_broadcast", mm);
}
TEST_CASE("matmul: forward vector @ batched matrix") { check_forward(kFile, "matmul_vec", mm); }
TEST_CASE("matmul: gradcheck vector @ batched matrix") { check_grad_at(kFile, "matmul_vec", mm); }
TEST_CASE("matmul: forward batched matrix @ vector") { check_forward(kFile, "matmul_mat_vec", mm); }
TEST_CASE("matmul: gradcheck batched matrix @ vector") {
  check_grad_at(kFile, "matmul_mat_vec", mm);
}

TEST_CASE("matmul: transposed and sliced operands give the same result as contiguous ones") {
  Generator g(3);
  Tensor a = ops::randn({5, 4}, g), b = ops::randn({6, 5}, g);
  Tensor ref = ops::matmul(a.mT().contiguous(), b.mT().contiguous());
  check_close(ops::matmul(a.mT(), b.mT()), ref);
  Tensor big = ops::randn({8, 10}, g);
  Tensor s = big.slice(0, 1, 5).slice(1, 2, 8);  // [4, 6], row stride 10
  check_close(ops::matmul(s, b), ops::matmul(s.contiguous(), b));
  Tensor st = big.slice(1, 0, kEnd, 2);  // column stride 2: not BLAS-ready, copied
  check_close(ops::matmul(st, ops::ones({5, 2})), ops::matmul(st.contiguous(), ops::ones({5, 2})));
}

TEST_CASE("matmul: 1-D @ 1-D is a dot product") {
  Tensor d = ops::matmul(ops::tensor({1, 2, 3}), ops::tensor({4, 5, 6}));
  CHECK(d.dim() == 0);
  CHECK(d.item() == 32);
  check_grad(mm, {rand64({3}, 1), rand64({3}, 2)});
}

TEST_CASE("matmul: many small batched products (parallel over the batch)") {
  Generator g(9);
  Tensor a = ops::randn({64, 8, 8}, g, kFloat64), b = ops::randn({64, 8, 8}, g, kFloat64);
  Tensor y = ops::matmul(a, b);
  for (int64_t i : {0, 17, 63})
    check_close(y.select(0, i), ops::matmul(a.select(0, i), b.select(0, i)), 1e-12);
}

TEST_CASE("matmul: bad calls name the shapes") {
  CHECK_ERROR_CONTAINS(ops::matmul(ops::zeros({2, 3}), ops::zeros({4, 5})), "matmul", "[2, 3]",
                       "[4, 5]", "3 != 4");
  CHECK_ERROR_CONTAINS(ops::matmul(ops::zeros({2, 2, 3}), ops::zeros({3, 3, 1})), "matmul",
                       "broadcast");
  CHECK_ERROR_CONTAINS(ops::matmul(ops::arange(4).reshape({2, 2}), ops::arange(4).reshape({2, 2})),
                       "matmul", "int64");
  CHECK_ERROR_CONTAINS(ops::matmul(ops::scalar(1), ops::zeros({2})), "matmul", "at least 1 dim");
}

namespace {
Tensor mlp6(const V& x) { return ops::mlp_gelu(x[0], x[1], x[2], x[3], x[4], x[5]); }
Tensor mlp3(const V& x) { return ops::mlp_gelu(x[0], x[1], Tensor(), x[2], Tensor()); }
/// linear, gelu, linear (and + residual) as separate ops: what mlp_gelu fuses.
Tensor mlp_composite(const V& x) {
  Tensor y = ops::linear(ops::gelu(ops::linear(x[0], x[1], x[2])), x[3], x[4]);
  return x.size() > 5 ? y + x[5] : y;
}
}  // namespace

TEST_CASE("mlp_gelu: forward (with residual and biases, and without)") {
  check_forward(kFile, "mlp_gelu", mlp6);
  check_forward(kFile, "mlp_gelu_plain", mlp3);
}
TEST_CASE("mlp_gelu: gradcheck (with residual and biases, and without)") {
  check_grad_at(kFile, "mlp_gelu", mlp6);
  check_grad_at(kFile, "mlp_gelu_plain", mlp3);
}

TEST_CASE("mlp_gelu: float32 at a ViT's sizes equals linear, gelu, linear, and so do the grads") {
  // 2 x 50 tokens of 64: large enough for the CPU's own GEMM and its fused epilogues (fc2's depth
  // of 320 is two slices), against the unfused ops. The inputs are views (x sliced, the residual
  // transposed), which the op reads or copies as it needs.
  Generator g(5);
  V leaves = {ops::randn({2, 50, 70}, g), ops::randn({320, 64}, g) * 0.1,
              ops::randn({320}, g),       ops::randn({40, 320}, g) * 0.1,
              ops::randn({40}, g),        ops::randn({2, 40, 50}, g)};
  for (Tensor& t : leaves) t.requires_grad_();
  for (bool residual : {true, false}) {
    CAPTURE(residual);
    V args = {leaves[0].slice(2, 3, 67), leaves[1], leaves[2], leaves[3], leaves[4]};
    if (residual) args.push_back(leaves[5].transpose(1, 2));
    const auto fused = [&] {
      return residual ? mlp6(args) : ops::mlp_gelu(args[0], args[1], args[2], args[3], args[4]);
    };
    Tensor y = fused(), ref = mlp_composite(args);
    CHECK(y.shape() == Dims{2, 50, 40});
    check_close(y, ref, 1e-5, 1e-5);
    Tensor w = ops::randn({2, 50, 40}, g);
    auto gy = grad({ops::sum(y * w)}, leaves, {}, /*retain_graph=*/true, false, true);
    auto gr = grad({ops::sum(ref * w)}, leaves, {}, false, false, true);
    for (size_t i = 0; i < leaves.size(); ++i) {
      CAPTURE(i);
      check_close(gy[i], gr[i], 2e-5, 2e-5);  // (the unused residual: zeros on both sides)
    }
    // Without grad the same values (GELU then overwrites the pre-activation in place).
    NoGradGuard no_grad;
    check_close(fused(), ref, 1e-5, 1e-5);
  }
}

TEST_CASE("mlp_gelu: bad shapes name the op and the shapes, and a second derivative is refused") {
  Tensor x = ops::zeros({2, 4}), w1 = ops::zeros({6, 4}), w2 = ops::zeros({3, 6});
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, ops::zeros({6, 5}), Tensor(), w2, Tensor()), "mlp_gelu",
                       "[2, 4]", "[6, 5]", "w1 [hidden, in]");
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, w1, Tensor(), ops::zeros({3, 5}), Tensor()), "mlp_gelu",
                       "[3, 5]");
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, w1, ops::zeros({5}), w2, Tensor()), "mlp_gelu",
                       "b1 has shape [5], expected [6]");
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, w1, Tensor(), w2, ops::zeros({2})), "b2 has shape [2]");
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, w1, Tensor(), w2, Tensor(), ops::zeros({2, 4})),
                       "mlp_gelu: residual has shape [2, 4], expected [2, 3]");
  CHECK_ERROR_CONTAINS(ops::mlp_gelu(x, w1.to(kFloat64), Tensor(), w2, Tensor()), "mlp_gelu");
  Tensor xg = rand64({2, 4}, 1);
  V p = {rand64({6, 4}, 2), rand64({3, 6}, 3)};
  Tensor gx =
      grad({ops::sum(ops::mlp_gelu(xg, p[0], Tensor(), p[1], Tensor()))}, {xg}, {}, false, true)[0];
  CHECK_ERROR_CONTAINS(ops::sum(gx).backward(), "mlp_gelu_backward", "double backward");
}
