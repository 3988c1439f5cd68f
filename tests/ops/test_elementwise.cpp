// Elementwise ops: forward against PyTorch (tests/fixtures/core_ops.json) in float64 and float32,
// gradcheck in float64 at the same points, and bad calls.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

namespace {
const char* kFile = "core_ops.json";
}

#define OP_CASE(NAME, FN)                                         \
  TEST_CASE(NAME ": forward") { check_forward(kFile, NAME, FN); } \
  TEST_CASE(NAME ": gradcheck") { check_grad_at(kFile, NAME, FN); }

using V = std::vector<Tensor>;
OP_CASE("add", [](const V& x) { return x[0] + x[1]; })
OP_CASE("sub", [](const V& x) { return x[0] - x[1]; })
OP_CASE("mul", [](const V& x) { return x[0] * x[1]; })
OP_CASE("div", [](const V& x) { return x[0] / x[1]; })
OP_CASE("neg", [](const V& x) { return -x[0]; })
OP_CASE("pow", [](const V& x) { return ops::pow(x[0], x[1]); })
OP_CASE("pow_scalar", [](const V& x) { return ops::pow(x[0], 2.5); })
OP_CASE("exp", [](const V& x) { return ops::exp(x[0]); })
OP_CASE("log", [](const V& x) { return ops::log(x[0]); })
OP_CASE("sqrt", [](const V& x) { return ops::sqrt(x[0]); })
OP_CASE("rsqrt", [](const V& x) { return ops::rsqrt(x[0]); })
OP_CASE("abs", [](const V& x) { return ops::abs(x[0]); })
OP_CASE("tanh", [](const V& x) { return ops::tanh(x[0]); })
OP_CASE("sigmoid", [](const V& x) { return ops::sigmoid(x[0]); })
OP_CASE("relu", [](const V& x) { return ops::relu(x[0]); })
OP_CASE("gelu", [](const V& x) { return ops::gelu(x[0]); })
OP_CASE("gelu_tanh", [](const V& x) { return ops::gelu(x[0], true); })
OP_CASE("clamp", [](const V& x) { return ops::clamp(x[0], -0.5, 0.75); })
OP_CASE("maximum", [](const V& x) { return ops::maximum(x[0], x[1]); })
OP_CASE("minimum", [](const V& x) { return ops::minimum(x[0], x[1]); })
OP_CASE("softplus", [](const V& x) { return ops::softplus(x[0]); })
OP_CASE("where",
        [](const V& x) { return ops::where(ops::gt(x[0], ops::zeros_like(x[0])), x[0], x[1]); })

TEST_CASE("softplus: large inputs, PyTorch's threshold, second derivative, bad input") {
  // log(1 + e^x) without overflow at +-100; above 20 it is x itself (PyTorch's threshold), and
  // just below it the formula: log(1 + e^20) = 20 + 2.06e-9.
  check_close(ops::softplus(ops::tensor({-100, 0, 100, 20.5})), {0, std::log(2.0), 100, 20.5});
  check_close(ops::softplus(ops::tensor({19.0}, kFloat64)), {19.0 + std::log1p(std::exp(-19.0))},
              1e-15, 1e-15);
  check_grad(
      [](const V& v) { return grad({ops::sum(ops::softplus(v[0]))}, {v[0]}, {}, true, true)[0]; },
      {rand64({3}, 10)});
  Tensor i = ops::from_vector(std::vector<int64_t>{1, 2});
  CHECK_ERROR_CONTAINS(ops::softplus(i), "softplus", "int64", "float32 or float64");
}

TEST_CASE("add: alpha and scalar forms") {
  Tensor a = ops::tensor({1, 2, 3}), b = ops::tensor({10, 20, 30});
  check_close(ops::add(a, b, 0.5), {6, 12, 18});
  check_close(a + 1.5, {2.5, 3.5, 4.5});
  check_close(2.0 - a, {1, 0, -1});
  check_close(6.0 / a, {6, 3, 2});
  check_close(a * 2.0, {2, 4, 6});
}

TEST_CASE("comparisons: forward, bool result, no gradient") {
  Tensor a = ops::tensor({1, 2, 3}, kFloat64), b = ops::tensor({2, 2, 2}, kFloat64);
  a.requires_grad_();
  Tensor lt = ops::lt(a, b), le = ops::le(a, b), gt = ops::gt(a, b), ge = ops::ge(a, b);
  Tensor eq = ops::eq(a, b), ne = ops::ne(a, b);
  CHECK(lt.dtype() == kBool);
  CHECK(!lt.requires_grad());
  check_close(lt, {1, 0, 0});
  check_close(le, {1, 1, 0});
  check_close(gt, {0, 0, 1});
  check_close(ge, {0, 1, 1});
  check_close(eq, {0, 1, 0});
  check_close(ne, {1, 0, 1});
}

TEST_CASE("where: no gradient to the mask, broadcasting") {
  Tensor c = ops::gt(ops::tensor({1, -1}), ops::scalar(0));
  Tensor a = rand64({2, 2}, 1), b = rand64({2}, 2);
  check_grad([&](const V& x) { return ops::where(c, x[0], x[1]); }, {a, b});
}

TEST_CASE("where: the exact bits (-0, inf, NaN) on every contiguous/broadcast pattern and dtype") {
  // The CPU kernel selects bits under a mask on the patterns below, a branch elsewhere: each must
  // give, element by element, the value its condition picks.
  const int64_t n = 37;  // more than one vector, and a tail
  const Tensor c = ops::gt(rand64({n, 3}, 3).detach(), ops::scalar(0, kFloat64));
  for (DType dt : {kFloat32, kFloat64, kInt64, kBool}) {
    CAPTURE(dtype_name(dt));
    Tensor a = ops::contiguous(ops::to_dtype(rand64({n, 3}, 4, 4).detach(), dt));
    Tensor b = ops::contiguous(ops::to_dtype(rand64({n, 3}, 5, 4).detach(), dt));
    if (dt == kFloat32) {
      a.data<float>()[0] = -0.0f;
      a.data<float>()[1] = INFINITY;
      b.data<float>()[0] = NAN;
      b.data<float>()[1] = -INFINITY;
    }
    const Tensor as = ops::to_dtype(ops::scalar(-0.0, kFloat64), dt);
    const Tensor bs = ops::to_dtype(ops::scalar(2.5, kFloat64), dt);
    const Tensor at = ops::transpose(ops::contiguous(ops::transpose(a, 0, 1)), 0, 1);  // strided
    const size_t size = dtype_size(dt);
    auto bytes = [&](const Tensor& t, int64_t i) {
      const Tensor u = ops::contiguous(t);
      return std::string(static_cast<const char*>(u.data_ptr()) + i * size, size);
    };
    const std::pair<Tensor, Tensor> cases[] = {{a, b}, {a, bs}, {as, b}, {as, bs}, {at, b}};
    for (const auto& [x, y] : cases) {
      const Tensor w = ops::contiguous(ops::where(c, x, y));
      const Tensor xf = ops::contiguous(ops::expand(x, {n, 3}));
      const Tensor yf = ops::contiguous(ops::expand(y, {n, 3}));
      for (int64_t i = 0; i < 3 * n; ++i)
        REQUIRE(bytes(w, i) == (c.data<bool>()[i] ? bytes(xf, i) : bytes(yf, i)));
    }
  }
}

TEST_CASE("maximum: ties split the gradient evenly, as PyTorch") {
  Tensor a = ops::tensor({1, 2}, kFloat64), b = ops::tensor({1, 3}, kFloat64);
  a.requires_grad_();
  b.requires_grad_();
  ops::sum(ops::maximum(a, b)).backward();
  check_close(a.grad(), {0.5, 0});
  check_close(b.grad(), {0.5, 1});
}

TEST_CASE("clamp: gradient passes at the bounds (inclusive, as PyTorch)") {
  Tensor x = ops::tensor({-1, 0, 0.5, 1, 2}, kFloat64);
  x.requires_grad_();
  ops::sum(ops::clamp(x, 0.0, 1.0)).backward();
  check_close(x.grad(), {0, 1, 1, 1, 0});
  check_close(ops::clamp(ops::tensor({-3, 3}), std::nullopt, 1.0), {-3, 1});
}

TEST_CASE("clamp: int64 with one bound keeps the other side as it is") {
  Tensor x = ops::from_vector(std::vector<int64_t>{-5, 0, 7});
  CHECK(ops::clamp(x, 0.0, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 7});
  CHECK(ops::clamp(x, std::nullopt, 3.0).to_vector<int64_t>() == std::vector<int64_t>{-5, 0, 3});
}

TEST_CASE("elementwise: broadcasting gradients are summed to each operand's shape") {
  Tensor a = rand64({2, 1, 3}, 3), b = rand64({4, 1}, 4);
  check_grad([](const V& x) { return x[0] * x[1] + x[1]; }, {a, b});
  Tensor y = a.detach() * b.detach();
  CHECK(y.shape() == Dims{2, 4, 3});
}

TEST_CASE("elementwise: int64 arithmetic works, float-only ops refuse ints") {
  Tensor i = ops::from_vector(std::vector<int64_t>{1, 2, 3});
  check_close(i + i, {2, 4, 6});
  CHECK((i * i).dtype() == kInt64);
  CHECK_ERROR_CONTAINS(ops::exp(i), "exp", "int64", "float32 or float64");
  CHECK_ERROR_CONTAINS(ops::tanh(ops::tensor({1}).to(kBFloat16)), "tanh", "bfloat16",
                       "to(kFloat32)");
}

TEST_CASE("elementwise: bad calls name the op and the shapes") {
  Tensor a = ops::zeros({2, 3}), b = ops::zeros({4});
  CHECK_ERROR_CONTAINS(a + b, "add", "[2, 3]", "[4]", "broadcast");
  CHECK_ERROR_CONTAINS(a * ops::zeros({2, 3}, kFloat64), "mul", "float32", "float64");
  CHECK_ERROR_CONTAINS(ops::where(a, a, a), "where", "bool");
  CHECK_ERROR_CONTAINS(ops::clamp(a, std::nullopt, std::nullopt), "clamp");
}

TEST_CASE("to: dtype conversion is differentiable between floats") {
  Tensor x = rand64({3}, 5);
  Tensor y = x.to(kFloat32);
  CHECK(y.dtype() == kFloat32);
  ops::sum(y * 2.0).backward();
  CHECK(x.grad().dtype() == kFloat64);
  check_close(x.grad(), {2, 2, 2});
}

TEST_CASE("elementwise: int64 refuses fractional scalars and division instead of truncating") {
  Tensor i = ops::arange(4);
  CHECK_ERROR_CONTAINS(i / 2.0, "mul", "0.5", "int64");
  CHECK_ERROR_CONTAINS(i + 0.5, "add", "0.5", "to(kFloat32)");
  CHECK_ERROR_CONTAINS(ops::div(i, i), "div", "int64", "to(kFloat32)");
  check_close(i * 3.0, {0, 3, 6, 9});  // integral scalars are fine
  check_close(ops::clamp(i, 1.0, 2.0), {1, 1, 2, 2});
}

TEST_CASE("pow: the exponent's gradient is 0 where the base is 0, as PyTorch") {
  Tensor a = ops::tensor({0, 2}, kFloat64), b = ops::tensor({2, 3}, kFloat64);
  b.requires_grad_();
  ops::sum(ops::pow(a, b)).backward();
  check_close(b.grad(), {0, 8 * std::log(2.0)}, 1e-12);
}

TEST_CASE("in-place: overlapping source and destination read the old values") {
  Tensor x = ops::tensor({1, 2, 3, 4}).reshape({2, 2});
  x.add_(x.mT());
  check_close(x, {2, 5, 5, 8});
  Tensor y = ops::arange(0, 6, 1, kFloat32);
  y.slice(0, 1, 6).copy_(y.slice(0, 0, 5));  // shift right by one
  check_close(y, {0, 0, 1, 2, 3, 4});
  Tensor z = ops::tensor({1, 2});
  z.add_(z);  // the very same elements: fine without a copy
  check_close(z, {2, 4});
}
