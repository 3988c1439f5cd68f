// Launchers of the CUDA kernels: plain C++ signatures, so that the Backend class (a .cpp built by
// the host compiler) can call them without seeing CUDA syntax. Each returns the launch status.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace vitrine::cuda {

/// y[i] = value for i < n (contiguous).   y: [n]
cudaError_t fill_f32(float* y, int64_t n, float value);
cudaError_t fill_f64(double* y, int64_t n, double value);
cudaError_t fill_i64(int64_t* y, int64_t n, int64_t value);
cudaError_t fill_bool(bool* y, int64_t n, bool value);

}  // namespace vitrine::cuda
