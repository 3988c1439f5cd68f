// Sorting, top-k, cumulative sums and sampling (ops/sequence.h). The backend's sort and cumsum
// kernels work along the last dim of a contiguous [R, C] tensor, so `dim` is moved last (a
// transposed contiguous copy) and back. sort's values send their gradient back to the positions
// they came from (a scatter-add, whose own gradient is the gather again); cumsum's gradient is
// the reverse cumsum. multinomial and randperm draw only through ops::rand on the given
// generator, so they are reproducible from its seed.
#include <cmath>
#include <limits>

#include "ops/helpers.h"
#include "ops/sequence.h"

namespace vitrine::ops {

using namespace detail;

namespace {
/// t with dim d moved last, contiguous, without graph (its own inverse).
Tensor to_last(const Tensor& t, int d) {
  if (t.dim() <= 1 || d == t.dim() - 1) return plain(t);
  NoGradGuard no_grad;
  return contiguous(transpose(t.detach(), d, -1));
}

/// The kernel view of a contiguous tensor as [rows, cols], cols its last dim.
Strided rows_view(const Tensor& t) {
  VT_ASSERT(t.is_contiguous());
  const int64_t cols = t.dim() == 0 ? 1 : t.shape().back();
  Strided s = t.strided();
  s.shape = {cols == 0 ? 0 : t.numel() / cols, cols};
  s.strides = {cols, 1};
  return s;
}

void check_sortable(const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  VT_CHECK(is_float(x.dtype()) || x.dtype() == kInt64,
           "{}: expected a float32, float64 or int64 tensor, got {} (shape {})", op,
           dtype_name(x.dtype()), x.shape());
}

/// Inclusive sum along dim d, forward or from the end; its gradient is the scan the other way.
Tensor scan(const Tensor& x, int d, bool reverse) {
  Tensor xt = to_last(x, d);
  Tensor yt = empty_on(xt, xt.shape(), xt.dtype());
  if (xt.numel() > 0) x.backend().cumsum(rows_view(xt), rows_view(yt), reverse);
  return record(
      to_last(yt, d), reverse ? "cumsum_reverse" : "cumsum", {x},
      [d, reverse](const Tensor& dy, const Needs&) -> Grads { return {scan(dy, d, !reverse)}; });
}
}  // namespace

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  check_sortable(x, "sort");
  const int d = wrap_dim(dim, x.dim(), "sort");
  if (x.dim() == 0) return {x.clone(), zeros({}, kInt64, x.device())};
  Tensor xt = to_last(x, d);
  Tensor vt = empty_on(xt, xt.shape(), xt.dtype()), it = empty_on(xt, xt.shape(), kInt64);
  if (xt.numel() > 0) x.backend().sort(rows_view(xt), rows_view(vt), rows_view(it), descending);
  Tensor values = to_last(vt, d), indices = to_last(it, d);
  // values = gather(x, d, indices): dx = scatter_add(zeros, d, indices, dvalues)
  values = record(values, "sort", {x},
                  [in = x.shape(), d, si = save(indices)](const Tensor& dy, const Needs&) -> Grads {
                    return {scatter_add_into(in, d, si.get(), dy.contiguous())};
                  });
  return {values, indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  NoGradGuard no_grad;
  return sort(x, dim, descending, stable).indices;
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  check_sortable(x, "topk");
  const int d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[d];
  VT_CHECK(k >= 0 && k <= n,
           "topk: k = {} is out of range for dim {} of size {} (shape {}; expected 0 to {})", k, d,
           n, x.shape(), n);
  ValuesIndices s = sort(x, d, largest);
  if (x.dim() == 0) return s;
  return {contiguous(narrow(s.values, d, 0, k)), contiguous(narrow(s.indices, d, 0, k))};
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_sortable(x, "cumsum");
  return scan(x, wrap_dim(dim, x.dim(), "cumsum"), false);
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator& gen) {
  check_defined(probs, "multinomial", "probs");
  VT_CHECK(probs.dim() == 1 || probs.dim() == 2,
           "multinomial: probs must be 1-D [C] or 2-D [N, C], got shape {}", probs.shape());
  VT_CHECK(is_float(probs.dtype()),
           "multinomial: expected float32 or float64 probabilities, got {} (shape {})",
           dtype_name(probs.dtype()), probs.shape());
  VT_CHECK(num_samples > 0, "multinomial: cannot sample num_samples <= 0 samples (got {})",
           num_samples);
  const int64_t C = probs.size(-1), N = probs.dim() == 2 ? probs.size(0) : 1;
  VT_CHECK(replacement || num_samples <= C,
           "multinomial: cannot sample num_samples = {} > {} categories without replacement",
           num_samples, C);
  VT_CHECK(C > 0 && C <= (int64_t{1} << 24),
           "multinomial: the number of categories must be in 1 to 2^24, got {}", C);
  NoGradGuard no_grad;
  Tensor p = reshape(to_dtype(probs.detach(), kFloat64), {N, C});
  Tensor zero = zeros({}, kFloat64, p.device());
  Tensor inf = full({}, std::numeric_limits<double>::infinity(), kFloat64, p.device());
  Tensor valid = to_dtype(le(zero, p), kFloat64) * to_dtype(lt(p, inf), kFloat64);  // NaN: 0
  VT_CHECK(N == 0 || min(valid).item() == 1,
           "multinomial: the probabilities (shape {}) contain inf, nan or an element < 0",
           probs.shape());
  std::vector<double> totals = sum(p, {1}).to_vector<double>();
  for (int64_t r = 0; r < N; ++r)
    VT_CHECK(totals[r] > 0,
             "multinomial: invalid distribution: the probabilities of row {} sum to {} (<= 0)", r,
             totals[r]);
  Tensor samples;
  if (replacement) {
    // The first c with cdf[c] > u, u ~ U[0, 1): the count of cdf entries <= u. The cdf is divided
    // by its last entry, so that entry is exactly 1 > u.
    Tensor cdf = cumsum(p, 1);
    cdf = div(cdf, narrow(cdf, 1, C - 1, 1));
    Tensor u = rand({N, num_samples, 1}, gen, kFloat64, 0, 1, p.device());
    Tensor below = le(reshape(cdf, {N, 1, C}), u);  // [N, S, C]
    samples = sum(to_dtype(below, kInt64), {2});
  } else {
    // The exponential race: keys p_c / E_c with E_c = -log(1 - u_c) ~ Exp(1); the largest
    // num_samples keys, in order. Zero-probability categories come last (key -1).
    Tensor u = rand({N, C}, gen, kFloat64, 0, 1, p.device());
    Tensor keys = div(p, neg(log1p(neg(u))));
    keys = where(eq(p, zero), full({}, -1, kFloat64, p.device()), keys);
    // One sample is the largest key (as PyTorch's argmax of the race): O(C), no sort.
    samples = num_samples == 1 ? argmax(keys, 1, true) : topk(keys, num_samples, 1).indices;
  }
  return probs.dim() == 1 ? reshape(samples, {num_samples}) : samples;
}

Tensor randperm(int64_t n, Generator& gen, DType dtype, Device device) {
  VT_CHECK(n >= 0, "randperm: n must be >= 0, got {}", n);
  VT_CHECK(dtype == kInt64 || is_float(dtype),
           "randperm: dtype must be int64, float32 or float64, got {}", dtype_name(dtype));
  VT_CHECK(dtype != kFloat32 || n <= (int64_t{1} << 24),
           "randperm: n = {} is too large for float32 (its integers are exact up to 2^24)", n);
  NoGradGuard no_grad;
  return to_dtype(argsort(rand({n}, gen, kFloat64, 0, 1, device)), dtype);
}

}  // namespace vitrine::ops
