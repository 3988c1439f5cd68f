// Direct convolution on the CPU (conv_direct.cpp): a stride-1 convolution whose output rows are
// as wide as its input's (a 3x3 with padding 1, any "same" width) computed straight from x into
// y, both NCHW, with no copy of either: the output positions of an image are one flat run of
// OH OW floats, and a tap's input is the same run shifted by a constant, read in place with the
// lanes that fall outside the image masked off; other strides and small maps through phase
// planes (one copy of the input); narrow 3x3s by Winograd's F(2x2, 3x3) in place
// (conv_direct_winograd.cpp). backends/cpu/conv_batched.cpp takes it first where it runs
// (conv_winograd.cpp's Winograd excepted).
#pragma once
#include <cstdint>

#include "backends/backend.h"
#include "backends/cpu/conv_window.h"

namespace vitrine::cpu {

/// Whether direct_conv2d takes a convolution of x [B, C, H, W] with geometry g into Cout
/// channels: float32 with rows of unit stride, under ConvAlgorithm::Auto or Direct where
/// Vitrine's own GEMM runs (AVX-512); groups 1; a depth C kh kw of 8 or more; and either (in
/// place) stride 1 and an output as wide as the input (dilation (kw - 1) = 2 pad_w; any kernel
/// height, dilation and vertical padding), rows W apart, a map whose vectors of 16 positions waste
/// at most 7%; or (phase planes) any stride with phase planes no larger than the output, 8
/// channels or more in, up to 64 out, a depth up to 576, and groups of images that waste at most
/// a fifth (a 7x7 map: groups of 21 images).
/// Its narrow Winograd's shapes run too (direct_winograd_runs). Neither depends on the batch size:
/// a batch cut between data-parallel ranks takes the path the whole batch takes.
bool direct_conv_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// What every direct path needs: float32 in 4 dims with rows of unit stride, ConvAlgorithm::Auto
/// or Direct where the own GEMM runs (AVX-512), a nonempty output, a depth C kh kw of 8 or more.
bool direct_basics(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// Whether direct_conv2d_input_grad takes the input gradient: "same" padding in both dims (the
/// input gradient is then the convolution of dy with the flipped weight) and direct_conv_runs
/// for that convolution (Cout channels in, C out).
bool direct_input_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);

/// Whether direct_conv2d (and its input gradient) computes it by Winograd's F(2x2, 3x3), x read in
/// place (conv_direct_winograd.cpp): a 3x3 at stride 1
/// with padding 1 on a map up to 31 wide (1, 2 or 4 rows of tiles a vector, a zero lane past each
/// row), rows W apart, 16 to 63 channels in and out (64 on a map up to 7 wide): direct_basics
/// under ConvAlgorithm::Auto, at any batch size.
bool direct_winograd_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// y = conv(x, w) + bias then out's residual and ReLU, as direct_conv2d, by F(2x2, 3x3): per 2x2
/// tile of outputs and its 4x4 window d, Y = A^T [ (G g G^T) . (B^T d B) ] A.
void direct_winograd_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias,
                            float* y, const ConvGeometry& g, const ConvOut& out);
/// dx of a convolution direct_winograd_runs takes (for dy, Cout channels into C), as
/// direct_conv2d_input_grad.
void direct_winograd_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g);

/// y [B, Cout, OH, OW] (contiguous) = conv(x, w) + bias, then out's residual and ReLU; w [Cout,
/// C, kh, kw] contiguous, bias [Cout] or null. With q = r OW + c an output's flat position in its
/// image and tap t = (a, b) at offset off_t = (a dh - ph) W + (b dw - pw):
///   y[co][q] = bias[co] + sum_t sum_c W[co, c, a, b] x[c][q + off_t]   (0 where (a, b) reads
///   outside the image)
/// in tiles of up to 12 output channels by 32 positions, the sum over t then c in that order.
/// Each output is computed by one thread: results do not depend on the thread count.
void direct_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                   const ConvGeometry& g, const ConvOut& out = {});

/// dx [B, C, H, W] (contiguous) of a convolution direct_input_grad_runs takes, from dy [B, Cout,
/// H, W]: the convolution of dy with the weight flipped in space and its channel dims swapped.
void direct_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                              const ConvGeometry& g);

/// Whether direct_conv2d_weight_grad takes the weight gradient: direct_basics, up to 16 output
/// channels, a kernel 3 taps wide, x read in place as direct_conv2d does (stride 1, an output as
/// wide as the input) with rows of 16 or more. (Where its products are narrow: ResNet-8's stem
/// and 16-channel layers.)
bool direct_weight_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// dw [Cout, C, kh, kw] (contiguous, overwritten) from x [B, C, H, W] and dy [B, Cout, OH, OW]
/// (contiguous): with q an output's flat position and off_t tap t's offset (direct_conv2d's)
///   dW[co, c, t] = sum_b sum_q dy[b][co][q] x[b][c][q + off_t]   (0 where t reads outside)
/// in tiles of up to 3 output channels by 9 taps of one channel, lanes over 16 positions each, one
/// partial per group of images (one thread's), the partials added in group order: results do not
/// depend on the thread count.
void direct_conv2d_weight_grad(const Strided& x, const float* dy, int64_t Cout, float* dw,
                               const ConvGeometry& g);

}  // namespace vitrine::cpu
