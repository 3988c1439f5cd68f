// Which output positions of a convolution read a given kernel tap from inside the image: the one
// index computation im2col, col2im and the depthwise kernels share; im2col of a band of output
// rows, which the batched convolution tiles large images with; the convolutions' scratch; the
// flipped weight of an input gradient, and a weight's derived forms kept between calls; what a
// convolution does to its rows as it writes them; the sum of a weight gradient's per-group
// partials.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/thread_pool.h"

namespace vitrine::cpu {

/// The outputs o in [lo, hi) whose input index o * stride - pad + k lies in [0, size), for a tap
/// at offset k (i dilation for kernel row i), out outputs.
inline std::pair<int64_t, int64_t> valid_range(int64_t k, int64_t size, int64_t stride, int64_t pad,
                                               int64_t out) {
  const int64_t a = pad - k;             // o * stride >= a
  const int64_t b = size - 1 + pad - k;  // o * stride <= b
  const int64_t lo = std::min(out, a <= 0 ? int64_t{0} : (a + stride - 1) / stride);
  const int64_t hi = b < 0 ? 0 : std::min(out, b / stride + 1);
  return {lo, std::max(lo, hi)};
}

/// A thread's scratch of at least n elements of T (slot 0 or 1), kept between calls: the
/// convolutions' columns, phase planes and product chunks (conv_batched.cpp, conv_implicit.cpp;
/// one convolution at a time per thread, so they share it).
template <typename T>
T* thread_scratch(size_t n, int slot) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& v = buffers[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// What a convolution does to y as it writes it, after the bias (ops::conv2d_add_relu, a ResNet
/// block's batch norm folded into its convolution in inference): y = relu(y + residual).
struct ConvOut {
  const float* residual = nullptr;  // laid out as y ([B, Cout, OH, OW] contiguous), or none
  bool relu = false;
};

/// d[i] = s[i] + add (+ r[i]) (then relu) for i < n: a row of y from a row of
/// the product; r the residual at the row's place in y (null: none). (One loop per case, so that
/// each vectorises.)
template <typename T>
inline void finish_row(T* d, const T* s, int64_t n, T add, const T* r, bool relu) {
  const auto clamp = [](T v) { return v > T(0) ? v : T(0); };  // (ops::relu's rule, NaN to 0)
  if (r && relu)
    for (int64_t i = 0; i < n; ++i) d[i] = clamp(s[i] + add + r[i]);
  else if (r)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] + add + r[i];
  else if (relu)
    for (int64_t i = 0; i < n; ++i) d[i] = clamp(s[i] + add);
  else
    for (int64_t i = 0; i < n; ++i) d[i] = s[i] + add;
}

/// dw[co][k] = the sum over groups, in group order, of partial[grp][k][co]: a weight gradient from
/// its per-group dW^T (partial [groups, K, Cout]: conv_batched.cpp's, conv_direct.cpp's), the
/// same bits on any number of threads. Blocks of 16 k: each sums whole rows of Cout (contiguous
/// in the partials, so the adds vectorise), then writes 16 contiguous k per co.
template <typename T>
void sum_group_partials(const T* partial, int64_t groups, int64_t K, int64_t Cout, T* dw) {
  constexpr int64_t kB = 16;
  const int64_t blocks = (K + kB - 1) / kB;
  parallel_for(blocks, kB * groups * Cout, [&](int64_t blk) {
    const int64_t k0 = blk * kB, nk = std::min(kB, K - k0);
    // [nk, Cout] in the thread's scratch (the convolutions' parallel loops have ended)
    T* acc = thread_scratch<T>(static_cast<size_t>(nk * Cout), 0);
    std::fill(acc, acc + nk * Cout, T(0));
    for (int64_t grp = 0; grp < groups; ++grp) {
      const T* p = partial + (grp * K + k0) * Cout;
      for (int64_t i = 0; i < nk * Cout; ++i) acc[i] += p[i];
    }
    for (int64_t co = 0; co < Cout; ++co)
      for (int64_t j = 0; j < nk; ++j) dw[co * K + k0 + j] = acc[j * Cout + co];
  });
}

/// wt [C, Cout kh kw] from w [Cout, C, kh, kw]: the weight flipped in space, its channel dims
/// swapped, wt[c][(co, a, b)] = w[co][c][kh - 1 - a][kw - 1 - b]. A stride-1 "same" convolution's
/// input gradient is the convolution of dy with it (conv_implicit.cpp, conv_winograd.cpp).
inline std::vector<float> flipped_weight(const float* w, int64_t Cout, const ConvGeometry& g) {
  const int64_t C = g.channels, kh = g.kernel_h, kw = g.kernel_w;
  std::vector<float> wt(static_cast<size_t>(C * Cout * kh * kw));
  for (int64_t co = 0; co < Cout; ++co)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t b = 0; b < kw; ++b)
          wt[static_cast<size_t>(((c * Cout + co) * kh + a) * kw + b)] =
              w[((co * C + c) * kh + kh - 1 - a) * kw + kw - 1 - b];
  return wt;
}

/// The last N entries a thread derived and keeps for reuse (conv_direct.cpp's plans, kept_weight's
/// forms): once full, each new entry replaces the oldest.
template <typename Entry, size_t N>
struct KeptRing {
  std::vector<Entry> entries;
  size_t next = 0;  // (the entry replaced next once all are taken)
  void add(Entry e) {
    if (entries.size() < N) return entries.push_back(std::move(e));
    entries[next] = std::move(e);
    next = (next + 1) % N;
  }
};

/// One entry of kept_weight's memory: a weight's derived form and the values it was made from.
struct KeptWeight {
  std::array<int64_t, 3> key;
  std::vector<float> w;
  std::shared_ptr<const std::vector<float>> form;
};

/// make() (a weight's derived form: transformed, flipped) for the weight w of n floats. Inside a
/// parallel loop, where batch-invariant mode convolves each leaf of 8 images by a call of its own
/// and each call derived the same forms, it is kept per thread for the last 8 (w's values, key)
/// of each Tag and returned again while w's values are the same: compared in full, so a weight
/// updated in place is derived again. Elsewhere (one call an op), and for weights over 2^18
/// floats (the copies kept would cost more memory than the derivation costs time), made afresh.
template <typename Tag, typename Make>
std::shared_ptr<const std::vector<float>> kept_weight(const float* w, int64_t n,
                                                      const std::array<int64_t, 3>& key,
                                                      Make&& make) {
  if (!in_parallel_chunk() || n > (int64_t{1} << 18))
    return std::make_shared<const std::vector<float>>(make());
  thread_local KeptRing<KeptWeight, 8> kept;  // (one per instantiation: per Tag and caller)
  for (const KeptWeight& k : kept.entries)
    if (k.key == key && static_cast<int64_t>(k.w.size()) == n &&
        std::memcmp(k.w.data(), w, static_cast<size_t>(n) * sizeof(float)) == 0)
      return k.form;
  auto form = std::make_shared<const std::vector<float>>(make());
  kept.add({key, std::vector<float>(w, w + n), form});
  return form;
}

/// flipped_weight(w, Cout, g), kept (kept_weight): an input gradient's weight.
inline std::shared_ptr<const std::vector<float>> flipped_weight_kept(const float* w, int64_t Cout,
                                                                     const ConvGeometry& g) {
  struct Tag {};
  return kept_weight<Tag>(w, Cout * g.channels * g.kernel_h * g.kernel_w,
                          {Cout, g.kernel_h, g.kernel_w},
                          [&] { return flipped_weight(w, Cout, g); });
}

/// im2col of output rows [oh0, oh1) of one image (x [C, H, W], float32, unit column stride of
/// its rows) into cols [C kh kw, (oh1 - oh0) out_w] with rows ld apart, on the AVX-512 row
/// kernels (conv.cpp). false, having done nothing, where those do not run (another dtype, a
/// column stride over 2, no AVX-512): then CpuBackend::im2col's plain loops do the whole image.
bool im2col_rows_f32(const Strided& x, float* cols, int64_t ld, const ConvGeometry& g, int64_t oh0,
                     int64_t oh1);
/// Whether im2col_rows_f32 runs for this image ([C, H, W] or [B, C, H, W]) and geometry.
bool im2col_rows_f32_runs(const Strided& x, const ConvGeometry& g);

}  // namespace vitrine::cpu
