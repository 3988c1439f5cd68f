// conv2d as im2col + GEMM (the Caffe / PyTorch slow_conv2d scheme). A backend that has a
// whole-batch convolution (the CPU's, backends/cpu/conv_batched.cpp: groups of images in parallel,
// one product per group) takes it first (Backend::conv2d_batched); what follows is the path of
// every backend, and the reference the tests check the batched one against. With K = Cin * kh * kw
// and L = OH * OW, per image b:
//   cols_b [K, L]    = im2col(x_b)                 (zero padding, stride)
//   y_b    [Cout, L] = W [Cout, K] @ cols_b + bias[:, None]
// Backward, from dy_b [Cout, L]:
//   dW  = sum_b dy_b @ cols_b^T     (cols recomputed from the saved x, not kept from the forward)
//   db  = sum of dy over B, OH, OW
//   dx_b = col2im(W^T @ dy_b)       (skipped when x needs no gradient, e.g. a patch embedding)
// Images go through in chunks so that one columns buffer stays under kColsBudget elements.
//
// Small output maps (L < kWideBelow: a stem's 3x3 on a 7x7 grid has L = 49) make small products,
// one per image, each too small to split between threads at a profit. There the chunk's images
// lie side by side instead: im2col writes image i's columns at offset i L of rows n L long, so
// that cols [K, n L] is one matrix with no copy, and
//   Y [Cout, n L] = W @ cols,   dW += dY @ cols^T,   dcols [K, n L] = W^T @ dY
// are one GEMM each per chunk; only y (out of Y) and dy (into dY) are copied, each Cout x n L.
#include <algorithm>

#include "backends/conv_algorithm.h"
#include "ops/batch_tree.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {

constexpr int64_t kColsBudget = int64_t{1} << 24;
constexpr int64_t kWideBelow = 128;
/// Side by side, a chunk's columns stay under this many elements (512 KiB of float32: in L2, so
/// the GEMM reads what im2col just wrote from cache), but hold at least 256 columns (n L).
constexpr int64_t kWideBudget = int64_t{1} << 17;

/// The view of t's data with the given shape and strides (same start).
Strided view_as(const Tensor& t, const Dims& shape, const Dims& strides) {
  Strided s = t.strided();
  s.shape = shape;
  s.strides = strides;
  return s;
}

/// Element b of dim 0, that dim removed (keeps the rest of the strides).
Strided item(const Strided& s, int64_t b) {
  Strided r;
  r.dtype = s.dtype;
  r.data =
      static_cast<char*>(s.data) + b * s.strides[0] * static_cast<int64_t>(dtype_size(s.dtype));
  for (int i = 1; i < s.shape.size(); ++i) {
    r.shape.push_back(s.shape[i]);
    r.strides.push_back(s.strides[i]);
  }
  return r;
}

/// Elements [b, b + n) of dim 0.
Strided rows(const Strided& s, int64_t b, int64_t n) {
  Strided r = s;
  r.data =
      static_cast<char*>(s.data) + b * s.strides[0] * static_cast<int64_t>(dtype_size(s.dtype));
  r.shape[0] = n;
  return r;
}

/// Images per chunk: image by image, the largest buffer ([n, K, L] or [n, Cout, L]) stays under
/// kColsBudget elements; side by side (L < kWideBelow), the columns under kWideBudget.
int64_t chunk_size(int64_t B, int64_t K, int64_t Cout, int64_t L) {
  const int64_t per_image = std::max<int64_t>(std::max(K, Cout) * L, 1);
  if (L < kWideBelow) {
    const int64_t at_least = std::max<int64_t>(1, 256 / std::max<int64_t>(L, 1));
    return std::clamp<int64_t>(kWideBudget / per_image, at_least, std::max<int64_t>(B, 1));
  }
  return std::clamp<int64_t>(kColsBudget / per_image, 1, std::max<int64_t>(B, 1));
}

/// s [n, a, L] read as [a, n, L] (the first two dims swapped: a view, nothing moves).
Strided swap01(const Strided& s) {
  Strided r = s;
  std::swap(r.shape[0], r.shape[1]);
  std::swap(r.strides[0], r.strides[1]);
  return r;
}

/// Image i's [rows, L] block of a side-by-side buffer [rows, n, L] (rows n L apart).
Strided block(const Tensor& wide, int64_t rows, int64_t n, int64_t L, int64_t i) {
  Strided s = wide.strided();
  s.data = static_cast<char*>(s.data) + i * L * static_cast<int64_t>(dtype_size(s.dtype));
  s.shape = {rows, L};
  s.strides = {n * L, 1};
  return s;
}

/// The first rows x n L elements of a buffer as the matrix [rows, n L] (or its transpose).
Strided matrix(const Tensor& t, int64_t rows, int64_t cols, bool transposed = false) {
  return transposed ? view_as(t, {cols, rows}, {1, cols}) : view_as(t, {rows, cols}, {cols, 1});
}

/// conv2d's input gradient into dx and/or its weight gradient into dw (either undefined:
/// skipped; dw is overwritten), from dy [B, Cout, OH, OW] contiguous: the backend's whole-batch
/// kernels first (the depthwise one always: a backend with its forward has its backward), then
/// im2col and gemm.
void conv2d_grads_into(const Tensor& dy, const Tensor& x, const Tensor& wc, const ConvGeometry& g,
                       bool depthwise, const Tensor& dx, const Tensor& dw) {
  const int64_t B = x.size(0), Cout = wc.size(0);
  const int64_t K = g.channels * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const DType dt = x.dtype();
  Backend& be = x.backend();
  const bool need_dx = dx.defined(), need_dw = dw.defined();
  const Strided dy3 = view_as(dy, {B, Cout, L}, {Cout * L, L, 1});
  const Strided dxs = need_dx ? dx.strided() : Strided(), dws = need_dw ? dw.strided() : Strided();
  const bool done =
      depthwise ? be.depthwise_conv2d_backward(x.strided(), wc.strided(), dy.strided(), dxs, dws, g)
                : be.conv2d_batched_backward(x.strided(), wc.strided(), dy.strided(), dxs, dws, g);
  VT_ASSERT(done || !depthwise);
  if (done) return;
  if (need_dw) be.fill(dw.strided(), 0);
  const Strided xs = x.strided();
  const int64_t chunk = chunk_size(B, K, Cout, L);
  Tensor cols = empty_on(x, {chunk, K, L}, dt);
  const Strided cs = cols.strided();
  if (L < kWideBelow) {  // side by side (file comment)
    Tensor dy_wide = empty_on(x, {Cout, chunk, L}, dt);
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t n = std::min(chunk, B - b0), nL = n * L;
      be.copy(swap01(rows(dy3, b0, n)), view_as(dy_wide, {Cout, n, L}, {nL, L, 1}));
      if (need_dw) {
        // dW [Cout, K] += dY [Cout, n L] @ cols^T [n L, K]
        for (int64_t i = 0; i < n; ++i) be.im2col(item(xs, b0 + i), block(cols, K, n, L, i), g);
        be.gemm(matrix(dy_wide, Cout, nL), matrix(cols, K, nL, true),
                view_as(dw, {Cout, K}, {K, 1}), true);
      }
      if (need_dx) {
        // dcols [K, n L] = W^T [K, Cout] @ dY [Cout, n L], then image by image into dx
        be.gemm(view_as(wc, {K, Cout}, {1, K}), matrix(dy_wide, Cout, nL), matrix(cols, K, nL),
                false);
        const Strided dxs = dx.strided();
        for (int64_t i = 0; i < n; ++i) be.col2im(block(cols, K, n, L, i), item(dxs, b0 + i), g);
      }
    }
  } else {
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t n = std::min(chunk, B - b0);
      if (need_dw) {
        // dW [Cout, K] += dy_b [Cout, L] @ cols_b^T [L, K]
        const Strided dw2 = view_as(dw, {Cout, K}, {K, 1});
        for (int64_t i = 0; i < n; ++i) {
          Strided ci = item(cs, i);
          be.im2col(item(xs, b0 + i), ci, g);
          ci.shape = {L, K};
          ci.strides = {1, L};
          be.gemm(item(dy3, b0 + i), ci, dw2, true);
        }
      }
      if (need_dx) {
        // dcols [n, K, L] = W^T [K, Cout] (broadcast over the chunk) @ dy [n, Cout, L]
        be.gemm(view_as(wc, {n, K, Cout}, {0, 1, K}), rows(dy3, b0, n), rows(cs, 0, n), false);
        const Strided dxs = dx.strided();
        for (int64_t i = 0; i < n; ++i) be.col2im(item(cs, i), item(dxs, b0 + i), g);
      }
    }
  }
}

/// The gradients of conv2d (see the file comment); dx and dW are fused kernels, so a second
/// derivative through them is refused; db is a sum, so it differentiates again. dW sums over the
/// images in the batch's fixed tree (ops/batch_tree.h): the kernels run on each leaf of images
/// alone, dx beside dW.
Grads conv2d_backward(const Tensor& dy_in, const Needs& needs, const Tensor& x, const Tensor& w,
                      const ConvGeometry& g, bool has_bias, bool depthwise) {
  const int64_t B = x.size(0);
  const DType dt = x.dtype();
  Grads out(has_bias ? 3 : 2);
  if (has_bias && needs[2]) out[2] = sum(dy_in, {0, 2, 3});
  if (!needs[0] && !needs[1]) return out;
  const Tensor dy = dy_in.contiguous();  // [B, Cout, OH, OW], read as [B, Cout, L]
  const Tensor wc = w.contiguous();      // [Cout, K]
  Tensor dx = needs[0] ? empty_on(x, x.shape(), dt) : Tensor(), dw;
  if (use_batch_tree(x, B)) {
    // Each leaf's dx beside its partial of dW, in one call (one pass over the leaves).
    const auto leaf_dx = [&](int64_t begin, int64_t count) {
      return needs[0] ? narrow(dx, 0, begin, count) : Tensor();
    };
    if (needs[1])
      dw = batch_tree_sum(
          x, B, {w.shape()}, dt, [&](int64_t begin, int64_t count, std::vector<Tensor>& parts) {
            conv2d_grads_into(narrow(dy, 0, begin, count), narrow(x, 0, begin, count), wc, g,
                              depthwise, leaf_dx(begin, count), parts[0]);
          })[0];
    else
      for_each_leaf(B, [&](int64_t begin, int64_t count) {
        conv2d_grads_into(narrow(dy, 0, begin, count), narrow(x, 0, begin, count), wc, g, depthwise,
                          narrow(dx, 0, begin, count), Tensor());
      });
  } else {
    if (needs[1]) dw = empty_on(w, w.shape(), dt);
    conv2d_grads_into(dy, x, wc, g, depthwise, dx, dw);
  }
  if (needs[0]) out[0] = no_double_backward(dx, "conv2d_backward", {dy_in, w});
  if (needs[1]) out[1] = no_double_backward(dw, "conv2d_backward", {dy_in, x});
  return out;
}

/// y's graph node: conv2d_backward from the saved x and weight.
Tensor record_conv(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const ConvGeometry& g, bool depthwise = false) {
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return record(y, "conv2d", inputs,
                [sx = save(x), sw_ = save(weight), g, has_bias = bias.defined(), depthwise](
                    const Tensor& dy, const Needs& needs) -> Grads {
                  return conv2d_backward(dy, needs, sx.get(), sw_.get(), g, has_bias, depthwise);
                });
}

/// y = conv2d(x, W) through im2col and gemm, image by image or in chunks side by side (file
/// comment): every backend's path. wc [Cout, K] contiguous.
void conv2d_im2col(const Tensor& x, const Tensor& wc, const Tensor& bias, const Tensor& y,
                   const ConvGeometry& g) {
  const int64_t B = x.size(0), Cout = wc.size(0);
  const int64_t K = g.channels * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const DType dt = x.dtype();
  Backend& be = x.backend();
  const Strided y3 = view_as(y, {B, Cout, L}, {Cout * L, L, 1});
  const int64_t chunk = chunk_size(B, K, Cout, L);
  Tensor cols = empty_on(x, {chunk, K, L}, dt);
  const Strided xs = x.strided(), cs = cols.strided();
  if (L < kWideBelow) {  // side by side (file comment)
    Tensor y_wide = empty_on(x, {Cout, chunk, L}, dt);
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t n = std::min(chunk, B - b0), nL = n * L;
      for (int64_t i = 0; i < n; ++i) be.im2col(item(xs, b0 + i), block(cols, K, n, L, i), g);
      const Strided yw = view_as(y_wide, {Cout, n, L}, {nL, L, 1});
      if (bias.defined()) be.copy(view_as(bias, {Cout, n, L}, {bias.strides()[0], 0, 0}), yw);
      // Y [Cout, n L] (+)= W [Cout, K] @ cols [K, n L], then y[b0 : b0 + n] = Y as [n, Cout, L]
      be.gemm(view_as(wc, {Cout, K}, {K, 1}), matrix(cols, K, nL), matrix(y_wide, Cout, nL),
              bias.defined());
      be.copy(swap01(yw), rows(y3, b0, n));
    }
  } else {
    if (bias.defined()) be.copy(view_as(bias, {B, Cout, L}, {0, bias.strides()[0], 0}), y3);
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t n = std::min(chunk, B - b0);
      for (int64_t i = 0; i < n; ++i) be.im2col(item(xs, b0 + i), item(cs, i), g);
      // y[b0 : b0 + n] (+)= W (broadcast over the chunk) @ cols
      be.gemm(view_as(wc, {n, Cout, K}, {0, K, 1}), rows(cs, 0, n), rows(y3, b0, n),
              bias.defined());
    }
  }
}

/// groups = 1: the whole batch on the backend's batched path, else im2col and gemm.
Tensor conv2d_dense(const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const ConvGeometry& g) {
  Tensor y = empty_on(x, {x.size(0), weight.size(0), g.out_h, g.out_w}, x.dtype());
  {
    // Training forwards step aside from the narrow Winograd and the phase planes
    // (conv_algorithm.h), except in batch-invariant mode: its fixed sums leave no drift for them
    // to amplify, and each leaf of images gets the same bits wherever it runs.
    const ConvForGradient recorded(any_requires_grad({x, weight, bias}) && !batch_invariant(x));
    NoGradGuard no_grad;
    const Tensor wc = weight.contiguous();  // [Cout, K]
    const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
    const auto images = [&](const Tensor& xs, const Tensor& ys) {
      if (!x.backend().conv2d_batched(xs.strided(), wc.strided(),
                                      bias.defined() ? bc.strided() : Strided(), ys.strided(), g))
        conv2d_im2col(xs, wc, bias, ys, g);
    };
    if (batch_invariant(x))  // each leaf of images on one thread (ops/batch_tree.h)
      for_each_leaf(x.size(0), [&](int64_t begin, int64_t count) {
        images(narrow(x, 0, begin, count), narrow(y, 0, begin, count));
      });
    else
      images(x, y);
  }
  return record_conv(y, x, weight, bias, g);
}

/// conv2d's checks of its arguments (with their messages), and the geometry of one group.
ConvGeometry checked_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              std::pair<int64_t, int64_t> stride,
                              std::pair<int64_t, int64_t> padding,
                              std::pair<int64_t, int64_t> dilation, int64_t groups) {
  check_defined(x, "conv2d", "input");
  check_defined(weight, "conv2d", "weight");
  VT_CHECK(x.dim() == 4, "conv2d: input must be 4-D [B, Cin, H, W], got shape {}", x.shape());
  VT_CHECK(weight.dim() == 4, "conv2d: weight must be 4-D [Cout, Cin, kh, kw], got shape {}",
           weight.shape());
  check_float(x, "conv2d");
  check_same(x, weight, "conv2d");
  const int64_t Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Cout = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  VT_CHECK(groups > 0, "conv2d: groups must be positive, got {}", groups);
  VT_CHECK(Cin % groups == 0 && Cout % groups == 0,
           "conv2d: groups ({}) must divide the input channels ({}, input {}) and the output "
           "channels ({}, weight {})",
           groups, Cin, x.shape(), Cout, weight.shape());
  VT_CHECK(weight.size(1) * groups == Cin,
           "conv2d: input has {} channels (shape {}) but weight expects {} (shape {}{})", Cin,
           x.shape(), weight.size(1) * groups, weight.shape(),
           groups > 1 ? fmt::format(", {} per group of {}", weight.size(1), groups) : "");
  if (bias.defined()) {
    check_same(x, bias, "conv2d");
    VT_CHECK(bias.dim() == 1 && bias.size(0) == Cout,
             "conv2d: bias must have shape [{}] (one per output channel of weight {}), got {}",
             Cout, weight.shape(), bias.shape());
  }
  const auto [sh, sw] = stride;
  const auto [ph, pw] = padding;
  VT_CHECK(sh > 0 && sw > 0, "conv2d: stride must be positive, got ({}, {})", sh, sw);
  VT_CHECK(ph >= 0 && pw >= 0, "conv2d: padding must be non-negative, got ({}, {})", ph, pw);
  VT_CHECK(kh > 0 && kw > 0, "conv2d: kernel size must be positive, got weight shape {}",
           weight.shape());
  const auto [dh, dw] = dilation;
  VT_CHECK(dh > 0 && dw > 0, "conv2d: dilation must be positive, got ({}, {})", dh, dw);
  const int64_t eh = dh * (kh - 1) + 1, ew = dw * (kw - 1) + 1;  // the kernel's extent
  VT_CHECK(
      eh <= H + 2 * ph && ew <= W + 2 * pw,
      "conv2d: kernel {}x{} (weight {}{}) is larger than the padded input {}x{} (input {}, "
      "padding ({}, {}))",
      kh, kw, weight.shape(),
      dh > 1 || dw > 1 ? fmt::format(", dilation ({}, {}): it spans {}x{}", dh, dw, eh, ew) : "",
      H + 2 * ph, W + 2 * pw, x.shape(), ph, pw);

  const int64_t OH = (H + 2 * ph - eh) / sh + 1, OW = (W + 2 * pw - ew) / sw + 1;
  return {Cin / groups, H, W, kh, kw, sh, sw, ph, pw, OH, OW, dh, dw};
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
              std::pair<int64_t, int64_t> dilation, int64_t groups) {
  const ConvGeometry g = checked_geometry(x, weight, bias, stride, padding, dilation, groups);
  if (groups == 1) return conv2d_dense(x, weight, bias, g);
  const int64_t Cin = x.size(1), Cout = weight.size(0);
  const int64_t cin_g = Cin / groups, cout_g = Cout / groups;
  if (cin_g == 1) {  // depthwise: one geometry over all the channels
    ConvGeometry gd = g;
    gd.channels = Cin;
    Tensor y = empty_on(x, {x.size(0), Cout, g.out_h, g.out_w}, x.dtype());
    bool done;
    {
      NoGradGuard no_grad;
      const Tensor wc = weight.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
      done = x.backend().depthwise_conv2d(
          x.strided(), wc.strided(), bias.defined() ? bc.strided() : Strided(), y.strided(), gd);
    }
    if (done) return record_conv(y, x, weight, bias, gd, true);
  }
  // Any other grouping (or a backend without a depthwise kernel): one convolution per group of
  // channels, concatenated (slice and cat carry the gradients).
  std::vector<Tensor> ys;
  for (int64_t i = 0; i < groups; ++i)
    ys.push_back(conv2d(slice(x, 1, i * cin_g, (i + 1) * cin_g),
                        slice(weight, 0, i * cout_g, (i + 1) * cout_g),
                        bias.defined() ? slice(bias, 0, i * cout_g, (i + 1) * cout_g) : Tensor(),
                        stride, padding, dilation, 1));
  return cat(ys, 1);
}

Tensor conv2d_add_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& residual, bool relu, std::pair<int64_t, int64_t> stride,
                       std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation,
                       int64_t groups) {
  const ConvGeometry g = checked_geometry(x, weight, bias, stride, padding, dilation, groups);
  const Dims out{x.size(0), weight.size(0), g.out_h, g.out_w};
  if (residual.defined()) {
    check_same(x, residual, "conv2d_add_relu");
    VT_CHECK(residual.shape() == out,
             "conv2d_add_relu: the residual must have the output's shape {}, got {}", out,
             residual.shape());
  }
  if (!any_requires_grad({x, weight, bias, residual}) && groups == 1 && !batch_invariant(x)) {
    Tensor y = empty_on(x, out, x.dtype());
    NoGradGuard no_grad;
    const Tensor wc = weight.contiguous();
    const Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
    const Tensor rc = residual.defined() ? residual.contiguous() : Tensor();
    if (x.backend().conv2d_batched_add_relu(
            x.strided(), wc.strided(), bias.defined() ? bc.strided() : Strided(),
            residual.defined() ? rc.strided() : Strided(), relu, y.strided(), g))
      return y;
  }
  Tensor y = conv2d(x, weight, bias, stride, padding, dilation, groups);
  if (residual.defined()) y = add(y, residual);
  return relu ? ops::relu(y) : y;
}

}  // namespace vitrine::ops
