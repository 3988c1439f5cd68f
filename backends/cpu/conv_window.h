// Which output positions of a convolution read a given kernel tap from inside the image: the one
// index computation im2col, col2im and the depthwise kernels share.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

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

}  // namespace vitrine::cpu
