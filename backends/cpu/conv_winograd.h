// Winograd convolution on the CPU (conv_winograd.cpp): a 3x3 at stride 1 as F(2x2, 3x3), 16
// products of 4 multiplies per output where the direct convolution does 9. backends/cpu/
// conv_batched.cpp takes it first where it runs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/conv_window.h"

namespace vitrine::cpu {

/// Whether winograd_conv2d takes a convolution of x [B, C, H, W] with geometry g into Cout
/// channels: float32 with unit column stride, under ConvAlgorithm::Auto where Vitrine's own GEMM
/// runs (AVX-512); a 3x3 kernel at stride 1 and dilation 1, padding 0 to 2 in each dim; C and Cout
/// 64 or more (below, the transforms cost more than the products save) and C Cout <= 2^16 (the
/// transformed weight, 16 C Cout floats, is read once per chunk of tiles).
bool winograd_conv_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);
/// Whether winograd_conv2d_input_grad takes the input gradient: padding 1 ("same") and
/// winograd_conv_runs for the convolution of dy with the flipped weight (Cout channels in, C out).
bool winograd_input_grad_runs(const Strided& x, const ConvGeometry& g, int64_t Cout);

/// U [16, Cout, C], U[xi][co][c] = (G g G^T)[xi] for g = w[co][c] (w [Cout, C, 3, 3]): F(2x2,
/// 3x3)'s transformed weight, of both Winograd paths (this one, conv_direct_winograd.cpp).
std::vector<float> winograd_weight(const float* w, int64_t Cout, int64_t C);

/// winograd_weight(w, Cout, C), or with c_major its transpose U[xi][c][co] (the narrow path's
/// layout), remembered per thread for the last 8 weights and returned again while w's values are
/// the same (compared in full, so a weight changed in place is transformed again). Batch-invariant
/// mode convolves each leaf of 8 images by a call of its own, each of which transformed the same
/// weight (3% of a ResNet-8 training step).
std::shared_ptr<const std::vector<float>> winograd_weight_kept(const float* w, int64_t Cout,
                                                               int64_t C, bool c_major);

/// y [B, Cout, OH, OW] (contiguous) = conv(x, w) + bias, w [Cout, C, 3, 3] contiguous, bias
/// [Cout] or null:
///   for each 2x2 output tile Y and its 4x4 input window d, per pair (co, c):
///   Y = A^T [ (G g G^T) . (B^T d B) ] A      (. elementwise; the 16 products over c are a GEMM)
/// with B^T, G, A^T of F(2x2, 3x3) (conv_winograd.cpp), then out's residual and ReLU. Results do
/// not depend on the thread count.
void winograd_conv2d(const Strided& x, const float* w, int64_t Cout, const float* bias, float* y,
                     const ConvGeometry& g, const ConvOut& out = {});

/// dx [B, C, H, W] (contiguous) of a convolution winograd_input_grad_runs takes, from dy [B, Cout,
/// H, W]: the convolution of dy with the weight flipped in space and its channel dims swapped
/// (flipped_weight, conv_window.h), by winograd_conv2d.
void winograd_conv2d_input_grad(const Strided& dy, const float* w, int64_t Cout, float* dx,
                                const ConvGeometry& g);

}  // namespace vitrine::cpu
