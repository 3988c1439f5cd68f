#include "ops/helpers.h"

#include <algorithm>

namespace vitrine::ops::detail {

void check_defined(const Tensor& t, const char* op, const char* arg) {
  VT_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op, arg);
}

void check_float(const Tensor& t, const char* op) {
  check_defined(t, op, "input");
  VT_CHECK(is_float(t.dtype()), "{}: expected a float32 or float64 tensor, got {} (shape {}){}", op,
           dtype_name(t.dtype()), t.shape(),
           is_floating_point(t.dtype()) ? "; convert 16-bit tensors with to(kFloat32) first" : "");
}

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  VT_CHECK(a.dtype() == b.dtype(),
           "{}: dtypes differ ({} with shape {} and {} with shape {}); convert one with to()", op,
           dtype_name(a.dtype()), a.shape(), dtype_name(b.dtype()), b.shape());
  VT_CHECK(a.device() == b.device(), "{}: tensors are on different devices ({} and {})", op,
           a.device().str(), b.device().str());
}

Strided broadcast_view(const Tensor& t, const Dims& shape) {
  Strided s = t.strided();
  const int n = shape.size(), k = t.dim();
  VT_ASSERT(k <= n);
  Dims st = Dims::filled(n, 0);
  for (int i = 0; i < k; ++i) {
    int64_t size = t.shape()[k - 1 - i];
    VT_ASSERT(size == shape[n - 1 - i] || size == 1);
    st[n - 1 - i] = size == 1 ? 0 : t.strides()[k - 1 - i];
  }
  s.shape = shape;
  s.strides = st;
  return s;
}

Tensor no_double_backward(Tensor y, std::string_view op, const std::vector<Tensor>& inputs) {
  return record(std::move(y), op, inputs, [op](const Tensor&, const Needs&) -> Grads {
    // The engine prefixes "backward of <op>: ".
    fail(
        "double backward is not supported ({} is the output of a fused backward kernel); use "
        "create_graph only through ops with differentiable backward rules",
        op);
  });
}

Dims reduce_dims(const Dims& dims, int ndim, const char* op) {
  Dims r;
  if (dims.empty()) {
    for (int i = 0; i < ndim; ++i) r.push_back(i);
    return r;
  }
  std::vector<int64_t> v;
  for (int64_t d : dims) v.push_back(wrap_dim(d, ndim, op));
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    VT_CHECK(i == 0 || v[i] != v[i - 1], "{}: dim {} appears twice in dims {}", op, v[i], dims);
    if (v[i] < ndim) r.push_back(v[i]);  // a 0-dim tensor: dim 0 reduces nothing
  }
  return r;
}

Dims keepdim_shape(const Dims& shape, const Dims& rdims) {
  Dims s = shape;
  for (int64_t d : rdims) s[static_cast<int>(d)] = 1;
  return s;
}

Dims squeezed_shape(const Dims& shape, const Dims& rdims) {
  Dims s;
  for (int i = 0; i < shape.size(); ++i)
    if (std::find(rdims.begin(), rdims.end(), i) == rdims.end()) s.push_back(shape[i]);
  return s;
}

Tensor plain(const Tensor& t) {
  if (!t.defined()) return t;
  NoGradGuard no_grad;
  return contiguous(t.detach());
}

}  // namespace vitrine::ops::detail
