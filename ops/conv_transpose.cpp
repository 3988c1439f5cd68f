// conv_transpose2d as the input gradient of conv2d (ops/conv_transpose.h). Per group of
// channels, with the geometry g of the convolution z [B, Cout, OH, OW] -> x [B, Cin, H, W] whose
// gradient this is (K = Cout kh kw, L = H W):
//   y = Backend::conv2d_batched_backward's dx from dy = x     (the CPU's fast input gradients)
//   or, where the backend has none, a chunk of n images side by side (X [Cin, n L], a copy):
//      cols [K, n L] = W^T [K, Cin] @ X,  y_b = col2im(image b's columns)
// Backward, from dy [B, Cout, OH, OW]:
//   dx = conv2d(dy, W)     (an op: it differentiates again)
//   dW = conv2d_batched_backward's dw with (x, dy) = (dy, x), or per chunk
//        dW [Cin, K] += X [Cin, n L] @ cols^T [n L, K],  cols = im2col(dy_b) side by side
//   db = sum of dy over B, OH, OW
// output_padding >= stride (allowed while it is below dilation) adds rows no tap reaches: the
// op computes with stride - 1 and pads the rest with zeros, so that g stays a convolution's.
#include <algorithm>

#include "ops/conv_transpose.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {

/// Images per product on the plain path: their columns [K, n L] stay under this many elements
/// (as ops/conv.cpp's image-by-image budget; smaller chunks measured slower on the DCGAN layer).
constexpr int64_t kColsBudget = int64_t{1} << 24;

/// t (contiguous) as the strided view with shape and strides, from element offset.
Strided view_of(const Tensor& t, const Dims& shape, const Dims& strides, int64_t offset = 0) {
  Strided s = t.strided();
  s.data = static_cast<char*>(s.data) + offset * static_cast<int64_t>(dtype_size(s.dtype));
  s.shape = shape;
  s.strides = strides;
  return s;
}

/// The plain path's chunk: n images side by side, so that one product covers them all (a
/// DCGAN layer's 8x8 maps would make 64 small products image by image).
int64_t chunk_of(int64_t B, int64_t K, int64_t L) {
  return std::clamp<int64_t>(kColsBudget / std::max<int64_t>(K * L, 1), 1, std::max<int64_t>(B, 1));
}

/// Images [b0, b0 + n) of t [B, C, L] copied side by side into wide as [C, n L].
void side_by_side(Backend& be, const Tensor& t, int64_t b0, int64_t n, int64_t C, int64_t L,
                  const Tensor& wide) {
  be.copy(view_of(t, {C, n, L}, {L, C * L, 1}, b0 * C * L),
          view_of(wide, {C, n, L}, {n * L, L, 1}));
}

/// One group's transposed convolution, no graph: x [B, Cin, H, W], w [Cin, Cout, kh, kw] ->
/// y [B, Cout, OH, OW] (g: the convolution from y's shape to x's).
Tensor transpose_forward(const Tensor& x, const Tensor& w, const ConvGeometry& g) {
  const int64_t B = x.size(0), Cin = w.size(0);
  const int64_t C = g.channels, K = C * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const int64_t HW = g.height * g.width;
  Backend& be = x.backend();
  Tensor y = empty_on(x, {B, C, g.height, g.width}, x.dtype());
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  // The convolution's input is only a shape here (no weight gradient is asked): y stands for it.
  if (be.conv2d_batched_backward(y.strided(), wc.strided(), xc.strided(), y.strided(), Strided(),
                                 g))
    return y;
  const int64_t chunk = chunk_of(B, K, L);
  Tensor cols = empty_on(x, {K, chunk * L}, x.dtype());
  Tensor x_wide = empty_on(x, {Cin, chunk * L}, x.dtype());
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t n = std::min(chunk, B - b0), nL = n * L;
    side_by_side(be, xc, b0, n, Cin, L, x_wide);
    // cols [K, n L] = W^T [K, Cin] @ X [Cin, n L], then image by image into y
    be.gemm(view_of(wc, {K, Cin}, {1, K}), view_of(x_wide, {Cin, nL}, {nL, 1}),
            view_of(cols, {K, nL}, {nL, 1}), false);
    for (int64_t i = 0; i < n; ++i)
      be.col2im(view_of(cols, {K, L}, {nL, 1}, i * L),
                view_of(y, {C, g.height, g.width}, {HW, g.width, 1}, (b0 + i) * C * HW), g);
  }
  return y;
}

/// One group's weight gradient, no graph: from x [B, Cin, H, W] and dy [B, Cout, OH, OW] ->
/// dw [Cin, Cout, kh, kw].
Tensor transpose_weight_grad(const Tensor& x, const Tensor& dy, const Tensor& w,
                             const ConvGeometry& g) {
  const int64_t B = x.size(0), Cin = w.size(0);
  const int64_t C = g.channels, K = C * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const int64_t HW = g.height * g.width;
  Backend& be = x.backend();
  Tensor dw = empty_on(w, w.shape(), w.dtype());
  const Tensor xc = x.contiguous(), dyc = dy.contiguous(), wc = w.contiguous();
  if (be.conv2d_batched_backward(dyc.strided(), wc.strided(), xc.strided(), Strided(), dw.strided(),
                                 g))
    return dw;
  const int64_t chunk = chunk_of(B, K, L);
  Tensor cols = empty_on(x, {K, chunk * L}, x.dtype());
  Tensor x_wide = empty_on(x, {Cin, chunk * L}, x.dtype());
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t n = std::min(chunk, B - b0), nL = n * L;
    side_by_side(be, xc, b0, n, Cin, L, x_wide);
    for (int64_t i = 0; i < n; ++i)
      be.im2col(view_of(dyc, {C, g.height, g.width}, {HW, g.width, 1}, (b0 + i) * C * HW),
                view_of(cols, {K, L}, {nL, 1}, i * L), g);
    // dW [Cin, K] (+)= X [Cin, n L] @ cols^T [n L, K]
    be.gemm(view_of(x_wide, {Cin, nL}, {nL, 1}), view_of(cols, {nL, K}, {1, nL}),
            view_of(dw, {Cin, K}, {K, 1}), b0 > 0);
  }
  return dw;
}

/// The channels of group i of n along dim.
Tensor group(const Tensor& t, int64_t dim, int64_t i, int64_t n) {
  if (n == 1) return t;
  const int64_t per = t.size(dim) / n;
  return slice(t, dim, i * per, (i + 1) * per);
}

/// Group by group, concatenated along dim (one group: as it is).
template <class F>
Tensor by_groups(int64_t groups, int64_t dim, F&& f) {
  if (groups == 1) return f(int64_t{0});
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < groups; ++i) parts.push_back(f(i));
  return cat(parts, dim);
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                        std::pair<int64_t, int64_t> output_padding, int64_t groups,
                        std::pair<int64_t, int64_t> dilation) {
  const char* op = "conv_transpose2d";
  check_defined(x, op, "input");
  check_defined(weight, op, "weight");
  VT_CHECK(x.dim() == 4, "conv_transpose2d: input must be 4-D [B, Cin, H, W], got shape {}",
           x.shape());
  VT_CHECK(weight.dim() == 4,
           "conv_transpose2d: weight must be 4-D [Cin, Cout / groups, kh, kw], got shape {}",
           weight.shape());
  check_float(x, op);
  check_same(x, weight, op);
  const int64_t Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t kh = weight.size(2), kw = weight.size(3);
  VT_CHECK(groups > 0, "conv_transpose2d: groups must be positive, got {}", groups);
  VT_CHECK(weight.size(0) == Cin,
           "conv_transpose2d: input has {} channels (shape {}) but weight {} expects {} (weight "
           "is [Cin, Cout / groups, kh, kw])",
           Cin, x.shape(), weight.shape(), weight.size(0));
  VT_CHECK(Cin % groups == 0,
           "conv_transpose2d: groups ({}) must divide the input channels ({}, input {})", groups,
           Cin, x.shape());
  const int64_t Cout = weight.size(1) * groups;
  if (bias.defined()) {
    check_same(x, bias, op);
    VT_CHECK(bias.dim() == 1 && bias.size(0) == Cout,
             "conv_transpose2d: bias must have shape [{}] (weight {}, groups {}), got {}", Cout,
             weight.shape(), groups, bias.shape());
  }
  const auto [sh, sw] = stride;
  const auto [ph, pw] = padding;
  const auto [oph, opw] = output_padding;
  const auto [dh, dw] = dilation;
  VT_CHECK(sh > 0 && sw > 0, "conv_transpose2d: stride must be positive, got ({}, {})", sh, sw);
  VT_CHECK(ph >= 0 && pw >= 0, "conv_transpose2d: padding must be non-negative, got ({}, {})", ph,
           pw);
  VT_CHECK(dh > 0 && dw > 0, "conv_transpose2d: dilation must be positive, got ({}, {})", dh, dw);
  VT_CHECK(kh > 0 && kw > 0, "conv_transpose2d: kernel size must be positive, got weight {}",
           weight.shape());
  VT_CHECK(oph >= 0 && opw >= 0 && (oph < sh || oph < dh) && (opw < sw || opw < dw),
           "conv_transpose2d: output_padding ({}, {}) must be non-negative and smaller than "
           "either stride ({}, {}) or dilation ({}, {})",
           oph, opw, sh, sw, dh, dw);
  const int64_t OH = (H - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1;
  const int64_t OW = (W - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1;
  // Rows and columns past stride - 1 of output padding: zeros, padded after (file comment).
  const int64_t xh = std::max<int64_t>(oph - (sh - 1), 0),
                xw = std::max<int64_t>(opw - (sw - 1), 0);
  VT_CHECK(OH - xh > 0 && OW - xw > 0,
           "conv_transpose2d: output size {}x{} is too small (input {}, weight {}, stride ({}, "
           "{}), padding ({}, {}), output_padding ({}, {}), dilation ({}, {}))",
           OH, OW, x.shape(), weight.shape(), sh, sw, ph, pw, oph, opw, dh, dw);
  const ConvGeometry g{Cout / groups, OH - xh, OW - xw, kh, kw, sh, sw, ph, pw, H, W, dh, dw};

  // The op's own node carries the bias unless the extra zero rows must come first.
  const bool bias_inside = bias.defined() && xh == 0 && xw == 0;
  Tensor y;
  {
    NoGradGuard no_grad;
    y = by_groups(groups, 1, [&](int64_t i) {
      return transpose_forward(group(x, 1, i, groups), group(weight, 0, i, groups), g);
    });
    if (bias_inside) {
      const Tensor bc = bias.contiguous();
      x.backend().binary(BinaryOp::Add, y.strided(), view_of(bc, y.shape(), {0, 1, 0, 0}),
                         y.strided());
    }
  }
  std::vector<Tensor> inputs{x, weight};
  if (bias_inside) inputs.push_back(bias);
  y = record(y, op, inputs,
             [sx = save(x), sw_ = save(weight), g, stride, padding, dilation, groups, bias_inside](
                 const Tensor& dy, const Needs& needs) -> Grads {
               const Tensor& x = sx.get();
               const Tensor& w = sw_.get();
               Grads out(bias_inside ? 3 : 2);
               if (bias_inside && needs[2]) out[2] = sum(dy, {0, 2, 3});
               if (needs[0]) out[0] = conv2d(dy, w, Tensor(), stride, padding, dilation, groups);
               if (needs[1]) {
                 Tensor dw;
                 {
                   NoGradGuard no_grad;
                   // The groups' gradients lie along dim 0 of the weight.
                   dw = by_groups(groups, 0, [&](int64_t i) {
                     return transpose_weight_grad(group(x, 1, i, groups), group(dy, 1, i, groups),
                                                  group(w, 0, i, groups), g);
                   });
                 }
                 out[1] = no_double_backward(dw, "conv_transpose2d_backward", {dy, x});
               }
               return out;
             });
  if (xh == 0 && xw == 0) return y;
  y = pad(y, {0, xw, 0, xh});
  if (bias.defined()) y = add(y, reshape(bias, {1, Cout, 1, 1}));
  return y;
}

}  // namespace vitrine::ops
