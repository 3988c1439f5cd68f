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
