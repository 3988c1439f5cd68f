// Shape ops. Most are views: a new TensorImpl over the same storage with other shape, strides
// and offset (so in-place writes through a view show in the base, and share its version). Their
// backward rules map dy back to the input's layout with other shape ops.
#include <algorithm>

#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {
Tensor make_view(const Tensor& x, const Dims& shape, const Dims& strides, int64_t offset) {
  return x.as_strided_view(shape, strides, offset);
}

/// Strides that let x be viewed with shape without a copy, if any (PyTorch's computeStride).
std::optional<Dims> view_strides(const Tensor& x, const Dims& shape) {
  if (x.numel() == 0 || x.dim() == 0) return contiguous_strides(shape);
  const Dims &os = x.shape(), &ost = x.strides();
  Dims st = Dims::filled(shape.size(), 0);
  int view_d = shape.size() - 1;
  int64_t chunk_base = ost.back(), tensor_numel = 1, view_numel = 1;
  for (int d = os.size() - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = ost[d - 1];
        tensor_numel = view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

/// Resolves one -1 and checks the element count.
Dims infer_shape(const Tensor& x, const Dims& shape, const char* op) {
  Dims s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      VT_CHECK(infer < 0, "{}: only one dim can be -1 (got {})", op, shape);
      infer = i;
    } else {
      VT_CHECK(s[i] >= 0, "{}: invalid size {} in shape {}", op, s[i], shape);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VT_CHECK(known != 0 && x.numel() % known == 0,
             "{}: shape {} is invalid for input of shape {} ({} elements)", op, shape, x.shape(),
             x.numel());
    s[infer] = x.numel() / known;
  }
  VT_CHECK(s.numel() == x.numel(),
           "{}: shape {} is invalid for input of shape {} ({} elements, expected {})", op, shape,
           x.shape(), x.numel(), s.numel());
  return s;
}

Tensor view_as_shape(const Tensor& x, const Dims& s, const Dims& st, const char* name) {
  Tensor y = make_view(x, s, st, x.offset());
  Dims in = x.shape();
  return record(y, name, {x},
                [in](const Tensor& dy, const Needs&) -> Grads { return {reshape(dy, in)}; });
}

/// dy placed into zeros of shape at x[..., start:end:step, ...] (the adjoint of slice).
Tensor slice_backward(const Tensor& dy, const Dims& shape, int dim, int64_t start, int64_t step) {
  Tensor out = zeros(shape, dy.dtype(), dy.device());
  Dims st = out.strides();
  st[dim] *= step;
  Tensor region = out.as_strided_view(dy.shape(), st, start * out.strides()[dim]);
  dy.backend().copy(dy.strided(), region.strided());
  return record(out, "slice_backward", {dy},
                [dim, start, step, n = dy.shape()[dim]](const Tensor& g, const Needs&) -> Grads {
                  return {slice(g, dim, start, n == 0 ? start : start + (n - 1) * step + 1, step)};
                });
}
}  // namespace

Tensor reshape(const Tensor& x, const Dims& shape) {
  check_defined(x, "reshape", "x");
  Dims s = infer_shape(x, shape, "reshape");
  if (auto st = view_strides(x, s)) return view_as_shape(x, s, *st, "reshape");
  return view_as_shape(contiguous(x), s, contiguous_strides(s), "reshape");
}

Tensor view(const Tensor& x, const Dims& shape) {
  check_defined(x, "view", "x");
  Dims s = infer_shape(x, shape, "view");
  auto st = view_strides(x, s);
  VT_CHECK(st.has_value(),
           "view: a tensor of shape {} with strides {} cannot be viewed as {} without "
           "a copy; use reshape() (or contiguous() first)",
           x.shape(), x.strides(), s);
  return view_as_shape(x, s, *st, "view");
}

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  check_defined(x, "flatten", "x");
  if (x.dim() == 0) return reshape(x, {1});
  int s = wrap_dim(start, x.dim(), "flatten"), e = wrap_dim(end, x.dim(), "flatten");
  VT_CHECK(s <= e, "flatten: start dim {} is after end dim {}", start, end);
  Dims shape;
  for (int i = 0; i < s; ++i) shape.push_back(x.shape()[i]);
  int64_t m = 1;
  for (int i = s; i <= e; ++i) m *= x.shape()[i];
  shape.push_back(m);
  for (int i = e + 1; i < x.dim(); ++i) shape.push_back(x.shape()[i]);
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, const Dims& dims) {
  check_defined(x, "permute", "x");
  VT_CHECK(dims.size() == x.dim(), "permute: {} dims given for a tensor with {} dims (shape {})",
           dims.size(), x.dim(), x.shape());
  Dims shape, strides, inverse = Dims::filled(x.dim(), -1);
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], x.dim(), "permute");
    VT_CHECK(inverse[d] < 0, "permute: dim {} appears twice in {}", d, dims);
    inverse[d] = i;
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  Tensor y = make_view(x, shape, strides, x.offset());
  return record(y, "permute", {x}, [inverse](const Tensor& dy, const Needs&) -> Grads {
    return {permute(dy, inverse)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  check_defined(x, "transpose", "x");
  if (x.dim() < 2) return x;
  Dims p = Dims::filled(x.dim(), 0);
  for (int i = 0; i < x.dim(); ++i) p[i] = i;
  std::swap(p[wrap_dim(d0, x.dim(), "transpose")], p[wrap_dim(d1, x.dim(), "transpose")]);
  return permute(x, p);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined(x, "squeeze", "x");
  int d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[d] != 1) return x;
  Dims s = x.shape(), st = x.strides();
  s.erase(d);
  st.erase(d);
  return view_as_shape(x, s, st, "squeeze");
}

Tensor squeeze(const Tensor& x) {
  check_defined(x, "squeeze", "x");
  Dims s, st;
  for (int i = 0; i < x.dim(); ++i)
    if (x.shape()[i] != 1) {
      s.push_back(x.shape()[i]);
      st.push_back(x.strides()[i]);
    }
  return view_as_shape(x, s, st, "squeeze");
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined(x, "unsqueeze", "x");
  int n = x.dim();
  VT_CHECK(dim >= -(n + 1) && dim <= n,
           "unsqueeze: dim {} is out of range for a tensor with {} dims "
           "(expected {} to {})",
           dim, n, -(n + 1), n);
  int d = static_cast<int>(dim < 0 ? dim + n + 1 : dim);
  Dims s = x.shape(), st = x.strides();
  s.insert(d, 1);
  st.insert(d, d < n ? x.strides()[d] * x.shape()[d] : 1);
  return view_as_shape(x, s, st, "unsqueeze");
}

Tensor expand(const Tensor& x, const Dims& shape) {
  check_defined(x, "expand", "x");
  const int n = shape.size(), k = x.dim();
  VT_CHECK(n >= k, "expand: cannot expand shape {} to {} (fewer dims)", x.shape(), shape);
  Dims s = shape, st = Dims::filled(n, 0);
  for (int i = 0; i < n; ++i) {
    int j = i - (n - k);  // matching dim of x, counted from the end
    if (j < 0) {
      VT_CHECK(shape[i] >= 0, "expand: size -1 is not allowed in a new leading dim ({})", shape);
      continue;
    }
    int64_t have = x.shape()[j];
    if (shape[i] == -1 || shape[i] == have) {
      s[i] = have;
      st[i] = x.strides()[j];
    } else {
      VT_CHECK(have == 1,
               "expand: cannot expand shape {} to {} (dim {}: {} vs {}; only size-1 dims "
               "expand)",
               x.shape(), shape, i, have, shape[i]);
    }
  }
  if (s == x.shape()) return x;
  Tensor y = make_view(x, s, st, x.offset());
  Dims in = x.shape();
  return record(y, "expand", {x},
                [in](const Tensor& dy, const Needs&) -> Grads { return {sum_to(dy, in)}; });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(x, "slice", "x");
  VT_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.shape()[d];
  VT_CHECK(step >= 1, "slice: step must be >= 1, got {}", step);
  VT_CHECK(start >= -n && start <= n,
           "slice: start {} is out of range for dim {} of size {} (shape {}; "
           "expected {} to {})",
           start, d, n, x.shape(), -n, n);
  if (end == kEnd) end = n;
  VT_CHECK(end >= -n && end <= n,
           "slice: end {} is out of range for dim {} of size {} (shape {}; "
           "expected {} to {}, or kEnd)",
           end, d, n, x.shape(), -n, n);
  if (start < 0) start += n;
  if (end < 0) end += n;
  VT_CHECK(end >= start, "slice: end {} is before start {} on dim {} (shape {})", end, start, d,
           x.shape());
  int64_t len = (end - start + step - 1) / step;
  Dims s = x.shape(), st = x.strides();
  s[d] = len;
  st[d] *= step;
  Tensor y = make_view(x, s, st, x.offset() + start * x.strides()[d]);
  Dims in = x.shape();
  return record(y, "slice", {x}, [in, d, start, step](const Tensor& dy, const Needs&) -> Grads {
    return {slice_backward(dy, in, d, start, step)};
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow", "x");
  int d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.shape()[d];
  if (start < 0 && start >= -n) start += n;
  VT_CHECK(start >= 0 && length >= 0 && start + length <= n,
           "narrow: start {} + length {} is out of range for dim {} of size {} (shape {})", start,
           length, d, n, x.shape());
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select", "x");
  int d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.shape()[d];
  VT_CHECK(index >= -n && index < n,
           "select: index {} is out of range for dim {} of size {} (shape {})", index, d, n,
           x.shape());
  if (index < 0) index += n;
  return squeeze(slice(x, d, index, index + 1), d);
}

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous", "x");
  if (x.is_contiguous()) return x;
  return x.clone();
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  VT_CHECK(!xs.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& x0 = xs[0];
  check_defined(x0, "cat", "xs[0]");
  int d = wrap_dim(dim, x0.dim(), "cat");
  VT_CHECK(x0.dim() > 0, "cat: 0-dim tensors cannot be concatenated (use stack)");
  Dims shape = x0.shape();
  shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_same(x0, xs[i], "cat");
    VT_CHECK(xs[i].dim() == x0.dim(),
             "cat: tensor {} has {} dims (shape {}), tensor 0 has {} (shape {})", i, xs[i].dim(),
             xs[i].shape(), x0.dim(), x0.shape());
    for (int j = 0; j < x0.dim(); ++j)
      VT_CHECK(
          j == d || xs[i].shape()[j] == x0.shape()[j],
          "cat: tensor {} has shape {}, tensor 0 has shape {} (they must match except in dim {})",
          i, xs[i].shape(), x0.shape(), d);
    shape[d] += xs[i].shape()[d];
  }
  Tensor y = empty_on(x0, shape, x0.dtype());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& x : xs) {
    Dims s = shape;
    s[d] = x.shape()[d];
    Tensor region = y.as_strided_view(s, y.strides(), off * y.strides()[d]);
    x.backend().copy(x.strided(), region.strided());
    sizes.push_back(x.shape()[d]);
    off += x.shape()[d];
  }
  return record(y, "cat", xs, [d, sizes](const Tensor& dy, const Needs& n) -> Grads {
    Grads g(sizes.size());
    int64_t o = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (n[i]) g[i] = narrow(dy, d, o, sizes[i]);
      o += sizes[i];
    }
    return g;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  VT_CHECK(!xs.empty(), "stack: expected a non-empty list of tensors");
  check_defined(xs[0], "stack", "xs[0]");
  int n = xs[0].dim();
  VT_CHECK(dim >= -(n + 1) && dim <= n, "stack: dim {} is out of range for {}-dim tensors", dim, n);
  std::vector<Tensor> u;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_defined(xs[i], "stack", "xs[i]");
    VT_CHECK(xs[i].shape() == xs[0].shape(),
             "stack: tensor {} has shape {}, tensor 0 has shape {} (all must "
             "match)",
             i, xs[i].shape(), xs[0].shape());
    u.push_back(unsqueeze(xs[i], dim));
  }
  return cat(u, dim < 0 ? dim + n + 1 : dim);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  check_defined(x, "pad", "x");
  VT_CHECK(pads.size() % 2 == 0 && static_cast<int>(pads.size()) <= 2 * x.dim(),
           "pad: {} pad values for a tensor with {} dims (expected an even count up to {})",
           pads.size(), x.dim(), 2 * x.dim());
  Dims shape = x.shape();
  Dims lo = Dims::filled(x.dim(), 0);
  for (size_t i = 0; i < pads.size(); ++i) {
    VT_CHECK(pads[i] >= 0, "pad: negative padding {} is not supported", pads[i]);
    int d = x.dim() - 1 - static_cast<int>(i / 2);
    shape[d] += pads[i];
    if (i % 2 == 0) lo[d] = pads[i];
  }
  Tensor y = full(shape, value, x.dtype(), x.device());
  int64_t off = 0;
  for (int d = 0; d < x.dim(); ++d) off += lo[d] * y.strides()[d];
  Tensor interior = y.as_strided_view(x.shape(), y.strides(), off);
  x.backend().copy(x.strided(), interior.strided());
  Dims in = x.shape();
  return record(y, "pad", {x}, [lo, in](const Tensor& dy, const Needs&) -> Grads {
    Tensor g = dy;
    for (int d = 0; d < in.size(); ++d)
      if (g.shape()[d] != in[d]) g = narrow(g, d, lo[d], in[d]);
    return {g};
  });
}

}  // namespace vitrine::ops
