// Sequence-model ops written with other ops (ops/sequence.h): triangles and masks (where with an
// index comparison), eye and one_hot (eq of index ranges), split/chunk (narrow views), flip
// (index_select), roll (narrow + cat), repeat (expand + reshape), bmm/baddbmm (matmul), and
// norm, whose 2-norm and general-p rules are recorded here so that the gradient at a zero norm
// is 0 as PyTorch's. Gradients come from the ops called, so second derivatives work.
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "ops/helpers.h"
#include "ops/sequence.h"

namespace vitrine::ops {

using namespace detail;

namespace {
/// 0, 1, ..., n - 1 as int64 on device.
Tensor iota(int64_t n, Device device) {
  Tensor t = Tensor::empty({n}, kInt64, device);
  if (n > 0) t.backend().arange(t.strided(), 0, 1);
  return t;
}

/// "[2, 3, 4]" for a list that may be longer than a Dims holds.
std::string list_str(const std::vector<int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

/// x where the column minus the row index of the last two dims is >= diagonal (upper) or <=
/// diagonal (lower), else 0.
Tensor triangle(const Tensor& x, int64_t diagonal, bool upper) {
  const char* name = upper ? "triu" : "tril";
  check_defined(x, name, "x");
  VT_CHECK(x.dim() >= 2, "{}: expected a tensor with at least 2 dims, got shape {}", name,
           x.shape());
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor offset = sub(reshape(iota(cols, x.device()), {1, cols}),
                      reshape(iota(rows, x.device()), {rows, 1}));  // [rows, cols]: j - i
  Tensor d = full({}, static_cast<double>(diagonal), kInt64, x.device());
  Tensor keep = upper ? ge(offset, d) : le(offset, d);
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}
}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_defined(x, "masked_fill", "x");
  check_defined(mask, "masked_fill", "mask");
  VT_CHECK(mask.dtype() == kBool, "masked_fill: expected a bool mask, got {} (shape {})",
           dtype_name(mask.dtype()), mask.shape());
  VT_CHECK(x.dtype() != kInt64 || value == std::trunc(value),
           "masked_fill: the value {} is not an integer, and the tensor is int64 (shape {})", value,
           x.shape());
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");  // names the op when they do not
  return where(mask, full({}, value, x.dtype(), x.device()), x);
}

Tensor eye(int64_t n, DType dtype, Device device) { return eye(n, n, dtype, device); }

Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  VT_CHECK(n >= 0 && m >= 0, "eye: n and m must be >= 0, got n = {}, m = {}", n, m);
  Tensor on = eq(reshape(iota(n, device), {n, 1}), reshape(iota(m, device), {1, m}));
  return to_dtype(on, dtype);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined(x, "split", "x");
  VT_CHECK(x.dim() > 0, "split: expected a tensor with at least 1 dim, got a 0-dim one");
  const int d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.shape()[d];
  VT_CHECK(split_size >= 0, "split: split_size must be non-negative, got {}", split_size);
  VT_CHECK(split_size > 0 || n == 0,
           "split: split_size can only be 0 if dim {} has size 0, but it has size {} (shape {})", d,
           n, x.shape());
  const int64_t pieces =
      split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<Tensor> out;
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    out.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  check_defined(x, "split", "x");
  VT_CHECK(x.dim() > 0, "split: expected a tensor with at least 1 dim, got a 0-dim one");
  const int d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.shape()[d];
  for (int64_t s : split_sizes)
    VT_CHECK(s >= 0, "split: split_sizes must be non-negative, got {}", list_str(split_sizes));
  const int64_t total = std::accumulate(split_sizes.begin(), split_sizes.end(), int64_t{0});
  VT_CHECK(total == n,
           "split: split_sizes {} add up to {}, but dim {} of shape {} has size {} (they must "
           "add up to it exactly)",
           list_str(split_sizes), total, d, x.shape(), n);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined(x, "chunk", "x");
  VT_CHECK(x.dim() > 0, "chunk: expected a tensor with at least 1 dim, got a 0-dim one");
  VT_CHECK(chunks > 0, "chunk: chunks must be greater than 0, got {}", chunks);
  const int d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.shape()[d];
  const int64_t size = (n + chunks - 1) / chunks;
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);
  return split(x, size, d);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_defined(indices, "one_hot", "indices");
  VT_CHECK(indices.dtype() == kInt64, "one_hot: expected an int64 index tensor, got {} (shape {})",
           dtype_name(indices.dtype()), indices.shape());
  VT_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (inferred) or >= 0, got {}",
           num_classes);
  if (indices.numel() == 0) {
    VT_CHECK(num_classes >= 0,
             "one_hot: cannot infer the number of classes from an empty tensor (shape {}); give "
             "num_classes",
             indices.shape());
  } else {
    const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
    VT_CHECK(lo >= 0, "one_hot: class values must be non-negative, got {}", lo);
    if (num_classes < 0) num_classes = hi + 1;
    VT_CHECK(hi < num_classes,
             "one_hot: class values must be smaller than num_classes = {}, got {}", num_classes,
             hi);
  }
  // [..., 1] == [C] -> [..., C]
  return to_dtype(eq(unsqueeze(indices, -1), iota(num_classes, indices.device())), kInt64);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_defined(a, "bmm", "batch1");
  check_defined(b, "bmm", "batch2");
  VT_CHECK(a.dim() == 3, "bmm: batch1 must be a 3-D tensor, got shape {}", a.shape());
  VT_CHECK(b.dim() == 3, "bmm: batch2 must be a 3-D tensor, got shape {}", b.shape());
  VT_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2),
           "bmm: batch1 has shape {}, so batch2's first two dims must be [{}, {}], got shape {}",
           a.shape(), a.size(0), a.size(2), b.shape());
  return matmul(a, b);
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta,
               double alpha) {
  check_defined(input, "baddbmm", "input");
  Tensor p = bmm(batch1, batch2);
  check_same(input, p, "baddbmm");
  VT_CHECK(broadcast_shapes(input.shape(), p.shape(), "baddbmm") == p.shape(),
           "baddbmm: input of shape {} does not broadcast to the product's shape {}", input.shape(),
           p.shape());
  Tensor y = alpha == 1 ? p : mul(p, alpha);
  if (beta == 0) return y;  // input is ignored (a NaN in it does not spread), as PyTorch
  return add(y, input, beta);
}

Tensor norm(const Tensor& x, double p, const Dims& dims, bool keepdim) {
  check_defined(x, "norm", "x");
  check_float(x, "norm");
  VT_CHECK(!std::isnan(p), "norm: p is NaN");
  const Dims rd = reduce_dims(dims, x.dim(), "norm");
  if (p == 1) return sum(abs(x), rd, keepdim);
  if (p == 0) return sum(to_dtype(ne(x, zeros({}, x.dtype(), x.device())), x.dtype()), rd, keepdim);
  const Dims kshape = keepdim_shape(x.shape(), rd);
  Tensor y;
  {
    NoGradGuard no_grad;
    Tensor a = abs(x.detach());
    if (std::isinf(p)) {
      int64_t count = 1;
      for (int64_t d : rd) count *= x.shape()[static_cast<int>(d)];
      VT_CHECK(count > 0,
               "norm: cannot compute the {}inf norm over an empty set of elements (shape {}, dims "
               "{})",
               p > 0 ? "" : "-", x.shape(), rd);
      y = empty_on(x, kshape, x.dtype());
      x.backend().reduce(p > 0 ? ReduceOp::Max : ReduceOp::Min, a.strided(), y.strided());
      if (!keepdim) y = reshape(y, squeezed_shape(kshape, rd));
    } else if (p == 2) {
      y = sqrt(sum(mul(a, a), rd, keepdim));
    } else {
      y = pow(sum(pow(a, p), rd, keepdim), 1.0 / p);
    }
  }
  return record(
      y, "norm", {x}, [sx = save(x), p, rd, kshape](const Tensor& dy, const Needs&) -> Grads {
        const Tensor& x = sx.get();
        Tensor yk = norm(x, p, rd, true), dyk = reshape(dy, kshape);
        if (std::isinf(p)) {  // sign(x), shared evenly among the elements whose |x| is the norm
          Tensor hit = to_dtype(eq(abs(x), yk.detach()), x.dtype());
          return {mul(mul(sign(x), div(hit, sum(hit, rd, true))), dyk)};
        }
        Tensor g = p == 2  ? div(x, yk)
                   : p < 2 ? mul(sign(x), div(pow(abs(x), p - 1), pow(yk, p - 1)))
                           : mul(x, div(pow(abs(x), p - 2), pow(yk, p - 1)));
        Tensor zero = zeros({}, x.dtype(), x.device());
        return {mul(where(eq(yk, zero), zero, g), dyk)};  // 0 where the norm is 0
      });
}

Tensor flip(const Tensor& x, const Dims& dims) {
  check_defined(x, "flip", "x");
  std::vector<bool> seen(static_cast<size_t>(std::max(x.dim(), 1)), false);
  Tensor y = x;
  for (int64_t dim : dims) {
    const int d = wrap_dim(dim, x.dim(), "flip");
    VT_CHECK(!seen[d], "flip: dim {} appears more than once in dims {}", d, dims);
    seen[d] = true;
    const int64_t n = x.dim() == 0 ? 1 : x.shape()[d];
    if (n <= 1) continue;
    Tensor reversed = Tensor::empty({n}, kInt64, x.device());
    reversed.backend().arange(reversed.strided(), static_cast<double>(n - 1), -1);
    y = index_select(y, d, reversed);
  }
  return y.same(x) ? x.clone() : y;
}

Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims) {
  check_defined(x, "roll", "x");
  if (dims.empty()) {
    VT_CHECK(shifts.size() == 1,
             "roll: without dims, expected one shift (of the flattened tensor), got shifts {}",
             shifts);
    return reshape(roll(flatten(x), shifts, {0}), x.shape());
  }
  VT_CHECK(shifts.size() == dims.size(),
           "roll: shifts and dims must align: {} shifts {} for {} dims {}", shifts.size(), shifts,
           dims.size(), dims);
  Tensor y = x;
  for (int i = 0; i < dims.size(); ++i) {
    const int d = wrap_dim(dims[i], x.dim(), "roll");
    if (x.dim() == 0) continue;
    const int64_t n = x.shape()[d];
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;  // y[(j + s) mod n] = x[j]
    if (s == 0) continue;
    y = cat({narrow(y, d, n - s, s), narrow(y, d, 0, n - s)}, d);
  }
  return y.same(x) ? x.clone() : y;
}

Tensor repeat(const Tensor& x, const Dims& sizes) {
  check_defined(x, "repeat", "x");
  VT_CHECK(sizes.size() >= x.dim(),
           "repeat: {} sizes {} given for a tensor with {} dims (shape {}); there must be at least "
           "as many sizes as dims",
           sizes.size(), sizes, x.dim(), x.shape());
  for (int64_t s : sizes) VT_CHECK(s >= 0, "repeat: sizes must be non-negative, got {}", sizes);
  Dims shape = Dims::filled(sizes.size() - x.dim(), 1);
  for (int64_t s : x.shape()) shape.push_back(s);
  Tensor y = reshape(x, shape);
  bool tiled = false;
  for (int i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    tiled = true;
    // [..., n, ...] -> [..., 1, n, ...] -> expand [..., r, n, ...] -> [..., r n, ...]
    Dims wide = y.shape(), merged = y.shape();
    wide.insert(i, sizes[i]);
    merged[i] *= sizes[i];
    y = reshape(expand(unsqueeze(y, i), wide), merged);
  }
  return tiled ? contiguous(y) : y.clone();  // a copy, as PyTorch's
}

}  // namespace vitrine::ops
