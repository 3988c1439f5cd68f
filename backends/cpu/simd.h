// Vectorisable float32 math and the row kernels built on it. The functions here are branch-free
// arithmetic (selects, no calls), so the compiler turns their loops into SIMD code; each row
// kernel is compiled three times (AVX-512, AVX2 + FMA, and the x86-64 baseline) and the best
// version for the running CPU is chosen once, at load time (GCC's target_clones). Float64 never
// comes here: it keeps libm's functions, so gradcheck sees exact derivatives.
//
// Accuracy (measured against libm over [-20, 20] in tests/backends/test_simd.cpp):
//   exp_approx: relative error below 2e-7 (Cephes' polynomial, as Eigen and PyTorch's Sleef)
//   erf_approx: absolute error below 5e-7 (Abramowitz & Stegun 7.1.26, 1.5e-7 in exact arithmetic,
//               plus float rounding; ATen's vectorised erf uses the same formula)
#pragma once
#include <bit>
#include <cstdint>

#include "backends/backend.h"  // Activation

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VT_SIMD_CLONES
#endif

namespace vitrine::cpu::simd {

/// The constants of exp_approx and erf_approx, shared with the AVX-512 GELU (gelu_avx512.cpp).
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 in two parts
inline constexpr float kExpLo = -87.3f, kExpHi = 88.7f;  // e^x leaves the normal floats
/// Cephes' degree-5 polynomial p(r) of exp, highest power first.
inline constexpr float kExpPoly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
/// Abramowitz & Stegun 7.1.26: p, and a5 ... a1 (highest power first).
inline constexpr float kErfP = 0.3275911f;
inline constexpr float kErfPoly[] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f,
                                     0.254829592f};

/// e^x, x in float: with n = round(x / ln 2) and r = x - n ln 2 (|r| <= ln 2 / 2),
///   e^x = 2^n * (1 + r + r^2 p(r)),  p Cephes' degree-5 minimax polynomial.
/// Below -87.3 (where e^x leaves the normal floats) the result is 0; above 88.7 it is +inf; NaN
/// stays NaN.
inline float exp_approx(float x) {
  const float hi = kExpHi, lo = kExpLo;
  // NaN is clamped too (to lo: x >= lo is false), so that the integer conversion below is always
  // defined; it is given back as NaN at the end.
  const float xc = x > hi ? hi : (x >= lo ? x : lo);
  // Round to nearest by the 1.5 * 2^23 trick: no call to a rounding function.
  const float shifter = 12582912.0f;
  const float t = xc * kLog2e + shifter;
  const float n = t - shifter;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = p * r + kExpPoly[i];
  const float y = p * r * r + r + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  const float scale = std::bit_cast<float>(e << 23);
  const float v = y * scale;
  return x < lo ? 0.0f : (x > hi ? __builtin_inff() : (x == x ? v : x));
}

/// erf(x) = sign(x) (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^{-x^2}),  t = 1 / (1 + p|x|);
/// emx2 is e^{-x^2}, passed in so that GELU's backward, which needs it too, computes it once.
inline float erf_approx(float x, float emx2) {
  const float ax = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + kErfP * ax);
  float q = kErfPoly[0];
  for (int i = 1; i < 5; ++i) q = q * t + kErfPoly[i];
  const float v = 1.0f - q * t * emx2;
  return x < 0 ? -v : v;
}

// ---- row kernels (simd.cpp) -------------------------------------------------------------------

/// y = x Phi(x) = x / 2 (1 + erf(x / sqrt 2))   (exact GELU)
/// On a CPU with AVX-512F this and gelu_backward run gelu_avx512.cpp's kernels: the same formulas
/// with a reciprocal-and-Newton step for the division and vscalefps for 2^n, held to the same
/// bounds against double as the portable loop (tests/backends/test_simd.cpp; more accurate for
/// x < 0); GELU's share of a cifar10 inference profile went from 4.9% to 3.3% with them.
void gelu(const float* x, float* y, int64_t n);
/// dx = dy (Phi(x) + x phi(x)),  phi(x) = e^{-x^2/2} / sqrt(2 pi)
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);
/// The portable loops (compiled for AVX-512, AVX2 and the baseline) and the AVX-512 kernels;
/// gelu and gelu_backward choose. The AVX-512 ones exist on x86-64 with GCC or Clang only.
void gelu_portable(const float* x, float* y, int64_t n);
void gelu_backward_portable(const float* x, const float* dy, float* dx, int64_t n);
void gelu_avx512(const float* x, float* y, int64_t n);
void gelu_backward_avx512(const float* x, const float* dy, float* dx, int64_t n);
/// The other activations of a fused MLP (backend.h's Activation), portable loops only (each
/// compiled for AVX-512, AVX2 and the baseline):
///   gelu_tanh  y = x (1 + tanh u) / 2 = x sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)
///              (sigmoid's form needs no tanh and loses nothing to 1 + tanh u near -1)
///              dx = dy s (1 + 2 x u' (1 - s)),  s = sigmoid(2u),  u' = sqrt(2/pi) (1 + 3 0.044715
///              x^2)
///   relu       y = x > 0 ? x : 0                  dx = x > 0 ? dy : 0
///   silu       y = x sigmoid(x) = x / (1 + e^-x)   dx = dy s (1 + x (1 - s)),  s = sigmoid(x)
/// 1 - s is computed as e s (e = e^-z); x is clamped where the functions have saturated (the
/// tanh GELU's u beyond |x| = 20, SiLU's gradient below -80), so that nothing overflows.
void gelu_tanh(const float* x, float* y, int64_t n);
void gelu_tanh_backward(const float* x, const float* dy, float* dx, int64_t n);
void relu(const float* x, float* y, int64_t n);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n);
void silu(const float* x, float* y, int64_t n);
void silu_backward(const float* x, const float* dy, float* dx, int64_t n);
/// y = act(x) and dx = dy act'(x) by act: the kernels above, or gelu and gelu_backward (the own
/// GEMM's epilogue and CpuBackend::gemm_fused's rows). y may be x, dx may be dy.
void activation(Activation act, const float* x, float* y, int64_t n);
void activation_backward(Activation act, const float* x, const float* dy, float* dx, int64_t n);
/// y = softmax(scale x) row by row, over `rows` rows of n (scale > 0): e^{scale (x - max)} / sum.
/// y may be x (in place, as attention does with its scores).
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, float scale);
/// dx = y (dy - sum(dy y)) over one row of n.
void softmax_backward_row(const float* y, const float* dy, float* dx, int64_t n);
/// y = x - max - log(sum e^{x - max}) over one row of n (exp_shifted_row's sum, in double lanes).
void log_softmax_row(const float* x, float* y, int64_t n);
/// dx = dy - e^y sum(dy) over one row of n (y = log_softmax(x)).
void log_softmax_backward_row(const float* y, const float* dy, float* dx, int64_t n);
/// m = max(x), e_i = e^{x_i - m} over one row of n; returns sum_i e_i, summed in double lanes
/// (cross entropy's log-sum-exp over a 50257-word vocabulary). *max receives m.
double exp_shifted_row(const float* x, float* e, int64_t n, float* max);

/// One row of layer norm with weight and bias: mean, rstd = 1 / sqrt(var + eps) (biased var,
/// two passes), y = (x - mean) rstd w + b.
void layer_norm_row(const float* x, const float* w, const float* b, float eps, float* y,
                    float* mean, float* rstd, int64_t n);
/// One row of layer norm's backward with weight: xhat = (x - mean) rstd, g = dy w,
///   dx = rstd (g - mean(g) - xhat mean(g xhat));  pw += dy xhat, pb += dy  (the dw, db partials)
/// dx, pw, pb may be null (not wanted). The partials are float: the caller adds them into double
/// sums every few rows.
void layer_norm_backward_row(const float* x, const float* w, float mean, float rstd,
                             const float* dy, float* dx, float* pw, float* pb, int64_t n);

/// Per-channel sums of batch norm, over one row of n (simd lanes in float):
///   sum_row = sum x,  centered_sq_sum_row = sum (x - c)^2,  centered_dot_row = sum dy (x - c)
float sum_row(const float* x, int64_t n);
float centered_sq_sum_row(const float* x, float c, int64_t n);
float centered_dot_row(const float* x, const float* dy, float c, int64_t n);
/// y = x a + d, or with z: y = x a + z b + d  (batch norm's output and input gradient)
void affine_row(const float* x, float a, float d, float* y, int64_t n);
void affine2_row(const float* x, float a, const float* z, float b, float d, float* y, int64_t n);

/// One Adam/AdamW update of n elements (PyTorch's single-tensor rule, as CpuBackend::adam_step):
///   p *= decay (AdamW: 1 - lr wd; else 1), g += wd p (Adam with weight decay: wd != 0),
///   m = fma(g, 1 - b1, m b1),  v = fma((1 - b2) g, g, v b2),
///   p += neg_step_size m / (sqrt(v) / bc2_sqrt + eps)
/// IEEE division, square root and fma are exact-rounded in every lane, so the vector code
/// gives the scalar one's bits.
struct AdamRow {
  float decay, wd, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, neg_step_size, bc2_sqrt;
  bool decoupled, coupled_decay;
};
void adam_row(float* p, const float* g, float* m, float* v, const AdamRow& o, int64_t n);

}  // namespace vitrine::cpu::simd
