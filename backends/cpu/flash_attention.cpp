// CPU flash attention (FlashAttention-2, Dao 2023): softmax(scale q k^T) v without the N x N
// probabilities, forward and backward, the contract of backend.h's flash_attention. The same tile
// loops as backends/cuda/flash_attention.cu and tests/backends/flash_reference.h (read that one
// first), on the CPU's caches instead of shared memory:
//
//   qkv   [B, N, 3, H, Dh]  float32 or float64; q, k, v of (b, h) read in place (row stride 3 H Dh)
//   out   [B, N, H, Dh]     qkv's dtype;  dout, dqkv: the shapes of out and qkv
//   lse   [B, H, N]         qkv's dtype (ops/attention.cpp allocates float64 for float64 qkv, so
//                           that a gradcheck sees exact derivatives; float32 otherwise)
//
// Forward: one task per (image, head, query tile), in parallel on the thread pool.
//   Q tile [Br, Dh] (in place)   K^T tile [Dh, Bc] (packed)   V tile [Bc, Dh] (in place)
//   S [Br, Bc], O [Br, Dh] (the unnormalised output), per row m (running max of scale S) and l
//   for each key tile j (causal: only those with a key <= the tile's last query):
//     S = Q K_j^T,  m' = max(m, rowmax scale S),  P = exp(scale S - m') (0 past N and, causal,
//     past the diagonal),  l = exp(m - m') l + rowsum P,  O = exp(m - m') O + P V_j
//   out = O / l,  lse = m + log l
// Backward: one task per (image, head), so that every gradient has one writer and one order of
// summation (no races, results independent of the thread count), and dq needs no second pass:
//   D = rowsum(dout out)                                               [N]
//   for each key tile j:  K_j^T, V_j^T packed [Dh, Bc];  dK, dV [Bc, Dh] accumulators
//     for each query tile i (causal: from the one holding key j's first row):
//       S = Q_i K_j^T,  P = exp(scale S - lse_i),  dP = dO_i V_j^T,  dS = P (dP - D_i)
//       dV += P^T dO_i,  dK += dS^T Q_i,  dQ_i += dS K_j               (dQ: [N, Dh] per head)
//   dk = scale dK,  dv = dV,  dq = scale dQ
// Five tile products per (query tile, key tile) pair, against seven for FlashAttention-2's
// separate dq pass; the parallelism is B H tasks, plenty for a training batch.
//
// The products: C [M, n] (+)= A [M, K] B [K, n], A read element by element at any strides (Q or
// dO rows in place, P or dS, or their transposes), B row-major with unit column stride (V, Q, K or
// dO rows in place, or a packed K^T / V^T). On an x86-64 CPU with AVX2 and FMA, float32 products
// whose n is a multiple of 8 (head dims 8, 16, ..., 128; packed tiles are padded) run a 6 x 16
// register-blocked micro-kernel (12 accumulators of 8 floats; A broadcast, B loaded) and the
// exponentials a vector port of simd::exp_approx; elsewhere (float64, other CPUs, other head dims)
// plain loops that the compiler vectorises for the baseline. Both compute the same maths; the
// tests hold either to the materialised path (tests/ops/test_flash_attention_cpu.cpp).
//
// Where it runs: flash_attention.h (the switch VITRINE_CPU_FLASH_ATTENTION, and flash_wanted, the
// rule by which it declines the shapes where the materialised path is faster).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VT_FLASH_X86 1
#else
#define VT_FLASH_X86 0
#endif

#include "backends/cpu/flash_attention.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"  // gemm_policy
#include "backends/cpu/simd.h"
#include "backends/env_switch.h"

namespace vitrine::cpu {

namespace {

constexpr int64_t kBr = 64;  // query rows of a tile
constexpr int64_t kBc = 64;  // key rows of a tile

/// Where one (image b, head h) lives in qkv [B, N, 3, H, Dh] and out [B, N, H, Dh].
struct FlashHead {
  int64_t N, Dh, D, row;   // row: qkv's row stride 3 D
  int64_t qkv_off, o_off;  // q of (b, h) at qkv + qkv_off (k: + D, v: + 2 D); out at o_off
  int64_t lse_off;         // lse[b, h, :]
  FlashHead(int64_t N_, int64_t H, int64_t Dh_, int64_t bh) : N(N_), Dh(Dh_) {
    const int64_t b = bh / H, h = bh % H;
    D = H * Dh, row = 3 * D;
    qkv_off = b * N * row + h * Dh, o_off = b * N * D + h * Dh, lse_off = bh * N;
  }
};

// ---- the products ------------------------------------------------------------------------------

/// C[m][j] = (accumulate ? C[m][j] : 0) + sum_k A(m, k) B[k][j]  (m < M, j < n, k < K), with
/// A(m, k) = a[m am + k ak], B[k][j] = b[k ldb + j], C[m][j] = c[m ldc + j].
template <typename T>
void tile_gemm_plain(int64_t M, int64_t n, int64_t K, const T* a, int64_t am, int64_t ak,
                     const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    T* cr = c + m * ldc;
    if (!accumulate) std::fill_n(cr, n, T(0));
    for (int64_t k = 0; k < K; ++k) {
      const T av = a[m * am + k * ak];
      const T* br = b + k * ldb;
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
  }
}

#if VT_FLASH_X86
/// The micro-kernel: an MR x (8 NV) block of C in MR * NV registers, over the whole depth K.
template <int MR, int NV>
__attribute__((target("avx2,fma"))) inline void micro_avx2(int64_t K, const float* a, int64_t am,
                                                           int64_t ak, const float* b, int64_t ldb,
                                                           float* c, int64_t ldc, bool accumulate) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      acc[i][v] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8 * v) : _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + k * ldb + 8 * v);
    const float* ak_ptr = a + k * ak;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(ak_ptr + i * am);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

template <int NV>
__attribute__((target("avx2,fma"))) void micro_rows(int mr, int64_t K, const float* a, int64_t am,
                                                    int64_t ak, const float* b, int64_t ldb,
                                                    float* c, int64_t ldc, bool accumulate) {
  switch (mr) {
    case 6:
      return micro_avx2<6, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
    case 5:
      return micro_avx2<5, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
    case 4:
      return micro_avx2<4, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
    case 3:
      return micro_avx2<3, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
    case 2:
      return micro_avx2<2, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
    default:
      return micro_avx2<1, NV>(K, a, am, ak, b, ldb, c, ldc, accumulate);
  }
}

/// tile_gemm_plain's product for n a multiple of 8: column panels of 16 (then one of 8), each
/// down the rows in blocks of 6, so that the panel of B [K, 16] stays in L1.
__attribute__((target("avx2,fma"))) void tile_gemm_avx2(int64_t M, int64_t n, int64_t K,
                                                        const float* a, int64_t am, int64_t ak,
                                                        const float* b, int64_t ldb, float* c,
                                                        int64_t ldc, bool accumulate) {
  for (int64_t j = 0; j < n; j += 16) {
    const bool wide = n - j >= 16;
    for (int64_t m = 0; m < M; m += 6) {
      const int mr = static_cast<int>(std::min<int64_t>(6, M - m));
      if (wide)
        micro_rows<2>(mr, K, a + m * am, am, ak, b + j, ldb, c + m * ldc + j, ldc, accumulate);
      else
        micro_rows<1>(mr, K, a + m * am, am, ak, b + j, ldb, c + m * ldc + j, ldc, accumulate);
    }
  }
}

/// e^x for x <= 0 (and -inf): simd::exp_approx's formula, 8 lanes at a time.
__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  const __m256 xc =
      _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(simd::kExpLo)), _mm256_set1_ps(simd::kExpHi));
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(simd::kLog2e), shifter);
  const __m256 nn = _mm256_sub_ps(t, shifter);
  __m256 r = _mm256_fnmadd_ps(nn, _mm256_set1_ps(simd::kLn2Hi), xc);
  r = _mm256_fnmadd_ps(nn, _mm256_set1_ps(simd::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(simd::kExpPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(simd::kExpPoly[i]));
  const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nn), _mm256_set1_epi32(127)), 23);
  const __m256 v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(simd::kExpLo), _CMP_LT_OQ);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm256_blendv_ps(v, _mm256_setzero_ps(), under), x, nan);
}

/// p[j] = e^{scale s[j] - m} for j < n (p may be s); returns sum_j p[j].
__attribute__((target("avx2,fma"))) float exp_row_avx2(const float* s, float* p, int64_t n,
                                                       float scale, float m) {
  const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_avx2(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), vs, vm));
    _mm256_storeu_ps(p + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float x : lanes) total += x;
  for (; j < n; ++j) total += p[j] = simd::exp_approx(scale * s[j] - m);
  return total;
}

/// max_j s[j] over j < n (n >= 1).
__attribute__((target("avx2,fma"))) float row_max_avx2(const float* s, int64_t n) {
  int64_t j = 0;
  float mx = s[0];
  if (n >= 8) {
    __m256 v = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (float x : lanes) mx = std::max(mx, x);
  }
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  return mx;
}

/// The backward's row: p[j] = e^{scale s[j] - lse}, ds[j] = p[j] (dp[j] - d) for j < n (in place
/// allowed: p may be s, ds may be dp).
__attribute__((target("avx2,fma"))) void prob_grad_row_avx2(const float* s, const float* dp,
                                                            float* p, float* ds, int64_t n,
                                                            float scale, float lse, float d) {
  const __m256 vs = _mm256_set1_ps(scale), vl = _mm256_set1_ps(lse), vd = _mm256_set1_ps(d);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_avx2(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), vs, vl));
    _mm256_storeu_ps(p + j, e);
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(e, _mm256_sub_ps(_mm256_loadu_ps(dp + j), vd)));
  }
  for (; j < n; ++j) {
    const float e = simd::exp_approx(scale * s[j] - lse);
    p[j] = e;
    ds[j] = e * (dp[j] - d);
  }
}
#endif

/// The kernels' choice of products and row functions for T, made once per call.
template <typename T>
struct Kernels {
  bool fast = false;  // float32 on AVX2 + FMA, with a head dim that is a multiple of 8

  explicit Kernels(int64_t Dh) {
#if VT_FLASH_X86
    if constexpr (std::is_same_v<T, float>) {
      static const bool avx2 = cpu_has_avx2_fma();
      fast = avx2 && Dh % 8 == 0;
    }
#endif
    (void)Dh;
  }

  void gemm(int64_t M, int64_t n, int64_t K, const T* a, int64_t am, int64_t ak, const T* b,
            int64_t ldb, T* c, int64_t ldc, bool accumulate) const {
#if VT_FLASH_X86
    if constexpr (std::is_same_v<T, float>)
      if (fast) return tile_gemm_avx2(M, n, K, a, am, ak, b, ldb, c, ldc, accumulate);
#endif
    tile_gemm_plain(M, n, K, a, am, ak, b, ldb, c, ldc, accumulate);
  }

  /// max_j scale s[j] over j < n (n >= 1).
  T scaled_max(const T* s, int64_t n, T scale) const {
#if VT_FLASH_X86
    if constexpr (std::is_same_v<T, float>)
      if (fast && scale >= 0) return scale * row_max_avx2(s, n);
#endif
    T mx = scale * s[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, scale * s[j]);
    return mx;
  }

  T exp_row(const T* s, T* p, int64_t n, T scale, T m) const {
#if VT_FLASH_X86
    if constexpr (std::is_same_v<T, float>)
      if (fast) return exp_row_avx2(s, p, n, scale, m);
#endif
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += p[j] = std::exp(scale * s[j] - m);
    return sum;
  }

  void prob_grad_row(const T* s, const T* dp, T* p, T* ds, int64_t n, T scale, T lse, T d) const {
#if VT_FLASH_X86
    if constexpr (std::is_same_v<T, float>)
      if (fast) return prob_grad_row_avx2(s, dp, p, ds, n, scale, lse, d);
#endif
    for (int64_t j = 0; j < n; ++j) {
      const T e = std::exp(scale * s[j] - lse);
      p[j] = e;
      ds[j] = e * (dp[j] - d);
    }
  }
};

/// Columns of a packed tile: n rounded up to 8 (the padding is zeros).
int64_t padded(int64_t n) { return (n + 7) / 8 * 8; }

/// dst [Dh, ldd] = the transpose of rows [n, Dh] at src (row stride ld); columns n..ldd zero.
template <typename T>
void pack_transposed(const T* src, int64_t ld, int64_t n, int64_t Dh, T* dst, int64_t ldd) {
  for (int64_t d = 0; d < Dh; ++d) std::fill(dst + d * ldd + n, dst + (d + 1) * ldd, T(0));
  for (int64_t j = 0; j < n; ++j) {
    const T* s = src + j * ld;
    for (int64_t d = 0; d < Dh; ++d) dst[d * ldd + j] = s[d];
  }
}

/// Keys of a tile starting at k0 (nc of them) that query i sees: all, or (causal) those <= i.
int64_t visible_keys(int64_t i, int64_t k0, int64_t nc, bool causal) {
  return causal ? std::clamp<int64_t>(i - k0 + 1, 0, nc) : nc;
}

/// The calling thread's scratch of n elements of T (slot: which of a kernel's buffers).
template <typename T, int slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// One task of the forward: query tile qt of head bh.
template <typename T>
void forward_tile(const Kernels<T>& kern, const FlashHead& hd, int64_t q0, const T* qkv, T scale,
                  bool causal, T* out, T* lse) {
  const int64_t N = hd.N, Dh = hd.Dh, nr = std::min(kBr, N - q0);
  T* kt = scratch<T, 0>(Dh * kBc);  // K_j^T [Dh, ncp]
  T* S = scratch<T, 1>(kBr * kBc);  // S, then P [nr, ncp]
  T* O = scratch<T, 2>(kBr * Dh);   // [nr, Dh]
  T* m = scratch<T, 3>(2 * kBr);    // running max of scale S, then l
  T* l = m + kBr;
  const T inf = std::numeric_limits<T>::infinity();
  std::fill_n(m, nr, -inf);
  std::fill_n(l, nr, T(0));
  std::fill_n(O, nr * Dh, T(0));
  const T* q = qkv + hd.qkv_off + q0 * hd.row;
  const int64_t last_query = q0 + nr - 1;
  const int64_t tiles = causal ? last_query / kBc + 1 : (N + kBc - 1) / kBc;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t k0 = t * kBc, nc = std::min(kBc, N - k0), ncp = padded(nc);
    const T* k = qkv + hd.qkv_off + hd.D + k0 * hd.row;
    const T* v = k + hd.D;
    pack_transposed(k, hd.row, nc, Dh, kt, ncp);
    kern.gemm(nr, ncp, Dh, q, hd.row, 1, kt, ncp, S, ncp, false);  // S = Q K^T
    for (int64_t r = 0; r < nr; ++r) {
      T* s = S + r * ncp;
      const int64_t nv = visible_keys(q0 + r, k0, nc, causal);
      if (nv == 0) {  // none of this tile's keys: P = 0, nothing to rescale
        std::fill_n(s, nc, T(0));
        continue;
      }
      const T m_new = std::max(m[r], kern.scaled_max(s, nv, scale));
      const T alpha = m[r] == -inf ? T(0) : std::exp(m[r] - m_new);
      l[r] = alpha * l[r] + kern.exp_row(s, s, nv, scale, m_new);
      std::fill(s + nv, s + nc, T(0));
      m[r] = m_new;
      if (alpha != T(1)) {
        T* o = O + r * Dh;
        for (int64_t d = 0; d < Dh; ++d) o[d] *= alpha;
      }
    }
    kern.gemm(nr, Dh, nc, S, ncp, 1, v, hd.row, O, Dh, true);  // O += P V
  }
  for (int64_t r = 0; r < nr; ++r) {
    T* o = out + hd.o_off + (q0 + r) * hd.D;
    const T inv = T(1) / l[r];
    for (int64_t d = 0; d < Dh; ++d) o[d] = O[r * Dh + d] * inv;
    lse[hd.lse_off + q0 + r] = m[r] + std::log(l[r]);
  }
}

/// One task of the backward: head bh, every gradient of its q, k and v.
template <typename T>
void backward_head(const Kernels<T>& kern, const FlashHead& hd, const T* qkv, const T* out,
                   const T* dout, const T* lse_all, T scale, bool causal, T* dqkv) {
  const int64_t N = hd.N, Dh = hd.Dh, D = hd.D, row = hd.row;
  T* kt = scratch<T, 0>(2 * Dh * kBc);  // K_j^T, V_j^T [Dh, ncp]
  T* vt = kt + Dh * kBc;
  T* S = scratch<T, 1>(2 * kBr * kBc);  // S then P, dP then dS [nr, ncp]
  T* dS = S + kBr * kBc;
  T* acc = scratch<T, 2>(2 * kBc * Dh);  // dK, dV [nc, Dh]
  T* dK = acc;
  T* dV = acc + kBc * Dh;
  T* dQ = scratch<T, 4>(N * Dh + N);  // dQ [N, Dh], then D [N]
  T* Dvec = dQ + N * Dh;
  const T* q_all = qkv + hd.qkv_off;
  const T* dy_all = dout + hd.o_off;
  const T* lse = lse_all + hd.lse_off;
  for (int64_t i = 0; i < N; ++i) {
    const T *o = out + hd.o_off + i * D, *dy = dy_all + i * D;
    T sum = 0;
    for (int64_t d = 0; d < Dh; ++d) sum += dy[d] * o[d];
    Dvec[i] = sum;
  }
  std::fill_n(dQ, N * Dh, T(0));
  for (int64_t k0 = 0; k0 < N; k0 += kBc) {
    const int64_t nc = std::min(kBc, N - k0), ncp = padded(nc);
    const T* k = q_all + D + k0 * row;
    const T* v = k + D;
    pack_transposed(k, row, nc, Dh, kt, ncp);
    pack_transposed(v, row, nc, Dh, vt, ncp);
    std::fill_n(acc, 2 * kBc * Dh, T(0));
    const int64_t first = causal ? k0 / kBr * kBr : 0;  // earlier queries see none of these keys
    for (int64_t q0 = first; q0 < N; q0 += kBr) {
      const int64_t nr = std::min(kBr, N - q0);
      const T* q = q_all + q0 * row;
      const T* dy = dy_all + q0 * D;
      kern.gemm(nr, ncp, Dh, q, row, 1, kt, ncp, S, ncp, false);  // S = Q_i K_j^T
      kern.gemm(nr, ncp, Dh, dy, D, 1, vt, ncp, dS, ncp, false);  // dP = dO_i V_j^T
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = q0 + r, nv = visible_keys(i, k0, nc, causal);
        T *p = S + r * ncp, *ds = dS + r * ncp;
        kern.prob_grad_row(p, ds, p, ds, nv, scale, lse[i], Dvec[i]);
        std::fill(p + nv, p + nc, T(0));
        std::fill(ds + nv, ds + nc, T(0));
      }
      kern.gemm(nc, Dh, nr, S, 1, ncp, dy, D, dV, Dh, true);              // dV += P^T dO_i
      kern.gemm(nc, Dh, nr, dS, 1, ncp, q, row, dK, Dh, true);            // dK += dS^T Q_i
      kern.gemm(nr, Dh, nc, dS, ncp, 1, k, row, dQ + q0 * Dh, Dh, true);  // dQ_i += dS K_j
    }
    T* dk = dqkv + hd.qkv_off + D + k0 * row;
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t d = 0; d < Dh; ++d) {
        dk[c * row + d] = scale * dK[c * Dh + d];
        dk[c * row + D + d] = dV[c * Dh + d];
      }
  }
  T* dq = dqkv + hd.qkv_off;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < Dh; ++d) dq[i * row + d] = scale * dQ[i * Dh + d];
}

// qkv: [B, N, 3, H, Dh]; out: [B, N, H, Dh]; lse: [B, H, N] (qkv's dtype)
bool flash_forward(const Strided& qkv, double scale, bool causal, const Strided& out,
                   const Strided& lse) {
  if (qkv.dtype != DType::Float32 && qkv.dtype != DType::Float64) return false;
  if (lse.dtype != qkv.dtype || out.dtype != qkv.dtype) return false;
  VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
  const int64_t B = qkv.shape[0], N = qkv.shape[1], H = qkv.shape[3], Dh = qkv.shape[4];
  VT_ASSERT(out.is_contiguous() && lse.is_contiguous() && out.numel() == B * N * H * Dh &&
            lse.numel() == B * H * N);
  const FlashMode mode = flash_mode();
  if (mode == FlashMode::Off || (mode == FlashMode::Auto && !flash_wanted(N, Dh, causal)))
    return false;
  if (B * H * N == 0 || Dh == 0) return true;
  const int64_t qtiles = (N + kBr - 1) / kBr;
  dispatch_float(qkv.dtype, "flash_attention", [&]<typename T>() {
    const Kernels<T> kern(Dh);
    const T* x = qkv.ptr<T>();
    T *o = out.ptr<T>(), *l = lse.ptr<T>();
    parallel_for(B * H * qtiles, 4 * kBr * N * Dh, [&](int64_t task) {
      const FlashHead hd(N, H, Dh, task / qtiles);
      forward_tile(kern, hd, task % qtiles * kBr, x, static_cast<T>(scale), causal, o, l);
    });
  });
  return true;
}

// dout: [B, N, H, Dh]; dqkv: [B, N, 3, H, Dh], every element written
bool flash_backward(const Strided& qkv, const Strided& out, const Strided& dout, const Strided& lse,
                    double scale, bool causal, const Strided& dqkv) {
  if (qkv.dtype != DType::Float32 && qkv.dtype != DType::Float64) return false;
  if (lse.dtype != qkv.dtype || out.dtype != qkv.dtype || dout.dtype != qkv.dtype ||
      dqkv.dtype != qkv.dtype)
    return false;
  VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
  const int64_t B = qkv.shape[0], N = qkv.shape[1], H = qkv.shape[3], Dh = qkv.shape[4];
  VT_ASSERT(out.is_contiguous() && dout.is_contiguous() && lse.is_contiguous() &&
            dqkv.is_contiguous() && out.numel() == B * N * H * Dh && dout.numel() == out.numel() &&
            lse.numel() == B * H * N && dqkv.numel() == qkv.numel());
  if (B * H * N == 0 || Dh == 0) return true;
  dispatch_float(qkv.dtype, "flash_attention_backward", [&]<typename T>() {
    const Kernels<T> kern(Dh);
    parallel_for(B * H, 10 * N * N * Dh, [&](int64_t bh) {
      const FlashHead hd(N, H, Dh, bh);
      backward_head(kern, hd, qkv.ptr<T>(), out.ptr<T>(), dout.ptr<T>(), lse.ptr<T>(),
                    static_cast<T>(scale), causal, dqkv.ptr<T>());
    });
  });
  return true;
}

}  // namespace

namespace {
/// The mode, as FlashMode's value; -1 until first read.
std::atomic<int> g_mode{-1};

FlashMode mode_from_env() {
  const std::string_view s = env_value("VITRINE_CPU_FLASH_ATTENTION", "auto");
  VT_CHECK(s == "0" || s == "1" || s == "auto",
           "VITRINE_CPU_FLASH_ATTENTION: expected 0 (off), 1 (on) or auto, got '{}'", s);
  return s == "0" ? FlashMode::Off : s == "1" ? FlashMode::On : FlashMode::Auto;
}
}  // namespace

FlashMode flash_mode() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m < 0) {
    static const FlashMode from_env = mode_from_env();
    m = static_cast<int>(from_env);
    int expected = -1;
    if (!g_mode.compare_exchange_strong(expected, m)) m = expected;
  }
  return static_cast<FlashMode>(m);
}

void set_flash_mode(FlashMode mode) { g_mode.store(static_cast<int>(mode)); }

bool flash_wanted(int64_t N, int64_t Dh, bool causal) {
  // Measured on an AMD EPYC (Zen 1: AVX2, no AVX-512), float32, forward + backward, one thread's
  // CPU time, B 4, 6 heads of 64 unless said (bench/flash_attention.cpp; docs/performance.md,
  // "Flash attention on the CPU"):
  //   causal (against sdpa's composition with its T x T tensors): flash at every T, 8 to 1024
  //     (T=64: 4.7 against 5.5 ms; T=256: 40 against 128; T=1024, B 1: 119 against 270)
  //   full (against backends/cpu/attention.cpp): the materialised kernel at a ViT's token counts
  //     (cifar10 N=65: 17.3 against 19.0 ms; ViT-S/16 N=197: 30.9 against 35.9; fmnist N=50
  //     within the noise), its backward being a product shorter; flash from about 200 tokens
  //     (N=224: 43 against 63; N=256: 55 against 111), where the N x N tensors leave the caches.
  // The materialised kernel was measured on OpenBLAS; where Vitrine's own AVX-512 GEMM runs it
  // (gemm_policy() not Off) it is faster, and full attention stays materialised there. Without
  // the AVX2 kernels (another CPU, or a head dim that is not a multiple of 8) the portable loops
  // are there to be correct, not fast: the materialised paths run.
  if (!Kernels<float>(Dh).fast) return false;
  return causal || (N >= 200 && gemm_policy() == GemmPolicy::Off);
}

bool CpuBackend::flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                                 const Strided& lse) {
  return flash_forward(qkv, scale, causal, out, lse);
}

bool CpuBackend::flash_attention_backward(const Strided& qkv, const Strided& out,
                                          const Strided& dout, const Strided& lse, double scale,
                                          bool causal, const Strided& dqkv) {
  return flash_backward(qkv, out, dout, lse, scale, causal, dqkv);
}

}  // namespace vitrine::cpu
