// Reductions: forward against PyTorch (core_ops.json), gradcheck, keepdim, errors.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using V = std::vector<Tensor>;

namespace {
const char* kFile = "core_ops.json";
}

#define OP_CASE(NAME, FN)                                         \
  TEST_CASE(NAME ": forward") { check_forward(kFile, NAME, FN); } \
  TEST_CASE(NAME ": gradcheck") { check_grad_at(kFile, NAME, FN); }

OP_CASE("sum", [](const V& x) { return ops::sum(x[0], {0, 2}); })
OP_CASE("sum_keepdim", [](const V& x) { return ops::sum(x[0], {1}, true); })
OP_CASE("mean", [](const V& x) { return ops::mean(x[0], {-1}); })
OP_CASE("var", [](const V& x) { return ops::var(x[0], {1}); })
OP_CASE("var_biased", [](const V& x) { return ops::var(x[0], {0, 2}, false); })
OP_CASE("max_dim", [](const V& x) { return ops::max(x[0], 2).values; })
OP_CASE("min_dim", [](const V& x) { return ops::min(x[0], 0).values; })
OP_CASE("logsumexp", [](const V& x) { return ops::logsumexp(x[0], {1, 2}); })

TEST_CASE("argmax: forward") {
  check_forward(kFile, "argmax_dim", [](const V& x) { return ops::argmax(x[0], 2).to(kFloat64); });
}
TEST_CASE("argmin: forward") {
  check_forward(kFile, "argmin_dim", [](const V& x) { return ops::argmin(x[0], 0).to(kFloat64); });
}

TEST_CASE("sum: all dims, 0-dim result, int64") {
  Tensor x = ops::arange(0, 6, 1, kFloat32).reshape({2, 3});
  Tensor s = ops::sum(x);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 15);
  check_close(ops::sum(x, {0}), {3, 5, 7});
  check_close(ops::sum(ops::arange(5)), {10});
  CHECK(ops::sum(ops::arange(5)).dtype() == kInt64);
  check_grad([](const V& v) { return ops::sum(v[0]); }, {rand64({2, 3}, 1)});
}

TEST_CASE("max: values, indices, keepdim, first index on ties") {
  Tensor x = ops::tensor({1, 5, 5, 2}).reshape({2, 2});
  auto [v, i] = ops::max(x, 1, true);
  CHECK(v.shape() == Dims{2, 1});
  check_close(v, {5, 5});
  check_close(i, {1, 0});
  CHECK(i.dtype() == kInt64);
  CHECK(ops::max(x).item() == 5);
  CHECK(ops::min(x).item() == 1);
}

TEST_CASE("max: all-elements gradient is shared among ties, as PyTorch") {
  Tensor x = ops::tensor({1, 3, 3}, kFloat64);
  x.requires_grad_();
  ops::max(x).backward();
  check_close(x.grad(), {0, 0.5, 0.5});
  check_grad([](const V& v) { return ops::max(v[0]); }, {rand64({5}, 7)});
  check_grad([](const V& v) { return ops::min(v[0]); }, {rand64({5}, 8)});
}

TEST_CASE("mean: gradient is 1/count") {
  Tensor x = rand64({4, 5}, 2);
  ops::mean(x).backward();
  check_close(x.grad(), std::vector<double>(20, 0.05));
}

TEST_CASE("logsumexp: stable for large values") {
  Tensor x = ops::tensor({1000, 1000}, kFloat64);
  CHECK(ops::logsumexp(x, {0}).item() == doctest::Approx(1000 + std::log(2.0)));
}

TEST_CASE("sum_to: reduces broadcast dims") {
  Tensor x = ops::ones({2, 3, 4});
  check_close(ops::sum_to(x, {3, 1}), {8, 8, 8});
  CHECK(ops::sum_to(x, {3, 1}).shape() == Dims{3, 1});
  CHECK_ERROR_CONTAINS(ops::sum_to(x, {5, 1}), "sum_to", "[5, 1]");
}

TEST_CASE("reductions: bad calls") {
  Tensor x = ops::zeros({2, 3});
  CHECK_ERROR_CONTAINS(ops::sum(x, {2}), "sum", "dim 2", "out of range");
  CHECK_ERROR_CONTAINS(ops::sum(x, {1, -1}), "sum", "twice");
  CHECK_ERROR_CONTAINS(ops::max(ops::zeros({0, 2}), 0), "max", "empty");
  CHECK_ERROR_CONTAINS(ops::mean(ops::arange(3)), "mean", "int64");
}

TEST_CASE("max/argmax: a NaN anywhere wins, even past the first 16384-element chunk") {
  Tensor x = ops::zeros({20000});
  x.select(0, 17000).fill_(NAN);
  CHECK(std::isnan(ops::max(x).item()));
  CHECK(ops::argmax(x, 0).item() == 17000);
  CHECK(std::isnan(ops::min(x).item()));
}

TEST_CASE("reductions and matmul: zero-size dims give empty results, not errors") {
  Tensor e = ops::zeros({2, 0});
  CHECK(e.is_contiguous());
  Tensor m = ops::matmul(ops::ones({2, 3}), ops::zeros({3, 0}));
  CHECK(m.shape() == Dims{2, 0});
  check_close(ops::matmul(ops::ones({2, 0}), ops::ones({0, 3})), std::vector<double>(6, 0.0));
  check_close(ops::sum(e, {1}), {0, 0});
  CHECK(ops::softmax(ops::zeros({0, 4}), -1).shape() == Dims{0, 4});
}
