#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace vitrine::nn::init {

namespace {
/// Writes values (drawn as float64 on the CPU) into t, whatever its dtype and device.
void assign(const Tensor& t, const Tensor& values) {
  NoGradGuard ng;
  Tensor(t).copy_(values.to(t.dtype()));
}
}  // namespace

void uniform_(const Tensor& t, double a, double b, Generator& gen) {
  assign(t, ops::rand(t.shape(), gen, kFloat64, a, b));
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  assign(t, ops::randn(t.shape(), gen, kFloat64) * std + mean);
}

double erfinv(double x) {
  VT_CHECK(x > -1 && x < 1, "erfinv: argument {} is outside (-1, 1)", x);
  // Giles (2010) single-precision approximation, then two Newton steps on erf(y) - x.
  double w = -std::log((1.0 - x) * (1.0 + x)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = c + p * w;
  }
  double y = p * x;
  for (int i = 0; i < 2; ++i) y -= (std::erf(y) - x) / (2.0 / std::sqrt(M_PI) * std::exp(-y * y));
  return y;
}

void trunc_normal_(const Tensor& t, double mean, double std, double a, double b, Generator& gen) {
  VT_CHECK(std > 0 && a < b, "trunc_normal_: need std > 0 and a < b (got std {}, [{}, {}])", std, a,
           b);
  auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
  double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  std::vector<double> v =
      ops::rand(t.shape(), gen, kFloat64, 2 * l - 1, 2 * u - 1).to_vector<double>();
  for (double& x : v) {
    x = std::clamp(x, -1 + 1e-16, 1 - 1e-16);
    x = std::clamp(mean + std * std::sqrt(2.0) * erfinv(x), a, b);
  }
  assign(t, ops::from_vector(v, t.shape(), kFloat64));
}

std::pair<int64_t, int64_t> fan_in_out(const Tensor& t) {
  VT_CHECK(t.dim() >= 2, "init: fan in/out need a weight with at least 2 dims, got shape {}",
           t.shape());
  int64_t receptive = 1;
  for (int i = 2; i < t.dim(); ++i) receptive *= t.shape()[i];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

void xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  auto [fin, fout] = fan_in_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fin + fout));
  uniform_(t, -bound, bound, gen);
}

void kaiming_uniform_(const Tensor& t, double a, Generator& gen) {
  auto [fin, fout] = fan_in_out(t);
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fin));
  uniform_(t, -bound, bound, gen);
}

void constant_(const Tensor& t, double value) {
  NoGradGuard ng;
  Tensor(t).fill_(value);
}
void zeros_(const Tensor& t) { constant_(t, 0); }
void ones_(const Tensor& t) { constant_(t, 1); }

}  // namespace vitrine::nn::init
