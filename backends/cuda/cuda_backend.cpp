// The CUDA backend's memory, copies, random numbers, elementwise and index ops, normalisation,
// images and optimizers (the class: cuda_backend.h), and the backend's registration.
#include "backends/cuda/cuda_backend.h"

namespace vitrine {
namespace cuda {

// The mirrored enums must keep the library's values (kernels.cuh).
static_assert(static_cast<int>(Dt::F16) == static_cast<int>(DType::Float16));
// (The op enums come from the same lists, backends/op_lists.h; checked all the same.)
#define VITRINE_SAME_UNARY(name) \
  static_assert(static_cast<int>(Unary::name) == static_cast<int>(UnaryOp::name));
#define VITRINE_SAME_BINARY(name) \
  static_assert(static_cast<int>(Binary::name) == static_cast<int>(BinaryOp::name));
#define VITRINE_SAME_REDUCE(name) \
  static_assert(static_cast<int>(Reduce::name) == static_cast<int>(ReduceOp::name));
VITRINE_UNARY_OPS(VITRINE_SAME_UNARY)
VITRINE_BINARY_OPS(VITRINE_SAME_BINARY)
VITRINE_REDUCE_OPS(VITRINE_SAME_REDUCE)
#undef VITRINE_SAME_UNARY
#undef VITRINE_SAME_BINARY
#undef VITRINE_SAME_REDUCE
static_assert(static_cast<int>(InterpMode::Bicubic) == 2);

StoragePtr CudaBackend::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  const size_t cls = BlockCache::size_class(std::max(nbytes, kMinBlock));
  void* p = cache_.take(cls);
  if (!p && cudaMalloc(&p, cls) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the failure, free the cache, try once more
    cache_.release_all();
    cudaError_t e = cudaMalloc(&p, cls);
    VT_CHECK(e == cudaSuccess, "cuda: out of memory allocating {} bytes ({} in use, {})", nbytes,
             counter_.current(), cudaGetErrorString(e));
  }
  counter_.add(cls);
  s->data = p;
  s->nbytes = nbytes;
  s->device = device();
  s->deleter = [this, cls](void* q) {
    counter_.sub(cls);
    cache_.give(q, cls);
  };
  return s;
}

void CudaBackend::copy(const Strided& src, const Strided& dst) {
  VT_ASSERT(src.shape == dst.shape);
  if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
    check(cudaMemcpyAsync(dst.data, src.data, src.numel() * dtype_size(src.dtype),
                          cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
    return;
  }
  check_launch(cuda::copy(view(src), view(dst), stream_), "copy", dst.dtype);
}

void CudaBackend::to_host(const void* src, void* host_dst, size_t nbytes) {
  check(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync to host");
  check(cudaStreamSynchronize(stream_), "reading the GPU's results");
}

void CudaBackend::from_host(const void* host_src, void* dst, size_t nbytes) {
  check(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync from host");
  // The host buffer may be freed as soon as we return.
  check(cudaStreamSynchronize(stream_), "copying to the GPU");
}

void CudaBackend::unary(UnaryOp op, const Strided& x, const Strided& y, double alpha, double beta) {
  check_launch(cuda::unary(static_cast<Unary>(op), view(x), view(y), alpha, beta, stream_),
               "unary op", x.dtype);
}

void CudaBackend::binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) {
  check_launch(cuda::binary(static_cast<Binary>(op), view(a), view(b), view(y), stream_),
               "binary op", a.dtype);
}

void CudaBackend::reduce(ReduceOp op, const Strided& x, const Strided& y) {
  check_launch(cuda::reduce(static_cast<Reduce>(op), view(x), view(y), stream_), "reduce", x.dtype);
}

void CudaBackend::index_select(const Strided& x, int dim, const Strided& index, const Strided& y) {
  check_index(index, x.shape[dim], "index_select", dim);
  check_launch(cuda::index_select(view(x), dim, view(index), view(y), stream_), "index_select",
               x.dtype);
}

void CudaBackend::index_add(const Strided& y, int dim, const Strided& index, const Strided& src) {
  check_index(index, y.shape[dim], "index_add", dim);
  check_launch(cuda::index_add(view(y), dim, view(index), view(src), stream_), "index_add",
               y.dtype);
}

void CudaBackend::gather(const Strided& x, int dim, const Strided& index, const Strided& y) {
  check_index(index, x.shape.empty() ? 1 : x.shape[dim], "gather", dim);
  check_launch(cuda::gather(view(x), dim, view(index), view(y), stream_), "gather", x.dtype);
}

void CudaBackend::scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) {
  check_index(index, y.shape.empty() ? 1 : y.shape[dim], "scatter_add", dim);
  check_launch(cuda::scatter_add(view(y), dim, view(index), view(src), stream_), "scatter_add",
               y.dtype);
}

void CudaBackend::softmax_backward(const Strided& y, const Strided& dy, const Strided& dx,
                                   bool log) {
  check_launch(cuda::softmax_backward(view(y), view(dy), view(dx), log, stream_),
               "softmax_backward", y.dtype);
}

void CudaBackend::layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                             const Strided& y, const Strided& mean, const Strided& rstd) {
  check_launch(
      cuda::layer_norm(view(x), view(w), view(b), eps, view(y), view(mean), view(rstd), stream_),
      "layer_norm", x.dtype);
}

void CudaBackend::layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                                      const Strided& rstd, const Strided& dy, const Strided& dx,
                                      const Strided& dw, const Strided& db) {
  check_launch(cuda::layer_norm_backward(view(x), view(w), view(mean), view(rstd), view(dy),
                                         view(dx), view(dw), view(db), stream_),
               "layer_norm_backward", x.dtype);
}

void CudaBackend::cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                                double label_smoothing, const Strided& loss) {
  const int64_t classes = logits.shape[logits.shape.size() - 1];
  int64_t at = 0;
  const int64_t bad = first_bad_index(target, 0, classes, ignore_index, at);
  VT_CHECK(at < 0,
           "cross_entropy: target {} (at index {}) is out of range for {} classes (expected 0 "
           "<= target < {}, or ignore_index {})",
           bad, at, classes, classes, ignore_index);
  check_launch(cuda::cross_entropy(view(logits), view(target), ignore_index, label_smoothing,
                                   view(loss), stream_),
               "cross_entropy", logits.dtype);
}

void CudaBackend::cross_entropy_backward(const Strided& logits, const Strided& target,
                                         int64_t ignore_index, double label_smoothing,
                                         const Strided& dloss, const Strided& dlogits) {
  check_launch(cuda::cross_entropy_backward(view(logits), view(target), ignore_index,
                                            label_smoothing, view(dloss), view(dlogits), stream_),
               "cross_entropy_backward", logits.dtype);
}

void CudaBackend::interpolate_backward(const Strided& dy, const Strided& dx,
                                       const InterpGeometry& g) {
  check_launch(cuda::interpolate_backward(view(dy), view(dx), interp(g), stream_),
               "interpolate_backward", dy.dtype);
}

void CudaBackend::adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                            const Strided& exp_avg_sq, const AdamStep& o) {
  const Adam a{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.step, o.decoupled};
  check_launch(
      cuda::adam_step(view(param), view(grad), view(exp_avg), view(exp_avg_sq), a, stream_),
      "adam_step", param.dtype);
}

void CudaBackend::adam_step_multi(std::span<const AdamTensors> tensors, const AdamStep& o) {
  if (tensors.empty()) return;
  const Adam a{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.step, o.decoupled};
  std::vector<cuda::AdamViews> views;
  views.reserve(tensors.size());
  for (const AdamTensors& t : tensors)
    views.push_back({view(t.param), view(t.grad), view(t.exp_avg), view(t.exp_avg_sq)});
  check_launch(cuda::adam_step_multi(views.data(), static_cast<int64_t>(views.size()), a, stream_),
               "adam_step_multi", tensors[0].param.dtype);
}

bool CudaBackend::conv2d_batched(const Strided& x, const Strided& w, const Strided& bias,
                                 const Strided& y, const ConvGeometry& g) {
  if (!batched_conv(x.dtype)) return false;
  const int64_t B = x.shape[0], Cout = w.shape[0], L = g.out_h * g.out_w;
  const int64_t K = g.channels * g.kernel_h * g.kernel_w;
  if (B == 0 || Cout == 0 || K == 0 || L == 0) return false;
  VT_ASSERT(y.is_contiguous() && w.is_contiguous());
  const DType t = x.dtype;
  const int64_t n = conv_chunk(B, K, Cout, L);
  StoragePtr cols = allocate(n * K * L * dtype_size(t));
  const Strided y3{y.data, t, {B, Cout, L}, {Cout * L, L, 1}};
  if (bias.data) copy({bias.data, t, {B, Cout, L}, {0, bias.strides[0], 0}}, y3);
  for (int64_t b0 = 0; b0 < B; b0 += n) {
    const int64_t m = std::min(n, B - b0);
    const Strided cs{cols->data, t, {m, K, L}, {K * L, L, 1}};
    im2col(images(x, b0, m), cs, g);
    gemm({w.data, t, {m, Cout, K}, {0, K, 1}}, cs, images(y3, b0, m), bias.data != nullptr);
  }
  return true;
}

bool CudaBackend::conv2d_batched_backward(const Strided& x, const Strided& w, const Strided& dy,
                                          const Strided& dx, const Strided& dw,
                                          const ConvGeometry& g) {
  if (!batched_conv(x.dtype)) return false;
  const int64_t B = x.shape[0], Cout = w.shape[0], L = g.out_h * g.out_w;
  const int64_t K = g.channels * g.kernel_h * g.kernel_w;
  if (B == 0 || Cout == 0 || K == 0 || L == 0) return false;
  VT_ASSERT(dy.is_contiguous() && w.is_contiguous());
  VT_ASSERT(!dw.data || dw.is_contiguous());
  const DType t = x.dtype;
  const int64_t n = conv_chunk(B, K, Cout, L);
  StoragePtr cols = allocate(n * K * L * dtype_size(t)),
             dy_wide = allocate(n * Cout * L * dtype_size(t));
  for (int64_t b0 = 0; b0 < B; b0 += n) {
    const int64_t m = std::min(n, B - b0), mL = m * L;
    const Strided cs{cols->data, t, {m, K, L}, {L, mL, 1}};  // [K, m L] as m images
    const Strided cmat{cols->data, t, {K, mL}, {mL, 1}};
    const Strided dyw{dy_wide->data, t, {Cout, mL}, {mL, 1}};
    copy({at(dy.data, t, b0 * Cout * L), t, {Cout, m, L}, {L, Cout * L, 1}},
         {dy_wide->data, t, {Cout, m, L}, {mL, L, 1}});
    if (dw.data) {
      im2col(images(x, b0, m), cs, g);
      gemm(dyw, {cols->data, t, {mL, K}, {1, mL}}, {dw.data, t, {Cout, K}, {K, 1}}, b0 > 0);
    }
    if (dx.data) {
      gemm({w.data, t, {K, Cout}, {1, K}}, dyw, cmat, false);
      col2im(cs, images(dx, b0, m), g);
    }
  }
  return true;
}

void CudaBackend::sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                           const SgdStep& o) {
  const Sgd s{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.first};
  check_launch(cuda::sgd_step(view(param), view(grad), view(momentum_buf), s, stream_), "sgd_step",
               param.dtype);
}

int64_t CudaBackend::first_bad_index(const Strided& index, int64_t lo, int64_t hi, int64_t allowed,
                                     int64_t& at) {
  StoragePtr s = allocate(sizeof(int64_t));
  const View v = view(index);
  check_launch(
      cuda::first_out_of_range(v, lo, hi, allowed, static_cast<int64_t*>(s->data), stream_),
      "index check", index.dtype);
  int64_t first = 0, value = 0;
  to_host(s->data, &first, sizeof first);
  at = -1;
  if (first == INT64_MAX) return 0;
  at = first;
  to_host(static_cast<const int64_t*>(index.data) + v.offset(first), &value, sizeof value);
  return value;
}

void CudaBackend::check_index(const Strided& index, int64_t size, const char* op, int dim) {
  int64_t at = 0;
  const int64_t bad = first_bad_index(index, -size, size, -size, at);
  VT_CHECK(at < 0, "{}: index {} is out of range for dim {} of size {}", op, bad, dim, size);
}

Conv CudaBackend::conv(const ConvGeometry& g) {
  return {g.channels, g.height, g.width, g.kernel_h, g.kernel_w,   g.stride_h,  g.stride_w,
          g.pad_h,    g.pad_w,  g.out_h, g.out_w,    g.dilation_h, g.dilation_w};
}

}  // namespace cuda

Backend* cuda_backend() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  VT_CHECK(e == cudaSuccess && count > 0, "device cuda: no usable GPU ({})",
           e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  static cuda::CudaBackend* b = new cuda::CudaBackend;  // never destroyed: see the class
  return b;
}

cudaStream_t cuda_compute_stream() {
  return static_cast<cuda::CudaBackend*>(cuda_backend())->stream();
}

}  // namespace vitrine
