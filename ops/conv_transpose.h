// Transposed and 1-D convolutions, and the convolutions' padding modes (PyTorch's
// F.conv_transpose2d, F.conv1d, F.conv_transpose1d and the padding_mode of torch.nn.Conv*d).
//
// A transposed convolution is the input gradient of a convolution: conv_transpose2d(x, W) is what
// conv2d(z, W)'s backward gives z from the output gradient x, so it runs on the same kernels
// (Backend::conv2d_batched_backward: Winograd, direct, implicit GEMM on the CPU; else W^T x and
// col2im), never by inserting zeros. Its own gradients are the convolution's other two products:
//   dx = conv2d(dy, W)          (stride, padding, dilation, groups: the same)
//   dW = conv2d's weight gradient with dy as the convolution's input and x as its output gradient
// (conv_transpose.cpp). The 1-D ops are the 2-D ones on [N, C, 1, L] (conv1d.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace vitrine::ops {

/// PyTorch's F.conv_transpose2d (argument order included): x [B, Cin, H, W], weight [Cin, Cout /
/// groups, kh, kw], bias [Cout] or undefined -> [B, Cout, OH, OW] with
///   OH = (H - 1) stride_h - 2 pad_h + dil_h (kh - 1) + output_padding_h + 1,
///   y[b, co, oh stride_h - pad_h + i dil_h, ...] += weight[ci, co', i, j] x[b, ci, oh, ow]
/// summed over the input channels ci of co's group (co' = co within its group), plus bias[co].
/// output_padding (extra rows and columns at the bottom and right) must be smaller than either
/// stride or dilation.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::pair<int64_t, int64_t> stride = {1, 1},
                        std::pair<int64_t, int64_t> padding = {0, 0},
                        std::pair<int64_t, int64_t> output_padding = {0, 0}, int64_t groups = 1,
                        std::pair<int64_t, int64_t> dilation = {1, 1});

/// PyTorch's F.conv1d: x [B, Cin, L], weight [Cout, Cin / groups, k], bias [Cout] or undefined
/// -> [B, Cout, OL], OL = (L + 2 pad - dil (k - 1) - 1) / stride + 1; conv2d on [B, Cin, 1, L].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

/// PyTorch's F.conv_transpose1d: x [B, Cin, L], weight [Cin, Cout / groups, k] -> [B, Cout, OL],
/// OL = (L - 1) stride - 2 pad + dil (k - 1) + output_padding + 1; conv_transpose2d on
/// [B, Cin, 1, L].
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                        int64_t groups = 1, int64_t dilation = 1);

/// Circular padding (F.pad's "circular"), pads in PyTorch's order {last_lo, last_hi, prev_lo,
/// prev_hi, ...}: along a padded dim of size n, y[..., i, ...] = x[..., (i - lo) mod n, ...];
/// each pad at most n. Slices and cat, so gradients wrap around too.
Tensor circular_pad(const Tensor& x, const std::vector<int64_t>& pads);

/// x padded for a convolution's padding_mode, as torch.nn.Conv*d does before convolving with
/// padding 0: "zeros" (ops::pad), "reflect" (reflection_pad), "replicate" (replication_pad) or
/// "circular" (circular_pad). Anything else is an Error naming the four.
Tensor pad_for_conv(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode);

/// The padding of "same" for one dim (torch.nn.Conv*d's rule): the total dil (k - 1), split
/// {total / 2 before, the rest after} (the extra one at the right or bottom).
std::pair<int64_t, int64_t> same_padding(int64_t kernel, int64_t dilation);

}  // namespace vitrine::ops
