// The CUDA backend (first part), built by the host compiler: memory, host/device copies and fill on
// the GPU. The compute kernels arrive with the CUDA issue; until then each one throws a clear "not
// implemented" Error, which the cross-backend tests see. The interface is backends/backend.h, the
// same one the CPU implements.
#include <cuda_runtime.h>

#include "backends/backend.h"
#include "backends/cuda/kernels.cuh"

namespace vitrine {
namespace cuda {

namespace {
void check(cudaError_t e, const char* what) {
  VT_CHECK(e == cudaSuccess, "cuda: {} failed: {}", what, cudaGetErrorString(e));
}

[[noreturn]] void unsupported(const char* kernel) {
  fail(
      "cuda: the {} kernel is not implemented yet in this build (CUDA backend, part 1: memory "
      "and copies); run on the CPU",
      kernel);
}

}  // namespace

class CudaBackend final : public Backend {
 public:
  Device device() const override { return {DeviceType::CUDA, 0}; }

  StoragePtr allocate(size_t nbytes) override {
    auto s = std::make_shared<Storage>();
    check(cudaMalloc(&s->data, std::max<size_t>(nbytes, 1)), "cudaMalloc");
    s->nbytes = nbytes;
    s->device = device();
    s->deleter = [](void* p) { cudaFree(p); };
    return s;
  }
  void copy(const Strided& src, const Strided& dst) override {
    if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
      check(cudaMemcpy(dst.data, src.data, src.numel() * dtype_size(src.dtype),
                       cudaMemcpyDeviceToDevice),
            "cudaMemcpy");
      return;
    }
    unsupported("strided copy");
  }
  void to_host(const void* src, void* host_dst, size_t nbytes) override {
    check(cudaMemcpy(host_dst, src, nbytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void from_host(const void* host_src, void* dst, size_t nbytes) override {
    check(cudaMemcpy(dst, host_src, nbytes, cudaMemcpyHostToDevice), "cudaMemcpy from host");
  }
  void fill(const Strided& dst, double value) override {
    if (!dst.is_contiguous()) unsupported("strided fill");
    const int64_t n = dst.numel();
    if (n == 0) return;
    cudaError_t e = cudaSuccess;
    switch (dst.dtype) {
      case DType::Float32:
        e = fill_f32(dst.ptr<float>(), n, static_cast<float>(value));
        break;
      case DType::Float64:
        e = fill_f64(dst.ptr<double>(), n, value);
        break;
      case DType::Int64:
        e = fill_i64(dst.ptr<int64_t>(), n, static_cast<int64_t>(value));
        break;
      case DType::Bool:
        e = fill_bool(dst.ptr<bool>(), n, value != 0);
        break;
      default:
        unsupported("16-bit fill");
    }
    check(e, "fill kernel launch");
  }
  void arange(const Strided&, double, double) override { unsupported("arange"); }
  void uniform(const Strided&, uint64_t, uint64_t, double, double) override {
    unsupported("uniform");
  }
  void normal(const Strided&, uint64_t, uint64_t, double, double) override {
    unsupported("normal");
  }
  void randint(const Strided&, uint64_t, uint64_t, int64_t, int64_t) override {
    unsupported("randint");
  }
  void unary(UnaryOp, const Strided&, const Strided&, double, double) override {
    unsupported("unary");
  }
  void binary(BinaryOp, const Strided&, const Strided&, const Strided&) override {
    unsupported("binary");
  }
  void where(const Strided&, const Strided&, const Strided&, const Strided&) override {
    unsupported("where");
  }
  void reduce(ReduceOp, const Strided&, const Strided&) override { unsupported("reduce"); }
  void gemm(const Strided&, const Strided&, const Strided&, bool) override { unsupported("gemm"); }
  void index_select(const Strided&, int, const Strided&, const Strided&) override {
    unsupported("index_select");
  }
  void index_add(const Strided&, int, const Strided&, const Strided&) override {
    unsupported("index_add");
  }
  void gather(const Strided&, int, const Strided&, const Strided&) override {
    unsupported("gather");
  }
  void scatter_add(const Strided&, int, const Strided&, const Strided&) override {
    unsupported("scatter_add");
  }
  void softmax(const Strided&, const Strided&, bool) override { unsupported("softmax"); }
  void softmax_backward(const Strided&, const Strided&, const Strided&, bool) override {
    unsupported("softmax_backward");
  }
  void layer_norm(const Strided&, const Strided&, const Strided&, double, const Strided&,
                  const Strided&, const Strided&) override {
    unsupported("layer_norm");
  }
  void layer_norm_backward(const Strided&, const Strided&, const Strided&, const Strided&,
                           const Strided&, const Strided&, const Strided&,
                           const Strided&) override {
    unsupported("layer_norm_backward");
  }
  void cross_entropy(const Strided&, const Strided&, int64_t, double, const Strided&) override {
    unsupported("cross_entropy");
  }
  void cross_entropy_backward(const Strided&, const Strided&, int64_t, double, const Strided&,
                              const Strided&) override {
    unsupported("cross_entropy_backward");
  }
  void attention(const Strided&, double, const Strided&, const Strided&) override {
    unsupported("attention");
  }
  void attention_backward(const Strided&, const Strided&, const Strided&, double,
                          const Strided&) override {
    unsupported("attention_backward");
  }
  void im2col(const Strided&, const Strided&, const ConvGeometry&) override {
    unsupported("im2col");
  }
  void col2im(const Strided&, const Strided&, const ConvGeometry&) override {
    unsupported("col2im");
  }
  void interpolate(const Strided&, const Strided&, const InterpGeometry&) override {
    unsupported("interpolate");
  }
  void interpolate_backward(const Strided&, const Strided&, const InterpGeometry&) override {
    unsupported("interpolate_backward");
  }
  void adam_step(const Strided&, const Strided&, const Strided&, const Strided&,
                 const AdamStep&) override {
    unsupported("adam_step");
  }
  void sgd_step(const Strided&, const Strided&, const Strided&, const SgdStep&) override {
    unsupported("sgd_step");
  }
};

}  // namespace cuda

Backend* cuda_backend() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  VT_CHECK(e == cudaSuccess && count > 0, "device cuda: no usable GPU ({})",
           e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  static cuda::CudaBackend b;
  return &b;
}

}  // namespace vitrine
