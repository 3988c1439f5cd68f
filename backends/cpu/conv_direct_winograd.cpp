// Winograd's F(2x2, 3x3) for narrow layers, in place (conv_direct.h: direct_winograd_runs).
//
// The Winograd of conv_winograd.cpp gathers every window into memory and runs 16 products over a
// chunk of tiles: on 16 or 32 channels its transforms cost what the products save (0.7x and 0.9x
// against the direct convolution's predecessor). Here nothing goes through memory but V and M,
// which stay in L1/L2: a vector's lanes are one row of tiles of an image (a map 2 TW wide, TW <= 16
// tiles) or two rows (TW <= 8, lanes 8 apart), so that
//   - tile tx's window column j (input column 2 tx + j - 1) is a permute of the row's floats as x
//     holds them (x read in place, no phase planes), 0 outside the map;
//   - the 2x2 outputs Y[u][v] of a row of tiles interleave, again by permutes, into output rows
//     2 ty + u of y, written with the bias, the residual and the ReLU (no output copy).
// Per panel (2 vectors of tile rows) and channel: V[c][xi] = B^T d B in registers; per xi one
// product over the channels, M[co][xi] = sum_c U[xi][c][co] V[c][xi] (the weight transformed once
// a call, U = G g G^T); per output channel Y = A^T M A:
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1]   (U: winograd_weight, conv_winograd.h, shared with that path).
// Each output is one thread's, in a fixed order: results do not depend on the thread count.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VT_DIRECT_WINOGRAD 1
#endif

namespace vitrine::cpu {

namespace {

constexpr int kMR = 12;                                  // output channels of a product's tile
constexpr int kLanes = 32;                               // tile lanes of a panel: two vectors
constexpr int64_t kMinChannels = 16, kMaxChannels = 64;  // (in and out)

#ifdef VT_DIRECT_WINOGRAD

/// How a map's tiles lie in the lanes: R rows of tiles a vector, each in a slot of 16 / R lanes
/// (R = 1 up to 16 tiles a row, 2 up to 8, 4 up to 4: a 7x7 map's 16 tiles in one vector). The
/// vector's R window rows i (one a slot) are read into (P0, P1), 32 lanes, row s from lane
/// span s (span = 32 / R), so that its lane span s + W (W < span) loads as 0; a window column is
/// a permute of (P0, P1), and an output row one of (Y[u][0], Y[u][1]).
struct Lanes {
  int64_t R = 1, slot = 16, span = 32;
  __m512i window[4];  // window column j of every slot's tiles, from (P0, P1)
  __m512i out[4];     // output columns 16 h .. 16 h + 15 (R = 1, h < 2), or slot h's (R > 1)
};

/// The rows of tiles a vector for a map W wide (W <= 31), or 0 where none fits.
int64_t rows_a_vector(int64_t W) { return W <= 7 ? 4 : W <= 15 ? 2 : W <= 31 ? 1 : 0; }

__attribute__((target("avx512f"))) Lanes make_lanes(int64_t TW, int64_t W) {
  Lanes z;
  z.R = rows_a_vector(W);
  z.slot = 16 / z.R;
  z.span = 32 / z.R;
  alignas(64) int32_t idx[16];
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 16; ++l) {
      const int64_t s = l / z.slot, tx = l % z.slot, col = 2 * tx + j - 1;
      const bool ok = tx < TW && col >= 0 && col < W;
      // (outside the map: the slot's last lane, past the row's W floats, which loads as 0)
      idx[l] = static_cast<int32_t>(z.span * s + (ok ? col : z.span - 1));
    }
    z.window[j] = _mm512_load_si512(idx);
  }
  for (int h = 0; h < 4; ++h) {
    // output column o = 2 tx + v of a row: lane tx of the slot in Y[.][v]
    for (int l = 0; l < 16; ++l) {
      const int64_t o = (z.R == 1 ? 16 * h : 0) + l, tx = std::min<int64_t>(o / 2, z.slot - 1);
      idx[l] = static_cast<int32_t>(16 * (o % 2) + (z.R == 1 ? tx : z.slot * h + tx));
    }
    z.out[h] = _mm512_load_si512(idx);
  }
  return z;
}

/// Where a panel's vector v reads and writes: image b's tile rows ty0 .. ty0 + R - 1 (past TH:
/// none), or nothing (b < 0: the batch's last panel may have one vector).
struct Rows {
  int64_t b = -1, ty0 = 0;
};

/// V[c][xi][lanes] = B^T d B for a panel's 2 vectors (a channel's 16 positions one after another,
/// stored together). x: the batch's data (image b, channel c at
/// x + b bs + c cs), maps H x W with rows W apart.
template <int R>
__attribute__((target("avx512f"))) void input_panel(const float* x, int64_t bs, int64_t cs,
                                                    int64_t C, int64_t H, int64_t W, int64_t TH,
                                                    const Rows* at, const Lanes& z, float* V) {
  alignas(64) static const float zeros[48] = {};
  constexpr int64_t span = 32 / R;
  const __m512i w0 = z.window[0], w1 = z.window[1], w2 = z.window[2], w3 = z.window[3];
  const auto lanes = [](int64_t n) { return static_cast<__mmask16>(first_lanes(n)); };
  for (int v = 0; v < 2; ++v) {
    // window row i of slot s: base pointer and channel stride (0: a row of zeros)
    const float* base[4][R];
    int64_t step[4][R];
    for (int i = 0; i < 4; ++i)
      for (int sl = 0; sl < R; ++sl) {
        const int64_t ty = at[v].ty0 + sl, r = 2 * ty + i - 1;
        const bool ok = at[v].b >= 0 && ty < TH && r >= 0 && r < H;
        base[i][sl] = ok ? x + at[v].b * bs + r * W : zeros + 16;
        step[i][sl] = ok ? cs : 0;
      }
    float* Vv = V + 16 * v;
    for (int64_t c = 0; c < C; ++c) {
      __m512 t[4][4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        __m512 p0, p1;
        if constexpr (R == 1) {
          const float* row = base[i][0] + c * step[i][0];
          p0 = _mm512_maskz_loadu_ps(lanes(W), row);
          p1 = _mm512_maskz_loadu_ps(lanes(W - 16), row + 16);
        } else if constexpr (R == 2) {
          p0 = _mm512_maskz_loadu_ps(lanes(W), base[i][0] + c * step[i][0]);
          p1 = _mm512_maskz_loadu_ps(lanes(W), base[i][1] + c * step[i][1]);
        } else {  // (rows 8 lanes apart: each loaded into its half, from 8 floats before it)
          const __mmask16 lo = lanes(W), hi = static_cast<__mmask16>(lo << 8);
          p0 = _mm512_maskz_loadu_ps(lo, base[i][0] + c * step[i][0]);
          p0 = _mm512_mask_loadu_ps(p0, hi, base[i][1] + c * step[i][1] - span);
          p1 = _mm512_maskz_loadu_ps(lo, base[i][2] + c * step[i][2]);
          p1 = _mm512_mask_loadu_ps(p1, hi, base[i][3] + c * step[i][3] - span);
        }
        const __m512 d0 = _mm512_permutex2var_ps(p0, w0, p1);
        const __m512 d1 = _mm512_permutex2var_ps(p0, w1, p1);
        const __m512 d2 = _mm512_permutex2var_ps(p0, w2, p1);
        const __m512 d3 = _mm512_permutex2var_ps(p0, w3, p1);
        t[i][0] = _mm512_sub_ps(d0, d2);  // (d B)[i]
        t[i][1] = _mm512_add_ps(d1, d2);
        t[i][2] = _mm512_sub_ps(d2, d1);
        t[i][3] = _mm512_sub_ps(d1, d3);
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        float* o = Vv + (c * 16 + k) * kLanes;  // V[c][4 k1 + k]: a channel's 16 in a row
        _mm512_storeu_ps(o, _mm512_sub_ps(t[0][k], t[2][k]));
        _mm512_storeu_ps(o + 4 * kLanes, _mm512_add_ps(t[1][k], t[2][k]));
        _mm512_storeu_ps(o + 8 * kLanes, _mm512_sub_ps(t[2][k], t[1][k]));
        _mm512_storeu_ps(o + 12 * kLanes, _mm512_sub_ps(t[1][k], t[3][k]));
      }
    }
  }
}

/// M[co0 + i][xi][lanes] = sum_c U[xi][c][co0 + i] V[c][xi][lanes] for i < MR (one position
/// xi): V = V[0][xi] (channels 16 32 apart), u = U[xi][0][co0] (rows Cout apart: a strip's 12
/// broadcasts from one cache line; read as winograd_weight lays U out, 12 lines a step, the
/// 16-channel 28x28 layer measured 5.0-5.2 against 4.3-4.6 ms, alternating, one thread), M =
/// M[co0][xi] (rows 16 32 apart).
template <int MR>
__attribute__((target("avx512f"))) void product(int64_t C, const float* V, const float* u,
                                                int64_t Cout, float* M) {
  constexpr int64_t ldm = 16 * kLanes;
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; ++c, V += 16 * kLanes, u += Cout) {
    const __m512 b0 = _mm512_loadu_ps(V), b1 = _mm512_loadu_ps(V + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(u[i]);
      acc0[i] = _mm512_fmadd_ps(a, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(a, b1, acc1[i]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(M + i * ldm, acc0[i]);
    _mm512_storeu_ps(M + i * ldm + 16, acc1[i]);
  }
}

using Product = void (*)(int64_t, const float*, const float*, int64_t, float*);
template <int... R>
constexpr std::array<Product, sizeof...(R)> products(std::integer_sequence<int, R...>) {
  return {&product<R + 1>...};
}
constexpr std::array<Product, kMR> kProducts = products(std::make_integer_sequence<int, kMR>{});

/// y's rows of a panel's tiles from M[co][xi][lanes]: Y = A^T M A per output channel, then
/// + bias (+ r) (then relu), in finish_row's order (conv_window.h); y and r (or null) the batch's,
/// maps H x W.
template <int R>
__attribute__((target("avx512f"))) void output_panel(const float* M, int64_t Cout, int64_t H,
                                                     int64_t W, int64_t TH, const Rows* at,
                                                     const Lanes& z, const float* bias,
                                                     const float* r, bool relu, float* y) {
  const int64_t L = H * W;
  const __m512 zero = _mm512_setzero_ps();
  const auto lanes = [](int64_t n) { return static_cast<__mmask16>(first_lanes(n)); };
  for (int64_t co = 0; co < Cout; ++co) {
    const __m512 add = _mm512_set1_ps(bias ? bias[co] : 0.0f);
    for (int v = 0; v < 2; ++v) {
      if (at[v].b < 0) continue;
      __m512 s[4][2];
      for (int k1 = 0; k1 < 4; ++k1) {
        __m512 mk[4];
        for (int k2 = 0; k2 < 4; ++k2)
          mk[k2] = _mm512_loadu_ps(M + (co * 16 + 4 * k1 + k2) * kLanes + 16 * v);
        s[k1][0] = _mm512_add_ps(_mm512_add_ps(mk[0], mk[1]), mk[2]);
        s[k1][1] = _mm512_sub_ps(_mm512_sub_ps(mk[1], mk[2]), mk[3]);
      }
      __m512 Y[2][2];
      for (int e = 0; e < 2; ++e) {
        Y[0][e] = _mm512_add_ps(_mm512_add_ps(s[0][e], s[1][e]), s[2][e]);
        Y[1][e] = _mm512_sub_ps(_mm512_sub_ps(s[1][e], s[2][e]), s[3][e]);
      }
      for (int64_t sl = 0; sl < R; ++sl) {
        const int64_t ty = at[v].ty0 + sl;
        if (ty >= TH) break;
        for (int u = 0; u < 2; ++u) {
          const int64_t row = 2 * ty + u;
          if (row >= H) break;
          const int64_t q0 = (at[v].b * Cout + co) * L + row * W;
          // R = 1: the row's columns 0..15 then 16..31; R > 1: slot sl's W columns
          for (int h = 0; h < (R == 1 ? 2 : 1); ++h) {
            const int64_t n = R == 1 ? std::min<int64_t>(16, W - 16 * h) : W;
            if (n <= 0) break;
            const __mmask16 ms = lanes(n);
            const __m512i idx = z.out[R == 1 ? h : sl];
            __m512 o = _mm512_add_ps(_mm512_permutex2var_ps(Y[u][0], idx, Y[u][1]), add);
            const int64_t q = q0 + 16 * h;
            if (r) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(ms, r + q));
            if (relu) o = _mm512_maskz_max_ps(0xFFFF, o, zero);
            _mm512_mask_storeu_ps(y + q, ms, o);
          }
        }
      }
    }
  }
}

void narrow_run(const Strided& x, const float* U, int64_t Cout, const float* bias, float* y,
                const ConvGeometry& g, const ConvOut& out) {
  const int64_t B = x.shape[0], C = g.channels, H = g.height, W = g.width;
  const int64_t TH = (H + 1) / 2, TW = (W + 1) / 2;
  const Lanes z = make_lanes(TW, W);
  // Vectors: each image's tile rows, R a vector; panels: 2 vectors (across images where an image
  // fills one, a 7x7 map's 16 tiles).
  const int64_t per_image = (TH + z.R - 1) / z.R, vectors = B * per_image;
  const int64_t P = (vectors + 1) / 2;
  const int64_t strips = (Cout + kMR - 1) / kMR;
  const float* xp = x.ptr<float>();
  parallel_chunks(P, chunk_of(P), [&](int64_t p0, int64_t p1) {
    float* V = thread_scratch<float>(static_cast<size_t>(16 * (C + Cout) * kLanes), 0);
    float* M = V + 16 * C * kLanes;
    for (int64_t p = p0; p < p1; ++p) {
      Rows at[2];
      for (int v = 0; v < 2; ++v) {
        const int64_t k = 2 * p + v;
        if (k < vectors) at[v] = {k / per_image, (k % per_image) * z.R};
      }
      // The next panel's first rows, prefetched into L2: x streams in from L3 or memory, C planes
      // at once (as the direct path's, conv_direct.cpp).
      if (p + 1 < p1) {
        const int64_t k = 2 * (p + 1), nb = k / per_image, nr = 2 * (k % per_image) * z.R;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t rr = std::max<int64_t>(nr - 1, 0); rr < std::min(H, nr + 2 * z.R + 1); ++rr)
            _mm_prefetch(
                reinterpret_cast<const char*>(xp + nb * x.strides[0] + c * x.strides[1] + rr * W),
                _MM_HINT_T1);
      }
      switch (z.R) {
        case 1:
          input_panel<1>(xp, x.strides[0], x.strides[1], C, H, W, TH, at, z, V);
          break;
        case 2:
          input_panel<2>(xp, x.strides[0], x.strides[1], C, H, W, TH, at, z, V);
          break;
        default:
          input_panel<4>(xp, x.strides[0], x.strides[1], C, H, W, TH, at, z, V);
      }
      for (int64_t xi = 0; xi < 16; ++xi)
        for (int64_t s = 0, co0 = 0, mr = 0; co0 < Cout; ++s, co0 += mr) {
          mr = (Cout - co0 + strips - s - 1) / (strips - s);  // (strips of equal size)
          kProducts[static_cast<size_t>(mr - 1)](C, V + xi * kLanes, U + xi * C * Cout + co0, Cout,
                                                 M + (co0 * 16 + xi) * kLanes);
        }
      const float* r = out.residual;
      switch (z.R) {
        case 1:
          output_panel<1>(M, Cout, H, W, TH, at, z, bias, r, out.relu, y);
          break;
        case 2:
          output_panel<2>(M, Cout, H, W, TH, at, z, bias, r, out.relu, y);
          break;
        default:
          output_panel<4>(M, Cout, H, W, TH, at, z, bias, r, out.relu, y);
      }
    }
  });
}

#endif

}  // namespace

bool direct_winograd_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_DIRECT_WINOGRAD
  // 16 channels and more: at 8 it measured level with the direct tiles (their products are
  // short). Up to 63, and 64 on a map of 7 or fewer columns: from 64 in and out
  // conv_winograd.cpp's products over the whole batch take it, except on maps its 2x2 tiles
  // cover poorly (conv_batched.cpp).
  const int64_t most = g.width <= 7 ? kMaxChannels : kMaxChannels - 1;
  const auto narrow = [&](int64_t c) { return c >= kMinChannels && c <= most; };
  return conv_algorithm() == ConvAlgorithm::Auto && !conv_for_gradient() &&
         direct_basics(x, g, Cout) && x.strides[2] == g.width && g.kernel_h == 3 &&
         g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.pad_h == 1 && g.pad_w == 1 && rows_a_vector(g.width) > 0 &&
         narrow(g.channels) && narrow(Cout);
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

void direct_winograd_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias,
                            float* y, const ConvGeometry& g, const ConvOut& out) {
#ifdef VT_DIRECT_WINOGRAD
  // U[xi][c][co] (product's comment)
  const auto U = winograd_weight_kept(w, Cout, g.channels, true);
  narrow_run(x, U->data(), Cout, bias, y, g, out);
#else
  (void)x, (void)w, (void)Cout, (void)bias, (void)y, (void)g, (void)out;
  VT_ASSERT(false);  // (direct_winograd_runs is false without AVX-512)
#endif
}

void direct_winograd_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g) {
  const auto wt = flipped_weight_kept(w, Cout, g);  // [C, Cout, 3, 3]
  ConvGeometry gt = g;
  gt.channels = Cout;
  direct_winograd_conv2d(dy, wt->data(), g.channels, nullptr, dx, gt, {});
}

}  // namespace vitrine::cpu
