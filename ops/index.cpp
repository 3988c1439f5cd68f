// Indexing with int64 index tensors. The backward of a gather-like op is a scatter-add into zeros,
// itself an op whose backward is the gather again, so second derivatives work.
#include "ops/helpers.h"

namespace vitrine::ops {

using namespace detail;

namespace {
void check_index(const Tensor& index, const Tensor& x, const char* op) {
  check_defined(index, op, "index");
  VT_CHECK(index.dtype() == kInt64, "{}: index must be an int64 tensor, got {}", op,
           dtype_name(index.dtype()));
  VT_CHECK(index.device() == x.device(), "{}: index is on {}, input on {}", op,
           index.device().str(), x.device().str());
}

/// zeros(shape) with src added at index along dim (the adjoint of index_select).
Tensor index_add_into(const Dims& shape, int dim, const Tensor& index, const Tensor& src) {
  Tensor y = zeros(shape, src.dtype(), src.device());
  src.backend().index_add(y.strided(), dim, index.strided(), src.strided());
  return record(y, "index_add", {src},
                [dim, si = save(index)](const Tensor& g, const Needs&) -> Grads {
                  return {index_select(g, dim, si.get())};
                });
}

}  // namespace

Tensor detail::scatter_add_into(const Dims& shape, int dim, const Tensor& index,
                                const Tensor& src) {
  Tensor y = zeros(shape, src.dtype(), src.device());
  src.backend().scatter_add(y.strided(), dim, index.strided(), src.strided());
  return record(y, "scatter_add", {src},
                [dim, si = save(index)](const Tensor& g, const Needs&) -> Grads {
                  return {gather(g, dim, si.get())};
                });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(x, "index_select", "x");
  check_index(index, x, "index_select");
  VT_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape {}", index.shape());
  VT_CHECK(x.dim() > 0, "index_select: the input is 0-dim; unsqueeze it first");
  int d = wrap_dim(dim, x.dim(), "index_select");
  Tensor idx = index.dim() == 0 ? index.as_strided_view({1}, {1}, index.offset()) : index;
  Dims shape = x.shape();
  shape[d] = idx.numel();
  Tensor y = empty_on(x, shape, x.dtype());
  x.backend().index_select(x.strided(), d, idx.strided(), y.strided());
  Dims in = x.shape();
  return record(y, "index_select", {x},
                [in, d, si = save(idx)](const Tensor& dy, const Needs&) -> Grads {
                  return {index_add_into(in, d, si.get(), dy.contiguous())};
                });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(x, "gather", "x");
  check_index(index, x, "gather");
  int d = wrap_dim(dim, x.dim(), "gather");
  VT_CHECK(index.dim() == x.dim(), "gather: index has {} dims (shape {}), input has {} (shape {})",
           index.dim(), index.shape(), x.dim(), x.shape());
  for (int i = 0; i < x.dim(); ++i)
    VT_CHECK(i == d || index.shape()[i] <= x.shape()[i],
             "gather: index shape {} is larger than input shape {} in dim {}", index.shape(),
             x.shape(), i);
  Tensor y = empty_on(x, index.shape(), x.dtype());
  x.backend().gather(x.strided(), d, index.strided(), y.strided());
  Dims in = x.shape();
  return record(y, "gather", {x},
                [in, d, si = save(index)](const Tensor& dy, const Needs&) -> Grads {
                  return {scatter_add_into(in, d, si.get(), dy.contiguous())};
                });
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_defined(weight, "embedding", "weight");
  check_defined(indices, "embedding", "indices");
  VT_CHECK(weight.dim() == 2, "embedding: expected weight [num_embeddings, dim], got shape {}",
           weight.shape());
  VT_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got {}",
           dtype_name(indices.dtype()));
  Dims shape = indices.shape();
  shape.push_back(weight.size(1));
  return reshape(index_select(weight, 0, reshape(contiguous(indices), {indices.numel()})), shape);
}

}  // namespace vitrine::ops
