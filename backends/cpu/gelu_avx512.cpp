// GELU and its gradient written for AVX-512 by hand: simd::gelu and simd::gelu_backward call
// these on a CPU with AVX-512F (every product's fc1 epilogue in the own GEMM, and the gelu op).
// The formulas and their constants are simd.h's (Abramowitz & Stegun 7.1.26 for erf, Cephes'
// polynomial for exp);
// what the compiler could not do from the portable loop is done by hand:
//   1 / (1 + p|z|)   an approximate reciprocal (14 bits) and one Newton step (about 1 ulp)
//                    instead of a division
//   2^n              vscalefps instead of building the exponent's bits; n rounded by
//                    vrndscaleps
//   e^w, w = -z^2    w <= 0 always, so one clamp and one mask: 0 below -87.3, as exp_approx
// 16 floats per step; the tail is masked.
#include <cstdint>

#include "backends/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace vitrine::cpu::simd {

namespace {

#define VT_AVX512 __attribute__((target("avx512f"), always_inline)) inline

// All lanes, for the maskz forms: the unmasked intrinsics start from _mm512_undefined_ps, which
// GCC 12 reports as maybe uninitialised.
constexpr __mmask16 kAll = 0xFFFF;

/// e^w for w <= 0: 0 below -87.3 (where e^w leaves the normal floats); NaN gives e^-87.3 (the
/// callers multiply by x, which is NaN then).
VT_AVX512 __m512 exp_nonpositive(__m512 w) {
  const __m512 lo = _mm512_set1_ps(kExpLo);
  const __mmask16 normal = _mm512_cmp_ps_mask(w, lo, _CMP_GE_OQ);
  w = _mm512_maskz_max_ps(kAll, w, lo);
  const __m512 n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(w, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), w);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1));
  return _mm512_maskz_scalef_ps(normal, y, n);
}

/// Phi(x) = (1 + erf(x / sqrt 2)) / 2 and e = e^{-x^2/2} (for phi(x) = e / sqrt(2 pi)).
VT_AVX512 __m512 cdf(__m512 x, __m512* e) {
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752440f));
  *e = exp_nonpositive(_mm512_mul_ps(_mm512_mul_ps(z, z), _mm512_set1_ps(-1)));
  // |z| clamped at 10 (where erf is 1 in float) keeps t finite for z = +-inf.
  const __m512 az = _mm512_maskz_min_ps(kAll, _mm512_abs_ps(z), _mm512_set1_ps(10));
  const __m512 d = _mm512_fmadd_ps(az, _mm512_set1_ps(kErfP), _mm512_set1_ps(1));
  __m512 t = _mm512_maskz_rcp14_ps(kAll, d);
  t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2)));  // t (2 - d t)
  __m512 q = _mm512_set1_ps(kErfPoly[0]);
  for (int i = 1; i < 5; ++i) q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kErfPoly[i]));
  // 1 - erf(|z|) = q t e, so Phi = 1 - q t e / 2 for z >= 0 and q t e / 2 for z < 0.
  const __m512 tail = _mm512_mul_ps(_mm512_mul_ps(q, t), _mm512_mul_ps(*e, _mm512_set1_ps(0.5f)));
  const __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(_mm512_sub_ps(_mm512_set1_ps(1), tail), neg, tail);
}

VT_AVX512 __mmask16 first(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
}

}  // namespace

__attribute__((target("avx512f"))) void gelu_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 e;
    const __m512 p = cdf(v, &e);  // x Phi(x): NaN and +-inf as the portable kernel gives them
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, p));
  }
}

__attribute__((target("avx512f"))) void gelu_backward_avx512(const float* x, const float* dy,
                                                             float* dx, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512 e;
    const __m512 p = cdf(v, &e);
    // gelu'(x) = Phi(x) + x phi(x)
    const __m512 g =
        _mm512_fmadd_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.39894228040143267794f)), e, p);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

}  // namespace vitrine::cpu::simd

#endif
