// 2-D pooling as compositions of existing ops, so that every backend runs them and autograd
// differentiates them without a rule of their own. Max pooling takes a backend's kernel first
// where there is one (the CPU's, backends/cpu/pool.cpp): the maxima, and their indices where a
// gradient is wanted (the backward scatters dy onto them); no copy of the k_h k_w windows below.
//
// A k_h x k_w window with stride s and padding p over x [B, C, H, W] gives
//   OH = (H + 2 p_h - k_h) / s_h + 1,  OW likewise,
// and window element (i, j) of every output position is one strided slice of the padded input:
//   x_pad[:, :, i : i + s_h (OH - 1) + 1 : s_h, j : j + s_w (OW - 1) + 1 : s_w]   [B, C, OH, OW]
// Stacking the k_h k_w slices on a new dim 2 gives the windows [B, C, k_h k_w, OH, OW]; max over
// that dim is max pooling (its gradient goes to the first maximum in the window's row-major
// order, as PyTorch's max_pool2d, because ops::max(x, dim) sends it to the first index), the mean
// is average pooling.
#include <cmath>
#include <limits>

#include "ops/helpers.h"

namespace vitrine::ops {

namespace {

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, oh, ow;
};

Window window(const Tensor& x, std::pair<int64_t, int64_t> kernel,
              std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
              const char* op) {
  detail::check_defined(x, op, "x");
  detail::check_float(x, op);
  VT_CHECK(x.dim() == 4, "{}: expected x [B, C, H, W], got shape {}", op, x.shape());
  Window w{kernel.first,
           kernel.second,
           stride.first,
           stride.second,
           padding.first,
           padding.second,
           0,
           0};
  VT_CHECK(w.kh > 0 && w.kw > 0, "{}: kernel sizes must be positive, got {}x{}", op, w.kh, w.kw);
  VT_CHECK(w.sh > 0 && w.sw > 0, "{}: stride must be positive, got {}x{}", op, w.sh, w.sw);
  VT_CHECK(w.ph >= 0 && w.pw >= 0 && 2 * w.ph <= w.kh && 2 * w.pw <= w.kw,
           "{}: padding must be between 0 and half the kernel ({}x{}), got {}x{}", op, w.kh, w.kw,
           w.ph, w.pw);
  const int64_t H = x.size(2) + 2 * w.ph, W = x.size(3) + 2 * w.pw;
  VT_CHECK(H >= w.kh && W >= w.kw,
           "{}: the {}x{} kernel is larger than the padded input {}x{} (x shape {})", op, w.kh,
           w.kw, H, W, x.shape());
  w.oh = (H - w.kh) / w.sh + 1;
  w.ow = (W - w.kw) / w.sw + 1;
  return w;
}

/// [B, C, kh kw, OH, OW]: every window of the padded input, element (i, j) at i kw + j.
Tensor windows(const Tensor& padded, const Window& w) {
  std::vector<Tensor> parts;
  parts.reserve(static_cast<size_t>(w.kh * w.kw));
  for (int64_t i = 0; i < w.kh; ++i) {
    const Tensor rows = slice(padded, 2, i, i + w.sh * (w.oh - 1) + 1, w.sh);
    for (int64_t j = 0; j < w.kw; ++j)
      parts.push_back(slice(rows, 3, j, j + w.sw * (w.ow - 1) + 1, w.sw));
  }
  return stack(parts, 2);
}

Tensor padded(const Tensor& x, const Window& w, double value) {
  if (w.ph == 0 && w.pw == 0) return x;
  return pad(x, {w.pw, w.pw, w.ph, w.ph}, value);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                  std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding) {
  const Window w = window(x, kernel, stride, padding, "max_pool2d");
  if (w.kh == 1 && w.kw == 1) return squeeze(windows(x, w), 2);
  // A backend's kernel: the maxima, and where a gradient is wanted their indices too, the
  // backward scattering dy onto them (gather's gradient; no window copies).
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const Tensor xc = contiguous(x);
  const bool grad = GradMode::is_enabled() && x.requires_grad();
  Tensor values = detail::empty_on(x, {B, C, w.oh, w.ow}, x.dtype());
  Tensor index = grad ? detail::empty_on(x, {B, C, w.oh, w.ow}, kInt64) : Tensor();
  const bool done =
      x.backend().max_pool2d(xc.strided(), values.strided(), grad ? index.strided() : Strided(),
                             ConvGeometry{C, H, W, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.oh, w.ow});
  if (done) {
    if (!grad) return values;
    const Dims in = x.shape();
    return record(
        values, "max_pool2d", {x},
        [in, si = save(reshape(index, {B * C, w.oh * w.ow}))](const Tensor& dy,
                                                              const Needs&) -> Grads {
          const Tensor d2 = reshape(dy.contiguous(), {si.get().size(0), -1});
          return {reshape(detail::scatter_add_into({in[0] * in[1], in[2] * in[3]}, 1, si.get(), d2),
                          in)};
        });
  }
  const double lowest = -std::numeric_limits<double>::infinity();
  return max(windows(padded(x, w, lowest), w), 2).values;
}

Tensor avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                  std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                  bool count_include_pad) {
  const Window w = window(x, kernel, stride, padding, "avg_pool2d");
  const Tensor sums = sum(windows(padded(x, w, 0), w), {2});
  if (count_include_pad || (w.ph == 0 && w.pw == 0))
    return mul(sums, 1.0 / static_cast<double>(w.kh * w.kw));
  // Divide each output by the number of its window's elements inside the image: the same
  // windows over a [1, 1, H, W] plane of ones.
  const Tensor counts = [&] {
    NoGradGuard no_grad;
    const Tensor plane = ones({1, 1, x.size(2), x.size(3)}, x.dtype(), x.device());
    return sum(windows(padded(plane, w, 0), w), {2});
  }();
  return div(sums, counts);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::pair<int64_t, int64_t> output_size) {
  detail::check_defined(x, "adaptive_avg_pool2d", "x");
  detail::check_float(x, "adaptive_avg_pool2d");
  VT_CHECK(x.dim() == 4, "adaptive_avg_pool2d: expected x [B, C, H, W], got shape {}", x.shape());
  const auto [oh, ow] = output_size;
  VT_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d: the output size must be positive, got {}x{}", oh,
           ow);
  // PyTorch's bins: output i averages input rows [floor(i H / OH), ceil((i + 1) H / OH)). A mean
  // over a rectangle is the mean over its rows of the means over its columns, so one dim at a
  // time.
  auto along = [](const Tensor& t, int64_t dim, int64_t out) {
    const int64_t n = t.size(dim);
    if (out == 1) return mean(t, {dim}, true);
    if (n % out == 0) {  // equal bins: a reshape and one mean
      Dims shape = t.shape();
      shape[dim] = out;
      shape.insert(static_cast<int>(dim) + 1, n / out);
      return mean(reshape(contiguous(t), shape), {dim + 1});
    }
    std::vector<Tensor> bins;
    for (int64_t i = 0; i < out; ++i) {
      const int64_t lo = i * n / out, hi = ((i + 1) * n + out - 1) / out;
      bins.push_back(mean(slice(t, dim, lo, hi), {dim}, true));
    }
    return cat(bins, dim);
  };
  // (The global average pool of a ResNet's head: one mean over each contiguous map.)
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  return along(along(x, 2, oh), 3, ow);
}

}  // namespace vitrine::ops
