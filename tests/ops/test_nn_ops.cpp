// Tests of ops/nn_ops.cpp: softmax, log_softmax, layer_norm, cross_entropy, dropout. Forward
// values (and the cross-entropy gradients) come from PyTorch via
// tests/fixtures/make_nn_ops_fixtures.py -> nn_ops.json; gradients are checked against finite
// differences on the full Jacobian (small float64 inputs, no reduction).
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

using namespace vitrine;
using namespace vt_test;
using json = nlohmann::json;
using ops::Reduction;

const json& fixtures() { return fixture_json("nn_ops.json"); }

Dims dims_of(const json& a) {
  Dims d;
  for (const json& v : a) d.push_back(v.get<int64_t>());
  return d;
}

/// A fixture tensor {"shape", "data"} in dtype (float64 by default, or int64).
Tensor tensor_of(const json& j, DType dtype = kFloat64) { return fixture_tensor(j, dtype); }

std::vector<double> values_of(const json& j) { return j["data"].get<std::vector<double>>(); }

Reduction reduction_of(const std::string& s) {
  if (s == "none") return Reduction::None;
  if (s == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

}  // namespace

// ---- softmax / log_softmax -------------------------------------------------------------------

TEST_CASE("softmax: forward") {
  for (const json& c : fixtures()["softmax"]) {
    CAPTURE(c["dim"].get<int>());
    Tensor x = tensor_of(c["x"]);
    Tensor y = ops::softmax(x, c["dim"].get<int64_t>());
    CHECK(y.shape() == x.shape());
    CHECK(y.dtype() == kFloat64);
    CHECK(y.is_contiguous());
    check_close(y, values_of(c["softmax"]), 1e-12, 1e-10);
    // float32 against the same reference, looser
    Tensor y32 = ops::softmax(x.to(kFloat32), c["dim"].get<int64_t>());
    CHECK(y32.dtype() == kFloat32);
    check_close(y32, values_of(c["softmax"]), 1e-6, 1e-5);
  }
}

TEST_CASE("softmax: numerically stable and PyTorch's special values") {
  // Large logits would overflow exp without the max subtraction.
  check_close(
      ops::softmax(ops::tensor({1000, 1000, 999}, kFloat64), 0),
      {1 / (2 + std::exp(-1.0)), 1 / (2 + std::exp(-1.0)), std::exp(-1.0) / (2 + std::exp(-1.0))},
      1e-12);
  check_close(ops::softmax(ops::tensor({-1000, 0}, kFloat32), 0), {0, 1}, 1e-7);
  const double inf = std::numeric_limits<double>::infinity();
  check_close(ops::softmax(ops::tensor({0, -inf}, kFloat64), 0), {1, 0}, 1e-12);
  Tensor ls = ops::log_softmax(ops::tensor({0, -inf}, kFloat64), 0);
  CHECK(ls.at({0}) == 0.0);
  CHECK(ls.at({1}) == -inf);
  // As PyTorch: a row of only -inf gives NaN.
  CHECK(std::isnan(ops::softmax(ops::tensor({-inf, -inf}, kFloat64), 0).at({0})));
  // A 0-dim input: softmax is 1, log_softmax 0.
  check_close(ops::softmax(ops::scalar(3.0, kFloat64), 0), {1.0}, 0);
  check_close(ops::log_softmax(ops::scalar(3.0, kFloat64), -1), {0.0}, 0);
}

TEST_CASE("softmax: gradcheck") {
  Tensor x = rand64({2, 3, 4}, 1);
  for (int64_t dim : {-1, 1, 0})
    check_grad([dim](const std::vector<Tensor>& in) { return ops::softmax(in[0], dim); }, {x});
  // A non-contiguous input.
  check_grad([](const std::vector<Tensor>& in) { return ops::softmax(in[0].transpose(0, 2), 1); },
             {x});
}

TEST_CASE("log_softmax: forward") {
  for (const json& c : fixtures()["softmax"]) {
    CAPTURE(c["dim"].get<int>());
    Tensor x = tensor_of(c["x"]);
    Tensor y = ops::log_softmax(x, c["dim"].get<int64_t>());
    CHECK(y.shape() == x.shape());
    check_close(y, values_of(c["log_softmax"]), 1e-12, 1e-10);
    check_close(ops::log_softmax(x.to(kFloat32), c["dim"].get<int64_t>()),
                values_of(c["log_softmax"]), 1e-5, 1e-5);
  }
  // Large logits: finite (a naive log(softmax) would give -inf).
  check_close(ops::log_softmax(ops::tensor({0, -2000}, kFloat64), 0), {0, -2000}, 1e-9);
}

TEST_CASE("log_softmax: gradcheck") {
  Tensor x = rand64({2, 3, 4}, 2, 2.0);
  for (int64_t dim : {-1, 1, 0})
    check_grad([dim](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], dim); }, {x});
  check_grad([](const std::vector<Tensor>& in) { return ops::log_softmax(in[0].mT(), -1); }, {x});
}

TEST_CASE("softmax: bad input") {
  CHECK_ERROR_CONTAINS(ops::softmax(ops::zeros({2, 3}), 2), "softmax");
  CHECK_ERROR_CONTAINS(ops::log_softmax(ops::zeros({2, 3}), -3), "log_softmax");
  CHECK_ERROR_CONTAINS(ops::softmax(ops::zeros({2}, kInt64), 0), "softmax", "int64");
}

// ---- layer_norm ------------------------------------------------------------------------------

TEST_CASE("layer_norm: forward") {
  for (const json& c : fixtures()["layer_norm"]) {
    Tensor x = tensor_of(c["x"]);
    const Dims ns = dims_of(c["normalized_shape"]);
    const bool affine = c.contains("weight");
    CAPTURE(affine);
    Tensor w = affine ? tensor_of(c["weight"]) : Tensor();
    Tensor b = affine ? tensor_of(c["bias"]) : Tensor();
    const double eps = c["eps"].get<double>();
    Tensor y = ops::layer_norm(x, ns, w, b, eps);
    CHECK(y.shape() == x.shape());
    check_close(y, values_of(c["y"]), 1e-12, 1e-10);
    Tensor y32 = ops::layer_norm(x.to(kFloat32), ns, affine ? w.to(kFloat32) : Tensor(),
                                 affine ? b.to(kFloat32) : Tensor(), eps);
    CHECK(y32.dtype() == kFloat32);
    check_close(y32, values_of(c["y"]), 1e-5, 1e-5);
  }
}

TEST_CASE("layer_norm: gradcheck") {
  Tensor x = rand64({2, 3, 4}, 3, 2.0, 0.5);
  Tensor w = rand64({4}, 4), b = rand64({4}, 5);
  check_grad(
      [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], {4}, in[1], in[2]); },
      {x, w, b});
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::layer_norm(in[0], {3, 4}, {}, {}, 1e-3);
      },
      {x});
  // weight only; a non-contiguous input
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::layer_norm(in[0].transpose(0, 1), {4}, in[1], {});
      },
      {x, w});
  // bias only, with x not requiring grad
  Tensor xc = x.detach();
  check_grad([xc](const std::vector<Tensor>& in) { return ops::layer_norm(xc, {4}, {}, in[0]); },
             {b});
}

TEST_CASE("layer_norm: many rows (blocked dw/db sums) match the formula") {
  // 3000 rows: the kernel sums dw/db over several row blocks.
  Generator g(11);
  Tensor x = ops::randn({3000, 8}, g, kFloat64) * 2.0 + 1.0;
  Tensor w = ops::randn({8}, g, kFloat64), b = ops::randn({8}, g, kFloat64);
  Tensor dy = ops::randn({3000, 8}, g, kFloat64);
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  Tensor y = ops::layer_norm(x, {8}, w, b, 1e-5);
  y.backward(dy);
  // The same maths with plain ops.
  NoGradGuard ng;
  Tensor xd = x.detach();
  Tensor mu = ops::mean(xd, {-1}, true);
  Tensor rstd = ops::rsqrt(ops::add(ops::var(xd, {-1}, false, true), 1e-5));
  Tensor xhat = (xd - mu) * rstd;
  check_close(y.detach(), xhat * w.detach() + b.detach(), 1e-10, 1e-10);
  check_close(w.grad(), ops::sum(dy * xhat, {0}), 1e-9, 1e-10);
  check_close(b.grad(), ops::sum(dy, {0}), 1e-9, 1e-10);
  Tensor gw = dy * w.detach();
  Tensor dx = rstd * (gw - ops::mean(gw, {-1}, true) - xhat * ops::mean(gw * xhat, {-1}, true));
  check_close(x.grad(), dx, 1e-10, 1e-9);
}

TEST_CASE("layer_norm: float32 with weight (the vectorised kernel) against float64, many rows") {
  // 5000 rows: 20 rows per block, so the kernel's float partials of dw and db are added into the
  // block's double sums after 16 rows and at the block's end.
  Generator g(12);
  const Tensor x = ops::randn({5000, 24}, g, kFloat64) * 2.0 + 1.0;
  const Tensor w = ops::randn({24}, g, kFloat64), b = ops::randn({24}, g, kFloat64);
  const Tensor dy = ops::randn({5000, 24}, g, kFloat64);
  const auto grads = [&](DType dt) {
    Tensor xl = x.to(dt).detach().requires_grad_(), wl = w.to(dt).detach().requires_grad_(),
           bl = b.to(dt).detach().requires_grad_();
    ops::layer_norm(xl, {24}, wl, bl, 1e-5).backward(dy.to(dt));
    return std::vector<Tensor>{xl.grad().to(kFloat64), wl.grad().to(kFloat64),
                               bl.grad().to(kFloat64)};
  };
  const auto g64 = grads(kFloat64), g32 = grads(kFloat32);
  check_close(g32[0], g64[0], 1e-5, 1e-4);
  // sums over 5000 rows of numbers of size 1: float32 rounding, well under 1e-4 of the sum's size
  check_close(g32[1], g64[1], 5e-4, 1e-5);
  check_close(g32[2], g64[2], 5e-4, 1e-5);
}

TEST_CASE("layer_norm: bad input") {
  Tensor x = ops::zeros({2, 3});
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {4}, {}, {}),
                       "layer_norm: normalized_shape [4] does not match the trailing dims of "
                       "input shape [2, 3]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {2, 3, 1}, {}, {}), "layer_norm", "[2, 3, 1]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {}, {}, {}), "layer_norm", "normalized_shape");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {3}, ops::ones({2}), {}), "layer_norm", "weight", "[2]",
                       "[3]");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {3}, {}, ops::zeros({3, 1})), "layer_norm", "bias");
  CHECK_ERROR_CONTAINS(ops::layer_norm(x, {3}, ops::ones({3}, kFloat64), {}), "layer_norm",
                       "float32", "float64");
  CHECK_ERROR_CONTAINS(ops::layer_norm(ops::zeros({2, 3}, kInt64), {3}, {}, {}), "layer_norm",
                       "int64");
}

// ---- cross_entropy ---------------------------------------------------------------------------

namespace {
/// Runs one fixture case; checks the loss and, when the fixture has it, the gradient.
void check_cross_entropy_case(const json& c, DType dtype, double tol) {
  const std::string red = c["reduction"].get<std::string>();
  const double s = c["label_smoothing"].get<double>();
  const int64_t ignore = c["ignore_index"].get<int64_t>();
  CAPTURE(red);
  CAPTURE(s);
  CAPTURE(ignore);
  Tensor logits = tensor_of(c["logits"], dtype).detach();
  logits.requires_grad_();
  Tensor target = tensor_of(c["target"], kInt64);
  Tensor loss = ops::cross_entropy(logits, target, reduction_of(red), s, ignore);
  CHECK(loss.dtype() == dtype);
  CHECK(loss.shape() == dims_of(c["loss"]["shape"]));
  check_close(loss, values_of(c["loss"]), tol, tol);
  if (!c.contains("grad")) return;
  if (red == "none")
    ops::sum(loss * tensor_of(c["r"], dtype)).backward();
  else
    loss.backward();
  check_close(logits.grad(), values_of(c["grad"]), tol, tol);
}
}  // namespace

TEST_CASE("cross_entropy: forward") {
  int n = 0;
  for (const json& c : fixtures()["cross_entropy"]) {
    if (c["label_smoothing"].get<double>() != 0 || c["ignore_index"].get<int64_t>() != -100)
      continue;
    check_cross_entropy_case(c, kFloat64, 1e-12);
    check_cross_entropy_case(c, kFloat32, 1e-5);
    ++n;
  }
  CHECK(n == 4);  // none, mean, sum, unbatched
}

TEST_CASE("cross_entropy: logits [N, C, d1, ...] and target [N, d1, ...], as PyTorch") {
  int n = 0;
  for (const json& c : fixtures()["cross_entropy_kdim"]) {
    for (const DType dtype : {kFloat64, kFloat32}) {
      const double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
      const std::string red = c["reduction"].get<std::string>();
      CAPTURE(red);
      Tensor logits = tensor_of(c["logits"], dtype).detach();
      logits.requires_grad_();
      Tensor loss =
          ops::cross_entropy(logits, tensor_of(c["target"], kInt64), reduction_of(red),
                             c["label_smoothing"].get<double>(), c["ignore_index"].get<int64_t>());
      CHECK(loss.shape() == dims_of(c["loss"]["shape"]));
      check_close(loss, values_of(c["loss"]), tol, tol);
      ops::sum(loss * tensor_of(c["r"], dtype)).backward();
      check_close(logits.grad(), values_of(c["grad"]), tol, tol);
    }
    ++n;
  }
  CHECK(n == 4);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0], ops::from_vector(std::vector<int64_t>{1, 0, 2, 2}, {2, 2}),
                                  Reduction::Mean, 0.1);
      },
      {rand64({2, 3, 2}, 21)});
  CHECK_ERROR_CONTAINS(ops::cross_entropy(ops::zeros({2, 3, 4}), ops::zeros({2, 3}, kInt64)),
                       "cross_entropy", "target shape [2, 3]", "expected target shape [2, 4]");
}

TEST_CASE("cross_entropy: label smoothing and ignore_index") {
  int n = 0;
  for (const json& c : fixtures()["cross_entropy"]) {
    if (c["label_smoothing"].get<double>() == 0 && c["ignore_index"].get<int64_t>() == -100)
      continue;
    check_cross_entropy_case(c, kFloat64, 1e-12);
    check_cross_entropy_case(c, kFloat32, 1e-5);
    ++n;
  }
  CHECK(n == 10);
  // Ignored rows: loss 0 and gradient 0.
  Tensor logits = rand64({3, 4}, 7);
  Tensor target = ops::from_vector(std::vector<int64_t>{1, -100, 3});
  Tensor loss = ops::cross_entropy(logits, target, Reduction::None, 0.2);
  CHECK(loss.at({1}) == 0.0);
  ops::sum(loss).backward();
  check_close(logits.grad().select(0, 1), {0, 0, 0, 0}, 0);
  // As PyTorch: the mean over no counted targets is 0 / 0 = NaN.
  REQUIRE(fixtures()["cross_entropy_all_ignored_mean_is_nan"].get<bool>());
  Tensor all_ignored = ops::from_vector(std::vector<int64_t>{-100, -100, -100});
  CHECK(std::isnan(ops::cross_entropy(logits, all_ignored).item()));
  CHECK(ops::cross_entropy(logits, all_ignored, Reduction::Sum).item() == 0.0);
}

TEST_CASE("cross_entropy: gradcheck") {
  Tensor logits = rand64({4, 5}, 8, 2.0);
  Tensor target = ops::from_vector(std::vector<int64_t>{4, 0, -100, 2});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    for (double s : {0.0, 0.1}) {
      CAPTURE(s);
      check_grad(
          [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], target, r, s); },
          {logits});
    }
  }
  // A custom ignore_index, and an unbatched input.
  Tensor target2 = ops::from_vector(std::vector<int64_t>{4, 2, 1, 2});
  check_grad(
      [&](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0], target2, Reduction::Mean, 0.3, 2);
      },
      {logits});
  Tensor one = rand64({5}, 9);
  check_grad(
      [](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0], ops::scalar(3, kInt64), Reduction::None, 0.1);
      },
      {one});
}

TEST_CASE("cross_entropy: bad input") {
  Tensor logits = ops::zeros({3, 4});
  Tensor target = ops::from_vector(std::vector<int64_t>{0, 1, 2});
  CHECK_ERROR_CONTAINS(ops::cross_entropy(logits, ops::from_vector(std::vector<int64_t>{0, 4, 1})),
                       "cross_entropy", "target 4", "4 classes");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(logits, ops::from_vector(std::vector<int64_t>{-1, 0, 1})),
                       "cross_entropy", "target -1", "4 classes");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(logits, ops::zeros({3})), "cross_entropy", "int64",
                       "float32");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(logits, ops::from_vector(std::vector<int64_t>{0, 1})),
                       "cross_entropy", "[2]", "[3, 4]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(ops::zeros({2, 3, 4}), target), "cross_entropy",
                       "[2, 3, 4]");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(logits, target, Reduction::Mean, 1.5), "cross_entropy",
                       "label_smoothing", "1.5");
  CHECK_ERROR_CONTAINS(ops::cross_entropy(ops::zeros({3, 4}, kInt64), target), "cross_entropy",
                       "int64");
}

// ---- dropout ---------------------------------------------------------------------------------

TEST_CASE("dropout: same seed gives the same mask, another seed another") {
  Tensor x = ops::ones({64});
  Generator g1(5), g2(5), g3(6);
  std::vector<double> a = ops::dropout(x, 0.5, true, g1).to_vector<double>();
  std::vector<double> b = ops::dropout(x, 0.5, true, g2).to_vector<double>();
  std::vector<double> c = ops::dropout(x, 0.5, true, g3).to_vector<double>();
  CHECK(a == b);
  CHECK(a != c);
  // The generator advances: a second draw differs from the first.
  CHECK(ops::dropout(x, 0.5, true, g1).to_vector<double>() != a);
}

TEST_CASE("dropout: eval and p = 0 are the identity") {
  Tensor x = rand64({3, 4}, 12);
  CHECK(ops::dropout(x, 0.7, false).same(x));
  CHECK(ops::dropout(x, 0.0, true).same(x));
}

TEST_CASE("dropout: fraction of zeros near p, kept values x / (1 - p)") {
  for (DType dt : {kFloat32, kFloat64}) {
    const double p = 0.3;
    Generator g(21), gx(22);
    Tensor x = ops::rand({100000}, gx, dt, 1.0, 2.0);  // no zeros in x
    std::vector<double> xs = x.to_vector<double>();
    std::vector<double> ys = ops::dropout(x, p, true, g).to_vector<double>();
    int64_t zeros = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      if (ys[i] == 0) {
        ++zeros;
      } else if (std::fabs(ys[i] - xs[i] / (1 - p)) > 1e-6 * std::fabs(ys[i])) {
        FAIL("element " << i << ": " << ys[i] << " != " << xs[i] << " / (1 - p)");
      }
    }
    // Binomial(1e5, 0.3): sd 0.00145; 5 sd
    CHECK(std::fabs(static_cast<double>(zeros) / 1e5 - p) < 0.0075);
  }
}

TEST_CASE("dropout: backward is dy * mask / (1 - p)") {
  Generator g(31);
  Tensor x = rand64({1000}, 32);
  Tensor y = ops::dropout(x, 0.4, true, g);
  Tensor dy = rand64({1000}, 33).detach();
  y.backward(dy);
  std::vector<double> ys = y.detach().to_vector<double>(), xs = x.detach().to_vector<double>();
  std::vector<double> gs = x.grad().to_vector<double>(), ds = dy.to_vector<double>();
  for (size_t i = 0; i < ys.size(); ++i) {
    const double expected = ys[i] == 0 ? 0 : ds[i] / 0.6;
    CHECK(std::fabs(gs[i] - expected) <= 1e-12);
  }
}

TEST_CASE("dropout: gradcheck") {
  Tensor x = rand64({4, 5}, 41);
  Generator g(42);
  check_grad(
      [&g](const std::vector<Tensor>& in) {
        g.manual_seed(42);  // the same mask on every call
        return ops::dropout(in[0], 0.35, true, g);
      },
      {x});
}

TEST_CASE("dropout: p = 1 gives zeros, p outside [0, 1] is an error") {
  Tensor x = rand64({6}, 51);
  Tensor y = ops::dropout(x, 1.0, true);
  check_close(y, std::vector<double>(6, 0.0), 0);
  ops::sum(y).backward();
  check_close(x.grad(), std::vector<double>(6, 0.0), 0);
  CHECK_ERROR_CONTAINS(ops::dropout(x, 1.5, true), "dropout", "1.5");
  CHECK_ERROR_CONTAINS(ops::dropout(x, -0.1, false), "dropout", "-0.1");
  CHECK_ERROR_CONTAINS(ops::dropout(ops::zeros({2}, kInt64), 0.5, true), "dropout", "int64");
}

// ---- double backward -------------------------------------------------------------------------

TEST_CASE("nn ops: double backward through a fused backward kernel is refused") {
  Tensor x = rand64({2, 3}, 61);
  Tensor w = rand64({3}, 62);
  Tensor r = rand64({2, 3}, 63).detach();
  Tensor target = ops::from_vector(std::vector<int64_t>{2, 0});
  struct Case {
    const char* name;
    std::function<Tensor()> f;
  };
  std::vector<Case> cases = {
      {"softmax_backward", [&] { return ops::softmax(x, -1); }},
      {"log_softmax_backward", [&] { return ops::log_softmax(x, 0); }},
      {"cross_entropy_backward", [&] { return ops::cross_entropy(x, target, Reduction::None); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Tensor y = c.f();
    Tensor l = ops::sum(y * (y.dim() == 2 ? r : r.select(1, 0)));
    std::vector<Tensor> g = grad({l}, {x}, {}, false, true);
    REQUIRE(g[0].requires_grad());
    CHECK_ERROR_CONTAINS(ops::sum(g[0]).backward(), c.name, "double backward");
  }
  // layer_norm's backward under create_graph is a composition of ops (second derivatives are
  // tested in tests/nn/test_norm_extras.cpp): the gradient of the gradient is defined.
  Tensor yl = ops::layer_norm(x, {3}, w, {});
  std::vector<Tensor> gl = grad({ops::sum(yl * r)}, {x}, {}, false, true);
  ops::sum(gl[0] * gl[0]).backward();
  CHECK(x.grad().defined());
  // dropout's backward is an op, so create_graph works: sum(y^2) = sum(x^2 m^2), m = mask / (1 -
  // p); its gradient 2 x m^2 has gradient 2 m^2, which is 0 or 2 (2^2) = 8 for p = 0.5.
  Generator gen(64);
  Tensor x2 = rand64({2, 3}, 65);
  Tensor y = ops::dropout(x2, 0.5, true, gen);
  std::vector<Tensor> g = grad({ops::sum(y * y)}, {x2}, {}, true, true);
  ops::sum(g[0]).backward();
  std::vector<double> ys = y.detach().to_vector<double>(), gx = x2.grad().to_vector<double>();
  for (size_t i = 0; i < ys.size(); ++i) CHECK(gx[i] == doctest::Approx(ys[i] == 0 ? 0.0 : 8.0));
}
