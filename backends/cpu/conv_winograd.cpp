// Winograd convolution F(2x2, 3x3) (conv_winograd.h), float32 on the own GEMM.
//
// The direct convolution (im2col or the implicit GEMM) does 9 multiplies per output, channel pair
// and image. Winograd's minimal filtering (Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks", 2015) computes a 2x2 tile of outputs from its 4x4 input window d with 16: in one
// dimension, outputs y0 = d0 g0 + d1 g1 + d2 g2 and y1 = d1 g0 + d2 g1 + d3 g2 are
//   m0 = (d0 - d2) g0,   m1 = (d1 + d2) (g0 + g1 + g2) / 2,
//   m2 = (d2 - d1) (g0 - g1 + g2) / 2,   m3 = (d1 - d3) g2,
//   y0 = m0 + m1 + m2,   y1 = m1 - m2 - m3,
// that is y = A^T [(G g) . (B^T d)] with
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// and in two dimensions, nested: Y = A^T [U . V] A, U = G g G^T, V = B^T d B (4x4 each). The
// transformed weight U is computed once a call. Summed over the input channels c, each of the 16
// positions xi of the 4x4 is a matrix product over all tiles t:
//   M[xi] [Cout, T] = U[xi] [Cout, C] V[xi] [C, T]          (16 GEMMs, 16/4 = 4 multiplies an
//                                                            output against 9: 2.25x fewer)
// then every tile's 2x2 outputs come from its 16 M values by A^T . A (additions only).
// The transforms are exact in real arithmetic; in float32 they add a few roundings (the tests
// hold it to the float64 convolution as tightly as the direct paths). A NaN or an infinity in a
// window spreads to the whole tile's outputs, not only to those whose 3x3 reads it.
//
// Tiles over the whole batch at once, as the implicit GEMM lays out its planes
// (conv_implicit.cpp): the images stand one above the other, Hs = H + pad_h rows apart, the rows
// between them zero (the bottom padding of one image and the top padding of the next), so that
// output "wide row" R is image R / Hs's row R % Hs (kept when that is under OH). Tile rows cover
// wide rows 2 tr and 2 tr + 1, and tiles TW = ceil(OW / 2) a tile row; tile (tr, tc) reads wide
// input rows 2 tr - pad_h .. + 3 and columns 2 tc - pad_w .. + 3. Its outputs past OW, and a tile
// row's past the image's last row, are computed and dropped (at 28x28 none; at 7x7 with padding
// 1, 64 wide outputs per 49).
//
// Chunks of whole tile rows (L tiles, at most kChunkFloats floats of V and M, which then stay in
// L2) run in parallel, each on one thread from its input transform to its outputs:
//   D [16, L]      the 4x4 windows of the chunk's tiles, one channel at a time (position u 4 + v:
//                  row u, column v), picked from a zero-padded copy of each input row
//   V [16, C, L]   = B^T d B per channel                (input transform)
//   M [16, Cout, L] = U[xi] V[xi], xi = 0 .. 15          (own_sgemm_in_chunk)
//   y              = A^T m A per output channel, + bias (output transform), interleaved into rows
// Chunks depend on the shape alone and every tile is computed by one thread in the same way:
// results do not depend on the number of threads.
#include "backends/cpu/conv_winograd.h"

#include <algorithm>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_window.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VT_WINOGRAD 1
#endif

namespace vitrine::cpu {

namespace {

/// The fewest channels in and out. Below, the transforms cost more than the products save: on a
/// Zen 4, 16 channels at 28x28 ran at 0.75x the implicit GEMM and 32 at 14x14 at 0.9x, where 64
/// at 56x56 ran at 1.4x and 128 at 28x28 at 1.3x (the transforms are per channel, the products'
/// work per pair of channels).
constexpr int64_t kMinChannels = 64;
/// The largest C Cout: the transformed weight U, 16 C Cout floats (4 MiB), is read once per
/// chunk. (ResNet-18's 512 channels at 7x7, batch 8, measured 0.7x im2col's speed: 16 MiB of U,
/// few tiles.)
constexpr int64_t kMaxWeights = int64_t{1} << 16;
/// V's and M's floats a chunk, at most (768 KiB: they stay in L2 between the transforms and the
/// products), unless kMinTiles tiles are larger.
constexpr int64_t kChunkFloats = int64_t{3} << 16;
/// The fewest tiles a chunk (the columns of its products).
constexpr int64_t kMinTiles = 128;

/// The tiling of one call (file comment).
struct Plan {
  int64_t B, C, Cout, H, W, OH, OW, ph, pw;
  int64_t Hs;        // wide rows between images: H + ph
  int64_t nR;        // wide rows: (B - 1) Hs + OH
  int64_t TW, TR;    // tiles a tile row (ceil(OW / 2)), tile rows (ceil(nR / 2))
  int64_t rows, Lp;  // tile rows a chunk; a chunk's tiles at most, rounded up to 32
  int64_t Ld;        // D's rows: Lp + 16 (gather_windows' whole-vector stores)
  int64_t chunks;    // ceil(TR / rows)
};

Plan plan(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  Plan p;
  p.B = x.shape[0];
  p.C = g.channels;
  p.Cout = Cout;
  p.H = g.height;
  p.W = g.width;
  p.OH = g.out_h;
  p.OW = g.out_w;
  p.ph = g.pad_h;
  p.pw = g.pad_w;
  p.Hs = p.H + p.ph;
  p.nR = (p.B - 1) * p.Hs + p.OH;
  p.TW = (p.OW + 1) / 2;
  p.TR = (p.nR + 1) / 2;
  const int64_t per_tile = 16 * (p.C + p.Cout);
  // (at least kMinTiles tiles: the products' columns)
  const int64_t rows =
      std::max<int64_t>((kMinTiles + p.TW - 1) / p.TW, kChunkFloats / (per_tile * p.TW));
  p.chunks = (p.TR + rows - 1) / rows;
  p.rows = (p.TR + p.chunks - 1) / p.chunks;  // as even as that many chunks can be
  p.Lp = (p.rows * p.TW + 31) / 32 * 32;
  p.Ld = p.Lp + 16;
  return p;
}

/// U [16, Cout, C]: U[xi][co][c] = (G g G^T)[xi] for g = w[co][c] (3x3). The loop over c is
/// innermost, so that it vectorises (9 strided loads, 16 contiguous stores).
VT_SIMD_CLONES void transform_weight_rows(const float* w, int64_t Cout, int64_t C, int64_t co,
                                          float* U) {
  const float* wc = w + co * C * 9;
  for (int64_t c = 0; c < C; ++c) {
    const float* g = wc + c * 9;
    float t[4][3];  // G g
    for (int j = 0; j < 3; ++j) {
      const float g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
      t[0][j] = g0;
      t[1][j] = 0.5f * (g0 + g1 + g2);
      t[2][j] = 0.5f * (g0 - g1 + g2);
      t[3][j] = g2;
    }
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
      float* u = U + (i * 4 * Cout + co) * C + c;
      const int64_t next = Cout * C;  // (U's positions xi and xi + 1)
      u[0] = t[i][0];
      u[next] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
      u[2 * next] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
      u[3 * next] = t[i][2];
    }
  }
}

/// C[M, N] = A[M, K] B[K, N] on the calling thread (rows lda, ldb, ldc apart): the own GEMM, or
/// plain loops where it declines (a chunk of fewer than 16 tiles).
void chunk_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc) {
  if (own_sgemm_in_chunk(M, N, K, a, lda, false, b, ldb, false, c, ldc, false)) return;
  for (int64_t m = 0; m < M; ++m) {
    float* cm = c + m * ldc;
    std::fill(cm, cm + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float amk = a[m * lda + k];
      const float* bk = b + k * ldb;
      for (int64_t j = 0; j < N; ++j) cm[j] += amk * bk[j];
    }
  }
}

#ifdef VT_WINOGRAD
/// The masks of gather_windows' loads: mask[(v blocks + k) 2 + h] keeps lane l of the load from
/// column 2 (16 k) + v - pw + 16 h + l where that column lies in [0, W).
std::vector<__mmask16> gather_masks(const Plan& p) {
  const int64_t blocks = (p.TW + 15) / 16;
  std::vector<__mmask16> m(static_cast<size_t>(4 * blocks * 2));
  for (int64_t v = 0; v < 4; ++v)
    for (int64_t k = 0; k < blocks; ++k)
      for (int64_t h = 0; h < 2; ++h) {
        uint32_t bits = 0;
        for (int64_t l = 0; l < 16; ++l) {
          const int64_t col = 32 * k + v - p.pw + 16 * h + l;
          if (col >= 0 && col < p.W) bits |= 1u << l;
        }
        m[static_cast<size_t>((v * blocks + k) * 2 + h)] = static_cast<__mmask16>(bits);
      }
  return m;
}

/// Chunk tile rows [tr0, tr1) of channel c: D[u 4 + v][(tr - tr0) TW + tc] = the input at wide
/// row 2 tr - ph + u, column 2 tc - pw + v (0 in the padding), D's rows Ld apart. Column v of
/// tile tc is the even lane of two masked loads from column 2 tc0 + v - pw (masks: gather_masks),
/// picked by one permute; a row of zeros (above the first image, between images, below the last)
/// is stored as zeros. x's rows have unit column stride. The stores are whole vectors (a masked
/// store measured slow on a Zen 4): lanes past a tile row's TW land on the next tile row's, which
/// are written after them, and the last row's in D's 16 floats of padding.
__attribute__((target("avx512f"))) void gather_windows(const Plan& p, const Strided& x, int64_t c,
                                                       int64_t tr0, int64_t tr1,
                                                       const __mmask16* masks, float* D) {
  const float* xp = x.ptr<float>() + c * x.strides[1];
  const int64_t s0 = x.strides[0], s2 = x.strides[2], blocks = (p.TW + 15) / 16;
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  // Wide input row 2 tr0 - ph: image i's row r (r may start negative, above the first image).
  int64_t yr = 2 * tr0 - p.ph, i = yr >= 0 ? yr / p.Hs : 0, r = yr - i * p.Hs;
  for (int64_t tr = tr0; tr < tr1; ++tr) {
    const int64_t base = (tr - tr0) * p.TW;
    int64_t ri = i, rr = r;  // rows u = 0 .. 3 of this tile row
    for (int64_t u = 0; u < 4; ++u) {
      const bool zero = rr < 0 || rr >= p.H || ri >= p.B;
      const float* src = xp + ri * s0 + rr * s2 - p.pw;
      for (int64_t v = 0; v < 4; ++v) {
        float* d = D + (u * 4 + v) * p.Ld + base;
        for (int64_t k = 0; k < blocks; ++k) {
          const int64_t tc0 = 16 * k;
          if (zero) {
            _mm512_storeu_ps(d + tc0, _mm512_setzero_ps());
            continue;
          }
          const __mmask16* m = masks + (v * blocks + k) * 2;
          const float* s = src + 2 * tc0 + v;
          const __m512 lo = _mm512_maskz_loadu_ps(m[0], s),
                       hi = _mm512_maskz_loadu_ps(m[1], s + 16);
          _mm512_storeu_ps(d + tc0, _mm512_permutex2var_ps(lo, even, hi));
        }
      }
      if (++rr == p.Hs) rr = 0, ++ri;
    }
    r += 2;  // the next tile row starts 2 wide rows down
    if (r >= p.Hs) r -= p.Hs, ++i;
  }
}

/// V[xi][c][t] = (B^T d B)[xi] for D's windows of one channel, t < n (a multiple of 16; D's rows
/// Ld apart, V's rows Lp apart and its channels C Lp).
__attribute__((target("avx512f"))) void input_transform(const float* D, int64_t Ld, int64_t Lp,
                                                        int64_t n, int64_t C, int64_t c, float* V) {
  for (int64_t t = 0; t < n; t += 16) {
    __m512 d[4][4], b[4][4];
    for (int u = 0; u < 4; ++u)
      for (int v = 0; v < 4; ++v) d[u][v] = _mm512_loadu_ps(D + (u * 4 + v) * Ld + t);
    for (int v = 0; v < 4; ++v) {  // B^T d: combine rows
      b[0][v] = _mm512_sub_ps(d[0][v], d[2][v]);
      b[1][v] = _mm512_add_ps(d[1][v], d[2][v]);
      b[2][v] = _mm512_sub_ps(d[2][v], d[1][v]);
      b[3][v] = _mm512_sub_ps(d[1][v], d[3][v]);
    }
    for (int u = 0; u < 4; ++u) {  // (B^T d) B: combine columns
      const __m512 o[4] = {_mm512_sub_ps(b[u][0], b[u][2]), _mm512_add_ps(b[u][1], b[u][2]),
                           _mm512_sub_ps(b[u][2], b[u][1]), _mm512_sub_ps(b[u][1], b[u][3])};
      for (int v = 0; v < 4; ++v) _mm512_storeu_ps(V + ((u * 4 + v) * C + c) * Lp + t, o[v]);
    }
  }
}

/// d[0 .. k) = v (+ r) (then ReLU: ops::relu's, 0 for NaN, which vmaxps gives as its second
/// operand), k <= 16; r the residual at d's place (null: none).
__attribute__((target("avx512f"))) inline void store_outputs(__m512 v, int64_t k, const float* r,
                                                             bool relu, float* d) {
  const __mmask16 m = static_cast<__mmask16>((1u << k) - 1);
  if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, r));
  if (relu) v = _mm512_maskz_max_ps(0xFFFF, v, _mm512_setzero_ps());  // (maskz: GCC 12's warning)
  _mm512_mask_storeu_ps(d, m, v);
}

/// Output channel co of the chunk's tiles [0, n): the 2x2 outputs A^T m A (+ bias) of M[xi][co]
/// (rows Lp apart, channels Cout Lp apart) into T[0..3] (rows Lp apart: y00, y01, y10, y11),
/// then interleaved into y's rows, with out's residual and ReLU (after the bias, as
/// ops::conv2d_add_relu's composition rounds them; the ReLU is ops::relu's, NaN to 0).
__attribute__((target("avx512f"))) void output_transform(const Plan& p, const float* M, int64_t co,
                                                         float bias, int64_t tr0, int64_t tr1,
                                                         const ConvOut& out, float* T, float* y) {
  const int64_t n = (tr1 - tr0) * p.TW, Lp = p.Lp;
  const __m512 add = _mm512_set1_ps(bias);
  for (int64_t t = 0; t < n; t += 16) {
    __m512 m[4][4], s[2][4];
    for (int u = 0; u < 4; ++u)
      for (int v = 0; v < 4; ++v)
        m[u][v] = _mm512_loadu_ps(M + ((u * 4 + v) * p.Cout + co) * Lp + t);
    for (int v = 0; v < 4; ++v) {  // A^T m: combine rows
      s[0][v] = _mm512_add_ps(_mm512_add_ps(m[0][v], m[1][v]), m[2][v]);
      s[1][v] = _mm512_sub_ps(_mm512_sub_ps(m[1][v], m[2][v]), m[3][v]);
    }
    for (int u = 0; u < 2; ++u) {  // (A^T m) A: combine columns
      const __m512 y0 = _mm512_add_ps(_mm512_add_ps(s[u][0], s[u][1]), s[u][2]);
      const __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(s[u][1], s[u][2]), s[u][3]);
      _mm512_storeu_ps(T + (2 * u) * Lp + t, _mm512_add_ps(y0, add));
      _mm512_storeu_ps(T + (2 * u + 1) * Lp + t, _mm512_add_ps(y1, add));
    }
  }
  // Wide rows 2 tr and 2 tr + 1: row 0 of the tiles is (y00, y01) interleaved, row 1 (y10, y11).
  const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi_idx =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t tr = tr0; tr < tr1; ++tr)
    for (int64_t u = 0; u < 2; ++u) {
      const int64_t R = 2 * tr + u, i = R / p.Hs, r = R % p.Hs;
      if (R >= p.nR || r >= p.OH) continue;
      const float* a = T + (2 * u) * Lp + (tr - tr0) * p.TW;
      const float* b = T + (2 * u + 1) * Lp + (tr - tr0) * p.TW;
      const int64_t at = ((i * p.Cout + co) * p.OH + r) * p.OW;
      float* d = y + at;
      const float* res = out.residual ? out.residual + at : nullptr;
      for (int64_t tc0 = 0; tc0 < p.TW; tc0 += 16) {
        const __m512 av = _mm512_loadu_ps(a + tc0), bv = _mm512_loadu_ps(b + tc0);
        const int64_t k = std::min<int64_t>(32, p.OW - 2 * tc0);  // outputs left in the row
        const int64_t k0 = std::min<int64_t>(k, 16), k1 = k - k0;
        const int64_t c = 2 * tc0;
        store_outputs(_mm512_permutex2var_ps(av, lo_idx, bv), k0, res ? res + c : nullptr, out.relu,
                      d + c);
        if (k1 > 0)
          store_outputs(_mm512_permutex2var_ps(av, hi_idx, bv), k1, res ? res + c + 16 : nullptr,
                        out.relu, d + c + 16);
      }
    }
}

void run(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
         const ConvGeometry& g, const ConvOut& out) {
  const Plan p = plan(x, g, Cout);
  const auto kept = winograd_weight_kept(w, Cout, p.C, false);
  const std::vector<float>& U = *kept;
  const std::vector<__mmask16> masks = gather_masks(p);
  const int64_t Lp = p.Lp;
  // One scratch a thread, cut into D [16, Ld], V [16, C, Lp], M [16, Cout, Lp] and T [4, Lp]
  // (16 more floats after T's rows for the interleave's loads).
  const int64_t d_size = 16 * p.Ld, v_size = 16 * p.C * Lp, m_size = 16 * Cout * Lp;
  const int64_t t_size = 4 * Lp + 16;
  parallel_chunks(p.chunks, 1, [&](int64_t k0, int64_t k1) {
    float* D = thread_scratch<float>(static_cast<size_t>(d_size + v_size + m_size + t_size), 0);
    float* V = D + d_size;
    float* M = V + v_size;
    float* T = M + m_size;
    std::fill(D, D + d_size, 0.0f);  // (lanes past a chunk's tiles are read, not used)
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t tr0 = k * p.rows, tr1 = std::min(p.TR, tr0 + p.rows);
      // The tiles, and as many columns as whole tiles of the GEMM take (32; the rest computed
      // from D's stale lanes and dropped)
      const int64_t n = (tr1 - tr0) * p.TW, n32 = (n + 31) / 32 * 32;
      for (int64_t c = 0; c < p.C; ++c) {
        gather_windows(p, x, c, tr0, tr1, masks.data(), D);
        input_transform(D, p.Ld, Lp, n32, p.C, c, V);
      }
      for (int64_t xi = 0; xi < 16; ++xi)
        chunk_gemm(Cout, n32, p.C, U.data() + xi * Cout * p.C, p.C, V + xi * p.C * Lp, Lp,
                   M + xi * Cout * Lp, Lp);
      for (int64_t co = 0; co < Cout; ++co)
        output_transform(p, M, co, bias ? bias[co] : 0.0f, tr0, tr1, out, T, y);
    }
  });
}
#else
void run(const Strided&, const float*, int64_t, const float*, float*, const ConvGeometry&,
         const ConvOut&) {
  VT_ASSERT(false);  // (winograd_conv_runs is false without AVX-512)
}
#endif

}  // namespace

std::vector<float> winograd_weight(const float* w, int64_t Cout, int64_t C) {
  std::vector<float> U(static_cast<size_t>(16 * Cout * C));
  parallel_chunks(Cout, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t co = c0; co < c1; ++co) transform_weight_rows(w, Cout, C, co, U.data());
  });
  return U;
}

std::shared_ptr<const std::vector<float>> winograd_weight_kept(const float* w, int64_t Cout,
                                                               int64_t C, bool c_major) {
  struct Tag {};
  return kept_weight<Tag>(w, Cout * C * 9, {Cout, C, c_major ? 1 : 0}, [&] {
    std::vector<float> U = winograd_weight(w, Cout, C);
    if (!c_major) return U;
    std::vector<float> T(U.size());
    for (int64_t xi = 0; xi < 16; ++xi)
      for (int64_t co = 0; co < Cout; ++co)
        for (int64_t c = 0; c < C; ++c)
          T[static_cast<size_t>((xi * C + c) * Cout + co)] =
              U[static_cast<size_t>((xi * Cout + co) * C + c)];
    return T;
  });
}

bool winograd_conv_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_WINOGRAD
  if (x.dtype != DType::Float32 || x.shape.size() != 4 || conv_algorithm() != ConvAlgorithm::Auto ||
      x.strides[3] != 1 || gemm_policy() == GemmPolicy::Off || !cpu_has_avx512())
    return false;
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.pad_h >= 0 && g.pad_h <= 2 && g.pad_w >= 0 &&
         g.pad_w <= 2 && g.out_h > 0 && g.out_w > 0 && g.channels >= kMinChannels &&
         Cout >= kMinChannels && g.channels * Cout <= kMaxWeights;
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

bool winograd_input_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  ConvGeometry gt = g;
  gt.channels = Cout;
  return g.pad_h == 1 && g.pad_w == 1 && winograd_conv_runs(x, gt, g.channels);
}

void winograd_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, const ConvOut& out) {
  run(x, w, Cout, bias, y, g, out);
}

void winograd_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g) {
  const auto wt = flipped_weight_kept(w, Cout, g);
  ConvGeometry gt = g;  // (padding 1 at stride 1: the output's size is the input's)
  gt.channels = Cout;
  run(dy, wt->data(), g.channels, nullptr, dx, gt, {});
}

}  // namespace vitrine::cpu
