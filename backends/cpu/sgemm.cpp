// Vitrine's own float32 GEMM (see sgemm.h). The loop nest, from the outside in:
//
//   B row-major: read in place                     B[k][n] = b[k * ldb + n]
//   B transposed (a weight): packed once           Bp[p][k][0..31], panels of 32 columns
//   runs of C's units (12-row strip x 32-column   equal numbers of units, strip by strip; a run
//   panel), taken by threads as they come free    may start or end inside a strip
//   (thread_pool.h)
//     for each depth slice k0 .. k0+kc (kc <= 256)
//       for each block of up to 512 columns        B[k0..k0+kc, block]: at most 512 KiB, in L2
//         for each 12-row strip of A               A[i..i+12, k0..k0+kc]: 12 KiB, stays in L1
//           for each of the run's panels p         (the first prefetches the next strip of A)
//             micro-kernel: C[i..i+12, 32p..32p+32] (+)= A strip x panel, 24 zmm accumulators
//           on the last depth slice: GELU (or its gradient) on those columns, in cache
//
// Each step of the micro-kernel's k loop loads two 16-float vectors of B and broadcasts 12
// floats of A (one per row of the strip; A may be stored transposed, as dy^T in dW = dy^T x,
// and then those 12 floats are contiguous), for 24 fused multiply-adds. Every element of C is a
// plain sequential sum over k in float32, as OpenBLAS's is, computed by one thread whatever the
// thread count or the schedule; only the grouping into depth slices differs.
#include "backends/cpu/sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <utility>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/thread_pool.h"
#include "backends/env_switch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VT_HAVE_OWN_SGEMM 1
#endif

namespace vitrine::cpu {

bool openblas_kernels_current(std::string_view core, bool avx512) {
  // (bench/compare.py's openblas_current is the same rule, for PyTorch's side.)
  const auto is = [core](std::string_view known) {
    return core.size() == known.size() &&
           std::equal(core.begin(), core.end(), known.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == y;
           });
  };
  for (std::string_view set : {"skylakex", "cooperlake", "sapphirerapids"})
    if (is(set)) return true;
  // The AVX2 sets are current only where there is nothing wider to run.
  return !avx512 && (is("haswell") || is("zen"));
}

GemmPolicy gemm_policy_for(std::string_view env, bool avx512, std::string_view openblas_core) {
  if (env == "openblas" || !avx512) return GemmPolicy::Off;
  if (env == "own") return GemmPolicy::All;
  return openblas_kernels_current(openblas_core, avx512) ? GemmPolicy::SmallWeights
                                                         : GemmPolicy::All;
}

#ifdef VT_HAVE_OWN_SGEMM
namespace {

constexpr int kMR = 12;       // rows of a C tile
constexpr int kNR = 32;       // columns of a C tile: two 16-float vectors
constexpr int64_t kKC = 256;  // depth of one pass: a 12 x 256 strip of A is 12 KiB
constexpr int64_t kNC = 512;  // columns of one block: a 256 x 512 block of B is 512 KiB
constexpr int64_t kMaxWeight = int64_t{1} << 20;  // floats (4 MiB): the largest weight taken

/// The calling thread's packing buffer, grown as needed and kept (a training step asks for the
/// same sizes every time, so after the first step nothing is allocated).
float* pack_buffer(size_t floats) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> buf;
  thread_local size_t cap = 0;
  if (floats > cap) {
    buf.reset(static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)));
    cap = buf ? floats : 0;
  }
  return buf.get();
}

// The all-lanes masks of the maskz forms below: the unmasked intrinsics start from
// _mm512_undefined_ps, which GCC 12 reports as maybe uninitialised.
constexpr __mmask16 kAll16 = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

/// dst[k * 32 + j] = src[j * lds + k] for j < rows, k < kr (both at most 16), and 0 for
/// rows <= j < 16: one 16 x 16 block of a transposed weight, transposed in registers. Rows of
/// src are loaded (masked to kr floats), interleaved in pairs (unpack ps), in fours (unpack pd),
/// then their 128-bit lanes are gathered (shuffle f32x4) so that vector c holds column c.
__attribute__((target("avx512f"))) void pack_block16(const float* src, int64_t lds, int rows,
                                                     int kr, float* dst) {
  const __mmask16 km = first_lanes(kr);
  __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * lds) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // per lane: t[i] = a0 b0 a1 b1, t[i+1] = a2 b2 a3 b3
    t[i] = _mm512_maskz_unpacklo_ps(kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll16, r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {  // u[g + c], lane L: column 4 L + c of rows g .. g+3
    const __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]),
                  t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, t0, t2));
    u[g + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, t0, t2));
    u[g + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, t1, t3));
    u[g + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    // 0x88 takes lanes 0 and 2 of each operand, 0xDD lanes 1 and 3.
    const __m512 v0 = _mm512_maskz_shuffle_f32x4(kAll16, u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_maskz_shuffle_f32x4(kAll16, u[8 + c], u[12 + c], 0x88);
    const __m512 w0 = _mm512_maskz_shuffle_f32x4(kAll16, u[c], u[4 + c], 0xDD);
    const __m512 w1 = _mm512_maskz_shuffle_f32x4(kAll16, u[8 + c], u[12 + c], 0xDD);
    const __m512 col[4] = {_mm512_maskz_shuffle_f32x4(kAll16, v0, v1, 0x88),
                           _mm512_maskz_shuffle_f32x4(kAll16, w0, w1, 0x88),
                           _mm512_maskz_shuffle_f32x4(kAll16, v0, v1, 0xDD),
                           _mm512_maskz_shuffle_f32x4(kAll16, w0, w1, 0xDD)};
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l)
      if (4 * l + c < kr) _mm512_storeu_ps(dst + (4 * l + c) * kNR, col[l]);
  }
}

/// Packs panel p of a transposed B (B[k][n] = b[n * ldb + k]; columns 32p .. 32p+31, zero past
/// N): bp[p][k][j] = B[k][32p + j], in 16 x 16 blocks transposed in registers.
void pack_panel(int64_t p, int64_t N, int64_t K, const float* b, int64_t ldb, float* bp) {
  const int64_t n0 = p * kNR, cols = std::min<int64_t>(kNR, N - n0);
  float* dst = bp + p * K * kNR;
  for (int64_t j0 = 0; j0 < kNR; j0 += 16) {
    const int rows = static_cast<int>(std::clamp<int64_t>(cols - j0, 0, 16));
    const float* src = rows > 0 ? b + (n0 + j0) * ldb : b;  // (not read when rows = 0)
    for (int64_t k0 = 0; k0 < K; k0 += 16)
      pack_block16(src + k0, ldb, rows, static_cast<int>(std::min<int64_t>(16, K - k0)),
                   dst + k0 * kNR + j0);
  }
}

/// Where B's panels are: element B[k0 + k][32p + j] of the current slice is
/// at[p * panel + k * row + j].
/// With a row table (rows non-null), row k0 + k of the slice is at at + p * panel + rows[k0 + k].
struct PanelView {
  const float* at;
  int64_t panel, row;
  const int64_t* rows = nullptr;
};

/// C tile [MR, 32] (+)= A[MR, kc] B[kc, 32].
///   a: A[i][k0], the strip's first element (A[r][k] = a[r * lda + k], or a[k * lda + r] when
///      ATrans); b: B[k0][32p], row stride ldbk; Masked: load only B's existing columns (B read
///      in place, last panel), else all 32 (packed panels are zero past N).
///   c_in: the tile's starting values (C itself on later depth slices, a residual or, when
///      accumulating, C on the first), row stride ld_in; null: zero. bias (may be null): added
///      to every row (bias[0..31]).
///   m0/m1: which of the tile's 32 columns exist in C.
///   next: the next strip's A[i + MR][k0] (row-major A only), or null; its first next_rows rows
///      are prefetched into L1 over the k loop, one cache line per step, so that the next strip's
///      first panel finds them there (A is read in place, not packed, and its rows stream in from
///      L3 or memory otherwise).
/// With a row-major A the tile of C is prefetched first: it is stored at the end, and there C is
/// large and written for the first time (activations), not in cache. A weight gradient's C (with
/// a transposed A) is small and stays in L2; prefetching it there measured slower.
///   rows (Rows only): B's row k is at b + rows[k] instead of b + k ldbk (an implicit-GEMM
///      convolution's B: row (c, i, j) is the padded input shifted by tap (i, j)).
template <int MR, bool ATrans, bool Masked, bool Rows = false>
__attribute__((target("avx512f"))) void micro_kernel(int64_t kc, const float* a, int64_t lda,
                                                     const float* b, int64_t ldbk, float* c,
                                                     int64_t ldc, const float* c_in, int64_t ld_in,
                                                     const float* bias, __mmask16 m0, __mmask16 m1,
                                                     const float* next, int next_rows,
                                                     const int64_t* rows) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    acc0[i] = acc1[i] = _mm512_setzero_ps();
    if constexpr (!ATrans) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
    }
  }
  // The next strip's line to prefetch: row r, columns col .. col + 15.
  int r = 0;
  int64_t col = next != nullptr ? 0 : kc;
  for (int64_t k = 0; k < kc; ++k) {
    if (col < kc) {
      _mm_prefetch(reinterpret_cast<const char*>(next + r * lda + col), _MM_HINT_T0);
      if (++r == next_rows) r = 0, col += 16;
    }
    const float* bk = Rows ? b + rows[k] : b + k * ldbk;
    const __m512 b0 = Masked ? _mm512_maskz_loadu_ps(m0, bk) : _mm512_loadu_ps(bk);
    const __m512 b1 = Masked ? _mm512_maskz_loadu_ps(m1, bk + 16) : _mm512_loadu_ps(bk + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(ATrans ? a[k * lda + i] : a[i * lda + k]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (c_in) {
      const float* in = c_in + i * ld_in;
      acc0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, in), acc0[i]);
      acc1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, in + 16), acc1[i]);
    }
    if (bias) {
      acc0[i] = _mm512_add_ps(bias0, acc0[i]);
      acc1[i] = _mm512_add_ps(bias1, acc1[i]);
    }
    _mm512_mask_storeu_ps(ci, m0, acc0[i]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc1[i]);
  }
}

/// sums[r] += sum_k A[r][k] for the mr (<= 16) rows of a strip of a transposed A (A[r][k] =
/// a[k * lda + r]: the strip's values of column k are contiguous), over kc columns: a linear
/// layer's bias gradient, summed while the strip is in L1 for the product.
__attribute__((target("avx512f"))) void add_row_sums(int64_t kc, const float* a, int64_t lda,
                                                     int mr, float* sums) {
  const __mmask16 rows = first_lanes(mr);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 1 < kc; k += 2) {  // two chains, so that the adds' latencies overlap
    s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(rows, a + k * lda));
    s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(rows, a + (k + 1) * lda));
  }
  if (k < kc) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(rows, a + k * lda));
  _mm512_mask_storeu_ps(sums, rows,
                        _mm512_add_ps(_mm512_maskz_loadu_ps(rows, sums), _mm512_add_ps(s0, s1)));
}

using Kernel = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                        const float*, int64_t, const float*, __mmask16, __mmask16, const float*,
                        int, const int64_t*);

template <bool ATrans, bool Masked, bool Rows, int... R>
constexpr std::array<Kernel, sizeof...(R)> kernel_row(std::integer_sequence<int, R...>) {
  return {&micro_kernel<R + 1, ATrans, Masked, Rows>...};
}
template <bool ATrans, bool Masked, bool Rows = false>
constexpr auto kernel_row() {
  return kernel_row<ATrans, Masked, Rows>(std::make_integer_sequence<int, kMR>{});
}
// kKernels[a_trans][masked][r - 1] handles a strip of r rows (a thread's last strip may be
// short); kRowKernels[masked][r - 1] the same with B's rows from a table (row-major A).
constexpr std::array<std::array<std::array<Kernel, kMR>, 2>, 2> kKernels = {
    {{kernel_row<false, false>(), kernel_row<false, true>()},
     {kernel_row<true, false>(), kernel_row<true, true>()}}};
constexpr std::array<std::array<Kernel, kMR>, 2> kRowKernels = {
    {kernel_row<false, false, true>(), kernel_row<false, true, true>()}};

/// The epilogue's activation steps (ep.act) on rows [i, i + mr), columns [n0, n1) of C, once
/// they are final.
void gelu_epilogue(const SgemmEpilogue& ep, int64_t i, int mr, int64_t n0, int64_t n1, float* c,
                   int64_t ldc) {
  for (int64_t r = i; r < i + mr; ++r) {
    float* cr = c + r * ldc + n0;
    if (ep.gelu_out) simd::activation(ep.act, cr, ep.gelu_out + r * ep.ld_gelu + n0, n1 - n0);
    if (ep.gelu_pre)
      simd::activation_backward(ep.act, ep.gelu_pre + r * ep.ld_pre + n0, cr, cr, n1 - n0);
  }
}

/// The work on C in units of one strip of rows by one panel of columns, strip by strip: unit u
/// is strip u / panels (rows 12 s .. 12 s + 11), panel u % panels. Runs of equal numbers of
/// units balance the threads even where the strips do not divide among them (a weight gradient
/// of 128 rows has 11 strips): a run may start or end inside a strip, and then two runs compute
/// different columns of it.
///
/// Units [u0, u1) of C.
void run_units(int64_t u0, int64_t u1, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
               bool a_trans, const PanelView& bv, bool packed, float* c, int64_t ldc,
               bool accumulate, const SgemmEpilogue& ep) {
  const bool gelu = ep.gelu_out != nullptr || ep.gelu_pre != nullptr;
  const int64_t panels = (N + kNR - 1) / kNR;
  const int64_t s0 = u0 / panels, s1 = (u1 - 1) / panels + 1;  // the strips touched
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const bool first = k0 == 0, last = k0 + kc == K;
    // Where each tile starts: C on later slices; on the first, the residual, or C when
    // accumulating, or zero. The bias is added once, on the first slice.
    const float* in = first ? (ep.add ? ep.add : accumulate ? c : nullptr) : c;
    const int64_t ld_in = first && ep.add ? ep.ld_add : ldc;
    const float* bias = first ? ep.bias : nullptr;
    for (int64_t n0 = 0; n0 < N; n0 += kNC) {
      const int64_t n1 = std::min(N, n0 + kNC);
      for (int64_t s = s0; s < s1; ++s) {
        const int64_t i = s * kMR;
        const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i));
        // This run's panels of strip s in this block of columns.
        const int64_t p0 = std::max(n0 / kNR, u0 - s * panels);
        const int64_t p1 = std::min((n1 + kNR - 1) / kNR, u1 - s * panels);
        if (p0 >= p1) continue;
        const float* ai = a_trans ? a + k0 * lda + i : a + i * lda + k0;
        // The next strip of a row-major A is prefetched during this strip's first panel (a
        // transposed A's next strip shares its cache lines).
        const int next_rows =
            s + 1 < s1 ? static_cast<int>(std::min<int64_t>(kMR, M - i - kMR)) : 0;
        const float* next = !a_trans && next_rows > 0 ? ai + kMR * lda : nullptr;
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t cols = std::min<int64_t>(kNR, N - p * kNR);
          const bool masked = !packed && cols < kNR;
          const Kernel kernel =
              bv.rows ? kRowKernels[masked][mr - 1] : kKernels[a_trans][masked][mr - 1];
          kernel(kc, ai, lda, bv.at + p * bv.panel + (bv.rows ? 0 : k0 * bv.row), bv.row,
                 c + i * ldc + p * kNR, ldc, in ? in + i * ld_in + p * kNR : nullptr, ld_in,
                 bias ? bias + p * kNR : nullptr, first_lanes(cols), first_lanes(cols - 16),
                 p == p0 ? next : nullptr, next_rows, bv.rows ? bv.rows + k0 : nullptr);
        }
        // A's row sums, once per strip and depth slice (by the run with the strip's first
        // panel), while the strip is in L1.
        if (ep.a_row_sums != nullptr && p0 == 0) add_row_sums(kc, ai, lda, mr, ep.a_row_sums + i);
        if (gelu && last) gelu_epilogue(ep, i, mr, p0 * kNR, std::min(N, p1 * kNR), c, ldc);
      }
    }
  }
}

}  // namespace

GemmPolicy gemm_policy() {
  static const GemmPolicy policy = [] {
    return gemm_policy_for(env_value("VITRINE_GEMM"), cpu_has_avx512(), openblas_get_corename());
  }();
  return policy;
}

namespace {
bool sgemm_impl(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc, bool accumulate,
                const SgemmEpilogue& ep, int64_t min_rows, const int64_t* b_rows = nullptr,
                bool any_rows = false);
}  // namespace

bool own_sgemm_takes_any_rows(int64_t N, int64_t K) {
  const GemmPolicy policy = gemm_policy();
  return policy != GemmPolicy::Off && N >= 16 && K >= 8 &&
         (policy == GemmPolicy::All || N * K <= kMaxWeight);
}

bool own_sgemm_fixed_rows(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                          bool a_trans, const float* b, int64_t ldb, bool b_trans, float* c,
                          int64_t ldc, const SgemmEpilogue& ep) {
  if (!own_sgemm_takes_any_rows(N, K) || ep.a_row_sums != nullptr) return false;
  return sgemm_impl(M, N, K, a, lda, a_trans, b, ldb, b_trans, c, ldc, false, ep, 1, nullptr, true);
}

bool own_sgemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
               const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc, bool accumulate,
               const SgemmEpilogue& ep) {
  // Made for tall products: below a few strips per thread OpenBLAS does as well.
  return sgemm_impl(M, N, K, a, lda, a_trans, b, ldb, b_trans, c, ldc, accumulate, ep, 4 * kMR);
}

bool own_sgemm_in_chunk(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                        const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc,
                        bool accumulate) {
  return sgemm_impl(M, N, K, a, lda, a_trans, b, ldb, b_trans, c, ldc, accumulate, {}, 1);
}

bool own_sgemm_rows_in_chunk(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                             const float* b, const int64_t* b_rows, float* c, int64_t ldc,
                             bool accumulate) {
  return sgemm_impl(M, N, K, a, lda, false, b, 0, false, c, ldc, accumulate, {}, 1, b_rows);
}

namespace {
bool sgemm_impl(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc, bool accumulate,
                const SgemmEpilogue& ep, int64_t min_rows, const int64_t* b_rows, bool any_rows) {
  const GemmPolicy policy = gemm_policy();
  if (M < min_rows || N < 16 || K < 8 || policy == GemmPolicy::Off) return false;
  // (any_rows: own_sgemm_takes_any_rows has said yes, on the weight alone.)
  // Made for a weight against many tokens: the weight (N x K in the forward and dx, M x N in
  // dW) up to 2^20 floats, ViT-S/16's largest (1536 x 384) included, where its fused epilogues
  // made ViT-S/16 5% to 10% faster than OpenBLAS on a Zen 4. Square products of 2048 (the
  // benchmark's sgemm peak) stay on OpenBLAS, whose blocking and packing of A are made for them.
  // (Unless OpenBLAS runs fallback kernels here: then every product is taken.)
  if (policy == GemmPolicy::SmallWeights && !any_rows && std::min(N * K, M * N) > kMaxWeight)
    return false;
  if (ep.a_row_sums != nullptr && !a_trans) return false;  // (summed from a transposed A only)
  const int64_t panels = (N + kNR - 1) / kNR;
  PanelView bv{b, kNR, ldb, b_rows};  // row-major B, read in place (rows from b_rows if given)
  float* bp = nullptr;
  if (b_trans) {
    bp = pack_buffer(static_cast<size_t>(panels * K * kNR));
    if (bp == nullptr) return false;
    bv = {bp, K * kNR, kNR};
  }
  const int64_t strips = (M + kMR - 1) / kMR;
  if (ep.a_row_sums != nullptr) std::fill(ep.a_row_sums, ep.a_row_sums + M, 0.0f);
  // Large products run on the pool's threads (backends/cpu/thread_pool.h); one inside a
  // parallel loop (attention's per-head products) on its chunk's thread, as one run.
  const int threads = M * N * K >= (int64_t{1} << 20) && !in_parallel_chunk() ? pool_threads() : 1;
  if (b_trans)
    run_chunks_of(panels, 1, threads, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) pack_panel(p, N, K, b, ldb, bp);
    });  // (B is packed before any row reads it)
  // Runs of contiguous units (run_units), taken as threads come free: a thread the operating
  // system puts aside holds up no more than its current run. Up to kChunksPerThread runs per
  // thread, but at least 16 strips' worth each (each run streams the blocks of B once more), and
  // one per thread at least.
  const int64_t runs =
      std::min(strips, std::clamp<int64_t>(strips / 16, threads, threads * kChunksPerThread));
  const int64_t units = strips * panels;
  run_chunks_of(runs, 1, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t u0 = units * r / runs, u1 = units * (r + 1) / runs;
      if (u0 < u1)
        run_units(u0, u1, M, N, K, a, lda, a_trans, bv, b_trans, c, ldc,
                  accumulate && !ep.bias && !ep.add, ep);
    }
  });
  return true;
}
}  // namespace

#else

GemmPolicy gemm_policy() { return GemmPolicy::Off; }

bool own_sgemm(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*, int64_t, bool,
               float*, int64_t, bool, const SgemmEpilogue&) {
  return false;
}

bool own_sgemm_in_chunk(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*,
                        int64_t, bool, float*, int64_t, bool) {
  return false;
}

bool own_sgemm_rows_in_chunk(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                             const int64_t*, float*, int64_t, bool) {
  return false;
}

bool own_sgemm_takes_any_rows(int64_t, int64_t) { return false; }

bool own_sgemm_fixed_rows(int64_t, int64_t, int64_t, const float*, int64_t, bool, const float*,
                          int64_t, bool, float*, int64_t, const SgemmEpilogue&) {
  return false;
}

#endif

}  // namespace vitrine::cpu
