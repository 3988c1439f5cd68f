// CUDA image kernels: im2col / col2im (the two halves of convolution as a GEMM, one image or a
// whole batch in one launch) and
// the nearest / bilinear / bicubic resize with its backward. Semantics, index rules and
// floating-point sequences are those of the CPU reference (backends/cpu/conv.cpp and
// backends/cpu/interpolate.cpp), so that results match it bit for bit:
//   - every rounding step of the CPU code is written out with the _rn intrinsics (fmul, fadd, ...
//     below), so that nvcc cannot contract a multiply and an add into an fma the CPU lacks;
//   - the adjoints (col2im, interpolate_backward) gather instead of scattering: one thread per
//     dx element adds its contributions in the CPU's order, so they are deterministic, without
//     atomics, and equal to the CPU's sums.
// The per-element functions are __host__ __device__ so that their index logic can be exercised
// on the host.
#include <cmath>
#include <cstdint>

#include "backends/cuda/dispatch.cuh"
#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

namespace {

// ---- IEEE operations, rounded once each, never contracted -----------------------------------
__host__ __device__ inline float fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline double fadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline double fsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ inline float fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline double fmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// ---- im2col / col2im -------------------------------------------------------------------------

/// cols[r, l] for one image, r = (c * kh + i) * kw + j, l = oh * out_w + ow:
/// x[c, oh * stride_h - pad_h + i dilation_h, ow * stride_w - pad_w + j dilation_w], 0 in the
/// padding.
/// x: [C, H, W] (any strides).
template <typename T>
__host__ __device__ T im2col_at(const T* x, int64_t xsc, int64_t xsh, int64_t xsw, const Conv& g,
                                int64_t r, int64_t l) {
  const int64_t oh = l / g.out_w, ow = l - oh * g.out_w;
  const int64_t j = r % g.kernel_w, i = (r / g.kernel_w) % g.kernel_h;
  const int64_t c = r / (g.kernel_w * g.kernel_h);
  const int64_t ih = oh * g.stride_h - g.pad_h + i * g.dilation_h;
  const int64_t iw = ow * g.stride_w - g.pad_w + j * g.dilation_w;
  if (ih < 0 || ih >= g.height || iw < 0 || iw >= g.width) return T(0);
  return x[c * xsc + ih * xsh + iw * xsw];
}

/// x: [n, C, H, W] (any strides) -> cols: [n, C * kh * kw, out_h * out_w], image b's block at
/// cols + b cbs, its rows contiguous and ld apart (cbs = rows ld: images one after the other;
/// cbs = L, ld = n L: side by side, [rows, n L]); one thread per cols element, so the whole batch
/// is one launch.
template <typename T>
__global__ void im2col_kernel(const T* x, int64_t xsb, int64_t xsc, int64_t xsh, int64_t xsw,
                              T* cols, int64_t cbs, Conv g, int64_t images, int64_t rows, int64_t L,
                              int64_t ld) {
  const int64_t per_image = rows * L, n = images * per_image;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int64_t b = e / per_image, rl = e - b * per_image;
    const int64_t r = rl / L, l = rl - r * L;
    cols[b * cbs + r * ld + l] = im2col_at(x + b * xsb, xsc, xsh, xsw, g, r, l);
  }
}

/// dx[c, h, w]: the sum of the cols entries im2col took from that pixel, added in the CPU's
/// order (kernel row i, then kernel column j; each (i, j) reaches a pixel from at most one
/// output position), in T from T(0). cols: [C * kh * kw, out_h * out_w], rows ld apart.
template <typename T>
__host__ __device__ T col2im_at(const T* cols, int64_t ld, const Conv& g, int64_t c, int64_t h,
                                int64_t w) {
  T acc = T(0);
  // oh * stride_h - pad_h + i dilation_h == h: i ascending, oh = (h + pad_h - i dilation_h) /
  // stride_h where that divides.
  const int64_t hp = h + g.pad_h, wp = w + g.pad_w;
  for (int64_t i = 0; i < g.kernel_h; ++i) {
    const int64_t th = hp - i * g.dilation_h;
    if (th < 0) break;  // so for every larger i
    if (th % g.stride_h != 0) continue;
    const int64_t oh = th / g.stride_h;
    if (oh >= g.out_h) continue;
    for (int64_t j = 0; j < g.kernel_w; ++j) {
      const int64_t tw = wp - j * g.dilation_w;
      if (tw < 0) break;
      if (tw % g.stride_w != 0) continue;
      const int64_t ow = tw / g.stride_w;
      if (ow >= g.out_w) continue;
      acc = fadd(acc, cols[((c * g.kernel_h + i) * g.kernel_w + j) * ld + oh * g.out_w + ow]);
    }
  }
  return acc;
}

/// cols: [n, C * kh * kw, out_h * out_w] laid out as im2col_kernel's (image b at cols + b cbs,
/// rows ld apart) -> dx: [n, C, H, W] (any strides), every element written (so dx needs no
/// zeroing first); one thread per dx element.
template <typename T>
__global__ void col2im_kernel(const T* cols, int64_t cbs, int64_t ld, T* dx, int64_t dsb,
                              int64_t dsc, int64_t dsh, int64_t dsw, Conv g, int64_t images) {
  const int64_t HW = g.height * g.width, per_image = g.channels * HW, n = images * per_image;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int64_t b = e / per_image, chw = e - b * per_image;
    const int64_t c = chw / HW, hw = chw - c * HW;
    const int64_t h = hw / g.width, w = hw - h * g.width;
    dx[b * dsb + c * dsc + h * dsh + w * dsw] = col2im_at(cols + b * cbs, ld, g, c, h, w);
  }
}

// ---- interpolate -----------------------------------------------------------------------------

/// One resized dim (in -> out), as make_taps in backends/cpu/interpolate.cpp sees it.
struct Axis {
  int mode;    // 0 nearest, 1 bilinear, 2 bicubic
  bool align;  // align_corners
  double s;    // the source-index scale: (in - 1) / (out - 1) with align_corners, else scale
  float fs;    // float(scale), nearest's
  int64_t in, out;
};

Axis make_axis(const Interp& g, double scale, int64_t in, int64_t out) {
  Axis a;
  a.mode = g.mode;
  a.align = g.align_corners;
  a.s = g.align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0) : scale;
  a.fs = static_cast<float>(scale);
  a.in = in;
  a.out = out;
  return a;
}

// std::min, std::max and std::clamp exactly (their NaN behaviour included).
template <typename T>
__host__ __device__ inline T min_of(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
__host__ __device__ inline T max_of(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
__host__ __device__ inline T clamp_of(T v, T lo, T hi) {
  return v < lo ? lo : hi < v ? hi : v;
}

// Keys' cubic convolution kernel for |x| <= 1 and 1 < |x| < 2, evaluated as the CPU's
// ((a + 2) * x - (a + 3)) * x * x + 1 and ((a * x - 5 * a) * x + 8 * a) * x - 4 * a.
__host__ __device__ inline double cubic1(double x, double a) {
  return fadd(fmul(fmul(fsub(fmul(a + 2, x), a + 3), x), x), 1.0);
}
__host__ __device__ inline double cubic2(double x, double a) {
  return fsub(fmul(fadd(fmul(fsub(fmul(a, x), 5 * a), x), 8 * a), x), 4 * a);
}

/// i0 = min(floor(src), in - 1) and the fraction clamped to [0, 1] (guard_index_and_lambda).
__host__ __device__ inline void floor_and_frac(double src, int64_t in, int64_t& i0, double& frac) {
  i0 = min_of(static_cast<int64_t>(floor(src)), in - 1);
  frac = clamp_of(fsub(src, static_cast<double>(i0)), 0.0, 1.0);
}

/// The taps of output index o: it reads idx[k] with weight w[k], k < the count returned (1, 2
/// or 4). The CPU's make_taps, one index at a time. Along k the indices never decrease, and
/// idx[0] and idx[n - 1] never decrease with o.
__host__ __device__ inline int taps(const Axis& a, int64_t o, int64_t idx[4], double w[4]) {
  if (a.mode == 0) {
    if (a.out == a.in)
      idx[0] = o;
    else if (a.out == 2 * a.in)
      idx[0] = o >> 1;
    else  // float arithmetic, as PyTorch's nearest_neighbor_compute_source_index
      idx[0] = min_of(static_cast<int64_t>(floorf(fmul(static_cast<float>(o), a.fs))), a.in - 1);
    w[0] = 1;
    return 1;
  }
  if (a.mode == 1) {
    if (a.out == a.in) {
      idx[0] = idx[1] = o;
      w[0] = 1;
      w[1] = 0;
      return 2;
    }
    const double src = a.align
                           ? fmul(a.s, static_cast<double>(o))
                           : max_of(fsub(fmul(a.s, fadd(static_cast<double>(o), 0.5)), 0.5), 0.0);
    int64_t i0;
    double l;
    floor_and_frac(src, a.in, i0, l);
    idx[0] = i0;
    idx[1] = i0 < a.in - 1 ? i0 + 1 : i0;
    w[0] = fsub(1.0, l);
    w[1] = l;
    return 2;
  }
  constexpr double A = -0.75;
  const double src = a.align ? fmul(a.s, static_cast<double>(o))
                             : fsub(fmul(a.s, fadd(static_cast<double>(o), 0.5)), 0.5);
  int64_t i0;
  double f;
  floor_and_frac(src, a.in, i0, f);
  w[0] = cubic2(fadd(f, 1.0), A);
  w[1] = cubic1(f, A);
  w[2] = cubic1(fsub(1.0, f), A);
  w[3] = cubic2(fsub(2.0, f), A);
  for (int k = 0; k < 4; ++k) idx[k] = clamp_of<int64_t>(i0 - 1 + k, 0, a.in - 1);
  return 4;
}

/// y[oh, ow] = sum_i wh[i] * (sum_j ww[j] * x[ih[i], iw[j]]) in double, as the CPU's.
/// x: one [H, W] plane (any strides).
template <typename T>
__host__ __device__ T interpolate_at(const T* x, int64_t sh, int64_t sw, const Axis& ah,
                                     const Axis& aw, int64_t oh, int64_t ow) {
  int64_t hi[4], wi[4];
  double hw[4], ww[4];
  const int nh = taps(ah, oh, hi, hw), nw = taps(aw, ow, wi, ww);
  double acc = 0;
  for (int i = 0; i < nh; ++i) {
    const T* xr = x + hi[i] * sh;
    double row = 0;
    for (int j = 0; j < nw; ++j) row = fadd(row, fmul(ww[j], static_cast<double>(xr[wi[j] * sw])));
    acc = fadd(acc, fmul(hw[i], row));
  }
  return static_cast<T>(acc);
}

/// x: [B, C, H, W] (any strides) -> y: [B, C, OH, OW] contiguous; one thread per y element.
template <typename T>
__global__ void interpolate_kernel(const T* x, int64_t C, int64_t sb, int64_t sc, int64_t sh,
                                   int64_t sw, T* y, int64_t n, Axis ah, Axis aw) {
  const int64_t OH = ah.out, OW = aw.out;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int64_t ow = e % OW, t = e / OW;
    const int64_t oh = t % OH, bc = t / OH;
    const T* xc = x + (bc / C) * sb + (bc % C) * sc;
    y[e] = interpolate_at(xc, sh, sw, ah, aw, oh, ow);
  }
}

/// The outputs o in [lo, hi) whose taps can include input index i: every o outside it has all
/// its taps below i (idx[n - 1] < i) or above it (idx[0] > i), both monotone in o.
__host__ __device__ inline void source_range(const Axis& a, int64_t i, int64_t& lo, int64_t& hi) {
  int64_t idx[4];
  double w[4];
  // lo: the first o with idx[n - 1] >= i.
  int64_t b = 0, e = a.out;
  while (b < e) {
    const int64_t m = b + (e - b) / 2;
    const int n = taps(a, m, idx, w);
    if (idx[n - 1] >= i)
      e = m;
    else
      b = m + 1;
  }
  lo = b;
  // hi: the first o with idx[0] > i.
  e = a.out;
  while (b < e) {
    const int64_t m = b + (e - b) / 2;
    taps(a, m, idx, w);
    if (idx[0] > i)
      e = m;
    else
      b = m + 1;
  }
  hi = b;
}

/// dx[h, w]: the CPU's scatter of dy through the taps, gathered. The CPU adds, into dx in T from
/// T(0), T(ww[j] * (wh[i] * double(dy[oh, ow]))) over oh, ow, i, j in that nesting; here the
/// same terms that land on (h, w) are added in that same order. dy: one [OH, OW] plane (any
/// strides).
template <typename T>
__host__ __device__ T interpolate_backward_at(const T* dy, int64_t sh, int64_t sw, const Axis& ah,
                                              const Axis& aw, int64_t h, int64_t w) {
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  source_range(ah, h, oh_lo, oh_hi);
  source_range(aw, w, ow_lo, ow_hi);
  T acc = T(0);
  int64_t hi[4], wi[4];
  double hw[4], ww[4];
  for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
    const int nh = taps(ah, oh, hi, hw);
    bool hit = false;
    for (int i = 0; i < nh; ++i) hit = hit || hi[i] == h;
    if (!hit) continue;
    for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
      const int nw = taps(aw, ow, wi, ww);
      const double d = static_cast<double>(dy[oh * sh + ow * sw]);
      for (int i = 0; i < nh; ++i) {
        if (hi[i] != h) continue;
        const double dh = fmul(hw[i], d);
        for (int j = 0; j < nw; ++j)
          if (wi[j] == w) acc = fadd(acc, static_cast<T>(fmul(ww[j], dh)));
      }
    }
  }
  return acc;
}

/// dy: [B, C, OH, OW] (any strides) -> dx: [B, C, H, W] contiguous, every element written (so dx
/// needs no zeroing first); one thread per dx element.
template <typename T>
__global__ void interpolate_backward_kernel(const T* dy, int64_t C, int64_t sb, int64_t sc,
                                            int64_t sh, int64_t sw, T* dx, int64_t n, Axis ah,
                                            Axis aw) {
  const int64_t H = ah.in, W = aw.in;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int64_t w = e % W, t = e / W;
    const int64_t h = t % H, bc = t / H;
    const T* dyc = dy + (bc / C) * sb + (bc % C) * sc;
    dx[e] = interpolate_backward_at(dyc, sh, sw, ah, aw, h, w);
  }
}

// ---- launchers -------------------------------------------------------------------------------

template <typename T>
cudaError_t launch_im2col(const View& x, const View& cols, const Conv& g, cudaStream_t stream) {
  const int64_t rows = g.channels * g.kernel_h * g.kernel_w, L = g.out_h * g.out_w;
  const bool batch = x.ndim == 4;  // else one image: [C, H, W] -> [rows, L]
  const int64_t images = batch ? x.shape[0] : 1;
  const int d = batch ? 1 : 0;  // x's first image dim, cols' rows dim
  if (images * rows * L == 0) return cudaSuccess;
  im2col_kernel<T><<<blocks_for(images * rows * L), kThreads, 0, stream>>>(
      static_cast<const T*>(x.data), batch ? x.strides[0] : 0, x.strides[d], x.strides[d + 1],
      x.strides[d + 2], static_cast<T*>(cols.data), batch ? cols.strides[0] : 0, g, images, rows, L,
      cols.strides[d]);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_col2im(const View& cols, const View& dx, const Conv& g, cudaStream_t stream) {
  const bool batch = dx.ndim == 4;  // else one image: [rows, L] -> [C, H, W]
  const int64_t images = batch ? dx.shape[0] : 1;
  const int d = batch ? 1 : 0;
  const int64_t n = images * g.channels * g.height * g.width;
  if (n == 0) return cudaSuccess;
  col2im_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const T*>(cols.data), batch ? cols.strides[0] : 0, cols.strides[d],
      static_cast<T*>(dx.data), batch ? dx.strides[0] : 0, dx.strides[d], dx.strides[d + 1],
      dx.strides[d + 2], g, images);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_interpolate(const View& x, const View& y, const Interp& g, cudaStream_t stream) {
  const int64_t n = y.numel();
  if (n == 0) return cudaSuccess;
  if (x.shape[2] == 0 || x.shape[3] == 0) return cudaErrorInvalidValue;  // nothing to read
  const Axis ah = make_axis(g, g.scale_h, x.shape[2], y.shape[2]);
  const Axis aw = make_axis(g, g.scale_w, x.shape[3], y.shape[3]);
  interpolate_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const T*>(x.data), x.shape[1], x.strides[0], x.strides[1], x.strides[2],
      x.strides[3], static_cast<T*>(y.data), n, ah, aw);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_interpolate_backward(const View& dy, const View& dx, const Interp& g,
                                        cudaStream_t stream) {
  const int64_t n = dx.numel();
  if (n == 0) return cudaSuccess;
  const Axis ah = make_axis(g, g.scale_h, dx.shape[2], dy.shape[2]);
  const Axis aw = make_axis(g, g.scale_w, dx.shape[3], dy.shape[3]);
  interpolate_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const T*>(dy.data), dx.shape[1], dy.strides[0], dy.strides[1], dy.strides[2],
      dy.strides[3], static_cast<T*>(dx.data), n, ah, aw);
  return cudaGetLastError();
}

}  // namespace

cudaError_t im2col(const View& x, const View& cols, const Conv& g, cudaStream_t stream) {
  const bool one = x.ndim == 3 && cols.ndim == 2;
  const bool batch = x.ndim == 4 && cols.ndim == 3 &&
                     (cols.strides[2] == 1 || cols.shape[2] == 1) && cols.shape[0] == x.shape[0];
  if (!(one || batch) || x.dtype != cols.dtype) return cudaErrorInvalidValue;
  if (x.dtype == Dt::F32) return launch_im2col<float>(x, cols, g, stream);
  if (x.dtype == Dt::F64) return launch_im2col<double>(x, cols, g, stream);
  return cudaErrorInvalidValue;
}

cudaError_t col2im(const View& cols, const View& dx, const Conv& g, cudaStream_t stream) {
  const bool one = dx.ndim == 3 && cols.ndim == 2;
  const bool batch = dx.ndim == 4 && cols.ndim == 3 &&
                     (cols.strides[2] == 1 || cols.shape[2] == 1) && cols.shape[0] == dx.shape[0];
  if (!(one || batch) || dx.dtype != cols.dtype) return cudaErrorInvalidValue;
  if (dx.dtype == Dt::F32) return launch_col2im<float>(cols, dx, g, stream);
  if (dx.dtype == Dt::F64) return launch_col2im<double>(cols, dx, g, stream);
  return cudaErrorInvalidValue;
}

cudaError_t interpolate(const View& x, const View& y, const Interp& g, cudaStream_t stream) {
  if (x.ndim != 4 || y.ndim != 4 || x.dtype != y.dtype) return cudaErrorInvalidValue;
  if (x.dtype == Dt::F32) return launch_interpolate<float>(x, y, g, stream);
  if (x.dtype == Dt::F64) return launch_interpolate<double>(x, y, g, stream);
  return cudaErrorInvalidValue;
}

cudaError_t interpolate_backward(const View& dy, const View& dx, const Interp& g,
                                 cudaStream_t stream) {
  if (dy.ndim != 4 || dx.ndim != 4 || dy.dtype != dx.dtype) return cudaErrorInvalidValue;
  if (dx.dtype == Dt::F32) return launch_interpolate_backward<float>(dy, dx, g, stream);
  if (dx.dtype == Dt::F64) return launch_interpolate_backward<double>(dy, dx, g, stream);
  return cudaErrorInvalidValue;
}

}  // namespace vitrine::cuda
