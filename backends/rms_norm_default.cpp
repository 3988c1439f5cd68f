// The Backend's default RMS-norm kernels (backend.h), composed from its own reduce, unary and
// binary kernels: correct on any backend, with several passes over x where a fused kernel makes
// one. The CPU overrides them (backends/cpu/rms_norm.cpp). x, y, dy, dx: [R, C] contiguous; w,
// dw: [C]; rstd: [R].
#include "backends/backend.h"

namespace vitrine {

namespace {

/// v's data read with another shape and strides (a broadcast or keepdim view).
Strided view_as(const Strided& v, Dims shape, Dims strides) {
  Strided r = v;
  r.shape = std::move(shape);
  r.strides = std::move(strides);
  return r;
}

/// A contiguous scratch tensor of the given shape and dtype, on this backend.
struct Scratch {
  StoragePtr storage;
  Strided view;
  Scratch(Backend& be, const Dims& shape, DType dtype) {
    storage = be.allocate(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    view.data = storage->data;
    view.dtype = dtype;
    view.shape = shape;
    view.strides = contiguous_strides(shape);
  }
};

}  // namespace

void Backend::rms_norm(const Strided& x, const Strided& w, double eps, const Strided& y,
                       const Strided& rstd) {
  const int64_t R = x.shape[0], C = x.shape[1];
  Scratch sq(*this, x.shape, x.dtype);
  binary(BinaryOp::Mul, x, x, sq.view);
  reduce(ReduceOp::Mean, sq.view, view_as(rstd, {R, 1}, {1, 1}));
  unary(UnaryOp::AddScalar, rstd, rstd, eps, 0);
  unary(UnaryOp::Rsqrt, rstd, rstd, 0, 0);
  binary(BinaryOp::Mul, x, view_as(rstd, {R, C}, {1, 0}), y);
  if (w.data != nullptr) binary(BinaryOp::Mul, y, view_as(w, {R, C}, {0, 1}), y);
}

void Backend::rms_norm_backward(const Strided& x, const Strided& w, const Strided& rstd,
                                const Strided& dy, const Strided& dx, const Strided& dw) {
  const int64_t R = x.shape[0], C = x.shape[1];
  const Strided rs = view_as(rstd, {R, C}, {1, 0});
  Scratch xhat(*this, x.shape, x.dtype), t(*this, x.shape, x.dtype);
  binary(BinaryOp::Mul, x, rs, xhat.view);
  if (dw.data != nullptr) {
    binary(BinaryOp::Mul, dy, xhat.view, t.view);
    reduce(ReduceOp::Sum, t.view, view_as(dw, {1, C}, {C, 1}));
  }
  if (dx.data == nullptr) return;
  Scratch g(*this, x.shape, x.dtype), m(*this, Dims{R}, x.dtype);
  if (w.data != nullptr)
    binary(BinaryOp::Mul, dy, view_as(w, {R, C}, {0, 1}), g.view);
  else
    copy(dy, g.view);
  binary(BinaryOp::Mul, g.view, xhat.view, t.view);
  reduce(ReduceOp::Mean, t.view, view_as(m.view, {R, 1}, {1, 1}));
  binary(BinaryOp::Mul, xhat.view, view_as(m.view, {R, C}, {1, 0}), t.view);
  binary(BinaryOp::Sub, g.view, t.view, t.view);
  binary(BinaryOp::Mul, t.view, rs, dx);
}

}  // namespace vitrine
