// In-place ops, for optimizers and initialisers. Each bumps the storage's version counter, so a
// backward that saved this storage notices the change. As in PyTorch, a leaf that requires grad
// cannot be modified in place while grad mode is on (wrap the update in NoGradGuard); Vitrine
// also refuses in-place changes of non-leaf tensors that require grad, rather than rebasing
// their history.
#include "ops/helpers.h"

namespace vitrine {

namespace {
void check_inplace(const Tensor& self, const char* op) {
  ops::detail::check_defined(self, op, "self");
  VT_CHECK(!(self.requires_grad() && GradMode::is_enabled()),
           "{}: in-place change of a {} that requires grad (shape {}) while grad mode is on; "
           "wrap it in NoGradGuard (as optimizers do) or use the out-of-place op",
           op, self.is_leaf() ? "leaf tensor" : "tensor computed by the graph", self.shape());
  for (int i = 0; i < self.dim(); ++i)
    VT_CHECK(self.strides()[i] != 0 || self.shape()[i] <= 1,
             "{}: in-place write into an expanded tensor (shape {}, strides {}); call contiguous() "
             "first",
             op, self.shape(), self.strides());
}

/// other, or a private copy of it when it shares memory with self in another layout
/// (x.add_(x.mT()), overlapping slices): an elementwise in-place kernel must never read what it
/// already wrote.
Tensor unaliased(const Tensor& self, const Tensor& other) {
  if (other.storage() != self.storage()) return other;
  if (other.offset() == self.offset() && other.shape() == self.shape() &&
      other.strides() == self.strides())
    return other;  // the very same elements: each is read before it is written
  NoGradGuard ng;
  return other.clone();
}

/// self = self (op) other, other broadcast to self's shape.
void binary_inplace(BinaryOp op, Tensor& self, const Tensor& other_in, const char* name) {
  check_inplace(self, name);
  ops::detail::check_same(self, other_in, name);
  Tensor other = unaliased(self, other_in);
  Dims b = broadcast_shapes(self.shape(), other.shape(), name);
  VT_CHECK(b == self.shape(), "{}: the other tensor's shape {} does not broadcast to {}", name,
           other.shape(), self.shape());
  self.backend().binary(op, self.strided(), ops::detail::broadcast_view(other, self.shape()),
                        self.strided());
  self.bump_version();
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  if (alpha == 1) {
    binary_inplace(BinaryOp::Add, *this, other, "add_");
  } else {
    check_inplace(*this, "add_");
    Tensor scaled;
    {
      NoGradGuard ng;
      scaled = ops::mul(other, alpha);
    }
    binary_inplace(BinaryOp::Add, *this, scaled, "add_");
  }
  return *this;
}

Tensor& Tensor::add_(double value) {
  check_inplace(*this, "add_");
  backend().unary(UnaryOp::AddScalar, strided(), strided(), value);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  binary_inplace(BinaryOp::Mul, *this, other, "mul_");
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  backend().unary(UnaryOp::MulScalar, strided(), strided(), value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  ops::detail::check_defined(src, "copy_", "src");
  Dims b = broadcast_shapes(shape(), src.shape(), "copy_");
  VT_CHECK(b == shape(), "copy_: source shape {} does not broadcast to {}", src.shape(), shape());
  Tensor s = src.device() == device() ? unaliased(*this, src) : src.to(device());
  backend().copy(ops::detail::broadcast_view(s, shape()), strided());
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  backend().fill(strided(), value);
  bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

}  // namespace vitrine
