// Reductions along dims (empty dims = all), with keepdim. Backward: broadcast dy back over the
// reduced dims (a view), scaled for mean; max/min send the gradient to the chosen element.
#include "ops/batch_tree.h"
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {
/// Runs the reduce kernel into a keepdim-shaped output, then drops the dims unless keepdim.
Tensor reduce_kernel(ReduceOp op, const Tensor& x, const Dims& rdims, bool keepdim, DType out) {
  Tensor y = empty_on(x, keepdim_shape(x.shape(), rdims), out);
  x.backend().reduce(op, x.strided(), y.strided());
  return keepdim ? y
                 : y.as_strided_view(squeezed_shape(y.shape(), rdims),
                                     contiguous_strides(squeezed_shape(y.shape(), rdims)), 0);
}

void check_reducible(const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  VT_CHECK(is_float(x.dtype()) || x.dtype() == kInt64,
           "{}: expected a float32, float64 or int64 tensor, got {}", op, dtype_name(x.dtype()));
}

/// dy (reduced shape) viewed with the reduced dims restored as size 1, then expanded to shape.
Tensor unreduce(const Tensor& dy, const Dims& shape, const Dims& rdims) {
  return expand(reshape(dy, keepdim_shape(shape, rdims)), shape);
}
}  // namespace

/// A float sum whose dims include 0 (a bias gradient, a broadcast's backward, a loss over the
/// batch) in the batch's fixed tree (ops/batch_tree.h): the kernel on each leaf of dim 0's
/// entries, the partials added pairwise. (The kernel alone already sums each output in an order
/// fixed by the shape; the tree makes it the same for a batch split into ranks or micro-batches.)
static Tensor tree_sum(const Tensor& x, const Dims& rd, bool keepdim) {
  const Dims ks = keepdim_shape(x.shape(), rd);
  Tensor y = batch_tree_sum(
      x, x.size(0), {ks}, x.dtype(), [&](int64_t begin, int64_t count, std::vector<Tensor>& parts) {
        x.backend().reduce(ReduceOp::Sum, narrow(x, 0, begin, count).strided(), parts[0].strided());
      })[0];
  return keepdim ? y : y.reshape(squeezed_shape(ks, rd));
}

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  check_reducible(x, "sum");
  Dims rd = reduce_dims(dims, x.dim(), "sum");
  const bool tree = !rd.empty() && rd[0] == 0 && is_float(x.dtype()) && x.size(0) > kBatchLeaf &&
                    use_batch_tree(x, x.size(0));
  Tensor y =
      tree ? tree_sum(x, rd, keepdim) : reduce_kernel(ReduceOp::Sum, x, rd, keepdim, x.dtype());
  Dims shape = x.shape();
  return record(y, "sum", {x}, [shape, rd](const Tensor& dy, const Needs&) -> Grads {
    return {unreduce(dy, shape, rd)};
  });
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  check_defined(x, "mean", "x");
  check_float(x, "mean");
  Dims rd = reduce_dims(dims, x.dim(), "mean");
  Tensor y = reduce_kernel(ReduceOp::Mean, x, rd, keepdim, x.dtype());
  Dims shape = x.shape();
  int64_t count = 1;
  for (int64_t d : rd) count *= shape[static_cast<int>(d)];
  return record(y, "mean", {x}, [shape, rd, count](const Tensor& dy, const Needs&) -> Grads {
    return {unreduce(mul(dy, 1.0 / static_cast<double>(count)), shape, rd)};
  });
}

Tensor var(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  check_float(x, "var");
  Dims rd = reduce_dims(dims, x.dim(), "var");
  int64_t count = 1;
  for (int64_t d : rd) count *= x.shape()[static_cast<int>(d)];
  double denom = static_cast<double>(count - (unbiased ? 1 : 0));
  // Composite: its gradient comes from sub, mul and sum (second derivatives included).
  Tensor centered = sub(x, mean(x, dims, true));
  return mul(sum(mul(centered, centered), dims, keepdim), 1.0 / denom);
}

namespace {
/// max/min over one dim: the index of the first extreme, and its value gathered from x (so the
/// gradient goes to exactly that element).
ValuesIndices extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_reducible(x, name);
  int d = wrap_dim(dim, x.dim(), name);
  if (x.dim() == 0) return {x, zeros({}, kInt64, x.device())};
  VT_CHECK(x.shape()[d] > 0, "{}: dim {} of shape {} is empty", name, d, x.shape());
  Tensor idx =
      reduce_kernel(is_max ? ReduceOp::ArgMax : ReduceOp::ArgMin, x, Dims{d}, true, kInt64);
  Tensor values = gather(x, d, idx);
  if (!keepdim) return {squeeze(values, d), squeeze(idx, d)};
  return {values, idx};
}
}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false);
}

namespace {
Tensor extreme_all(const Tensor& x, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_reducible(x, name);
  VT_CHECK(x.numel() > 0, "{}: the tensor is empty (shape {})", name, x.shape());
  Tensor y = reduce_kernel(is_max ? ReduceOp::Max : ReduceOp::Min, x,
                           reduce_dims({}, x.dim(), name), false, x.dtype());
  return record(y, is_max ? "max" : "min", {x},
                [sx = save(x), sy = save(y.detach())](const Tensor& dy, const Needs&) -> Grads {
                  // As PyTorch: the gradient is shared evenly among all elements equal to the
                  // extreme.
                  const Tensor& x = sx.get();
                  Tensor hit = to_dtype(eq(x, sy.get()), x.dtype());
                  return {mul(div(hit, sum(hit)), dy)};
                });
}
}  // namespace

Tensor max(const Tensor& x) { return extreme_all(x, true); }
Tensor min(const Tensor& x) { return extreme_all(x, false); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return max(x.detach(), dim, keepdim).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return min(x.detach(), dim, keepdim).indices;
}

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  check_float(x, "logsumexp");
  Dims rd = reduce_dims(dims, x.dim(), "logsumexp");
  // m = max over dims, held constant (any m gives the same value; the max keeps exp() in range).
  Tensor m = reduce_kernel(ReduceOp::Max, x.detach(), rd, true, x.dtype());
  m = where(eq(sub(m, m), zeros_like(m)), m, zeros_like(m));  // rows of +-inf or nan: shift by 0
  Tensor y = add(log(sum(exp(sub(x, m)), dims, true)), m);
  if (keepdim) return y;
  return reshape(y, squeezed_shape(y.shape(), rd));
}

Tensor sum_to(const Tensor& x, const Dims& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.size();
  VT_CHECK(lead >= 0, "sum_to: cannot reduce shape {} to the larger shape {}", x.shape(), shape);
  Dims rd;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      rd.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      rd.push_back(i);
    } else {
      VT_CHECK(shape[i - lead] == x.shape()[i], "sum_to: shape {} does not broadcast to {}", shape,
               x.shape());
    }
  }
  Tensor s = rd.empty() ? x : sum(x, rd, true);
  return reshape(s, shape);
}

}  // namespace vitrine::ops
