// interpolate: resizing [B, C, H, W] (or [C, H, W]) images with PyTorch's F.interpolate semantics
// (modes "nearest", "bilinear", "bicubic"; no antialias). The kernels
// (backends/cpu/interpolate.cpp) hold the index maths; this file turns the options into an output
// size and the source/output ratio PyTorch would use:
//   size given                         -> ratio = in / out
//   scale_factor s given               -> out = floor(in * s); ratio = 1 / s, or in / out when
//                                         recompute_scale_factor is true
// (align_corners = true ignores the ratio and maps corner pixels onto corner pixels).
// The backward is the kernel's exact adjoint (a fused kernel: no double backward).
#include <cmath>

#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {

InterpMode parse_mode(const std::string& mode) {
  if (mode == "nearest") return InterpMode::Nearest;
  if (mode == "bilinear") return InterpMode::Bilinear;
  if (mode == "bicubic") return InterpMode::Bicubic;
  fail("interpolate: unknown mode '{}' (expected \"nearest\", \"bilinear\" or \"bicubic\")", mode);
}

/// The output size of one dim, and the ratio to give the kernel.
std::pair<int64_t, double> out_size_and_ratio(int64_t in, const InterpolateOptions& o, bool h) {
  if (o.size) {
    const int64_t out = h ? o.size->first : o.size->second;
    return {out, double(in) / double(out)};
  }
  const double s = h ? o.scale_factor->first : o.scale_factor->second;
  const int64_t out = static_cast<int64_t>(std::floor(double(in) * s));
  return {out, o.recompute_scale_factor ? double(in) / double(out) : 1.0 / s};
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  check_float(x, "interpolate");
  VT_CHECK(x.dim() == 3 || x.dim() == 4,
           "interpolate: expected a 4-D [B, C, H, W] or 3-D [C, H, W] input, got shape {}",
           x.shape());
  const InterpMode mode = parse_mode(o.mode);
  VT_CHECK(!(o.size && o.scale_factor),
           "interpolate: only one of size and scale_factor may be given (got both)");
  VT_CHECK(o.size || o.scale_factor, "interpolate: either size or scale_factor must be given");
  VT_CHECK(!(o.size && o.recompute_scale_factor),
           "interpolate: recompute_scale_factor is not meaningful with an explicit size");
  VT_CHECK(!o.align_corners || mode != InterpMode::Nearest,
           "interpolate: align_corners can only be set with the interpolating modes \"bilinear\" "
           "and \"bicubic\" (mode is \"{}\")",
           o.mode);
  if (o.size)
    VT_CHECK(o.size->first > 0 && o.size->second > 0,
             "interpolate: size must be positive, got ({}, {})", o.size->first, o.size->second);
  if (o.scale_factor)
    VT_CHECK(o.scale_factor->first > 0 && o.scale_factor->second > 0 &&
                 std::isfinite(o.scale_factor->first) && std::isfinite(o.scale_factor->second),
             "interpolate: scale_factor must be positive and finite, got ({}, {})",
             o.scale_factor->first, o.scale_factor->second);
  const int64_t H = x.size(-2), W = x.size(-1);
  VT_CHECK(H > 0 && W > 0, "interpolate: input height and width must be positive, got shape {}",
           x.shape());
  const auto [OH, ratio_h] = out_size_and_ratio(H, o, true);
  const auto [OW, ratio_w] = out_size_and_ratio(W, o, false);
  VT_CHECK(OH > 0 && OW > 0,
           "interpolate: output size {}x{} is empty (input {}x{}, scale_factor ({}, {}))", OH, OW,
           H, W, o.scale_factor->first, o.scale_factor->second);

  if (x.dim() == 3) {  // [C, H, W]: as a batch of one
    return squeeze(interpolate(unsqueeze(x, 0), o), 0);
  }
  const InterpGeometry g{mode, o.align_corners, ratio_h, ratio_w};
  Tensor y = empty_on(x, {x.size(0), x.size(1), OH, OW}, x.dtype());
  x.backend().interpolate(x.strided(), y.strided(), g);
  // dx [B, C, H, W] = the adjoint of the resize applied to dy [B, C, OH, OW]
  return record(y, "interpolate", {x},
                [g, in_shape = x.shape()](const Tensor& dy, const Needs&) -> Grads {
                  Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device());
                  dy.backend().interpolate_backward(dy.strided(), dx.strided(), g);
                  return {no_double_backward(dx, "interpolate_backward", {dy})};
                });
}

}  // namespace vitrine::ops
