#include "nn/init.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "autograd/grad_mode.h"
#include "nn/batch_norm.h"
#include "nn/layers.h"
#include "ops/ops.h"

namespace vitrine::nn::init {

namespace {
/// Writes values (drawn as float64 on the CPU) into t, whatever its dtype and device.
void assign(const Tensor& t, const Tensor& values) {
  NoGradGuard ng;
  Tensor(t).copy_(values.to(t.dtype()));
}

/// assign(t, draw(shape)) in chunks of 2^20 elements when t is contiguous: draw(n) gives the next
/// n values as float64 [n] (its generator advances by n, so the chunks hold the values of one
/// draw of the whole). A [50257, 768] embedding then needs an 8 MB temporary, not 300 MB that
/// the allocator's cache would keep.
template <typename Draw>
void assign_chunked(const Tensor& t, Draw draw) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t n = t.numel();
  if (n <= kChunk || !t.is_contiguous()) return assign(t, draw(t.shape()));
  NoGradGuard ng;
  const Tensor flat = t.view({n});
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    Tensor(flat.narrow(0, start, m)).copy_(draw(Dims{m}).to(t.dtype()));
  }
}
}  // namespace

void uniform_(const Tensor& t, double a, double b, Generator& gen) {
  assign_chunked(t, [&](const Dims& shape) { return ops::rand(shape, gen, kFloat64, a, b); });
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  assign_chunked(t,
                 [&](const Dims& shape) { return ops::randn(shape, gen, kFloat64) * std + mean; });
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
  kaiming_uniform_(t, a, "fan_in", "leaky_relu", gen);
}

void constant_(const Tensor& t, double value) {
  NoGradGuard ng;
  Tensor(t).fill_(value);
}
void zeros_(const Tensor& t) { constant_(t, 0); }
void ones_(const Tensor& t) { constant_(t, 1); }

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  const std::string& n = nonlinearity;
  if (n == "linear" || n == "conv1d" || n == "conv2d" || n == "conv3d" || n == "conv_transpose1d" ||
      n == "conv_transpose2d" || n == "conv_transpose3d" || n == "sigmoid")
    return 1;
  if (n == "tanh") return 5.0 / 3;
  if (n == "relu") return std::sqrt(2.0);
  if (n == "leaky_relu") {
    double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1 + slope * slope));
  }
  if (n == "selu") return 3.0 / 4;
  VT_CHECK(false,
           "calculate_gain: unsupported nonlinearity '{}' (expected linear, conv1d, conv2d, "
           "conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, sigmoid, tanh, relu, "
           "leaky_relu or selu)",
           n);
  return 0;
}

void xavier_normal_(const Tensor& t, double gain, Generator& gen) {
  auto [fin, fout] = fan_in_out(t);
  normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fin + fout)), gen);
}

namespace {
/// fan_in or fan_out of t by mode ("fan_in" | "fan_out", any case).
double kaiming_fan(const Tensor& t, const std::string& mode, const char* op) {
  std::string m = mode;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  VT_CHECK(m == "fan_in" || m == "fan_out",
           "{}: mode '{}' is not supported (expected fan_in or fan_out)", op, mode);
  auto [fin, fout] = fan_in_out(t);
  return static_cast<double>(m == "fan_in" ? fin : fout);
}
}  // namespace

void kaiming_uniform_(const Tensor& t, double a, const std::string& mode,
                      const std::string& nonlinearity, Generator& gen) {
  double fan = kaiming_fan(t, mode, "kaiming_uniform_");
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan);
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& t, double a, const std::string& mode,
                     const std::string& nonlinearity, Generator& gen) {
  double fan = kaiming_fan(t, mode, "kaiming_normal_");
  normal_(t, 0, calculate_gain(nonlinearity, a) / std::sqrt(fan), gen);
}

Tensor householder_q(const Tensor& a) {
  VT_CHECK(a.defined() && a.dim() == 2 && a.size(0) >= a.size(1) && a.size(1) >= 1,
           "householder_q: expected a matrix [m, n] with m >= n >= 1, got shape {}",
           a.defined() ? a.shape() : Dims{});
  const int64_t m = a.size(0), n = a.size(1);
  std::vector<double> r = a.to(kCPU).to_vector<double>();  // [m, n] row-major, becomes R
  auto at = [&](std::vector<double>& x, int64_t i, int64_t j) -> double& { return x[i * n + j]; };
  std::vector<std::vector<double>> vs(static_cast<size_t>(n));  // unit Householder vectors
  std::vector<double> diag(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    // H_k = I - 2 v v^T maps column k's rows k.. onto alpha e_1, alpha = -sign(x_0) ||x||.
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += at(r, i, k) * at(r, i, k);
    norm = std::sqrt(norm);
    double alpha = at(r, k, k) > 0 ? -norm : norm;
    std::vector<double>& v = vs[static_cast<size_t>(k)];
    v.assign(static_cast<size_t>(m - k), 0);
    for (int64_t i = k; i < m; ++i) v[static_cast<size_t>(i - k)] = at(r, i, k);
    v[0] -= alpha;
    double vnorm = 0;
    for (double e : v) vnorm += e * e;
    vnorm = std::sqrt(vnorm);
    diag[static_cast<size_t>(k)] = vnorm == 0 ? at(r, k, k) : alpha;
    if (vnorm == 0) {  // the column is already alpha e_1 (or zero): H_k = I
      v.clear();
      continue;
    }
    for (double& e : v) e /= vnorm;
    for (int64_t j = k; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * at(r, i, j);
      for (int64_t i = k; i < m; ++i) at(r, i, j) -= 2 * dot * v[static_cast<size_t>(i - k)];
    }
  }
  // Q = H_0 H_1 .. H_{n-1} applied to the first n columns of I, the last reflection first.
  std::vector<double> q(static_cast<size_t>(m * n), 0);
  for (int64_t j = 0; j < n; ++j) at(q, j, j) = 1;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = vs[static_cast<size_t>(k)];
    if (v.empty()) continue;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[static_cast<size_t>(i - k)] * at(q, i, j);
      for (int64_t i = k; i < m; ++i) at(q, i, j) -= 2 * dot * v[static_cast<size_t>(i - k)];
    }
  }
  // Column j times sign(R_jj) (0 for a zero pivot, as torch.sign), so that R's diagonal is >= 0.
  for (int64_t j = 0; j < n; ++j) {
    double d = diag[static_cast<size_t>(j)];
    double s = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
    for (int64_t i = 0; i < m; ++i) at(q, i, j) *= s;
  }
  return ops::from_vector(q, {m, n}, kFloat64);
}

void orthogonal_(const Tensor& t, double gain, Generator& gen) {
  VT_CHECK(t.defined() && t.dim() >= 2,
           "orthogonal_: only tensors with 2 or more dimensions are supported, got shape {}",
           t.defined() ? t.shape() : Dims{});
  if (t.numel() == 0) return;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  Tensor flat = ops::randn({rows, cols}, gen, kFloat64);
  if (rows < cols) flat = ops::contiguous(ops::transpose(flat, 0, 1));
  Tensor q = householder_q(flat);
  if (rows < cols) q = ops::contiguous(ops::transpose(q, 0, 1));
  assign(t, ops::reshape(q * gain, t.shape()));
}

void gpt2_(Module& model, int64_t n_layer, Generator& gen) {
  VT_CHECK(n_layer > 0, "init::gpt2_: n_layer must be positive, got {}", n_layer);
  for (auto& [name, m] : model.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(m)) {
      normal_(linear->weight, 0, 0.02, gen);
      if (linear->bias.defined()) zeros_(linear->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      normal_(emb->weight, 0, 0.02, gen);
    } else if (auto* ln = dynamic_cast<LayerNorm*>(m)) {
      if (ln->weight.defined()) ones_(ln->weight);
      if (ln->bias.defined()) zeros_(ln->bias);
    }
  }
  const double std = 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer));
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string suffix = "c_proj.weight";
    if (name.size() >= suffix.size() && name.ends_with(suffix)) normal_(p, 0, std, gen);
  }
}

}  // namespace vitrine::nn::init
