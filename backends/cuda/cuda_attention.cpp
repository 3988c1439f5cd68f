// The CUDA backend's attention (the class: cuda_backend.h): the materialised path (batched cuBLAS
// products over images and heads, softmax over all rows) that returns the probabilities, and
// FlashAttention-2 (flash_attention.cu) where nothing asks for them; docs/cuda.md.
#include "backends/cuda/cuda_backend.h"

namespace vitrine::cuda {

void CudaBackend::attention(const Strided& qkv, double scale, const Strided& probs,
                            const Strided& out) {
  attention_probs(qkv, scale, probs);
  attention_apply(qkv, probs, out);
}

void CudaBackend::attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                     double scale, const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(dqkv.is_contiguous() && dqkv.numel() == qkv.numel());
  StoragePtr scratch = allocate(B * H * N * N * dtype_size(qkv.dtype));  // dP, then dS
  apply_backward(qkv, probs, dout, scratch->data, dqkv);
  probs_backward(qkv, probs, scratch->data, scale, dqkv);
  // scratch returns to the cache now; the kernels that read it come first in the stream.
}

void CudaBackend::attention_probs(const Strided& qkv, double scale, const Strided& probs) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && probs.numel() == B * H * N * N);
  VT_CHECK(is_float(qkv.dtype), "attention: dtype {} is not supported", dtype_name(qkv.dtype));
  const DType t = qkv.dtype;
  const int64_t D = H * Dh, row = 3 * D;
  // S = scale q k^T   [N, N] per (image, head)
  gemm_rm_grid(t, N, N, Dh, scale, {qkv.data, false, row, Dh}, N * row,
               {at(qkv.data, t, D), true, row, Dh}, N * row, 0.0, probs.data, N, N * N, H * N * N,
               H, B);
  check_launch(
      cuda::scaled_softmax_rows(flat(probs.data, t, B * H * N * N), B * H * N, N, 1.0, stream_),
      "attention softmax", t);
}

void CudaBackend::attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && out.is_contiguous() && probs.numel() == B * H * N * N &&
            out.numel() == B * N * H * Dh);
  VT_CHECK(is_float(qkv.dtype), "attention: dtype {} is not supported", dtype_name(qkv.dtype));
  const DType t = qkv.dtype;
  const int64_t D = H * Dh, row = 3 * D;
  // out[b, :, h, :] = P v   [N, Dh] per (image, head), row stride D
  gemm_rm_grid(t, N, Dh, N, 1.0, {probs.data, false, N, N * N}, H * N * N,
               {at(qkv.data, t, 2 * D), false, row, Dh}, N * row, 0.0, out.data, D, Dh, N * D, H,
               B);
}

void CudaBackend::attention_apply_backward(const Strided& qkv, const Strided& probs,
                                           const Strided& dout, const Strided& dprobs,
                                           const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(dprobs.is_contiguous() && dprobs.numel() == B * H * N * N && dqkv.is_contiguous() &&
            dqkv.numel() == qkv.numel());
  apply_backward(qkv, probs, dout, dprobs.data, dqkv);
  zero_parts(dqkv, 0, 2);  // dq, dk
}

void CudaBackend::attention_probs_backward(const Strided& qkv, const Strided& probs,
                                           const Strided& dprobs, double scale,
                                           const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(dprobs.is_contiguous() && dprobs.numel() == B * H * N * N && dqkv.is_contiguous() &&
            dqkv.numel() == qkv.numel());
  const size_t bytes = B * H * N * N * dtype_size(qkv.dtype);
  StoragePtr scratch = allocate(bytes);  // dS, computed in place from a copy of dP
  check(cudaMemcpyAsync(scratch->data, dprobs.data, bytes, cudaMemcpyDeviceToDevice, stream_),
        "attention_probs_backward copy");
  probs_backward(qkv, probs, scratch->data, scale, dqkv);
  zero_parts(dqkv, 2, 1);  // dv
}

bool CudaBackend::flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                                  const Strided& lse) {
  if (!use_flash(qkv) ||
      (qkv.dtype == DType::Float32 && float32_matmul_precision() != MatmulPrecision::Medium))
    return false;
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(out.is_contiguous() && out.dtype == qkv.dtype && out.numel() == B * N * H * Dh &&
            lse.is_contiguous() && lse.dtype == DType::Float32 && lse.numel() == B * H * N);
  check_launch(cuda::flash_attention(static_cast<Dt>(qkv.dtype), qkv.data, out.data,
                                     lse.ptr<float>(), B, N, H, Dh, scale, causal, stream_),
               "flash_attention", qkv.dtype);
  return true;
}

bool CudaBackend::flash_attention_backward(const Strided& qkv, const Strided& out,
                                           const Strided& dout, const Strided& lse, double scale,
                                           bool causal, const Strided& dqkv) {
  if (!use_flash(qkv)) return false;
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(out.is_contiguous() && dout.is_contiguous() && out.dtype == qkv.dtype &&
            dout.dtype == qkv.dtype && out.numel() == B * N * H * Dh &&
            dout.numel() == out.numel() && lse.is_contiguous() && lse.dtype == DType::Float32 &&
            lse.numel() == B * H * N && dqkv.is_contiguous() && dqkv.dtype == qkv.dtype &&
            dqkv.numel() == qkv.numel());
  StoragePtr d = allocate(static_cast<size_t>(B * H * N) * sizeof(float));  // rowsum(dO O)
  check_launch(cuda::flash_attention_backward(
                   static_cast<Dt>(qkv.dtype), qkv.data, out.data, dout.data, lse.ptr<float>(),
                   static_cast<float*>(d->data), dqkv.data, B, N, H, Dh, scale, causal, stream_),
               "flash_attention_backward", qkv.dtype);
  return true;
  // d returns to the cache now; the kernels that read it come first in the stream.
}

void CudaBackend::apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                 void* dp, const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && dout.is_contiguous() && probs.numel() == B * H * N * N &&
            dout.numel() == B * N * H * Dh);
  VT_CHECK(is_float(qkv.dtype), "attention_backward: dtype {} is not supported",
           dtype_name(qkv.dtype));
  const DType t = qkv.dtype;
  const int64_t D = H * Dh, row = 3 * D;
  // dP = dout v^T   [N, N] per (image, head)
  gemm_rm_grid(t, N, N, Dh, 1.0, {dout.data, false, D, Dh}, N * D,
               {at(qkv.data, t, 2 * D), true, row, Dh}, N * row, 0.0, dp, N, N * N, H * N * N, H,
               B);
  // dv = P^T dout   [N, Dh] per (image, head), row stride 3 D
  gemm_rm_grid(t, N, Dh, N, 1.0, {probs.data, true, N, N * N}, H * N * N, {dout.data, false, D, Dh},
               N * D, 0.0, at(dqkv.data, t, 2 * D), row, Dh, N * row, H, B);
}

void CudaBackend::probs_backward(const Strided& qkv, const Strided& probs, void* ds, double scale,
                                 const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && probs.numel() == B * H * N * N);
  VT_CHECK(is_float(qkv.dtype), "attention_backward: dtype {} is not supported",
           dtype_name(qkv.dtype));
  const DType t = qkv.dtype;
  const int64_t D = H * Dh, row = 3 * D;
  check_launch(
      cuda::scaled_softmax_rows_backward(flat(probs.data, t, B * H * N * N),
                                         flat(ds, t, B * H * N * N), B * H * N, N, 1.0, stream_),
      "attention softmax backward", t);
  // dq = scale dS k,  dk = scale dS^T q   [N, Dh] per (image, head), row stride 3 D
  gemm_rm_grid(t, N, Dh, N, scale, {ds, false, N, N * N}, H * N * N,
               {at(qkv.data, t, D), false, row, Dh}, N * row, 0.0, dqkv.data, row, Dh, N * row, H,
               B);
  gemm_rm_grid(t, N, Dh, N, scale, {ds, true, N, N * N}, H * N * N, {qkv.data, false, row, Dh},
               N * row, 0.0, at(dqkv.data, t, D), row, Dh, N * row, H, B);
}

void CudaBackend::zero_parts(const Strided& dqkv, int64_t first, int64_t count) {
  const auto [B, N, H, Dh] = qkv_dims(dqkv);
  const size_t es = dtype_size(dqkv.dtype), part = H * Dh * es;
  check(cudaMemset2DAsync(at(dqkv.data, dqkv.dtype, first * H * Dh), 3 * part, 0, count * part,
                          B * N, stream_),
        "attention zero");
}

bool CudaBackend::use_flash(const Strided& qkv) {
  if (!gpu_path_enabled(GpuPath::FlashAttention) || qkv.shape.size() != 5 || qkv.shape[2] != 3 ||
      !qkv.is_contiguous() || qkv.numel() == 0)
    return false;
  return cuda::flash_attention_supported(static_cast<Dt>(qkv.dtype), qkv.shape[0], qkv.shape[1],
                                         qkv.shape[3], qkv.shape[4]);
}

CudaBackend::QkvDims CudaBackend::qkv_dims(const Strided& qkv) {
  VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
  return {qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
}

}  // namespace vitrine::cuda
