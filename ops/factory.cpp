// Factories: new tensors from values, ranges and the seedable Philox generator.
#include <cmath>

#include "ops/helpers.h"

namespace vitrine::ops {

Tensor empty(const Dims& shape, DType dtype, Device device) {
  return Tensor::empty(shape, dtype, device);
}

Tensor full(const Dims& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.backend().fill(t.strided(), value);
  return t;
}
Tensor zeros(const Dims& shape, DType dtype, Device device) {
  return full(shape, 0, dtype, device);
}
Tensor ones(const Dims& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor zeros_like(const Tensor& x) { return full(x.shape(), 0, x.dtype(), x.device()); }
Tensor ones_like(const Tensor& x) { return full(x.shape(), 1, x.dtype(), x.device()); }
Tensor full_like(const Tensor& x, double value) {
  return full(x.shape(), value, x.dtype(), x.device());
}
Tensor scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype) {
  VT_CHECK(step != 0, "arange: step must be non-zero");
  VT_CHECK((end - start) / step >= 0 || start == end,
           "arange: the range [{}, {}) cannot be walked with step {}", start, end, step);
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = Tensor::empty({std::max<int64_t>(n, 0)}, dtype);
  if (n > 0) t.backend().arange(t.strided(), start, step);
  return t;
}
Tensor arange(double end, DType dtype) { return arange(0, end, 1, dtype); }

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  VT_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  Tensor t = Tensor::empty({steps}, dtype);
  if (steps == 1)
    t.fill_(start);
  else if (steps > 1)
    t.backend().arange(t.strided(), start, (end - start) / static_cast<double>(steps - 1));
  return t;
}

namespace {
template <typename T>
Tensor from_host(const std::vector<T>& values, const Dims& shape, DType dtype) {
  Dims s = shape.empty() && values.size() != 1 ? Dims{static_cast<int64_t>(values.size())} : shape;
  VT_CHECK(s.numel() == static_cast<int64_t>(values.size()),
           "from_vector: {} values given for shape {} ({} elements)", values.size(), s, s.numel());
  Tensor host = Tensor::empty(s, dtype_of<T>());
  std::copy(values.begin(), values.end(), host.data<T>());
  return dtype == dtype_of<T>() ? host : host.to(dtype);
}
}  // namespace

Tensor from_vector(const std::vector<double>& values, const Dims& shape, DType dtype) {
  return from_host(values, shape, dtype);
}
Tensor from_vector(const std::vector<float>& values, const Dims& shape) {
  return from_host(values, shape, kFloat32);
}
Tensor from_vector(const std::vector<int64_t>& values, const Dims& shape) {
  return from_host(values, shape, kInt64);
}
Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return from_host(std::vector<double>(values), {static_cast<int64_t>(values.size())}, dtype);
}

Tensor rand(const Dims& shape, Generator& gen, DType dtype, double lo, double hi, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.backend().uniform(t.strided(), gen.seed(), gen.advance(t.numel()), lo, hi);
  return t;
}

Tensor randn(const Dims& shape, Generator& gen, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.backend().normal(t.strided(), gen.seed(), gen.advance(t.numel()), 0, 1);
  return t;
}

Tensor randint(int64_t lo, int64_t hi, const Dims& shape, Generator& gen, Device device) {
  VT_CHECK(hi > lo, "randint: empty range [{}, {})", lo, hi);
  Tensor t = Tensor::empty(shape, kInt64, device);
  t.backend().randint(t.strided(), gen.seed(), gen.advance(t.numel()), lo, hi);
  return t;
}

}  // namespace vitrine::ops
