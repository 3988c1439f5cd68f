// Implicit-GEMM convolution (conv_implicit.h), float32 on the own GEMM.
//
// im2col writes kh kw shifted copies of the input, one per kernel tap, and the product reads them
// back: for a 3x3 over 16 channels (a ResNet-8) that copy cost a quarter of the inference. Here the
// copy is one, with the zero padding in it, and the taps are row offsets into it.
//
// Stride 1, padding 1, a 3x3 (the common case). For a group of n images, each channel's plane P_c
// holds the images one above the other, each row followed by a zero and each image by a zero row
// (with a zero row above the first): rows Ws = W + 1 apart, images Hs = H + 1 rows apart. A row's
// zero is at once the right padding of that row and the left padding of the next; an image's zero
// row the bottom padding of it and the top of the next. Output (i, r, c) is computed at the
// "wide" column q = (i Hs + r) Ws + c, and
//   B[(c, a, b)][q] = P_c[q + (a - 1) Ws + (b - 1)]
//   Y [Cout, N] = W [Cout, C kh kw] B       (W as stored: its columns are (c, a, b) in that order)
// so B's row (c, a, b) is P_c read from offset (a - 1) Ws + b - 1: own_sgemm_rows_in_chunk with a
// table of those offsets. The wide columns of the padding (c >= W or r >= H) are computed and
// dropped: Hs Ws / (H W) of the work, 1.07 at 28x28 and 1.15 at 14x14, which is why smaller maps
// (1.31 at 7x7) stay with im2col (kMaxWaste).
//
// Any stride s, padding p and dilation d, one dimension at a time: tap a reads input index
// o s + t for output o, t = a d - p. With phase = t mod s and shift = floor(t / s), that is entry
// o + shift of the phase's plane, which holds the input's indices phase, phase + s, ... So the
// input is cut into s_h s_w phase planes per channel (at stride 1, one: the plane above), each
// laid out as above with rows Ws and images Hs apart, Ws large enough that every row's reach,
// shifts from the most negative to the largest, falls on its own data or on zeros shared with its
// neighbours (axis()); B's row (c, a, b) is plane (c, phase_r(a), phase_c(b)) from offset
// shift_r(a) Ws + shift_c(b). At stride 2 a 3x3 with padding 1 reads all four phases, and the copy
// is still one: every input element lies in exactly one phase plane.
//
// The product goes in chunks of whole wide rows (about 2^16 / Cout columns: Y's chunk stays in
// L2), each chunk's valid columns copied out to y with the bias while in cache. A group of images
// is one task on one thread from its copy to its last chunk, as in conv_batched.cpp, so the result
// does not depend on the number of threads.
//
// The input gradient of a stride-1 "same" convolution is such a convolution too (of dy with the
// flipped weight: implicit_conv2d_input_grad). The weight gradient of 16 to 64 output channels
// reads the planes in place as well: per tap, the C rows of B above are the A of one product with
// dy laid out at the wide columns (implicit_conv2d_weight_grad). Other input gradients and
// weight gradients go through im2col and col2im (conv_batched.cpp).
#include "backends/cpu/conv_implicit.h"

#include <algorithm>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_window.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/thread_pool.h"

namespace vitrine::cpu {

namespace {

/// The most wide columns computed per output kept (waste(g)): above it, im2col. (1.4, which
/// takes the 3x3s of a 7x7 map, measured slower on ResNet-8: 1.31 times the product against
/// im2col's copies of a 64-channel map.)
constexpr double kMaxWaste = 1.25;

/// One spatial dimension (rows or columns) of the phase planes (file comment): tap a reads phase
/// phase[a] at output index + shift[a]; a phase plane holds count[phi] entries of its dimension,
/// and its rows (or images) lie period apart.
struct Axis {
  int64_t stride = 1, period = 0, dmin = 0;
  std::vector<int64_t> phase, shift, count;
};

Axis axis(int64_t size, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  Axis ax;
  ax.stride = s;
  int64_t dmax = 0;
  for (int64_t a = 0; a < k; ++a) {
    const int64_t t = a * d - p, phi = ((t % s) + s) % s, delta = (t - phi) / s;
    ax.phase.push_back(phi);
    ax.shift.push_back(delta);
    ax.dmin = std::min(ax.dmin, delta);
    dmax = std::max(dmax, delta);
  }
  ax.period = out + dmax;
  for (int64_t phi = 0; phi < s; ++phi) {
    ax.count.push_back(phi < size ? (size - phi + s - 1) / s : 0);
    ax.period = std::max(ax.period, ax.count.back() - ax.dmin);
  }
  return ax;
}

/// The phase planes of a group of up to n images (file comment).
struct Layout {
  Axis rows, cols;
  int64_t Ws, Hs;  // = cols.period (floats between rows), rows.period (rows between images)
  int64_t front;   // floats before a plane's first row (the most negative shifts' reach)
  int64_t plane;  // floats between planes; plane (c, phi_r, phi_c) is c s_h s_w + phi_r s_w + phi_c
};

Layout layout(const ConvGeometry& g, int64_t n) {
  Layout l;
  l.rows = axis(g.height, g.out_h, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h);
  l.cols = axis(g.width, g.out_w, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w);
  l.Ws = l.cols.period;
  l.Hs = l.rows.period;
  l.front = -l.cols.dmin - l.rows.dmin * l.Ws;
  l.plane = (l.front + n * l.Hs * l.Ws + 15) / 16 * 16;
  return l;
}

/// The wide columns of n images, up to the last image's last output.
int64_t wide_columns(const Layout& l, const ConvGeometry& g, int64_t n) {
  return ((n - 1) * l.Hs + g.out_h - 1) * l.Ws + g.out_w;
}

/// (H_s W_s) / (OH OW): the share of wide columns computed for every output kept.
double waste(const ConvGeometry& g) {
  const Layout l = layout(g, 1);
  return static_cast<double>(l.Hs * l.Ws) / static_cast<double>(g.out_h * g.out_w);
}

/// The phase planes P from images [b0, b0 + n) of x [B, C, H, W] (any strides); planes of a
/// phase no tap reads are left alone.
VT_SIMD_CLONES void pack(const Strided& x, int64_t b0, int64_t n, const ConvGeometry& g,
                         const Layout& l, const std::vector<char>& used, float* P) {
  const int64_t sh = l.rows.stride, sw = l.cols.stride, Ws = l.Ws;
  const float* xp = x.ptr<float>();
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t pr = 0; pr < sh; ++pr)
      for (int64_t pc = 0; pc < sw; ++pc) {
        if (!used[static_cast<size_t>(pr * sw + pc)]) continue;
        float* p = P + ((c * sh + pr) * sw + pc) * l.plane;
        float* const end = p + l.plane;
        const int64_t nr = l.rows.count[static_cast<size_t>(pr)];
        const int64_t nc = l.cols.count[static_cast<size_t>(pc)];
        std::fill(p, p + l.front, 0.0f);
        p += l.front;
        for (int64_t i = 0; i < n; ++i) {
          const float* img = xp + (b0 + i) * x.strides[0] + c * x.strides[1];
          for (int64_t u = 0; u < l.Hs; ++u, p += Ws) {
            if (u >= nr) {
              for (int64_t v = 0; v < Ws; ++v) p[v] = 0.0f;
              continue;
            }
            const float* src = img + (u * sh + pr) * x.strides[2] + pc * x.strides[3];
            const int64_t step = sw * x.strides[3];
            if (step == 1)  // (a loop, not memcpy: rows of 14 to 56 floats, a call each)
              for (int64_t v = 0; v < nc; ++v) p[v] = src[v];
            else if (step == 2)  // (a compile-time stride: vectorised as even-lane permutes)
              for (int64_t v = 0; v < nc; ++v) p[v] = src[2 * v];
            else
              for (int64_t v = 0; v < nc; ++v) p[v] = src[v * step];
            for (int64_t v = nc; v < Ws; ++v) p[v] = 0.0f;
          }
        }
        std::fill(p, end, 0.0f);
      }
}

/// C[M, N] = A[M, K] B, B[k][n] = b[rows[k] + n], on the calling thread: the own GEMM, or plain
/// loops where it declines the shape (a last chunk of fewer than 16 columns).
void rows_gemm(int64_t M, int64_t N, int64_t K, const float* a, const float* b, const int64_t* rows,
               float* c, int64_t ldc) {
  if (own_sgemm_rows_in_chunk(M, N, K, a, K, b, rows, c, ldc, false)) return;
  for (int64_t m = 0; m < M; ++m) {
    float* cm = c + m * ldc;
    std::fill(cm, cm + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float amk = a[m * K + k];
      const float* bk = b + rows[k];
      for (int64_t j = 0; j < N; ++j) cm[j] += amk * bk[j];
    }
  }
}

/// The valid outputs of wide rows [R0, R1) (Y's chunk yc [Cout, nc], row R0 at column 0) into y
/// [B, Cout, OH, OW] with the bias (and out's residual and ReLU): wide row R is image b0 + R / Hs's
/// output row R % Hs (none past OH). Channel by channel, so that each channel's rows land one
/// after another in y.
VT_SIMD_CLONES void copy_out(const float* yc, int64_t nc, int64_t R0, int64_t R1, int64_t Ws,
                             int64_t Hs, int64_t b0, int64_t Cout, int64_t OH, int64_t OW,
                             const float* bias, const ConvOut& out, float* y) {
  for (int64_t co = 0; co < Cout; ++co) {
    const float add = bias ? bias[co] : 0.0f;
    for (int64_t R = R0; R < R1; ++R) {
      const int64_t i = R / Hs, r = R % Hs;
      if (r >= OH) continue;
      const int64_t at = ((b0 + i) * Cout + co) * OH * OW + r * OW;
      finish_row(y + at, yc + co * nc + (R - R0) * Ws, OW, add,
                 out.residual ? out.residual + at : nullptr, out.relu);
    }
  }
}

/// B's row table: row (c, a, b) is plane (c, phase_r[a], phase_c[b]) from offset shift_r[a] Ws +
/// shift_c[b] (file comment); used[phi_r s_w + phi_c]: whether a tap reads that phase.
std::vector<int64_t> tap_rows(const Layout& l, const ConvGeometry& g, std::vector<char>& used) {
  const int64_t C = g.channels, kh = g.kernel_h, kw = g.kernel_w;
  const int64_t sh = g.stride_h, sw = g.stride_w;
  std::vector<int64_t> rows(static_cast<size_t>(C * kh * kw));
  used.assign(static_cast<size_t>(sh * sw), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) {
        const int64_t pr = l.rows.phase[static_cast<size_t>(a)];
        const int64_t pc = l.cols.phase[static_cast<size_t>(b)];
        used[static_cast<size_t>(pr * sw + pc)] = 1;
        rows[static_cast<size_t>((c * kh + a) * kw + b)] =
            ((c * sh + pr) * sw + pc) * l.plane + l.front +
            l.rows.shift[static_cast<size_t>(a)] * l.Ws + l.cols.shift[static_cast<size_t>(b)];
      }
  return rows;
}

void run(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
         const ConvGeometry& g, int64_t G, const ConvOut& out) {
  const int64_t B = x.shape[0], C = g.channels, OH = g.out_h, OW = g.out_w;
  const int64_t kh = g.kernel_h, kw = g.kernel_w, K = C * kh * kw;
  const int64_t sh = g.stride_h, sw = g.stride_w;
  const int64_t groups = (B + G - 1) / G;
  // One layout for every group (planes sized for G images; a last, smaller group leaves the rest
  // zero), and one table: B's row (c, a, b) is plane (c, phase_r[a], phase_c[b]) from offset
  // shift_r[a] Ws + shift_c[b].
  const Layout l = layout(g, G);
  std::vector<char> used;
  const std::vector<int64_t> rows = tap_rows(l, g, used);
  // Chunks of whole wide rows, about 2^16 / Cout columns (Y's chunk in L2), 256 at least.
  const int64_t per_chunk =
      std::max<int64_t>(1, std::clamp<int64_t>((int64_t{1} << 16) / Cout, 256, 4096) / l.Ws);
  const int64_t nc = per_chunk * l.Ws;
  parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t grp = g0; grp < g1; ++grp) {
      const int64_t b0 = grp * G, n = std::min(G, B - b0), N = wide_columns(l, g, n);
      float* P = thread_scratch<float>(static_cast<size_t>(C * sh * sw * l.plane), 0);
      pack(x, b0, n, g, l, used, P);
      float* Yc = thread_scratch<float>(static_cast<size_t>(Cout * nc), 1);
      for (int64_t R0 = 0; R0 * l.Ws < N; R0 += per_chunk) {
        const int64_t q0 = R0 * l.Ws, cols = std::min(nc, N - q0);
        rows_gemm(Cout, cols, K, w, P + q0, rows.data(), Yc, nc);
        // (the last chunk ends at the last output, inside its wide row)
        copy_out(Yc, nc, R0, std::min(R0 + per_chunk, (N + l.Ws - 1) / l.Ws), l.Ws, l.Hs, b0, Cout,
                 OH, OW, bias, out, y);
      }
    }
  });
}

}  // namespace

bool implicit_conv_runs(const Strided& x, const ConvGeometry& g) {
  const ConvAlgorithm a = conv_algorithm();
  if (x.dtype != DType::Float32 ||
      (a != ConvAlgorithm::Auto && a != ConvAlgorithm::Implicit && a != ConvAlgorithm::Direct) ||
      gemm_policy() == GemmPolicy::Off)
    return false;
  // At a stride over 1 a kernel of up to 9 taps goes to im2col: its one product over the group
  // measured faster than the chunks here (ResNet-18's 1x1 shortcuts: 0.76 against 0.88 ms; the
  // stride-2 3x3s of ResNet-8 and ResNet-18 by 3% to 10%), where a 7x7 stem's 49 copies are not.
  const bool strided_small = g.kernel_h * g.kernel_w <= 9 && (g.stride_h > 1 || g.stride_w > 1);
  return !strided_small && g.channels * g.kernel_h * g.kernel_w >= 8 && g.out_h > 0 &&
         g.out_w > 0 && waste(g) <= kMaxWaste;
}

bool implicit_input_grad_runs(const Strided& x, const ConvGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h * (g.kernel_h - 1) == 2 * g.pad_h &&
         g.dilation_w * (g.kernel_w - 1) == 2 * g.pad_w && implicit_conv_runs(x, g);
}

void implicit_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, int64_t G, const ConvOut& out) {
  run(x, w, Cout, bias, y, g, G, out);
}

bool implicit_weight_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout) {
  // Measured against im2col on a Zen 4: 1.1-1.16x at 16 channels (28x28), 1.0-1.1x at 32 (14x14),
  // 1.05-1.2x at 64 (56x56); level or slower at 128 and 256, which keep im2col.
  return Cout >= 16 && Cout <= 64 && implicit_conv_runs(x, g);
}

void implicit_conv2d_weight_grad(const Strided& x, const Strided& dy, int64_t Cout, float* partial,
                                 const ConvGeometry& g, int64_t G) {
  const int64_t B = x.shape[0], C = g.channels, kh = g.kernel_h, kw = g.kernel_w;
  const int64_t K = C * kh * kw, OH = g.out_h, OW = g.out_w, L = OH * OW;
  const int64_t phases = g.stride_h * g.stride_w, groups = (B + G - 1) / G;
  const Layout l = layout(g, G);
  std::vector<char> used;
  const std::vector<int64_t> rows = tap_rows(l, g, used);
  const float* dyp = dy.ptr<float>();
  parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t grp = g0; grp < g1; ++grp) {
      const int64_t b0 = grp * G, n = std::min(G, B - b0), N = wide_columns(l, g, n);
      float* P = thread_scratch<float>(static_cast<size_t>(C * phases * l.plane), 0);
      pack(x, b0, n, g, l, used, P);
      // dYt [N, Cout]: the group's dy at its wide columns, 0 at the padding's
      float* dYt = thread_scratch<float>(static_cast<size_t>(N * Cout), 1);
      std::fill(dYt, dYt + N * Cout, 0.0f);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t co = 0; co < Cout; ++co) {
          const float* src = dyp + ((b0 + i) * Cout + co) * L;
          for (int64_t r = 0; r < OH; ++r) {
            float* dst = dYt + ((i * l.Hs + r) * l.Ws) * Cout + co;
            for (int64_t c = 0; c < OW; ++c) dst[c * Cout] = src[r * OW + c];
          }
        }
      // Per tap (a, b): dWt[(c, a, b)][co] = sum_q P[rows[(c, a, b)] + q] dYt[q][co] over the C
      // channels, whose rows lie phases planes apart: A [C, N] read in place.
      float* dWt = partial + grp * K * Cout;
      for (int64_t t = 0; t < kh * kw; ++t) {
        const float* a = P + rows[static_cast<size_t>(t)];
        const int64_t lda = phases * l.plane;
        float* c = dWt + t * Cout;
        if (!own_sgemm_in_chunk(C, Cout, N, a, lda, false, dYt, Cout, false, c, kh * kw * Cout,
                                false))
          for (int64_t ci = 0; ci < C; ++ci)
            for (int64_t co = 0; co < Cout; ++co) {
              float s = 0;
              for (int64_t q = 0; q < N; ++q) s += a[ci * lda + q] * dYt[q * Cout + co];
              c[ci * kh * kw * Cout + co] = s;
            }
      }
    }
  });
}

void implicit_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g, int64_t G) {
  const auto wt = flipped_weight_kept(w, Cout, g);
  ConvGeometry gt = g;  // (same padding at stride 1: the output's size is the input's)
  gt.channels = Cout;
  run(dy, wt->data(), g.channels, nullptr, dx, gt, G, {});
}

}  // namespace vitrine::cpu
