// Implicit-GEMM convolution on the CPU (conv_implicit.cpp): a stride-1 convolution with "same"
// padding (odd kernel, padding half of it) as one product per group of images whose B is the
// zero-padded input itself, read in place through a table of row offsets, instead of im2col's
// kh kw copies of it. backends/cpu/conv_batched.cpp takes it first where it runs.
#pragma once
#include <cstdint>

#include "backends/backend.h"

namespace vitrine::cpu {

/// Whether the implicit path takes a convolution of x [B, C, H, W] with geometry g: float32 on
/// Vitrine's own GEMM (AVX-512) under ConvAlgorithm::Auto; stride 1, dilation 1, an odd kernel
/// with padding (k - 1) / 2 on both sides; a depth C kh kw of 8 or more; and a map large enough
/// that the padding's columns and rows, computed and dropped, add at most a quarter
/// ((H + ph) (W + pw) <= 1.25 H W: 14x14 and larger for a 3x3).
bool implicit_conv_runs(const Strided& x, const ConvGeometry& g);

/// y [B, Cout, H, W] (contiguous) = conv(x, w) + bias: w [Cout, C kh kw] contiguous, bias [Cout]
/// or null. Groups of G images, one group per task on the pool's threads; results do not depend
/// on the thread count.
void implicit_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, int64_t G);

/// dx [B, C, H, W] (contiguous) of a convolution implicit_conv_runs takes, from dy [B, Cout, H, W]
/// (contiguous): with "same" padding and stride 1 it is itself such a convolution, of dy with the
/// weight flipped in space and its channel dims swapped,
///   dx[c, h, w] = sum_{co, i, j} W[co, c, kh - 1 - i, kw - 1 - j] dy[co, h - ph + i, w - pw + j].
void implicit_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g, int64_t G);

}  // namespace vitrine::cpu
