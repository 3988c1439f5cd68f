// The vectorised float32 math of backends/cpu/simd.h against libm in double: the error bounds its
// header states, the edge cases (0 below the normal range, inf, NaN), and the row kernels that use
// it (GELU forward and backward, softmax forward and backward).
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/simd.h"
#include "test_util.h"

using namespace vitrine::cpu;

namespace {
std::vector<float> grid(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / n);
  return v;
}
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad_ref(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
}  // namespace

TEST_CASE("simd: exp_approx has relative error below 2e-7 on [-87, 88]") {
  double worst = 0;
  for (float x : grid(-87.0f, 88.0f, 200001)) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(simd::exp_approx(x) - ref) / ref);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 2e-7);
}

TEST_CASE("simd: exp_approx edge cases (underflow to 0, overflow to inf, NaN)") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(simd::exp_approx(-inf) == 0.0f);
  CHECK(simd::exp_approx(-100.0f) == 0.0f);
  CHECK(simd::exp_approx(0.0f) == 1.0f);
  CHECK(simd::exp_approx(inf) == inf);
  CHECK(simd::exp_approx(100.0f) == inf);
  CHECK(std::isnan(simd::exp_approx(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("simd: erf_approx has absolute error below 5e-7 on [-10, 10]") {
  double worst = 0;
  for (float x : grid(-10.0f, 10.0f, 100001)) {
    const float e = simd::exp_approx(-x * x);
    worst = std::max(worst, std::abs(simd::erf_approx(x, e) - std::erf(static_cast<double>(x))));
  }
  INFO("worst absolute error " << worst);
  CHECK(worst < 5e-7);
  CHECK(std::abs(simd::erf_approx(0.0f, 1.0f)) < 1e-7);
}

TEST_CASE("simd: gelu and its backward against the exact formulas in double") {
  const std::vector<float> x = grid(-12.0f, 12.0f, 30001);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(n), dy(n, 1.5f), dx(n);
  simd::gelu(x.data(), y.data(), n);
  simd::gelu_backward(x.data(), dy.data(), dx.data(), n);
  double worst_y = 0, worst_dx = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst_y = std::max(worst_y, std::abs(y[i] - gelu_ref(x[i])) / (1 + std::abs(x[i])));
    worst_dx = std::max(worst_dx, std::abs(dx[i] - 1.5 * gelu_grad_ref(x[i])));
  }
  INFO("gelu " << worst_y << ", backward " << worst_dx);
  CHECK(worst_y < 3e-7);
  CHECK(worst_dx < 1e-6);
}

TEST_CASE("simd: the tanh GELU, ReLU and SiLU and their gradients against double") {
  // PyTorch's formulas (torch.nn.functional.gelu(approximate='tanh'), relu, silu), in double.
  const auto u = [](double v) { return std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v); };
  const auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  struct Ref {
    vitrine::Activation act;
    std::function<double(double)> f, df;
  };
  const std::vector<Ref> refs = {
      // (x (1 + tanh u) / 2 as x / (1 + e^-2u): in double too, 1 + tanh u loses all its digits
      // to cancellation from x = -8 on, where the value is still a normal float)
      {vitrine::Activation::GELUTanh, [&](double v) { return v / (1 + std::exp(-2 * u(v))); },
       [&](double v) {
         const double t = std::tanh(u(v));
         return 0.5 * (1 + t) +
                0.5 * v * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * v * v);
       }},
      {vitrine::Activation::ReLU, [](double v) { return v > 0 ? v : 0.0; },
       [](double v) { return v > 0 ? 1.0 : 0.0; }},
      {vitrine::Activation::SiLU, [&](double v) { return v * sig(v); },
       [&](double v) { return sig(v) * (1 + v * (1 - sig(v))); }},
  };
  std::vector<float> x = grid(-20.0f, 20.0f, 40001);
  for (float v :
       {0.0f, -0.0f, 1e-30f, -1e-30f, -50.0f, 50.0f, -90.0f, 90.0f, 1e20f, -1e20f, 3e38f, -3e38f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  for (const Ref& r : refs) {
    INFO("activation " << static_cast<int>(r.act));
    std::vector<float> y(n), dy(n), dx(n);
    for (int64_t i = 0; i < n; ++i) dy[i] = 0.5f + static_cast<float>(i % 7) / 4;
    simd::activation(r.act, x.data(), y.data(), n);
    simd::activation_backward(r.act, x.data(), dy.data(), dx.data(), n);
    double worst_y = 0, worst_dx = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ry = r.f(x[i]), rd = dy[i] * r.df(x[i]);
      REQUIRE(std::isfinite(y[i]));
      REQUIRE(std::isfinite(dx[i]));
      // as the exact GELU's bound above: relative to 1 + |x| (in the negative tails the value
      // is e^-2u x or e^-x x, whose relative error grows with |u| from u's rounding alone, as
      // PyTorch's float32 does, where 1 + tanh u even cancels)
      worst_y = std::max(worst_y, std::abs(y[i] - ry) / (1 + std::abs(x[i])));
      worst_dx = std::max(worst_dx, std::abs(dx[i] - rd) / (1 + std::abs(rd)));
    }
    INFO("worst error " << worst_y << ", backward " << worst_dx);
    CHECK(worst_y < 3e-7);
    CHECK(worst_dx < 1e-6);
    // in place, as the GEMM's epilogue calls them (y = x, dx = dy)
    std::vector<float> a(x), d(dy);
    simd::activation(r.act, a.data(), a.data(), n);
    simd::activation_backward(r.act, x.data(), d.data(), d.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      CHECK(a[i] == y[i]);
      CHECK(d[i] == dx[i]);
    }
  }
  // NaN stays NaN in the GELUs and SiLU (ReLU gives 0, as the relu op here does)
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float y = 0;
  simd::gelu_tanh(&nan, &y, 1);
  CHECK(std::isnan(y));
  simd::silu(&nan, &y, 1);
  CHECK(std::isnan(y));
}

TEST_CASE("simd: the AVX-512 GELU kernels against double, with tails, edge values and in place") {
  if (!cpu_has_avx512()) return;  // they would not run here (gelu dispatches to them only there)
  std::vector<float> x = grid(-14.0f, 14.0f, 20001);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 13.19f, -13.19f, 13.3f, -13.3f, 1e20f, -1e20f, inf,
                  -inf, std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, static_cast<int64_t>(x.size())}) {
    CAPTURE(n);
    std::vector<float> ya(n, 9), yp(n, 9), dy(n), da(n, 9), dp(n, 9);
    for (int64_t i = 0; i < n; ++i) dy[i] = 0.5f + static_cast<float>(i % 7) / 4;
    simd::gelu_avx512(x.data(), ya.data(), n);
    simd::gelu_portable(x.data(), yp.data(), n);
    simd::gelu_backward_avx512(x.data(), dy.data(), da.data(), n);
    simd::gelu_backward_portable(x.data(), dy.data(), dp.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      CAPTURE(x[i]);
      if (!std::isfinite(x[i])) {  // inf and NaN: what the portable loop gives
        CHECK(std::isnan(ya[i]) == std::isnan(yp[i]));
        if (!std::isnan(yp[i])) CHECK(ya[i] == yp[i]);
        CHECK(std::isnan(da[i]) == std::isnan(dp[i]));
        continue;
      }
      // The bounds the portable loop meets (above). For x < 0 the AVX-512 kernel computes
      // Phi(x) = q t e / 2 directly where the portable one takes 1 + erf(x) after rounding erf
      // near -1, so it is the more accurate of the two there.
      CHECK(std::abs(ya[i] - gelu_ref(x[i])) <= 3e-7 * (1 + std::abs(x[i])));
      CHECK(std::abs(da[i] - dy[i] * gelu_grad_ref(x[i])) <= 1e-6 * dy[i]);
    }
  }
  // in place, as the GEMM's epilogue calls it (dx = dy)
  std::vector<float> d(x.begin(), x.begin() + 100), d2 = d;
  simd::gelu_backward_avx512(x.data() + 5000, d.data(), d.data(), 100);
  simd::gelu_backward_portable(x.data() + 5000, d2.data(), d2.data(), 100);
  for (int i = 0; i < 100; ++i) CHECK(std::abs(d[i] - d2[i]) <= 1e-6 * (1 + std::abs(d2[i])));
}

TEST_CASE("simd: softmax rows and their backward against double") {
  for (int64_t n : {1, 3, 17, 50, 197, 1000}) {
    std::vector<float> x(n), y(n), dy(n), dx(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(std::sin(0.7 * i) * 8);
      dy[i] = static_cast<float>(std::cos(1.3 * i));
    }
    simd::softmax_rows(x.data(), y.data(), 1, n, 1.0f);
    simd::softmax_backward_row(y.data(), dy.data(), dx.data(), n);
    double m = -1e300, s = 0;
    for (float v : x) m = std::max(m, static_cast<double>(v));
    std::vector<double> p(n);
    for (int64_t i = 0; i < n; ++i) s += p[i] = std::exp(x[i] - m);
    double dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += (p[i] /= s) * dy[i];
    for (int64_t i = 0; i < n; ++i) {
      CHECK(y[i] == doctest::Approx(p[i]).epsilon(1e-6).scale(1e-9));
      CHECK(dx[i] == doctest::Approx(p[i] * (dy[i] - dot)).epsilon(1e-5).scale(1e-7));
    }
  }
  // as PyTorch: a row with NaN, +inf, or only -inf gives NaN everywhere
  const float inf = std::numeric_limits<float>::infinity();
  for (std::vector<float> x : {std::vector<float>{1, NAN, 2}, std::vector<float>{1, inf, 2},
                               std::vector<float>{-inf, -inf, -inf}}) {
    std::vector<float> y(3);
    simd::softmax_rows(x.data(), y.data(), 1, 3, 1.0f);
    for (float v : y) CHECK(std::isnan(v));
  }
  std::vector<float> x{0, -inf, 0}, y(3);
  simd::softmax_rows(x.data(), y.data(), 1, 3, 1.0f);
  CHECK(y[0] == 0.5f);
  CHECK(y[1] == 0.0f);
}

TEST_CASE("simd: log_softmax rows and their backward against double") {
  for (int64_t n : {1, 7, 16, 33, 10000}) {
    CAPTURE(n);
    std::vector<float> x(n), y(n), dy(n), dx(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(std::sin(0.7 * i) * 8);
      dy[i] = static_cast<float>(std::cos(1.3 * i));
    }
    simd::log_softmax_row(x.data(), y.data(), n);
    simd::log_softmax_backward_row(y.data(), dy.data(), dx.data(), n);
    double m = -1e300, s = 0, sdy = 0;
    for (float v : x) m = std::max(m, static_cast<double>(v));
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m), sdy += dy[i];
    for (int64_t i = 0; i < n; ++i) {
      const double ly = x[i] - m - std::log(s);
      CHECK(y[i] == doctest::Approx(ly).epsilon(1e-6).scale(1e-5));
      CHECK(dx[i] == doctest::Approx(dy[i] - std::exp(ly) * sdy).epsilon(1e-5).scale(1e-4));
    }
  }
  // as PyTorch: a row with NaN, +inf, or only -inf gives NaN everywhere; -inf elsewhere is -inf
  const float inf = std::numeric_limits<float>::infinity();
  for (std::vector<float> x : {std::vector<float>{1, NAN, 2}, std::vector<float>{1, inf, 2},
                               std::vector<float>{-inf, -inf, -inf}}) {
    std::vector<float> y(3);
    simd::log_softmax_row(x.data(), y.data(), 3);
    for (float v : y) CHECK(std::isnan(v));
  }
  std::vector<float> x{0, -inf, 0}, y(3);
  simd::log_softmax_row(x.data(), y.data(), 3);
  CHECK(y[0] == doctest::Approx(-std::log(2.0)).epsilon(1e-6));
  CHECK(y[1] == -inf);
}

TEST_CASE("simd: softmax_rows in place with a scale equals it row by row on the scaled rows") {
  const int64_t rows = 7, n = 50;
  const float scale = 0.125f;
  std::vector<float> p(rows * n), ref(rows * n), scaled(n);
  for (int64_t i = 0; i < rows * n; ++i) p[i] = static_cast<float>(std::sin(0.37 * i) * 30);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) scaled[i] = p[r * n + i] * scale;
    simd::softmax_rows(scaled.data(), ref.data() + r * n, 1, n, 1.0f);
  }
  simd::softmax_rows(p.data(), p.data(), rows, n, scale);
  for (int64_t i = 0; i < rows * n; ++i)
    CHECK(p[i] == doctest::Approx(ref[i]).epsilon(1e-6).scale(1e-9));
}
