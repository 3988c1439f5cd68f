// The Backend's default batch-norm kernels (backend.h), composed from its own reduce and binary
// kernels: correct on any backend, with a few passes over x where a fused kernel makes one. The
// CPU overrides them (backends/cpu/batch_norm.cpp).
#include "backends/backend.h"

namespace vitrine {

namespace {

/// A per-channel operand [C] read as [B, C, L] (stride 0 over b and l).
Strided per_channel(const Strided& v, const Dims& shape) {
  Strided r = v;
  r.shape = shape;
  r.strides = Dims{0, v.strides[0], 0};
  return r;
}

/// A per-channel output [C] written as reduce's keepdim layout [1, C, 1].
Strided keepdim(const Strided& v) {
  Strided r = v;
  r.shape = Dims{1, v.shape[0], 1};
  r.strides = Dims{v.shape[0], 1, 1};
  return r;
}

/// A contiguous scratch tensor shaped like x, on this backend.
struct Scratch {
  StoragePtr storage;
  Strided view;
  Scratch(Backend& be, const Strided& x) {
    storage = be.allocate(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
    view.data = storage->data;
    view.dtype = x.dtype;
    view.shape = x.shape;
    view.strides = contiguous_strides(x.shape);
  }
};

}  // namespace

void Backend::batch_norm_stats(const Strided& x, const Strided& mean, const Strided& var) {
  reduce(ReduceOp::Mean, x, keepdim(mean));
  Scratch centered(*this, x);
  binary(BinaryOp::Sub, x, per_channel(mean, x.shape), centered.view);
  binary(BinaryOp::Mul, centered.view, centered.view, centered.view);
  reduce(ReduceOp::Mean, centered.view, keepdim(var));
}

void Backend::batch_norm_backward_reduce(const Strided& x, const Strided& mean, const Strided& dy,
                                         const Strided& sum_dy, const Strided& sum_dy_xmu) {
  reduce(ReduceOp::Sum, dy, keepdim(sum_dy));
  Scratch t(*this, x);
  binary(BinaryOp::Sub, x, per_channel(mean, x.shape), t.view);
  binary(BinaryOp::Mul, t.view, dy, t.view);
  reduce(ReduceOp::Sum, t.view, keepdim(sum_dy_xmu));
}

void Backend::channel_affine(const Strided& x, const Strided& a, const Strided& z,
                             const Strided& zc, const Strided& d, const Strided& y) {
  binary(BinaryOp::Mul, x, per_channel(a, x.shape), y);
  if (z.data != nullptr) {
    Scratch t(*this, x);
    binary(BinaryOp::Mul, z, per_channel(zc, x.shape), t.view);
    binary(BinaryOp::Add, y, t.view, y);
  }
  binary(BinaryOp::Add, y, per_channel(d, x.shape), y);
}

void Backend::channel_affine_relu(const Strided& x, const Strided& a, const Strided& d,
                                  const Strided& z, const Strided& y) {
  channel_affine(x, a, Strided(), Strided(), d, y);
  if (z.data != nullptr) binary(BinaryOp::Add, y, z, y);
  unary(UnaryOp::Relu, y, y, 0, 0);
}

}  // namespace vitrine
