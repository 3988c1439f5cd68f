// CPU index kernels: index_select / index_add along a dim with a 1-D int64 index, gather /
// scatter_add with an index shaped like the output. Out-of-range indices are user errors.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace vitrine::cpu {

namespace {
int64_t checked(int64_t i, int64_t size, const char* op, int dim) {
  VT_CHECK(i >= -size && i < size, "{}: index {} is out of range for dim {} of size {}", op, i, dim,
           size);
  return i < 0 ? i + size : i;
}

/// Splits a shape at dim: outer = dims before, inner = dims after (with their strides).
struct Split {
  Dims outer_shape, outer_strides, inner_shape, inner_strides;
  Split(const Strided& t, int dim) {
    for (int i = 0; i < t.shape.size(); ++i) {
      if (i < dim) {
        outer_shape.push_back(t.shape[i]);
        outer_strides.push_back(t.strides[i]);
      } else if (i > dim) {
        inner_shape.push_back(t.shape[i]);
        inner_strides.push_back(t.strides[i]);
      }
    }
  }
};

/// Visits (x offset, y offset) for y[..., i, ...] <- x[..., index[i], ...].
template <typename F>
void index_pairs(const Strided& x, int dim, const Strided& index, const Strided& y, const char* op,
                 F&& f) {
  Split sx(x, dim), sy(y, dim);
  const int64_t n = index.numel(), size = x.shape[dim];
  const int64_t* ip = index.ptr<int64_t>();
  for_offsets(sx.outer_shape, sx.outer_strides, 0, sx.outer_shape.numel(),
              [&](int64_t o, int64_t xo) {
                int64_t yo = 0;
                for_offsets(sy.outer_shape, sy.outer_strides, o, o + 1,
                            [&](int64_t, int64_t off) { yo = off; });
                for (int64_t i = 0; i < n; ++i) {
                  int64_t j = checked(ip[i * index.strides[0]], size, op, dim);
                  int64_t xb = xo + j * x.strides[dim], yb = yo + i * y.strides[dim];
                  for_offsets(sx.inner_shape, sx.inner_strides, 0, sx.inner_shape.numel(),
                              [&](int64_t k, int64_t xi) {
                                int64_t yi = 0;
                                for (int d = sy.inner_shape.size() - 1, r = k; d >= 0; --d) {
                                  yi += (r % sy.inner_shape[d]) * sy.inner_strides[d];
                                  r /= sy.inner_shape[d];
                                }
                                f(xb + xi, yb + yi);
                              });
                }
              });
}
}  // namespace

void CpuBackend::index_select(const Strided& x, int dim, const Strided& index, const Strided& y) {
  dispatch_all(x.dtype, "index_select", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* yp = y.ptr<T>();
    index_pairs(x, dim, index, y, "index_select", [&](int64_t xo, int64_t yo) { yp[yo] = xp[xo]; });
  });
}

void CpuBackend::index_add(const Strided& y, int dim, const Strided& index, const Strided& src) {
  // y[..., index[i], ...] += src[..., i, ...]: the same walk with the roles of x and y swapped.
  dispatch_numeric(y.dtype, "index_add", [&]<typename T>() {
    T* yp = y.ptr<T>();
    const T* sp = src.ptr<T>();
    index_pairs(y, dim, index, src, "index_add", [&](int64_t yo, int64_t so) { yp[yo] += sp[so]; });
  });
}

namespace {
/// Visits (source offset along everything, index value) pairs for gather / scatter_add.
template <typename F>
void gather_pairs(const Strided& big, int dim, const Strided& index, const Strided& small,
                  const char* op, F&& f) {
  const int nd = index.shape.size();
  const int64_t size = big.shape[dim];
  const int64_t* ip = index.ptr<int64_t>();
  for_offsets(index.shape, index.strides, 0, index.numel(), [&](int64_t flat, int64_t io) {
    int64_t bo = 0, so = 0;
    int64_t r = flat;
    for (int d = nd - 1; d >= 0; --d) {
      int64_t i = r % index.shape[d];
      r /= index.shape[d];
      so += i * small.strides[d];
      if (d != dim) bo += i * big.strides[d];
    }
    int64_t j = checked(ip[io], size, op, dim);
    f(bo + j * big.strides[dim], so);
  });
}
}  // namespace

void CpuBackend::gather(const Strided& x, int dim, const Strided& index, const Strided& y) {
  dispatch_all(x.dtype, "gather", [&]<typename T>() {
    const T* xp = x.ptr<T>();
    T* yp = y.ptr<T>();
    gather_pairs(x, dim, index, y, "gather", [&](int64_t xo, int64_t yo) { yp[yo] = xp[xo]; });
  });
}

void CpuBackend::scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) {
  dispatch_numeric(y.dtype, "scatter_add", [&]<typename T>() {
    T* yp = y.ptr<T>();
    const T* sp = src.ptr<T>();
    gather_pairs(y, dim, index, src, "scatter_add",
                 [&](int64_t yo, int64_t so) { yp[yo] += sp[so]; });
  });
}

}  // namespace vitrine::cpu
