// Convolution over the whole batch at once (ops/conv.cpp's first choice on the CPU). Where the
// implicit GEMM runs (conv_implicit.h: float32, ConvAlgorithm::Auto, little padding waste) the
// forward, a stride-1 "same" convolution's input gradient and a weight gradient of 16 to 64
// output channels go there, in the same groups (a 3x3 at stride 1 of 64 channels and more to
// Winograd's, conv_winograd.h); what follows is the im2col path, for the rest. The batch is
// cut into groups of G images, and the groups run in parallel on the pool's threads, each group
// on one thread from its im2col to its last product, so that no step waits at a barrier for
// another thread. With K = C kh kw, L = OH OW and the group's columns side by side (image i at
// columns i L .. i L + L - 1):
//   cols  [K, G L]       = im2col of the group's images
//   forward:   Y [Cout, G L] = W cols,  y[b, co, l] = Y[co, i L + l] + bias[co]
//   backward:  dY [Cout, G L] = the group's dy, gathered
//              dWt_g [K, Cout] = cols dY^T                  (one partial per group)
//              dcols [K, G L]  = W^T dY,  dx[b] = col2im(dcols's image i)
//              dW[co, k] = sum over groups, in group order, of dWt_g[k, co]
// The products run on Vitrine's own GEMM (sgemm.h, own_sgemm_in_chunk: any number of rows, so
// that 16 output channels are one 12-row strip and one 4-row strip at full speed) on the group's
// thread; a shape it does not take (a side under its minimum: the 9-deep weight gradient of a
// one-channel stem, a 1x1 convolution of fewer than 16 channels) runs the plain loops below
// instead, which cost little there.
// A large map (over kGroupColumns outputs an image: a 224x224 network's early stages) goes in
// bands of output rows instead, G = 1: the forward's columns of one band stay in L2, and its
// product lands in y directly. (The backward keeps whole images.)
// G depends on the shape only (about kGroupColumns output positions, at least kMinGroups
// groups where that leaves kMinColumns a group), every group is computed by one thread in the same
// way, and the partials are added in a fixed order: results do not depend on the number of threads.
//
// Why not one product per chunk over all threads (the per-image path, ops/conv.cpp): a ResNet's
// products are small (16 to 64 output channels), and cut between two threads each ended at a
// barrier; on 2 cores the ResNet-8 of vitrine-train spent a third of its step waiting
// (docs/performance.md).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/conv_algorithm.h"
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_implicit.h"
#include "backends/cpu/conv_window.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"

namespace vitrine::cpu {

namespace {

/// Output positions per group, and the fewest groups a batch is cut into.
constexpr int64_t kGroupColumns = 1024;
constexpr int64_t kMinGroups = 16;
constexpr int64_t kMinColumns = 256;
/// The columns of one band of a large image's output rows, at most (1 MiB of float32: they stay
/// in L2 between im2col's writes and the product's reads).
constexpr int64_t kBandFloats = int64_t{1} << 18;

int64_t group_size(int64_t B, int64_t L) {
  const int64_t l = std::max<int64_t>(L, 1);
  const int64_t by_columns = (kGroupColumns + l - 1) / l;
  const int64_t by_groups = (B + kMinGroups - 1) / kMinGroups;
  // At least kMinColumns a group, whatever the batch: a small batch of small maps (a 64x64
  // ResNet-18's 2x2 stage at batch 8) otherwise made 4-column products, under the own GEMM's
  // minimum and left to the plain loops.
  const int64_t at_least = (kMinColumns + l - 1) / l;
  const int64_t G = std::clamp<int64_t>(std::max(std::min(by_columns, by_groups), at_least), 1,
                                        std::max<int64_t>(B, 1));
  // Then as even as that many groups can be: ResNet-18's 7x7 stage at batch 8 made groups of 6
  // and 2 images, and one of two threads waited for the other half of the time.
  const int64_t groups = (B + G - 1) / G;
  return std::max<int64_t>((B + groups - 1) / groups, 1);
}

/// C[M, N] (+)= A[M, K] B[K, N] on the calling thread, C row-major (ldc); A stored transposed
/// when a_trans (A[m][k] = a[k lda + m]), B when b_trans (B[k][n] = b[n ldb + k]). float32 on the
/// own GEMM when it takes the shape, else plain loops.
template <typename T>
void group_gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, bool a_trans, const T* b,
                int64_t ldb, bool b_trans, T* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    if (own_sgemm_in_chunk(M, N, K, a, lda, a_trans, b, ldb, b_trans, c, ldc, accumulate)) return;
  }
  const auto A = [&](int64_t m, int64_t k) { return a_trans ? a[k * lda + m] : a[m * lda + k]; };
  if (b_trans && !a_trans) {  // dot products of contiguous rows (the weight gradient's case)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const T* am = a + m * lda;
        const T* bn = b + n * ldb;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < K; ++k) s += am[k] * bn[k];
        c[m * ldc + n] = accumulate ? c[m * ldc + n] + s : s;
      }
    return;
  }
  for (int64_t m = 0; m < M; ++m) {
    T* cm = c + m * ldc;
    if (!accumulate) std::fill(cm, cm + N, T(0));
    for (int64_t k = 0; k < K; ++k) {
      const T amk = A(m, k);
      if (!b_trans) {
        const T* bk = b + k * ldb;
#pragma omp simd
        for (int64_t n = 0; n < N; ++n) cm[n] += amk * bk[n];
      } else {
        for (int64_t n = 0; n < N; ++n) cm[n] += amk * b[n * ldb + k];
      }
    }
  }
}

/// Image b of x [B, C, H, W] (any strides) as [C, H, W].
Strided image(const Strided& x, int64_t b) {
  Strided r;
  r.dtype = x.dtype;
  r.data =
      static_cast<char*>(x.data) + b * x.strides[0] * static_cast<int64_t>(dtype_size(x.dtype));
  r.shape = {x.shape[1], x.shape[2], x.shape[3]};
  r.strides = {x.strides[1], x.strides[2], x.strides[3]};
  return r;
}

/// Image i's [K, L] block of a group's columns [K, G L].
template <typename T>
Strided block(T* cols, DType dt, int64_t K, int64_t G, int64_t L, int64_t i) {
  Strided s;
  s.dtype = dt;
  s.data = cols + i * L;
  s.shape = {K, L};
  s.strides = {G * L, 1};
  return s;
}

/// Whether Winograd's 2x2 tiles cover a stride-1 map with more than kMaxTileWaste of its outputs
/// (7x7: 64 for 49). There the direct convolution, which groups the images' maps, measured faster:
/// ResNet-8's 64-channel 3x3 at 7x7, batch 128, 2.8 against 3.8 ms on a Zen 4.
constexpr double kMaxTileWaste = 1.2;
bool small_map(const ConvGeometry& g) {
  const int64_t covered = (g.out_h + 1) / 2 * 2 * ((g.out_w + 1) / 2 * 2);
  return static_cast<double>(covered) > kMaxTileWaste * static_cast<double>(g.out_h * g.out_w);
}

bool batched_on_cpu(DType dt) {
  const ConvAlgorithm a = conv_algorithm();
  if (a == ConvAlgorithm::PerImage) return false;
  if (a == ConvAlgorithm::Batched) return dt == DType::Float32 || dt == DType::Float64;
  return dt == DType::Float32 && gemm_policy() != GemmPolicy::Off;  // Auto, Implicit, Direct
}

/// conv2d_batched, then out's residual and ReLU (float32 only) as y is written.
bool conv_forward(CpuBackend& be, const Strided& x, const Strided& w, const Strided& bias,
                  const Strided& y, const ConvGeometry& g, const ConvOut& out) {
  const int64_t B = x.shape[0], Cout = w.shape[0];
  const int64_t K = g.channels * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  VT_ASSERT(w.is_contiguous() && w.numel() == Cout * K && y.is_contiguous());
  VT_ASSERT(!bias.data || bias.numel() == Cout);
  // A 3x3 at stride 1: Winograd's F(2x2, 3x3) (conv_winograd.h), 2.25x fewer multiplies, unless
  // its tiles waste much of that on a small map that the direct convolution takes.
  const bool direct = direct_conv_runs(x, g, Cout);
  if (winograd_conv_runs(x, g, Cout) && !(small_map(g) && direct)) {
    winograd_conv2d(x, w.ptr<float>(), Cout, bias.data ? bias.ptr<float>() : nullptr,
                    y.ptr<float>(), g, out);
    return true;
  }
  // A stride-1 convolution as wide as its input (conv_direct.h): x and y in place, no copies.
  if (direct) {
    direct_conv2d(x, w.ptr<float>(), Cout, bias.data ? bias.ptr<float>() : nullptr, y.ptr<float>(),
                  g, out);
    return true;
  }
  // Where the phase planes waste little (conv_implicit.h): no im2col at all.
  if (implicit_conv_runs(x, g)) {
    implicit_conv2d(x, w.ptr<float>(), Cout, bias.data ? bias.ptr<float>() : nullptr,
                    y.ptr<float>(), g, group_size(B, L), out);
    return true;
  }
  // A large map (over kGroupColumns outputs an image) in float32: bands of output rows, whose
  // columns stay under kBandFloats, each band's product written straight into y (rows L apart).
  if (L > kGroupColumns && im2col_rows_f32_runs(x, g)) {
    const int64_t OW = g.out_w, OH = g.out_h;
    const int64_t band = std::clamp<int64_t>(kBandFloats / std::max<int64_t>(K, 1) / OW, 1,
                                             std::max<int64_t>(OH, 1));
    const int64_t bands = (OH + band - 1) / band;
    const float* wp = w.ptr<float>();
    const float* bp = bias.data ? bias.ptr<float>() : nullptr;
    float* yp = y.ptr<float>();
    parallel_chunks(B * bands, 1, [&](int64_t u0, int64_t u1) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t b = u / bands, oh0 = (u % bands) * band, oh1 = std::min(OH, oh0 + band);
        const int64_t n = (oh1 - oh0) * OW;
        float* cols = thread_scratch<float>(static_cast<size_t>(K * n), 0);
        im2col_rows_f32(image(x, b), cols, n, g, oh0, oh1);
        const int64_t at = b * Cout * L + oh0 * OW;  // y[b, :, oh0 : oh1] [Cout, n], rows L apart
        float* yb = yp + at;
        group_gemm<float>(Cout, n, K, wp, K, false, cols, n, false, yb, L, false);
        if (bp || out.residual || out.relu)
          for (int64_t co = 0; co < Cout; ++co)
            finish_row(yb + co * L, yb + co * L, n, bp ? bp[co] : 0.0f,
                       out.residual ? out.residual + at + co * L : nullptr, out.relu);
      }
    });
    return true;
  }
  const int64_t G = group_size(B, L), groups = (B + G - 1) / G;
  dispatch_float(x.dtype, "conv2d", [&]<typename T>() {
    const T* wp = w.ptr<T>();
    const T* bp = bias.data ? bias.ptr<T>() : nullptr;
    T* yp = y.ptr<T>();
    parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t grp = g0; grp < g1; ++grp) {
        const int64_t b0 = grp * G, n = std::min(G, B - b0), nL = n * L;
        T* cols = thread_scratch<T>(static_cast<size_t>(K * nL), 0);
        T* yt = thread_scratch<T>(static_cast<size_t>(Cout * nL), 1);
        for (int64_t i = 0; i < n; ++i)
          be.im2col(image(x, b0 + i), block(cols, x.dtype, K, n, L, i), g);
        // Y [Cout, n L] = W [Cout, K] cols [K, n L], then y[b0 + i] = Y's columns i L ..
        group_gemm<T>(Cout, nL, K, wp, K, false, cols, nL, false, yt, nL, false);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t co = 0; co < Cout; ++co) {
            const T* src = yt + co * nL + i * L;
            const int64_t at = ((b0 + i) * Cout + co) * L;
            if constexpr (std::is_same_v<T, float>) {
              if (bp || out.residual || out.relu) {
                finish_row(yp + at, src, L, bp ? bp[co] : 0.0f,
                           out.residual ? out.residual + at : nullptr, out.relu);
                continue;
              }
            } else if (bp) {  // (float64: no residual or ReLU here)
              finish_row(yp + at, src, L, bp[co], static_cast<const T*>(nullptr), false);
              continue;
            }
            std::memcpy(yp + at, src, static_cast<size_t>(L) * sizeof(T));
          }
      }
    });
  });
  return true;
}

}  // namespace

bool CpuBackend::conv2d_batched(const Strided& x, const Strided& w, const Strided& bias,
                                const Strided& y, const ConvGeometry& g) {
  return batched_on_cpu(x.dtype) && conv_forward(*this, x, w, bias, y, g, {});
}

bool CpuBackend::conv2d_batched_add_relu(const Strided& x, const Strided& w, const Strided& bias,
                                         const Strided& residual, bool relu, const Strided& y,
                                         const ConvGeometry& g) {
  if (x.dtype != DType::Float32 || !batched_on_cpu(x.dtype)) return false;
  VT_ASSERT(!residual.data || (residual.is_contiguous() && residual.numel() == y.numel()));
  return conv_forward(*this, x, w, bias, y, g,
                      {residual.data ? residual.ptr<float>() : nullptr, relu});
}

bool CpuBackend::conv2d_batched_backward(const Strided& x, const Strided& w, const Strided& dy,
                                         const Strided& dx, const Strided& dw,
                                         const ConvGeometry& g) {
  if (!batched_on_cpu(x.dtype)) return false;
  const int64_t B = x.shape[0], Cout = w.shape[0];
  const int64_t K = g.channels * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  VT_ASSERT(w.is_contiguous() && dy.is_contiguous());
  VT_ASSERT(!dx.data || dx.is_contiguous());
  VT_ASSERT(!dw.data || (dw.is_contiguous() && dw.numel() == Cout * K));
  const int64_t G = group_size(B, L), groups = (B + G - 1) / G;
  // A stride-1 "same" convolution's dx is a convolution of dy with the flipped weight, Winograd's,
  // direct or implicit too; the loop below then computes dW only.
  Strided dx_cols = dx;
  const bool direct_can = dx.data && direct_input_grad_runs(dy, g, Cout);
  const bool winograd_dx =
      dx.data && winograd_input_grad_runs(x, g, Cout) && !(small_map(g) && direct_can);
  const bool direct_dx = direct_can && !winograd_dx;
  if (winograd_dx || direct_dx || (dx.data && implicit_input_grad_runs(x, g))) {
    if (winograd_dx)
      winograd_conv2d_input_grad(dy, w.ptr<float>(), Cout, dx.ptr<float>(), g);
    else if (direct_dx)
      direct_conv2d_input_grad(dy, w.ptr<float>(), Cout, dx.ptr<float>(), g);
    else
      implicit_conv2d_input_grad(dy, w.ptr<float>(), Cout, dx.ptr<float>(), g, G);
    dx_cols = Strided();
    if (!dw.data) return true;
  }
  // The weight gradient by the direct convolution's tiles (conv_direct.h), x and dy in place.
  Strided dw_left = dw;
  if (dw.data && direct_weight_grad_runs(x, g, Cout)) {
    direct_conv2d_weight_grad(x, dy.ptr<float>(), Cout, dw.ptr<float>(), g);
    if (!dx_cols.data) return true;
    dw_left = Strided();
  }
  dispatch_float(x.dtype, "conv2d_backward", [&]<typename T>() {
    const T* wp = w.ptr<T>();
    const T* dyp = dy.ptr<T>();
    const Strided& dw = dw_left;
    // The weight gradient's partials, one [K, Cout] per group: read from the padded input in
    // place where the implicit path's planes waste little (conv_implicit.h), else by im2col below.
    std::unique_ptr<T[]> partial(dw.data ? new T[static_cast<size_t>(groups * K * Cout)] : nullptr);
    bool dw_cols = dw.data != nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (dw_cols && implicit_weight_grad_runs(x, g, Cout)) {
        implicit_conv2d_weight_grad(x, dy, Cout, partial.get(), g, G);
        dw_cols = false;
      }
    }
    if (dw_cols || dx_cols.data)
      parallel_chunks(groups, 1, [&](int64_t g0, int64_t g1) {
        for (int64_t grp = g0; grp < g1; ++grp) {
          const int64_t b0 = grp * G, n = std::min(G, B - b0), nL = n * L;
          T* cols = thread_scratch<T>(static_cast<size_t>(K * nL), 0);
          T* dY = thread_scratch<T>(static_cast<size_t>(Cout * nL), 1);
          for (int64_t i = 0; i < n; ++i)  // dY [Cout, n L]: image i's dy at columns i L
            for (int64_t co = 0; co < Cout; ++co)
              std::memcpy(dY + co * nL + i * L, dyp + ((b0 + i) * Cout + co) * L,
                          static_cast<size_t>(L) * sizeof(T));
          if (dw_cols) {
            for (int64_t i = 0; i < n; ++i)
              im2col(image(x, b0 + i), block(cols, x.dtype, K, n, L, i), g);
            // dWt_g [K, Cout] = cols [K, n L] dY^T [n L, Cout]
            group_gemm<T>(K, Cout, nL, cols, nL, false, dY, nL, true,
                          partial.get() + grp * K * Cout, Cout, false);
          }
          if (dx_cols.data) {
            // dcols [K, n L] = W^T [K, Cout] dY [Cout, n L]
            group_gemm<T>(K, nL, Cout, wp, K, true, dY, nL, false, cols, nL, false);
            for (int64_t i = 0; i < n; ++i)
              col2im(block(cols, x.dtype, K, n, L, i), image(dx_cols, b0 + i), g);
          }
        }
      });
    if (dw.data) sum_group_partials(partial.get(), groups, K, Cout, dw.ptr<T>());
  });
  return true;
}

}  // namespace vitrine::cpu
