// CUDA fill kernels.   y: [n] contiguous
#include "backends/cuda/kernels.cuh"

namespace vitrine::cuda {

namespace {
template <typename T>
__global__ void fill_kernel(T* y, int64_t n, T value) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = value;
}

template <typename T>
cudaError_t launch_fill(T* y, int64_t n, T value) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  fill_kernel<<<blocks, threads>>>(y, n, value);
  return cudaGetLastError();
}
}  // namespace

cudaError_t fill_f32(float* y, int64_t n, float value) { return launch_fill(y, n, value); }
cudaError_t fill_f64(double* y, int64_t n, double value) { return launch_fill(y, n, value); }
cudaError_t fill_i64(int64_t* y, int64_t n, int64_t value) { return launch_fill(y, n, value); }
cudaError_t fill_bool(bool* y, int64_t n, bool value) { return launch_fill(y, n, value); }

}  // namespace vitrine::cuda
