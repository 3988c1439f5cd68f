// The row kernels of simd.h, each compiled for AVX-512, AVX2 and the baseline.
#include "backends/cpu/simd.h"

#include "backends/cpu/cpu_features.h"

#include <cmath>

namespace vitrine::cpu::simd {

namespace {
constexpr float kSqrt1_2 = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)
}  // namespace

VT_SIMD_CLONES void gelu_portable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = exp_approx(-0.5f * v * v);
    y[i] = 0.5f * v * (1.0f + erf_approx(v * kSqrt1_2, e));
  }
}

VT_SIMD_CLONES void gelu_backward_portable(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = exp_approx(-0.5f * v * v);
    const float cdf = 0.5f * (1.0f + erf_approx(v * kSqrt1_2, e));
    dx[i] = dy[i] * (cdf + v * kInvSqrt2Pi * e);
  }
}

namespace {
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;
/// x clamped to [-20, 20], where the tanh GELU's u is already +-301 (tanh u is +-1 in float from
/// |u| = 9 on): x^3 then never overflows.
inline float clamp20(float x) { return x < -20.0f ? -20.0f : (x > 20.0f ? 20.0f : x); }
}  // namespace

VT_SIMD_CLONES void gelu_tanh(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], c = clamp20(v);
    const float u = kSqrt2OverPi * (c + kGeluC * c * c * c);
    y[i] = v / (1.0f + exp_approx(-2.0f * u));  // -0 below -20, v above 20
  }
}

VT_SIMD_CLONES void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float c = clamp20(x[i]), c2 = c * c;
    const float u = kSqrt2OverPi * (c + kGeluC * c2 * c);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluC * c2);
    // e^-2u at most e^80 (1 - s = e s stays finite; s is already below 2e-35 there)
    const float w = -2.0f * u;
    const float e = exp_approx(w < 80.0f ? w : 80.0f);
    const float s = 1.0f / (1.0f + e);
    dx[i] = dy[i] * (s * (1.0f + 2.0f * c * du * (e * s)));
  }
}

VT_SIMD_CLONES void relu(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

VT_SIMD_CLONES void relu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

VT_SIMD_CLONES void silu(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_approx(-x[i]));
}

VT_SIMD_CLONES void silu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    // x at least -80: e^-x stays finite (so does 1 - s = e s), and x (1 - s) never overflows;
    // below, the gradient is under 2e-33 either way.
    const float v = x[i] < -80.0f ? -80.0f : x[i];
    const float e = exp_approx(-v);
    const float s = 1.0f / (1.0f + e);
    dx[i] = dy[i] * (s * (1.0f + v * (e * s)));
  }
}

// The AVX-512 kernels exist where gelu_avx512.cpp compiles them (x86-64, GCC or Clang).
#if defined(__x86_64__) && defined(__GNUC__)
#define VT_GELU_AVX512 1
namespace {
const bool kAvx512 = cpu_has_avx512();
}  // namespace
#endif

void gelu(const float* x, float* y, int64_t n) {
#ifdef VT_GELU_AVX512
  if (kAvx512) return gelu_avx512(x, y, n);
#endif
  gelu_portable(x, y, n);
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#ifdef VT_GELU_AVX512
  if (kAvx512) return gelu_backward_avx512(x, dy, dx, n);
#endif
  gelu_backward_portable(x, dy, dx, n);
}

void activation(Activation act, const float* x, float* y, int64_t n) {
  switch (act) {
    case Activation::GELU:
      return gelu(x, y, n);
    case Activation::GELUTanh:
      return gelu_tanh(x, y, n);
    case Activation::ReLU:
      return relu(x, y, n);
    case Activation::SiLU:
      return silu(x, y, n);
  }
}

void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n) {
  switch (act) {
    case Activation::GELU:
      return gelu_backward(x, dy, dx, n);
    case Activation::GELUTanh:
      return gelu_tanh_backward(x, dy, dx, n);
    case Activation::ReLU:
      return relu_backward(x, dy, dx, n);
    case Activation::SiLU:
      return silu_backward(x, dy, dx, n);
  }
}

// The v16 helpers are inline and internal, so no call ever crosses an ABI boundary with them.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace {
/// 16 floats as one value (GCC's vector extension; split into narrower registers where the
/// target has no 512-bit ones). The horizontal reductions below are explicit halving trees:
/// the ones the compiler makes for short rows went through the stack.
typedef float v16 __attribute__((vector_size(64)));
constexpr int kLanes = 16;

inline float hmax(v16 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
inline float hsum(v16 v) {
  // pairwise: (0+8, 1+9, ...) then halves again
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) v[i] += v[i + w];
  return v[0];
}
inline v16 load_or(const float* x, int64_t n, float fill) {
  v16 v;
  for (int i = 0; i < kLanes; ++i) v[i] = i < n ? x[i] : fill;
  return v;
}
inline v16 vexp(v16 x) {
  v16 y;
  for (int i = 0; i < kLanes; ++i) y[i] = exp_approx(x[i]);
  return y;
}
}  // namespace

VT_SIMD_CLONES void softmax_rows(const float* xs, float* ys, int64_t rows, int64_t n, float scale) {
  const int64_t full = n / kLanes * kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = xs + r * n;
    float* y = ys + r * n;
    const float ninf = -__builtin_inff();
    v16 vm = load_or(x + full, n - full, ninf);
    for (int64_t i = 0; i < full; i += kLanes) {
      v16 v;
      __builtin_memcpy(&v, x + i, sizeof v);
      vm = v > vm ? v : vm;
    }
    const float ms = hmax(vm) * scale;
    v16 vs = {};
    for (int64_t i = 0; i < full; i += kLanes) {
      v16 v;
      __builtin_memcpy(&v, x + i, sizeof v);
      v = vexp(v * scale - ms);
      __builtin_memcpy(y + i, &v, sizeof v);
      vs += v;
    }
    for (int64_t i = full; i < n; ++i) {
      const float e = exp_approx(x[i] * scale - ms);
      y[i] = e;
      vs[0] += e;
    }
    const float inv = 1.0f / hsum(vs);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

VT_SIMD_CLONES void softmax_backward_row(const float* y, const float* dy, float* dx, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += dy[i] * y[i];
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - s);
}

VT_SIMD_CLONES double exp_shifted_row(const float* x, float* e, int64_t n, float* max) {
  float m = -__builtin_inff();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) e[i] = exp_approx(x[i] - m);
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(e[i]);
  *max = m;
  return s;
}

VT_SIMD_CLONES void log_softmax_row(const float* x, float* y, int64_t n) {
  // A NaN is skipped by the max but propagates through the sum (exp_approx keeps it). The
  // exponentials go through y (a loop that stores vectorises where one that sums them does not).
  float m = 0;
  const double s = exp_shifted_row(x, y, n, &m);
  const float shift = m + static_cast<float>(std::log(s));
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
}

VT_SIMD_CLONES void log_softmax_backward_row(const float* y, const float* dy, float* dx,
                                             int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += dy[i];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] - exp_approx(y[i]) * s;
}

VT_SIMD_CLONES void layer_norm_row(const float* x, const float* w, const float* b, float eps,
                                   float* y, float* mean, float* rstd, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const float mu = s / static_cast<float>(n);
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mu) * (x[i] - mu);
  const float rs = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  *mean = mu;
  *rstd = rs;
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mu) * rs * w[i] + b[i];
}

VT_SIMD_CLONES void layer_norm_backward_row(const float* x, const float* w, float mean, float rstd,
                                            const float* dy, float* dx, float* pw, float* pb,
                                            int64_t n) {
  if (dx) {
    float sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t i = 0; i < n; ++i) {
      const float g = dy[i] * w[i];
      sg += g;
      sgx += g * ((x[i] - mean) * rstd);
    }
    const float a = sg / static_cast<float>(n), bb = sgx / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) dx[i] = rstd * (dy[i] * w[i] - a - (x[i] - mean) * rstd * bb);
  }
  if (pw) {
    for (int64_t i = 0; i < n; ++i) {
      pw[i] += dy[i] * ((x[i] - mean) * rstd);
      pb[i] += dy[i];
    }
  }
}

VT_SIMD_CLONES float sum_row(const float* x, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

VT_SIMD_CLONES float centered_sq_sum_row(const float* x, float c, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

VT_SIMD_CLONES float centered_dot_row(const float* x, const float* dy, float c, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += dy[i] * (x[i] - c);
  return s;
}

VT_SIMD_CLONES void affine_row(const float* x, float a, float d, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + d;
}

VT_SIMD_CLONES void affine2_row(const float* x, float a, const float* z, float b, float d, float* y,
                                int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + z[i] * b + d;
}

VT_SIMD_CLONES void adam_row(float* __restrict p, const float* __restrict g, float* __restrict m,
                             float* __restrict v, const AdamRow& o, int64_t n) {
  // The options as locals (a store through p could otherwise alias o, and reload it).
  const bool coupled = o.coupled_decay;
  const float wd = o.wd, decay = o.decay;
  const float b1 = o.beta1, omb1 = o.one_minus_beta1, b2 = o.beta2, omb2 = o.one_minus_beta2;
  const float eps = o.eps, nss = o.neg_step_size, bc2 = o.bc2_sqrt;
  // AdamW's decay in a loop of its own: p decay is rounded and stored, as PyTorch's param.mul_,
  // never fused (fma) into the update's addition below.
  if (o.decoupled) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = coupled ? __builtin_fmaf(pi, wd, g[i]) : g[i];
    const float mi = __builtin_fmaf(gi, omb1, m[i] * b1);
    const float vi = __builtin_fmaf(omb2 * gi, gi, v[i] * b2);
    m[i] = mi;
    v[i] = vi;
    const float denom = __builtin_sqrtf(vi) / bc2 + eps;
    p[i] = pi + nss * mi / denom;
  }
}

}  // namespace vitrine::cpu::simd
