// Max pooling with its indices and its inverse, as torch.nn.functional's max_pool2d(...,
// return_indices=True) and max_unpool2d (pool.cpp). The indices are PyTorch's: per (sample,
// channel) plane, the flat index h W + w of the maximum in the unpadded input plane.
#pragma once
#include <utility>

#include "ops/ops.h"

namespace vitrine::ops {

/// max_pool2d (ops.h) and where each maximum is: x [B, C, H, W] -> values [B, C, OH, OW] and
/// indices int64 [B, C, OH, OW], indices[b, c, oh, ow] = h W + w of the first maximum of the
/// window (row-major order). The gradient goes to values only.
ValuesIndices max_pool2d_with_indices(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                                      std::pair<int64_t, int64_t> stride,
                                      std::pair<int64_t, int64_t> padding = {0, 0});

/// The inverse of max pooling (torch.nn.functional.max_unpool2d): x [B, C, H, W] or [C, H, W],
/// indices int64 of x's shape (max_pool2d_with_indices's) ->
///   y [B, C, OH, OW] = 0, then y[b, c].flat[indices[b, c, h, w]] = x[b, c, h, w]
/// (where two entries name one index, the last in row-major order wins, as PyTorch's CPU kernel),
///   dx[b, c, h, w] = dy[b, c].flat[indices[b, c, h, w]].
/// output_size: [OH, OW] or [B, C, OH, OW]; empty: OH = (H - 1) stride_h - 2 padding_h +
/// kernel_h, OW likewise; given, each within (that - stride, that + stride).
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::pair<int64_t, int64_t> kernel,
                    std::pair<int64_t, int64_t> stride,
                    std::pair<int64_t, int64_t> padding = {0, 0}, const Dims& output_size = {});

}  // namespace vitrine::ops
