// Direct convolution (conv_direct.h), float32 on AVX-512.
//
// The implicit GEMM (conv_implicit.cpp) copies the input into zero-padded planes and its product's
// wide rows back out into y: on a ResNet-8's 16-channel 28x28 layers those two copies took a fifth
// of the convolution. Here there are none. With an output as wide as the input (stride 1, "same"
// width) output q = r W + c of an image and tap (a, b) read the input at flat position
//   q + off(a, b),      off(a, b) = (a dh - ph) W + (b dw - pw)
// a constant shift of q: one unaligned load of 16 floats serves 16 outputs, and the lanes whose
// input lies outside the image (a column wrapping into the neighbouring row, a row above or below
// the image) are masked off, reading as 0. The masks depend on the tap and on where the 16 outputs
// lie in the image only: a table per convolution.
//
// The micro-kernel (tile) is the own GEMM's (sgemm.cpp) with its operands in place: C tile =
// up to 12 output channels x 32 positions (24 zmm accumulators), and per step of its loop (tap t,
// channel c) two masked loads of x's plane c at q0 + off_t and up to 12 broadcasts of the weight,
// laid out wd[t][c][co] so that a strip's 12 are contiguous. Its epilogue adds the bias, a
// residual and the ReLU (ConvOut) and stores y's rows, masked at the image's end. An image's
// panels (32 positions) are the units of work, each computed by one thread, all its strips of
// output channels while its input is in L1: results do not depend on the thread count.
//
// Panels cost the same whatever their share of real outputs: 14x14 maps waste 14% (196 outputs
// in 7 panels of 32), 28x28 2%, 56x56 none; a 7x7 map would waste 31% (kMaxWaste keeps it out).
// The input gradient of a stride-1 "same" convolution is the convolution of dy with the flipped
// weight (direct_conv2d_input_grad), the same kernel.
#include "backends/cpu/conv_direct.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VT_DIRECT 1
#endif

namespace vitrine::cpu {

namespace {

constexpr int kMR = 12;  // output channels of a tile
constexpr int kNR = 32;  // positions of a tile: two vectors
/// The most positions computed per output, in vectors of 16 (14x14: 208 / 196 = 1.06; 7x7: 64 /
/// 49 = 1.31 is out).
constexpr double kMaxWaste = 1.2;
constexpr int64_t kPrefetchFloats = 32;
constexpr int64_t kAhead = 2;

int64_t panels_of(const ConvGeometry& g) { return (g.out_h * g.out_w + kNR - 1) / kNR; }

/// wd[t][c][co] = w[co][c][t] (t = a kw + b), or with flip the flipped weight with its channel
/// dims swapped (the input gradient's: wd[t][co][c] = w[co][c][T - 1 - t], as a convolution of
/// Cout channels into C).
std::vector<float> direct_weight(const float* w, int64_t Cout, int64_t C, int64_t T, bool flip) {
  std::vector<float> wd(static_cast<size_t>(T * C * Cout));
  for (int64_t co = 0; co < Cout; ++co)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < T; ++t) {
        const float v = w[(co * C + c) * T + t];
        if (flip)
          wd[static_cast<size_t>(((T - 1 - t) * Cout + co) * C + c)] = v;
        else
          wd[static_cast<size_t>((t * C + c) * Cout + co)] = v;
      }
  return wd;
}

#ifdef VT_DIRECT

/// The lanes of panel p (positions 32 p .. 32 p + 31) whose input for tap (a, b) lies inside the
/// image, two 16-lane masks: masks[(p T + t) 2 + v]; store[2 p + v]: the lanes that are outputs.
struct Masks {
  std::vector<__mmask16> tap, store;
  std::vector<int64_t> off;  // off[t]: the tap's shift of the flat position
};

Masks make_masks(const ConvGeometry& g) {
  const int64_t P = panels_of(g), T = g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  Masks m;
  m.tap.assign(static_cast<size_t>(P * T * 2), 0);
  m.store.assign(static_cast<size_t>(P * 2), 0);
  m.off.resize(static_cast<size_t>(T));
  for (int64_t a = 0; a < g.kernel_h; ++a)
    for (int64_t b = 0; b < g.kernel_w; ++b)
      m.off[static_cast<size_t>(a * g.kernel_w + b)] =
          (a * g.dilation_h - g.pad_h) * g.width + (b * g.dilation_w - g.pad_w);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t l = 0; l < kNR; ++l) {
      const int64_t q = p * kNR + l;
      if (q >= L) continue;
      const auto bit = static_cast<__mmask16>(1u << (l % 16));
      m.store[static_cast<size_t>(2 * p + l / 16)] |= bit;
      const int64_t r = q / g.out_w, c = q % g.out_w;
      for (int64_t a = 0; a < g.kernel_h; ++a)
        for (int64_t b = 0; b < g.kernel_w; ++b) {
          const int64_t ir = r + a * g.dilation_h - g.pad_h, ic = c + b * g.dilation_w - g.pad_w;
          if (ir >= 0 && ir < g.height && ic >= 0 && ic < g.width)
            m.tap[static_cast<size_t>((p * T + a * g.kernel_w + b) * 2 + l / 16)] |= bit;
        }
    }
  return m;
}

/// One tile: y[co0 + i][q0 + j] for i < MR, j < 32 (positions past the image masked by s0, s1).
///   x: the image's plane 0 at q0 (plane c at x + c cs); off, m: the taps' shifts and masks for
///   this panel; a: wd[0][0][co0] (wd[t][c][co0 + i] = a[(t C + c) Cout + i]);
///   y: y[co0][q0] (rows L apart), r: the residual there or null; bias: bias[co0] or null.
template <int MR, int NV>
__attribute__((target("avx512f"))) void tile(int64_t T, int64_t C, const float* x, int64_t cs,
                                             const int64_t* off, const __mmask16* m, const float* a,
                                             int64_t Cout, float* y, const float* r, int64_t L,
                                             const float* bias, bool relu, __mmask16 s0,
                                             __mmask16 s1) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t t = 0; t < T; ++t) {
    const __mmask16 m0 = m[2 * t], m1 = m[2 * t + 1];
    if ((m0 | m1) == 0) continue;  // (a row of taps wholly above or below the image)
    const float* b = x + off[t];
    const float* at = a + t * C * Cout;
    for (int64_t c = 0; c < C; ++c, b += cs, at += Cout) {
      const __m512 b0 = _mm512_maskz_mov_ps(m0, _mm512_loadu_ps(b));
      const __m512 b1 = _mm512_maskz_mov_ps(m1, _mm512_loadu_ps(b + 16));
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(at[i]);
        acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
        acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
      }
    }
  }
  // y = acc + bias (+ r) (then relu), in finish_row's order (conv_window.h), so that the fused
  // epilogue gives the composition's bits.
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    const __m512 add = _mm512_set1_ps(bias ? bias[i] : 0.0f);
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 s = v ? s1 : s0;
      __m512 o = _mm512_add_ps(v ? acc1[i] : acc0[i], add);
      if (r) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(s, r + i * L + 16 * v));
      // (max(o, 0) is 0 for a NaN o, as ops::relu's rule; the maskz form, as GCC 12 reports
      // the plain one's undefined start as uninitialised)
      if (relu) o = _mm512_maskz_max_ps(0xFFFF, o, zero);
      _mm512_mask_storeu_ps(y + i * L + 16 * v, s, o);
    }
  }
}

using Tile = void (*)(int64_t, int64_t, const float*, int64_t, const int64_t*, const __mmask16*,
                      const float*, int64_t, float*, const float*, int64_t, const float*, bool,
                      __mmask16, __mmask16);

template <int NV, int... R>
constexpr std::array<Tile, sizeof...(R)> tiles(std::integer_sequence<int, R...>) {
  return {&tile<R + 1, NV>...};
}
// kTiles[nv - 1][mr - 1]: a tile of mr output channels by nv vectors of positions (a map's last
// panel may be one vector: 28x28 and 14x14 maps end in one).
constexpr std::array<std::array<Tile, kMR>, 2> kTiles = {
    tiles<1>(std::make_integer_sequence<int, kMR>{}),
    tiles<2>(std::make_integer_sequence<int, kMR>{})};

/// y = conv(x, wd) + bias, then out: x [B, C, H, W] with rows W apart (unit column stride), wd
/// as direct_weight lays it out, y contiguous.
void run(const Strided& x, const float* wd, int64_t Cout, const float* bias, float* y,
         const ConvGeometry& g, const ConvOut& out) {
  const int64_t B = x.shape[0], C = g.channels, T = g.kernel_h * g.kernel_w;
  const int64_t L = g.out_h * g.out_w, P = panels_of(g);
  const Masks m = make_masks(g);
  const float* xp = x.ptr<float>();
  const int64_t reach = kAhead * kNR + *std::max_element(m.off.begin(), m.off.end());
  parallel_chunks(B * P, chunk_of(B * P), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / P, p = u % P, q0 = p * kNR;
      const float* xi = xp + b * x.strides[0] + q0;
      const __mmask16* mp = m.tap.data() + p * T * 2;
      const __mmask16 s0 = m.store[static_cast<size_t>(2 * p)];
      const __mmask16 s1 = m.store[static_cast<size_t>(2 * p + 1)];
      // The input the next panel reads first (its last taps' rows, past this panel's reach),
      // prefetched: the planes stream in from L3 or memory, 16 or more at once, which the
      // hardware's prefetcher does not follow.
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < kPrefetchFloats; j += 16)
          _mm_prefetch(reinterpret_cast<const char*>(xi + c * x.strides[1] + reach + j),
                       _MM_HINT_T0);
      for (int64_t co0 = 0; co0 < Cout; co0 += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, Cout - co0));
        const int64_t at = (b * Cout + co0) * L + q0;
        kTiles[s1 ? 1 : 0][static_cast<size_t>(mr - 1)](
            T, C, xi, x.strides[1], m.off.data(), mp, wd + co0, Cout, y + at,
            out.residual ? out.residual + at : nullptr, L, bias ? bias + co0 : nullptr, out.relu,
            s0, s1);
      }
    }
  });
}

#else
void run(const Strided&, const float*, int64_t, const float*, float*, const ConvGeometry&,
         const ConvOut&) {
  VT_ASSERT(false);  // (direct_conv_runs is false without AVX-512)
}
#endif

}  // namespace

bool direct_conv_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_DIRECT
  const ConvAlgorithm a = conv_algorithm();
  if (x.dtype != DType::Float32 || x.shape.size() != 4 ||
      (a != ConvAlgorithm::Auto && a != ConvAlgorithm::Direct) ||
      gemm_policy() == GemmPolicy::Off || !cpu_has_avx512())
    return false;
  if (x.strides[3] != 1 || x.strides[2] != g.width) return false;
  const int64_t L = g.out_h * g.out_w;
  return g.stride_h == 1 && g.stride_w == 1 && g.out_w == g.width && L > 0 && Cout > 0 &&
         g.channels * g.kernel_h * g.kernel_w >= 8 &&
         static_cast<double>((L + 15) / 16 * 16) <= kMaxWaste * static_cast<double>(L);
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

bool direct_input_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  ConvGeometry gt = g;
  gt.channels = Cout;
  return g.dilation_h * (g.kernel_h - 1) == 2 * g.pad_h &&
         g.dilation_w * (g.kernel_w - 1) == 2 * g.pad_w && direct_conv_runs(x, gt, g.channels);
}

void direct_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                   const ConvGeometry& g, const ConvOut& out) {
  const std::vector<float> wd = direct_weight(w, Cout, g.channels, g.kernel_h * g.kernel_w, false);
  run(x, wd.data(), Cout, bias, y, g, out);
}

void direct_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                              const ConvGeometry& g) {
  const std::vector<float> wd = direct_weight(w, Cout, g.channels, g.kernel_h * g.kernel_w, true);
  ConvGeometry gt = g;  // ("same" padding at stride 1: the output's size is the input's)
  gt.channels = Cout;
  run(dy, wd.data(), g.channels, nullptr, dx, gt, {});
}

}  // namespace vitrine::cpu
