// Implicit-GEMM convolution on the CPU (conv_implicit.cpp): one product per group of images whose
// B is the zero-padded input itself (cut into stride_h x stride_w phase planes at a stride over
// 1), read in place through a table of row offsets, instead of im2col's kh kw copies of it.
// backends/cpu/conv_batched.cpp takes it first where it runs.
#pragma once
#include <cstdint>

#include "backends/backend.h"
#include "backends/cpu/conv_window.h"

namespace vitrine::cpu {

/// Whether the implicit path takes a convolution of x [B, C, H, W] with geometry g: float32 on
/// Vitrine's own GEMM (AVX-512) under ConvAlgorithm::Auto or Implicit, a depth C kh kw of 8 or
/// more, a map large enough that the columns of the padding, computed and dropped, add at most a
/// quarter of the work (for a 3x3 with padding 1, outputs of 14x14 and larger), and at a stride
/// over 1 a kernel of more than 9 taps (a 7x7 stem; any padding and dilation).
bool implicit_conv_runs(const Strided& x, const ConvGeometry& g);
/// Whether implicit_conv2d_input_grad takes its input gradient: implicit_conv_runs, stride 1 and
/// "same" padding (dilation (k - 1) = 2 padding, both dims).
bool implicit_input_grad_runs(const Strided& x, const ConvGeometry& g);

/// y [B, Cout, OH, OW] (contiguous) = conv(x, w) + bias, then out's residual and ReLU: w [Cout,
/// C kh kw] contiguous, bias [Cout] or null. Groups of G images, one group per task on the pool's
/// threads; results do not depend on the thread count.
void implicit_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, int64_t G, const ConvOut& out = {});

/// Whether implicit_conv2d_weight_grad takes the weight gradient: implicit_conv_runs and 16 to 64
/// output channels (the products' columns: below, under the own GEMM's minimum; above, im2col's
/// one product measured as fast).
bool implicit_weight_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// The weight gradient's partials, one per group of G images, partial [groups, C kh kw, Cout]
/// (group g's dW^T), from x [B, C, H, W] and dy [B, Cout, OH, OW] (contiguous): with the group's
/// planes P (as the forward lays them out) and dYt [N, Cout] (its dy at the wide columns, 0 at
/// the padding's), per tap (a, b)
///   dW^T[(c, a, b)][co] = sum_q P[row(c, a, b) + q] dYt[q][co]      (q over the wide columns)
/// one product whose A, the C rows of the tap, is read in place (they lie a fixed number of
/// planes apart): no im2col. The caller adds the partials in group order.
void implicit_conv2d_weight_grad(const Strided& x, const Strided& dy, int64_t Cout, float* partial,
                                 const ConvGeometry& g, int64_t G);

/// dx [B, C, H, W] (contiguous) of a convolution implicit_input_grad_runs takes, from dy [B, Cout,
/// H, W] (contiguous): with "same" padding and stride 1 it is itself such a convolution, of dy
/// with the weight flipped in space and its channel dims swapped,
///   dx[c, h, w] = sum_{co, i, j} W[co, c, kh - 1 - i, kw - 1 - j] dy[co, h - ph + i dh, w - pw + j
///   dw].
void implicit_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g, int64_t G);

}  // namespace vitrine::cpu
