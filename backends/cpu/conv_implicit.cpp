// Implicit-GEMM convolution (conv_implicit.h): stride 1, "same" padding (ph = (kh - 1) / 2, pw
// likewise), float32 on the own GEMM.
//
// im2col writes kh kw shifted copies of the input, one per kernel tap, and the product reads them
// back: for a 3x3 over 16 channels (a ResNet-8) that copy cost a quarter of the inference. Here the
// copy is one, with the zero padding in it, and the taps are row offsets into it. For a group of
// n images, each channel's plane P_c holds the images one above the other, each row followed by
// pw zeros and each image by ph zero rows (with ph zero rows above the first): rows Ws = W + pw
// apart, images Hs = H + ph rows apart. A row's pw zeros are at once the right padding of that row
// and the left padding of the next; an image's zero rows the bottom padding of it and the top of
// the next. Output (i, r, c) is computed at the "wide" column q = (i Hs + r) Ws + c, and
//   B[(c, a, b)][q] = P_c[q + a Ws + b]   (from P_c's start, which lies pw before the first row)
//   Y [Cout, N] = W [Cout, C kh kw] B       (W as stored: its columns are (c, a, b) in that order)
// so B's row (c, a, b) is P_c read from offset a Ws + b: own_sgemm_rows_in_chunk with a table of
// those offsets. The wide columns of the padding (q with c >= W or r >= H) are computed and
// dropped: (H + ph)(W + pw) / (H W) of the work, 1.07 at 28x28 and 1.15 at 14x14 for a 3x3, which
// is why smaller maps (1.31 at 7x7) stay with im2col.
//
// The product goes in chunks of whole wide rows (about 2^16 / Cout columns: Y's chunk stays in
// L2), each chunk's valid columns copied out to y with the bias while in cache. A group of images
// is one task on one thread from its copy to its last chunk, as in conv_batched.cpp, so the result
// does not depend on the number of threads.
#include "backends/cpu/conv_implicit.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/thread_pool.h"

namespace vitrine::cpu {

namespace {

/// The zero-padded planes of a group of n images (file comment).
struct Layout {
  int64_t Ws, Hs;  // row and image strides, in floats and rows
  int64_t plane;   // floats between channels' planes
  int64_t N;       // wide columns, up to the last image's last output
};

Layout layout(const ConvGeometry& g, int64_t n) {
  Layout l;
  l.Ws = g.width + g.pad_w;
  l.Hs = g.height + g.pad_h;
  l.plane = (g.pad_w + (g.pad_h + n * l.Hs) * l.Ws + 15) / 16 * 16;
  l.N = ((n - 1) * l.Hs + g.height - 1) * l.Ws + g.width;
  return l;
}

/// A thread's buffer of at least n floats (slot 0: the planes, 1: a chunk of Y), kept.
template <typename T>
T* buffer(size_t n, int slot) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& v = buffers[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// P (C planes of l.plane floats) from images [b0, b0 + n) of x [B, C, H, W] (any strides).
void pack(const Strided& x, int64_t b0, int64_t n, const ConvGeometry& g, const Layout& l,
          float* P) {
  const int64_t H = g.height, W = g.width, Ws = l.Ws;
  const float* xp = x.ptr<float>();
  for (int64_t c = 0; c < g.channels; ++c) {
    float* p = P + c * l.plane;
    float* const end = p + l.plane;
    const int64_t head = g.pad_w + g.pad_h * Ws;
    std::fill(p, p + head, 0.0f);
    p += head;
    for (int64_t i = 0; i < n; ++i) {
      const float* img = xp + (b0 + i) * x.strides[0] + c * x.strides[1];
      for (int64_t h = 0; h < H; ++h, p += Ws) {
        const float* src = img + h * x.strides[2];
        if (x.strides[3] == 1)
          std::memcpy(p, src, static_cast<size_t>(W) * sizeof(float));
        else
          for (int64_t w = 0; w < W; ++w) p[w] = src[w * x.strides[3]];
        std::fill(p + W, p + Ws, 0.0f);
      }
      std::fill(p, p + g.pad_h * Ws, 0.0f);
      p += g.pad_h * Ws;
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

void run(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
         const ConvGeometry& g, int64_t G) {
  const int64_t B = x.shape[0], C = g.channels, H = g.height, W = g.width;
  const int64_t kh = g.kernel_h, kw = g.kernel_w, K = C * kh * kw;
  const int64_t groups = (B + G - 1) / G;
  parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t grp = g0; grp < g1; ++grp) {
      const int64_t b0 = grp * G, n = std::min(G, B - b0);
      const Layout l = layout(g, n);
      float* P = buffer<float>(static_cast<size_t>(C * l.plane), 0);
      pack(x, b0, n, g, l, P);
      thread_local std::vector<int64_t> rows;
      rows.resize(static_cast<size_t>(K));
      for (int64_t c = 0; c < C; ++c)
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t b = 0; b < kw; ++b)
            rows[static_cast<size_t>((c * kh + a) * kw + b)] = c * l.plane + a * l.Ws + b;
      // Chunks of whole wide rows, about 2^16 / Cout columns (Y's chunk in L2), 256 at least.
      const int64_t per_chunk =
          std::max<int64_t>(1, std::clamp<int64_t>((int64_t{1} << 16) / Cout, 256, 4096) / l.Ws);
      const int64_t nc = per_chunk * l.Ws;
      float* Yc = buffer<float>(static_cast<size_t>(Cout * nc), 1);
      for (int64_t R0 = 0; R0 * l.Ws < l.N; R0 += per_chunk) {
        const int64_t q0 = R0 * l.Ws, cols = std::min(nc, l.N - q0);
        rows_gemm(Cout, cols, K, w, P + q0, rows.data(), Yc, nc);
        // The chunk's valid outputs: wide row R is image R / Hs's row R % Hs (none past H).
        for (int64_t R = R0; R < R0 + per_chunk && R * l.Ws < l.N; ++R) {
          const int64_t i = R / l.Hs, r = R % l.Hs;
          if (r >= H) continue;
          for (int64_t co = 0; co < Cout; ++co) {
            const float* src = Yc + co * nc + (R - R0) * l.Ws;
            float* dst = y + ((b0 + i) * Cout + co) * H * W + r * W;
            const float add = bias ? bias[co] : 0.0f;
            for (int64_t c = 0; c < W; ++c) dst[c] = src[c] + add;
          }
        }
      }
    }
  });
}

}  // namespace

bool implicit_conv_runs(const Strided& x, const ConvGeometry& g) {
  if (x.dtype != DType::Float32 || conv_algorithm() != ConvAlgorithm::Auto ||
      gemm_policy() == GemmPolicy::Off)
    return false;
  const int64_t H = g.height, W = g.width;
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.kernel_h % 2 == 1 && g.kernel_w % 2 == 1 && 2 * g.pad_h == g.kernel_h - 1 &&
         2 * g.pad_w == g.kernel_w - 1 && g.out_h == H && g.out_w == W &&
         g.channels * g.kernel_h * g.kernel_w >= 8 &&
         4 * (H + g.pad_h) * (W + g.pad_w) <= 5 * H * W;
}

void implicit_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, int64_t G) {
  run(x, w, Cout, bias, y, g, G);
}

void implicit_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g, int64_t G) {
  const int64_t C = g.channels, kh = g.kernel_h, kw = g.kernel_w;
  // wt [C, Cout kh kw]: wt[c][(co, a, b)] = W[co][c][kh - 1 - a][kw - 1 - b]
  std::vector<float> wt(static_cast<size_t>(C * Cout * kh * kw));
  for (int64_t co = 0; co < Cout; ++co)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t b = 0; b < kw; ++b)
          wt[static_cast<size_t>(((c * Cout + co) * kh + a) * kw + b)] =
              w[((co * C + c) * kh + kh - 1 - a) * kw + kw - 1 - b];
  ConvGeometry gt = g;
  gt.channels = Cout;
  run(dy, wt.data(), C, nullptr, dx, gt, G);
}

}  // namespace vitrine::cpu
