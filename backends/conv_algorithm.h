// How the CPU computes a convolution, as a switch for A/B runs and for the tests that check one
// path against the other (the rule that every fast kernel keeps its plain path):
//   Auto      the batched path (backends/cpu/conv_batched.cpp: groups of images in parallel, one
//             thread each) for float32 where Vitrine's own GEMM runs (AVX-512): a 3x3 at stride 1
//             of 64 channels and more by Winograd's F(2x2, 3x3) (backends/cpu/conv_winograd.cpp),
//             else the direct convolution, x and y in place (backends/cpu/conv_direct.cpp; its
//             narrow 3x3s by F(2x2, 3x3) in place, conv_direct_winograd.cpp), else products
//             reading the padded input in place where that wastes little
//             (backends/cpu/conv_implicit.cpp, implicit GEMM), else im2col; image by image
//             where the own GEMM does not run (the default). docs/convolutions.md.
//   Direct    Auto without either Winograd: the direct tiles where they run (A/B runs, tests)
//   Implicit  Auto without Winograd and the direct path: the implicit GEMM where it runs
//   Batched   the batched path with im2col for float32 and float64 (float64 and shapes the own
//             GEMM does not take on plain loops: for tests and A/B runs)
//   PerImage  im2col and one product per image or per chunk (ops/conv.cpp), on any backend
// CUDA takes its batched path (one im2col launch per chunk of images, cuda_backend.cpp) under
// Auto, Direct, Implicit and Batched, and ops/conv.cpp's under PerImage.
// The environment's VITRINE_CONV (auto, direct, implicit, batched, per-image) sets it when the
// process starts.
#pragma once
#include <string_view>

namespace vitrine {

enum class ConvAlgorithm : unsigned char { Auto, Batched, PerImage, Implicit, Direct };

/// "auto", "direct", "implicit", "batched" or "per-image"; anything else is an Error naming them.
void set_conv_algorithm(std::string_view name);
void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm();

/// Whether the convolution forward that this thread runs is recorded for a gradient: ops::conv2d
/// sets it (ConvForGradient) around the backend's call. The CPU's narrow Winograd and the direct
/// convolution's phase planes (backends/cpu/conv_direct*.cpp) then step aside, and the forward
/// takes the paths before them (Winograd, the in-place direct tiles, the implicit GEMM, im2col):
/// with them, a ResNet-8's and the default ViT's training losses under 2 data-parallel ranks
/// drifted from one process's by 1.4e-5 within 7 steps (the reductions' different roundings
/// amplified along the way; without them 6.9e-8 and 9.9e-8, measured at the test's seed;
/// docs/convolutions.md). Input gradients and inference keep them, and so do training forwards
/// in batch-invariant mode (ops/batch_invariant.h), whose fixed sums leave no drift to amplify.
bool conv_for_gradient();
struct ConvForGradient {
  explicit ConvForGradient(bool on);
  ~ConvForGradient();
  ConvForGradient(const ConvForGradient&) = delete;
  ConvForGradient& operator=(const ConvForGradient&) = delete;
  bool before;
};

}  // namespace vitrine
