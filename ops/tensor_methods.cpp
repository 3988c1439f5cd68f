// Tensor's computing methods and operators: thin forwards to vitrine::ops.
#include "ops/helpers.h"

namespace vitrine {

Tensor Tensor::to(DType d) const { return ops::to_dtype(*this, d); }
Tensor Tensor::contiguous() const { return ops::contiguous(*this); }

Tensor Tensor::clone() const {
  Tensor y = Tensor::empty(shape(), dtype(), device());
  backend().copy(strided(), y.strided());
  return record(y, "clone", {*this}, [](const Tensor& dy, const Needs&) -> Grads { return {dy}; });
}

Tensor Tensor::reshape(const Dims& s) const { return ops::reshape(*this, s); }
Tensor Tensor::view(const Dims& s) const { return ops::view(*this, s); }
Tensor Tensor::permute(const Dims& d) const { return ops::permute(*this, d); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ops::transpose(*this, d0, d1); }
Tensor Tensor::mT() const {
  VT_CHECK(dim() >= 2, "mT: expected at least 2 dims, got shape {}", shape());
  return ops::transpose(*this, -2, -1);
}
Tensor Tensor::squeeze(int64_t d) const { return ops::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return ops::unsqueeze(*this, d); }
Tensor Tensor::expand(const Dims& s) const { return ops::expand(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return ops::narrow(*this, d, start, length);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return ops::slice(*this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return ops::select(*this, d, index); }
Tensor Tensor::flatten(int64_t start, int64_t end) const { return ops::flatten(*this, start, end); }

Tensor Tensor::matmul(const Tensor& o) const { return ops::matmul(*this, o); }
Tensor Tensor::sum(const Dims& d, bool keepdim) const { return ops::sum(*this, d, keepdim); }
Tensor Tensor::mean(const Dims& d, bool keepdim) const { return ops::mean(*this, d, keepdim); }
Tensor Tensor::exp() const { return ops::exp(*this); }
Tensor Tensor::log() const { return ops::log(*this); }
Tensor Tensor::sqrt() const { return ops::sqrt(*this); }
Tensor Tensor::tanh() const { return ops::tanh(*this); }
Tensor Tensor::relu() const { return ops::relu(*this); }
Tensor Tensor::pow(double p) const { return ops::pow(*this, p); }
Tensor Tensor::abs() const { return ops::abs(*this); }
Tensor Tensor::sigmoid() const { return ops::sigmoid(*this); }

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator+(const Tensor& a, double b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, double b) { return ops::add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return ops::mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return ops::add(b, a); }
Tensor operator-(double a, const Tensor& b) { return ops::add(ops::neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return ops::mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return ops::mul(ops::pow(b, -1.0), a); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }

}  // namespace vitrine
