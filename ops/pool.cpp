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
// is average pooling. max_pool2d_with_indices also returns where each maximum is (flat h W + w per
// plane), and max_unpool2d writes values back at such indices (a scatter; its gradient a gather).
#include "ops/pool.h"

#include <cmath>
#include <limits>
#include <vector>

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

/// The maxima of x [B, C, H, W] with, when a gradient is wanted, a node scattering dy onto their
/// flat indices per plane (gather's gradient; no window copies).
Tensor record_max_pool(const Tensor& values, const Tensor& index, const Tensor& x) {
  const Dims in = x.shape();
  const int64_t planes = in[0] * in[1];
  return record(
      values, "max_pool2d", {x},
      [in, planes, si = save(reshape(index, {planes, -1}))](const Tensor& dy,
                                                            const Needs&) -> Grads {
        const Tensor d2 = reshape(dy.contiguous(), {planes, -1});
        return {reshape(detail::scatter_add_into({planes, in[2] * in[3]}, 1, si.get(), d2), in)};
      });
}

/// The maxima by the backend's kernel (values, and indices when index is defined); false where
/// the backend has none.
bool pool_kernel(const Tensor& x, const Window& w, const Tensor& values, const Tensor& index) {
  const Tensor xc = contiguous(x);
  return x.backend().max_pool2d(xc.strided(), values.strided(),
                                index.defined() ? index.strided() : Strided(),
                                ConvGeometry{x.size(1), x.size(2), x.size(3), w.kh, w.kw, w.sh,
                                             w.sw, w.ph, w.pw, w.oh, w.ow});
}

}  // namespace

Tensor max_pool2d(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                  std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding) {
  const Window w = window(x, kernel, stride, padding, "max_pool2d");
  if (w.kh == 1 && w.kw == 1) return squeeze(windows(x, w), 2);
  // A backend's kernel: the maxima, and where a gradient is wanted their indices too, the
  // backward scattering dy onto them (gather's gradient; no window copies).
  const int64_t B = x.size(0), C = x.size(1);
  const bool grad = GradMode::is_enabled() && x.requires_grad();
  Tensor values = detail::empty_on(x, {B, C, w.oh, w.ow}, x.dtype());
  Tensor index = grad ? detail::empty_on(x, {B, C, w.oh, w.ow}, kInt64) : Tensor();
  if (pool_kernel(x, w, values, index)) return grad ? record_max_pool(values, index, x) : values;
  const double lowest = -std::numeric_limits<double>::infinity();
  return max(windows(padded(x, w, lowest), w), 2).values;
}

ValuesIndices max_pool2d_with_indices(const Tensor& x, std::pair<int64_t, int64_t> kernel,
                                      std::pair<int64_t, int64_t> stride,
                                      std::pair<int64_t, int64_t> padding) {
  const Window w = window(x, kernel, stride, padding, "max_pool2d_with_indices");
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor values = detail::empty_on(x, {B, C, w.oh, w.ow}, x.dtype());
  Tensor index = detail::empty_on(x, {B, C, w.oh, w.ow}, kInt64);
  if (pool_kernel(x, w, values, index)) return {record_max_pool(values, index, x), index};
  // Composed: the windows' maxima and their positions in the window, mapped to the plane's flat
  // indices through the same windows over a plane of its own indices (padding: -1).
  const double lowest = -std::numeric_limits<double>::infinity();
  ValuesIndices m = max(windows(padded(x, w, lowest), w), 2);
  NoGradGuard no_grad;
  const Tensor plane = reshape(arange(0, static_cast<double>(H * W), 1, kFloat64), {1, 1, H, W});
  const Tensor where = windows(padded(plane.to(x.device()), w, -1), w);  // [1, 1, kh kw, OH, OW]
  const Tensor at =
      gather(expand(where, {B, C, w.kh * w.kw, w.oh, w.ow}), 2, unsqueeze(m.indices, 2));
  return {m.values, to_dtype(squeeze(at, 2), kInt64)};
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::pair<int64_t, int64_t> kernel,
                    std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                    const Dims& output_size) {
  const char* op = "max_unpool2d";
  detail::check_defined(x, op, "x");
  detail::check_defined(indices, op, "indices");
  detail::check_float(x, op);
  VT_CHECK(x.dim() == 3 || x.dim() == 4, "{}: expected x [B, C, H, W] or [C, H, W], got shape {}",
           op, x.shape());
  VT_CHECK(indices.dtype() == kInt64, "{}: indices must be int64, got {} (shape {})", op,
           dtype_name(indices.dtype()), indices.shape());
  VT_CHECK(indices.shape() == x.shape(),
           "{}: expected indices of the input's shape {} (max_pool2d_with_indices's), got {}", op,
           x.shape(), indices.shape());
  VT_CHECK(indices.device() == x.device(), "{}: x and indices are on different devices ({} and {})",
           op, x.device().str(), indices.device().str());
  if (x.dim() == 3)
    return squeeze(
        max_unpool2d(unsqueeze(x, 0), unsqueeze(indices, 0), kernel, stride, padding, output_size),
        0);
  const auto [kh, kw] = kernel;
  const auto [sh, sw] = stride;
  const auto [ph, pw] = padding;
  VT_CHECK(kh > 0 && kw > 0, "{}: kernel sizes must be positive, got {}x{}", op, kh, kw);
  VT_CHECK(sh > 0 && sw > 0, "{}: stride must be positive, got {}x{}", op, sh, sw);
  VT_CHECK(ph >= 0 && pw >= 0, "{}: padding must be >= 0, got {}x{}", op, ph, pw);
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  // PyTorch's _unpool_output_size: the default, or a size within a stride of it.
  const int64_t dh = (H - 1) * sh - 2 * ph + kh, dw = (W - 1) * sw - 2 * pw + kw;
  int64_t oh = dh, ow = dw;
  if (!output_size.empty()) {
    VT_CHECK(output_size.size() == 2 || output_size.size() == 4,
             "{}: output_size must have 2 or 4 elements ([OH, OW] or [B, C, OH, OW]), got {}", op,
             output_size);
    oh = output_size[output_size.size() - 2];
    ow = output_size[output_size.size() - 1];
    VT_CHECK(dh - sh < oh && oh < dh + sh && dw - sw < ow && ow < dw + sw,
             "{}: invalid output_size {} (the height must be between {} and {}, the width between "
             "{} and {}, exclusive: within a stride of the default {}x{})",
             op, output_size, dh - sh, dh + sh, dw - sw, dw + sw, dh, dw);
  }
  VT_CHECK(oh > 0 && ow > 0, "{}: the output size {}x{} is not positive (x shape {})", op, oh, ow,
           x.shape());
  const int64_t planes = B * C, n_in = H * W, n_out = oh * ow;
  const Tensor idx = reshape(contiguous(indices), {planes, n_in});
  Tensor src = reshape(contiguous(x.detach()), {planes, n_in});
  {
    // On the host: every index inside its plane, and where two entries of a plane name one
    // output, only the last (row-major) written, as PyTorch's kernel overwrites.
    NoGradGuard no_grad;
    const std::vector<int64_t> flat = idx.to_vector<int64_t>();
    std::vector<int64_t> stamp(static_cast<size_t>(n_out), -1), owner(static_cast<size_t>(n_out));
    std::vector<double> keep;
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < n_in; ++i) {
        const int64_t e = p * n_in + i, k = flat[static_cast<size_t>(e)];
        VT_CHECK(k >= 0 && k < n_out,
                 "{}: found an invalid max index {} (at flat position {} of indices of shape {}); "
                 "the output planes are {}x{}, so indices must be in [0, {})",
                 op, k, e, indices.shape(), oh, ow, n_out);
        if (stamp[static_cast<size_t>(k)] == p) {
          if (keep.empty()) keep.assign(flat.size(), 1.0);
          keep[static_cast<size_t>(owner[static_cast<size_t>(k)])] = 0.0;
        }
        stamp[static_cast<size_t>(k)] = p;
        owner[static_cast<size_t>(k)] = e;
      }
    if (!keep.empty()) src = mul(src, from_vector(keep, {planes, n_in}, x.dtype()).to(x.device()));
  }
  Tensor y;
  {
    NoGradGuard no_grad;
    y = reshape(detail::scatter_add_into({planes, n_out}, 1, idx, src), {B, C, oh, ow});
  }
  const Dims in = x.shape();
  return record(y, op, {x}, [in, planes, si = save(idx)](const Tensor& dy, const Needs&) -> Grads {
    const Tensor d2 = reshape(dy.contiguous(), {planes, -1});
    return {reshape(gather(d2, 1, si.get()), in)};
  });
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
