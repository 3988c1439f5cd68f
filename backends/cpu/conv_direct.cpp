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
// Panels cost the same whatever their share of real outputs: a map read in place ends in one
// vector or two (14x14 wastes 6%, 28x28 none). At a stride over 1, or on a map too small for
// that (7x7: 64 lanes for 49 outputs), the input is first copied into phase planes that hold a
// group of images one after another (make_plan, pack_phases): a strided tap reads a phase plane at
// a constant shift too, and a panel may run from one image into the next.
// The input gradient of a stride-1 "same" convolution is the convolution of dy with the flipped
// weight (direct_conv2d_input_grad), the same kernel. A 3x3 with padding 1 of 16 to 63 channels
// goes by Winograd's F(2x2, 3x3) instead (conv_direct_winograd.cpp), reading x in place as well.
#include "backends/cpu/conv_direct.h"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/cpu_features.h"
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
/// The most positions computed per output, in vectors of 16: a map read in place wastes the end of
/// its last vector (14x14: 208 / 196 = 1.06, where 7x7's 64 / 49 = 1.31 is out); a group of
/// images in phase planes the end of the group's.
constexpr double kMaxWaste = 1.2;
/// Phase planes: positions per group of images (at least), and the fewest groups of a batch.
constexpr int64_t kGroupPositions = 1024;
constexpr int64_t kMinGroups = 16;
/// Prefetching x read in place: floats per plane, this many panels ahead (into L2).
constexpr int64_t kPrefetchFloats = 32;
constexpr int64_t kAhead = 4;

/// How the tiles read x: in place (stride 1, an output as wide as the input, rows W apart: an
/// image's positions), or from phase planes that hold a group of G images one after another.
struct Mode {
  bool runs = false, in_place = false;
  bool columns = false;  // (the plan's column masks too: the weight gradient's tiles read them)
  int64_t G = 1;
};

double waste(int64_t positions) {
  return static_cast<double>((positions + 15) / 16 * 16) / static_cast<double>(positions);
}

/// Whether the tiles read x in place: stride 1, an output as wide as the input, rows W apart, a
/// map whose vectors of 16 positions waste at most 7%.
bool reads_in_place(const Strided& x, const ConvGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.out_w == g.width && x.strides[2] == g.width &&
         waste(g.out_h * g.out_w) <= 1.07;
}

Mode mode_of(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  const int64_t L = g.out_h * g.out_w, B = x.shape[0];
  Mode m;
  if (reads_in_place(x, g)) {
    m.runs = m.in_place = true;
    return m;
  }
  // Phase planes of ceil(H / s_h) rows of ceil(W / s_w) entries: they must fit in the output's
  // rows and columns, so that an image's planes are OH x OW, as its output. Not for fewer than 8
  // channels: a 3-channel 7x7 stem at stride 2 measured slower than the implicit GEMM (ResNet-18,
  // 17.3 against 13.7 ms at batch 8). Nor for the wide layers' products (more than 64 output
  // channels or a depth over 576), which im2col's blocked product runs better: ResNet-18's 1x1
  // shortcuts at stride 2 measured 0.80 against 0.65 ms (128 to 256) and 0.73 against 0.67 ms
  // (64 to 128), its 128 to 256 3x3 at stride 2 5.5 against 5.25 ms, batch 8.
  // Not in a forward recorded for a gradient (conv_algorithm.h: conv_for_gradient), which keeps
  // the paths before this one for strided and small maps.
  const int64_t depth = g.channels * g.kernel_h * g.kernel_w;
  if (conv_for_gradient() || g.channels < 8 || Cout > 64 || depth > 576 ||
      (g.height + g.stride_h - 1) / g.stride_h > g.out_h ||
      (g.width + g.stride_w - 1) / g.stride_w > g.out_w)
    return m;
  // Whether it runs does not depend on the batch (a batch cut between data-parallel ranks takes
  // the path the whole batch takes): groups of G0 images waste little; a smaller batch runs in
  // smaller groups (at least kMinGroups of them where it can), computed the same way.
  const int64_t G0 = (kGroupPositions + L - 1) / L;
  m.runs = waste(G0 * L) <= kMaxWaste;
  m.G = std::clamp<int64_t>(G0, 1, (B + kMinGroups - 1) / kMinGroups);
  return m;
}

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

/// Where a tap reads, one dimension at a time: tap k of a dimension with stride s reads input
/// index o s + t for output o, t = k d - p, which is entry o + shift of phase plane phase (the
/// inputs phase, phase + s, ...; t = shift s + phase), valid for entries [0, count).
struct Tap {
  int64_t phase, shift;
};
Tap tap_of(int64_t k, int64_t d, int64_t p, int64_t s) {
  const int64_t t = k * d - p;
  const int64_t shift = t >= 0 ? t / s : -((-t + s - 1) / s);
  return {t - shift * s, shift};
}
/// The entries of phase plane phase: inputs phase, phase + s, ... below size.
int64_t phase_count(int64_t size, int64_t s, int64_t phase) {
  return size > phase ? (size - phase + s - 1) / s : 0;
}

/// Where a tile's two vectors of positions land in y (and the residual): vector v's lanes lo[v]
/// at y + at_lo[v] + lane, its lanes hi[v] (those past an image's end, in a panel over a group of
/// images) at y + at_hi[v] + lane, row co0 + i at i L further.
struct Out {
  int64_t at_lo[2], at_hi[2];
  __mmask16 lo[2], hi[2];
};

/// What the tiles read and write, for a geometry and a mode. Positions Q = i L + q run over the
/// G images of a unit (q = r OW + c, image i's output (r, c)). In place, x's planes are the
/// image's own (rows W = OW apart). In phase planes each channel's input is cut into s_h s_w
/// planes, plane (c, phase_r, phase_c) at ((c s_h + phase_r) s_w + phase_c) plane, each holding
/// the G images one after another, OH x OW entries each: a tap reads one plane at a constant shift
/// of Q as well.
///   off[t]: tap t's offset from Q (its phase plane's included);
///   tap[(p T + t) 2 + v]: the lanes of panel p's vector v whose input for tap t exists;
///   out[p]: where panel p's vectors land in y.
struct Plan {
  int64_t G = 1, N = 0, P = 0;  // images, positions, panels of a unit
  std::vector<__mmask16> tap;
  std::vector<Out> out;
  std::vector<int64_t> off;
  // col[(p kw + b) 2 + v]: the lanes of panel p's vector v whose input column for taps (., b)
  // exists; rows_full[p 2 + v]: every tap's rows exist there (its mask is its column's); only
  // with Mode::columns
  std::vector<__mmask16> col;
  std::vector<char> rows_full;
  int64_t plane = 0;       // (phase planes) floats per plane
  std::vector<char> used;  // (phase planes) used[phase_r s_w + phase_c]: a tap reads it
};

Plan make_plan(const ConvGeometry& g, const Mode& mode, int64_t Cout) {
  const int64_t T = g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const int64_t sh = g.stride_h, sw = g.stride_w, OW = g.out_w;
  Plan m;
  m.G = mode.G;
  m.N = m.G * L;
  m.P = (m.N + kNR - 1) / kNR;
  m.plane = mode.in_place ? 0 : (m.N + 15) / 16 * 16;
  m.tap.assign(static_cast<size_t>(m.P * T * 2), 0);
  if (mode.columns) {
    m.col.assign(static_cast<size_t>(m.P * g.kernel_w * 2), 0);
    m.rows_full.assign(static_cast<size_t>(m.P * 2), 0);
  }
  m.out.assign(static_cast<size_t>(m.P), Out{});
  m.off.resize(static_cast<size_t>(T));
  m.used.assign(static_cast<size_t>(sh * sw), 0);
  std::vector<Tap> rows(static_cast<size_t>(g.kernel_h)), cols(static_cast<size_t>(g.kernel_w));
  for (int64_t a = 0; a < g.kernel_h; ++a)
    rows[static_cast<size_t>(a)] = tap_of(a, g.dilation_h, g.pad_h, sh);
  for (int64_t b = 0; b < g.kernel_w; ++b)
    cols[static_cast<size_t>(b)] = tap_of(b, g.dilation_w, g.pad_w, sw);
  for (int64_t a = 0; a < g.kernel_h; ++a)
    for (int64_t b = 0; b < g.kernel_w; ++b) {
      const Tap r = rows[static_cast<size_t>(a)], c = cols[static_cast<size_t>(b)];
      m.used[static_cast<size_t>(r.phase * sw + c.phase)] = 1;
      m.off[static_cast<size_t>(a * g.kernel_w + b)] =
          (r.phase * sw + c.phase) * m.plane + r.shift * OW + c.shift;
    }
  for (int64_t p = 0; p < m.P; ++p)
    for (int v = 0; v < 2; ++v) {
      const int64_t Q0 = p * kNR + 16 * v;
      const int64_t i0 = std::min(Q0, m.N - 1) / L, q0 = Q0 - i0 * L;
      Out& o = m.out[static_cast<size_t>(p)];
      o.at_lo[v] = i0 * Cout * L + q0;  // (row co0 of image i0, position q0: from y[0][0])
      o.at_hi[v] = (i0 + 1) * Cout * L + q0 - L;
      for (int64_t l = 0; l < 16; ++l) {
        const int64_t Q = Q0 + l;
        if (Q >= m.N) break;
        const auto bit = static_cast<__mmask16>(1u << l);
        (q0 + l < L ? o.lo[v] : o.hi[v]) |= bit;
        const int64_t q = Q % L, orow = q / OW, ocol = q % OW;
        for (int64_t b = 0; mode.columns && b < g.kernel_w; ++b) {
          const Tap c = cols[static_cast<size_t>(b)];
          const int64_t ic = ocol + c.shift;
          if (ic >= 0 && ic < phase_count(g.width, sw, c.phase))
            m.col[static_cast<size_t>((p * g.kernel_w + b) * 2 + v)] |= bit;
        }
        for (int64_t a = 0; a < g.kernel_h; ++a)
          for (int64_t b = 0; b < g.kernel_w; ++b) {
            const Tap r = rows[static_cast<size_t>(a)], c = cols[static_cast<size_t>(b)];
            const int64_t ir = orow + r.shift, ic = ocol + c.shift;
            if (ir >= 0 && ir < phase_count(g.height, sh, r.phase) && ic >= 0 &&
                ic < phase_count(g.width, sw, c.phase))
              m.tap[static_cast<size_t>((p * T + a * g.kernel_w + b) * 2 + v)] |= bit;
          }
      }
      if (!mode.columns) continue;
      bool full = true;
      for (int64_t t = 0; t < T; ++t)
        full = full && m.tap[static_cast<size_t>((p * T + t) * 2 + v)] ==
                           m.col[static_cast<size_t>((p * g.kernel_w + t % g.kernel_w) * 2 + v)];
      m.rows_full[static_cast<size_t>(p * 2 + v)] = full;
    }
  return m;
}

/// make_plan's plan, kept per thread for the last 16 (geometry, mode, Cout): batch-invariant mode
/// runs a layer's convolution once per leaf of 8 images, and each call built the same plan again
/// (2.6% of a ResNet-8 training step).
std::shared_ptr<const Plan> plan_for(const ConvGeometry& g, const Mode& mode, int64_t Cout) {
  using Key = std::array<int64_t, 18>;
  const Key key{g.channels,   g.height,  g.width,       g.kernel_h,   g.kernel_w, g.stride_h,
                g.stride_w,   g.pad_h,   g.pad_w,       g.out_h,      g.out_w,    g.dilation_h,
                g.dilation_w, mode.runs, mode.in_place, mode.columns, mode.G,     Cout};
  thread_local KeptRing<std::pair<Key, std::shared_ptr<const Plan>>, 16> kept;
  for (const auto& [k, plan] : kept.entries)
    if (k == key) return plan;
  auto plan = std::make_shared<const Plan>(make_plan(g, mode, Cout));
  kept.add({key, plan});
  return plan;
}

/// d0[j] = s[2 j] for j < n0 and d1[j] = s[2 j + 1] for j < n1 (either may be null), 16 of each
/// at a time: two masked loads, a permute of their even lanes and one of their odd lanes.
/// (Plain loops ran at about 2 cycles a float on a ResNet-8's rows of 14.)
__attribute__((target("avx512f"))) void deinterleave_row(const float* s, float* d0, int64_t n0,
                                                         float* d1, int64_t n1) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const auto lanes = [](int64_t c) { return static_cast<__mmask16>(first_lanes(c)); };
  const int64_t n = std::max(d0 ? n0 : 0, d1 ? n1 : 0);
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t k0 = d0 ? std::clamp<int64_t>(n0 - j, 0, 16) : 0;
    const int64_t k1 = d1 ? std::clamp<int64_t>(n1 - j, 0, 16) : 0;
    const int64_t f = std::max(2 * k0 - 1, 2 * k1);  // (reads s[2 j .. 2 j + f))
    const __m512 a = _mm512_maskz_loadu_ps(lanes(f), s + 2 * j);
    const __m512 b = _mm512_maskz_loadu_ps(lanes(f - 16), s + 2 * j + 16);
    if (k0 > 0) _mm512_mask_storeu_ps(d0 + j, lanes(k0), _mm512_permutex2var_ps(a, even, b));
    if (k1 > 0) _mm512_mask_storeu_ps(d1 + j, lanes(k1), _mm512_permutex2var_ps(a, odd, b));
  }
}

/// The phase planes (Plan) of images [b0, b0 + n): plane (c, phase_r, phase_c), image i, row r,
/// entry j = x[b0 + i][c][r s_h + phase_r][j s_w + phase_c], for the entries that exist (the
/// rest, never read, left alone), of the phases a tap reads (a 1x1 at stride 2 reads one in four).
/// x is read row by row, each row once, in order (so that it streams).
void pack_phases(const Strided& x, int64_t b0, int64_t n, const ConvGeometry& g, const Plan& m,
                 float* planes) {
  const int64_t sh = g.stride_h, sw = g.stride_w, OW = g.out_w, L = g.out_h * g.out_w;
  const float* xp = x.ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < g.channels; ++c) {
      const float* xc = xp + (b0 + i) * x.strides[0] + c * x.strides[1];
      for (int64_t ir = 0; ir < g.height; ++ir) {
        const int64_t pr = ir % sh, r = ir / sh;
        const float* sr = xc + ir * x.strides[2];
        for (int64_t j = 0; j < g.width; j += 16)  // (x streams in: 8 rows ahead into L1)
          _mm_prefetch(reinterpret_cast<const char*>(sr + 8 * x.strides[2] + j), _MM_HINT_T0);
        // row r of plane (c, pr, pc), image i
        const auto dst = [&](int64_t pc) {
          return m.used[static_cast<size_t>(pr * sw + pc)]
                     ? planes + ((c * sh + pr) * sw + pc) * m.plane + i * L + r * OW
                     : nullptr;
        };
        if (sw == 2) {
          deinterleave_row(sr, dst(0), phase_count(g.width, 2, 0), dst(1),
                           phase_count(g.width, 2, 1));
          continue;
        }
        for (int64_t pc = 0; pc < sw; ++pc) {
          float* dr = dst(pc);
          if (dr == nullptr) continue;
          const int64_t nc = phase_count(g.width, sw, pc);
          for (int64_t j = 0; j < nc; ++j) dr[j] = sr[pc + j * sw];
        }
      }
    }
}

/// One tile: C rows co0 .. co0 + MR - 1, NV vectors of 16 positions from q0, over the taps t
/// (all of them) and the channels c:
///   acc[i][lanes] += a[(t C + c) Cout + i] x[c cs + off[t] + lanes]   (lanes outside m[2t + v]: 0)
/// then y = acc + bias (+ r) (then relu) where o says.
///   x: the planes at position q0; a: wd[0][0][co0]; bias: bias[co0] or null; y, r: y and the
///   residual (or null) at row co0's start.
template <int MR, int NV>
__attribute__((target("avx512f"))) void tile(int64_t T, int64_t C, const float* x, int64_t cs,
                                             const int64_t* off, const __mmask16* m, const float* a,
                                             int64_t Cout, float* y, const float* r, int64_t L,
                                             const float* bias, bool relu, const Out& o) {
  __m512 acc[NV][MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[v][i] = _mm512_setzero_ps();
  for (int64_t t = 0; t < T; ++t) {
    const __mmask16 m0 = m[2 * t], m1 = m[2 * t + 1];
    if ((m0 | m1) == 0) continue;  // (a row of taps wholly above or below the image)
    const float* b = x + off[t];
    const float* at = a + t * C * Cout;
    for (int64_t c = 0; c < C; ++c, b += cs, at += Cout) {
      __m512 bv[NV];
      bv[0] = _mm512_maskz_loadu_ps(m0, b);
      if constexpr (NV == 2) bv[1] = _mm512_maskz_loadu_ps(m1, b + 16);
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) {
        const __m512 ai = _mm512_set1_ps(at[i]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[v][i] = _mm512_fmadd_ps(ai, bv[v], acc[v][i]);
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
      __m512 s = _mm512_add_ps(acc[v][i], add);
      const int64_t lo = o.at_lo[v] + i * L, hi = o.at_hi[v] + i * L;
      if (r) {
        __m512 rv = _mm512_maskz_loadu_ps(o.lo[v], r + lo);
        if (o.hi[v]) rv = _mm512_mask_loadu_ps(rv, o.hi[v], r + hi);
        s = _mm512_add_ps(s, rv);
      }
      // (max(s, 0) is 0 for a NaN s, as ops::relu's rule; the maskz form, as GCC 12 reports
      // the plain one's undefined start as uninitialised)
      if (relu) s = _mm512_maskz_max_ps(0xFFFF, s, zero);
      _mm512_mask_storeu_ps(y + lo, o.lo[v], s);
      if (o.hi[v]) _mm512_mask_storeu_ps(y + hi, o.hi[v], s);
    }
  }
}

using Tile = void (*)(int64_t, int64_t, const float*, int64_t, const int64_t*, const __mmask16*,
                      const float*, int64_t, float*, const float*, int64_t, const float*, bool,
                      const Out&);

template <int NV, int... R>
constexpr std::array<Tile, sizeof...(R)> tiles(std::integer_sequence<int, R...>) {
  return {&tile<R + 1, NV>...};
}
// kTiles[nv - 1][mr - 1]: a tile of mr output channels by nv vectors of positions (a map's last
// panel may be one vector: 28x28 and 14x14 maps end in one).
constexpr std::array<std::array<Tile, kMR>, 2> kTiles = {
    tiles<1>(std::make_integer_sequence<int, kMR>{}),
    tiles<2>(std::make_integer_sequence<int, kMR>{})};

/// The tiles of a unit's panels [p0, p1), all output channels: x, cs its planes (at position 0)
/// and their stride; y: the unit's first image's y[0][0] (and r its residual's, or null).
void panels(const Plan& m, const float* x, int64_t cs, int64_t p0, int64_t p1, int64_t T, int64_t C,
            const float* wd, int64_t Cout, const float* bias, float* y, const float* r, int64_t L,
            bool relu, bool prefetch) {
  const int64_t reach = kAhead * kNR + *std::max_element(m.off.begin(), m.off.end());
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t Q0 = p * kNR;
    const float* xq = x + Q0;
    const __mmask16* mp = m.tap.data() + p * T * 2;
    const Out& o = m.out[static_cast<size_t>(p)];
    // The input a later panel reads first (its last taps' rows, past this panel's reach),
    // prefetched into L2: x's planes stream in from L3 or memory, 16 or more at once, which the
    // hardware's prefetcher does not follow. (Into L1, or 2 panels ahead, measured slower on the
    // 16-channel 28x28 layers of ResNet-8: 3.1 against 2.6-2.8 ms.) Phase planes were just
    // written: in cache.
    if (prefetch)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < kPrefetchFloats; j += 16)
          _mm_prefetch(reinterpret_cast<const char*>(xq + c * cs + reach + j), _MM_HINT_T1);
    const bool two = (o.lo[1] | o.hi[1]) != 0;
    for (int64_t co0 = 0; co0 < Cout; co0 += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, Cout - co0));
      kTiles[two ? 1 : 0][static_cast<size_t>(mr - 1)](T, C, xq, cs, m.off.data(), mp, wd + co0,
                                                       Cout, y + co0 * L, r ? r + co0 * L : nullptr,
                                                       L, bias ? bias + co0 : nullptr, relu, o);
    }
  }
}

/// y = conv(x, wd) + bias, then out: x [B, C, H, W] with unit column stride, wd as direct_weight
/// lays it out, y contiguous. In place the units of work are runs of an image's panels; in phase
/// planes groups of G images, each cut into its planes (in the thread's scratch), then computed.
void direct_run(const Strided& x, const float* wd, int64_t Cout, const float* bias, float* y,
                const ConvGeometry& g, const ConvOut& out) {
  const int64_t B = x.shape[0], C = g.channels, T = g.kernel_h * g.kernel_w;
  const int64_t L = g.out_h * g.out_w;
  const Mode mode = mode_of(x, g, Cout);
  const auto plan = plan_for(g, mode, Cout);
  const Plan& m = *plan;
  const auto at = [&](int64_t b) { return b * Cout * L; };
  if (mode.in_place) {
    const float* xp = x.ptr<float>();
    const int64_t P = m.P;
    parallel_chunks(B * P, chunk_of(B * P), [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1;) {  // (a run of panels of one image at a time)
        const int64_t b = u / P, p0 = u % P, p1 = std::min(P, p0 + (u1 - u));
        panels(m, xp + b * x.strides[0], x.strides[1], p0, p1, T, C, wd, Cout, bias, y + at(b),
               out.residual ? out.residual + at(b) : nullptr, L, out.relu, true);
        u += p1 - p0;
      }
    });
    return;
  }
  // (a last, smaller group has a plan of its own: its panels end at its last image)
  const int64_t S = g.stride_h * g.stride_w, groups = (B + m.G - 1) / m.G;
  Mode rest = mode;
  rest.G = B - (groups - 1) * m.G;
  const auto last_plan = rest.G == m.G ? nullptr : plan_for(g, rest, Cout);
  const Plan& last = last_plan ? *last_plan : m;
  parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
    float* planes = thread_scratch<float>(static_cast<size_t>(C * S * m.plane), 0);
    for (int64_t grp = g0; grp < g1; ++grp) {
      const int64_t b0 = grp * m.G;
      const Plan& pl = grp == groups - 1 && rest.G != m.G ? last : m;
      pack_phases(x, b0, pl.G, g, pl, planes);
      panels(pl, planes, S * pl.plane, 0, pl.P, T, C, wd, Cout, bias, y + at(b0),
             out.residual ? out.residual + at(b0) : nullptr, L, out.relu, false);
    }
  });
}

/// The weight gradient's groups: about kDwPositions output positions a group (its accumulators'
/// horizontal sums, once a group, cost little beside its products), at least kDwMinGroups groups.
constexpr int64_t kDwPositions = 1536;
constexpr int64_t kDwMinGroups = 8;

int64_t dw_group(int64_t B, int64_t L) {
  const int64_t G = std::clamp<int64_t>(
      std::min((kDwPositions + L - 1) / L, (B + kDwMinGroups - 1) / kDwMinGroups), 1, B);
  const int64_t groups = (B + G - 1) / G;
  return (B + groups - 1) / groups;  // (as even as that many groups can be)
}

/// Whether the weight gradient's tiles take a geometry: up to 16 output
/// channels, x read in place as the forward reads it (stride 1, an output as wide as the input),
/// rows of 16 or more, a kernel 3 taps wide (a 1x1 is a plain product, the own GEMM's).
/// Measured on a Zen 4 against the implicit GEMM, 2 threads, batch 128, alternating: 3.4-4.5
/// against 6.0-7.0 ms on ResNet-8's 16-channel 28x28 layer (whose product has 12 + 4 rows),
/// 0.3-0.45 against 1.3-1.7 ms on its one-channel stem, 2.4 against 4.2 ms on a 16-channel
/// 32x32 (batch 64); but 0.93x with 32 channels at 28x28 (batch 64) and 0.68-0.81x with 64 and
/// 128 (batch 8), where the tiles read x once per 3 output channels; 0.87x on a 14x14 map (the
/// first and last rows' masks are a quarter of its vectors) and 0.93x on 7x7 maps in phase planes.
bool dw_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  return Cout <= 16 && g.kernel_w == 3 && g.out_w >= 16 && reads_in_place(x, g);
}

/// Where one weight-gradient tile reads: x's planes (at channel c's, position 0) and dy (at row
/// co0 of the first image its plan's positions start at).
struct Segment {
  const float* x;
  const float* dy;
};

/// The sum of v's 16 lanes: its 128-bit quarters added (a + c, b + d, then both), then the 4
/// lanes of one.
__attribute__((target("avx512f"))) inline float hsum(__m512 v) {
  // (the maskz forms: GCC 12 reports the plain ones' undefined start as uninitialised)
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xFFFF, v, v, 0xB1));
  __m128 q = _mm512_maskz_extractf32x4_ps(0xF, v, 0);
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

/// One weight-gradient tile: R output channels co0 .. by the taps of KH rows a0 .. of a 3-wide
/// kernel (t = a 3 + b), of one input channel c, summed over every position of the segments
/// (lanes over the positions, 2 vectors a panel):
///   acc[r][t][lanes] += dy[co0 + r][Q + lanes] x[c][Q + off[t] + lanes]   (masked as the
///   forward's tile)
/// then sums[r 3 KH + t] = the sum of acc[r][t]'s lanes. x's loads are the forward's, dy's its
/// stores. Where every tap's rows exist (all but a map's first and last rows) a tap's mask is its
/// column's: 3 masks a vector instead of 3 KH.
template <int R, int KH>
__attribute__((target("avx512f"))) void dw_tile(const Plan& m, const Segment* seg, int64_t nseg,
                                                int64_t a0, int64_t T, int64_t L, float* sums) {
  constexpr int TB = 3 * KH;
  __m512 acc[R][TB];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 9
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t* off = m.off.data() + 3 * a0;
  for (int64_t s = 0; s < nseg; ++s) {
    const float* xs = seg[s].x;
    const float* d = seg[s].dy;
    for (int64_t p = 0; p < m.P; ++p) {
      const Out& o = m.out[static_cast<size_t>(p)];
      for (int v = 0; v < 2; ++v) {
        if ((o.lo[v] | o.hi[v]) == 0) continue;
        __m512 dv[R];
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          dv[r] = _mm512_maskz_loadu_ps(o.lo[v], d + r * L + o.at_lo[v]);
          if (o.hi[v]) dv[r] = _mm512_mask_loadu_ps(dv[r], o.hi[v], d + r * L + o.at_hi[v]);
        }
        const float* xq = xs + p * kNR + 16 * v;
        const auto fma = [&](int t, __mmask16 k) __attribute__((target("avx512f"), always_inline)) {
          const __m512 xv = _mm512_maskz_loadu_ps(k, xq + off[t]);
#pragma GCC unroll 12
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(dv[r], xv, acc[r][t]);
        };
        if (m.rows_full[static_cast<size_t>(p * 2 + v)]) {
          const __mmask16* cm = m.col.data() + p * 6 + v;
          const __mmask16 c0 = cm[0], c1 = cm[2], c2 = cm[4];
#pragma GCC unroll 3
          for (int a = 0; a < KH; ++a) {
            fma(3 * a, c0);
            fma(3 * a + 1, c1);
            fma(3 * a + 2, c2);
          }
        } else {
          const __mmask16* mp = m.tap.data() + (p * T + 3 * a0) * 2 + v;
#pragma GCC unroll 9
          for (int t = 0; t < TB; ++t) fma(t, mp[2 * t]);
        }
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 9
    for (int t = 0; t < TB; ++t) sums[r * TB + t] = hsum(acc[r][t]);
}

using DwTile = void (*)(const Plan&, const Segment*, int64_t, int64_t, int64_t, int64_t, float*);
template <int R>
constexpr std::array<DwTile, 3> dw_tiles() {
  return {&dw_tile<R, 1>, &dw_tile<R, 2>, &dw_tile<R, 3>};
}
constexpr int kDwR = 3;
// kDwTiles[r - 1][kh - 1]: r output channels by kh rows of 3 taps
constexpr std::array<std::array<DwTile, 3>, kDwR> kDwTiles = {dw_tiles<1>(), dw_tiles<2>(),
                                                              dw_tiles<3>()};

/// partial [C T, Cout]: a group's dW^T, from the tiles of its images (segments), all output
/// channels in blocks of kDwR, all channels. (Prefetching the next group's x and dy into L2
/// meanwhile measured no faster: 3.51 against 3.83 ms, medians of 5 alternating runs with their
/// spread over 0.4 ms, on ResNet-8's 16-channel layer.)
void dw_group_tiles(const Plan& m, const std::vector<Segment>& segs, int64_t cs, int64_t C,
                    int64_t T, int64_t Cout, int64_t L, float* part) {
  std::vector<Segment> at(segs.size());
  float sums[kDwR * 9];
  for (int64_t co0 = 0; co0 < Cout;) {
    const int R = static_cast<int>(std::min<int64_t>(kDwR, Cout - co0));
    for (int64_t c = 0; c < C; ++c) {
      for (size_t s = 0; s < segs.size(); ++s) at[s] = {segs[s].x + c * cs, segs[s].dy + co0 * L};
      for (int64_t a0 = 0; a0 < T / 3; a0 += 3) {
        const int kh = static_cast<int>(std::min<int64_t>(3, T / 3 - a0)), tb = 3 * kh;
        const int64_t t0 = 3 * a0;
        kDwTiles[static_cast<size_t>(R - 1)][static_cast<size_t>(kh - 1)](
            m, at.data(), static_cast<int64_t>(at.size()), a0, T, L, sums);
        for (int r = 0; r < R; ++r)
          for (int t = 0; t < tb; ++t) part[(c * T + t0 + t) * Cout + co0 + r] = sums[r * tb + t];
      }
    }
    co0 += R;
  }
}

/// dw = the weight gradient (direct_conv2d_weight_grad): one partial per group of images, each
/// computed by one thread, added in group order.
void direct_dw_run(const Strided& x, const float* dy, int64_t Cout, float* dw,
                   const ConvGeometry& g) {
  const int64_t B = x.shape[0], C = g.channels, T = g.kernel_h * g.kernel_w, K = C * T;
  const int64_t L = g.out_h * g.out_w;
  const int64_t G = dw_group(B, L), groups = (B + G - 1) / G;
  std::vector<float> partial(static_cast<size_t>(groups * K * Cout));
  Mode one;
  one.runs = one.in_place = one.columns = true;
  const auto plan = plan_for(g, one, Cout);
  const Plan& m = *plan;
  const float* xp = x.ptr<float>();
  const auto images = [&](int64_t grp) {
    std::vector<Segment> segs;
    for (int64_t b = grp * G; b < std::min(B, grp * G + G); ++b)
      segs.push_back({xp + b * x.strides[0], dy + b * Cout * L});
    return segs;
  };
  parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t grp = g0; grp < g1; ++grp)
      dw_group_tiles(m, images(grp), x.strides[1], C, T, Cout, L, partial.data() + grp * K * Cout);
  });
  sum_group_partials(partial.data(), groups, K, Cout, dw);
}

#endif

}  // namespace

bool direct_basics(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_DIRECT
  const ConvAlgorithm a = conv_algorithm();
  if (x.dtype != DType::Float32 || x.shape.size() != 4 ||
      (a != ConvAlgorithm::Auto && a != ConvAlgorithm::Direct) ||
      gemm_policy() == GemmPolicy::Off || !cpu_has_avx512())
    return false;
  return x.strides[3] == 1 && g.out_h > 0 && g.out_w > 0 && Cout > 0 && x.shape[0] > 0 &&
         g.channels * g.kernel_h * g.kernel_w >= 8;
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

bool direct_conv_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_DIRECT
  return direct_basics(x, g, Cout) &&
         (mode_of(x, g, Cout).runs || direct_winograd_runs(x, g, Cout));
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

bool direct_input_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  ConvGeometry gt = g;
  gt.channels = Cout;
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h * (g.kernel_h - 1) == 2 * g.pad_h &&
         g.dilation_w * (g.kernel_w - 1) == 2 * g.pad_w && direct_conv_runs(x, gt, g.channels);
}

void direct_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                   const ConvGeometry& g, const ConvOut& out) {
  if (direct_winograd_runs(x, g, Cout)) {
    direct_winograd_conv2d(x, w, Cout, bias, y, g, out);
    return;
  }
#ifdef VT_DIRECT
  const std::vector<float> wd = direct_weight(w, Cout, g.channels, g.kernel_h * g.kernel_w, false);
  direct_run(x, wd.data(), Cout, bias, y, g, out);
#else
  VT_ASSERT(false);  // (direct_conv_runs is false without AVX-512)
#endif
}

bool direct_weight_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
#ifdef VT_DIRECT
  return direct_basics(x, g, Cout) && dw_runs(x, g, Cout);
#else
  (void)x, (void)g, (void)Cout;
  return false;
#endif
}

void direct_conv2d_weight_grad(const Strided& x, const float* dy, int64_t Cout, float* dw,
                               const ConvGeometry& g) {
#ifdef VT_DIRECT
  direct_dw_run(x, dy, Cout, dw, g);
#else
  (void)x, (void)dy, (void)Cout, (void)dw, (void)g;
  VT_ASSERT(false);
#endif
}

void direct_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                              const ConvGeometry& g) {
  ConvGeometry gt = g;  // ("same" padding at stride 1: the output's size is the input's)
  gt.channels = Cout;
  if (direct_winograd_runs(dy, gt, g.channels)) {
    direct_winograd_input_grad(dy, w, Cout, dx, g);
    return;
  }
#ifdef VT_DIRECT
  const std::vector<float> wd = direct_weight(w, Cout, g.channels, g.kernel_h * g.kernel_w, true);
  direct_run(dy, wd.data(), g.channels, nullptr, dx, gt, {});
#else
  VT_ASSERT(false);
#endif
}

}  // namespace vitrine::cpu
