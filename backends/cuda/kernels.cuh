// Launchers of the CUDA kernels: plain C++ signatures, so that the Backend class (a .cpp built by
// the host compiler) can call them without seeing CUDA syntax, and the .cu files need none of the
// library's headers (nvcc does not compile fmt's; backends/op_lists.h, plain macros, is the
// exception). Each launcher enqueues its kernels on `stream`
// and returns the launch status; none synchronises. The enums and structs mirror those of
// backends/backend.h and backends/dtype.h value for value (cuda_backend.cpp static_asserts it and
// converts); each launcher's semantics are those of the Backend method of the same name, which
// the CPU backend (backends/cpu/) implements as the reference.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/op_lists.h"

namespace vitrine::cuda {

constexpr int kMaxDims = 8;

/// vitrine::DType, value for value.
enum class Dt : uint8_t { F32, F64, I64, Bool, BF16, F16 };

/// vitrine::UnaryOp, vitrine::BinaryOp, vitrine::ReduceOp: the same lists (backends/op_lists.h).
enum class Unary : uint8_t { VITRINE_UNARY_OPS(VITRINE_OP_ENUMERATOR) };
enum class Binary : uint8_t { VITRINE_BINARY_OPS(VITRINE_OP_ENUMERATOR) };
enum class Reduce : uint8_t { VITRINE_REDUCE_OPS(VITRINE_OP_ENUMERATOR) };

/// A kernel's view of a tensor (vitrine::Strided): data points at element [0, ..., 0]; strides
/// in elements. Passed to kernels by value.
struct View {
  void* data = nullptr;
  Dt dtype = Dt::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  __host__ __device__ int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  /// The element offset of flat (row-major) index i.
  __host__ __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t s = shape[d];
      off += (i % s) * strides[d];
      i /= s;
    }
    return off;
  }
  bool contiguous() const {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expect) return false;
      expect *= shape[d];
    }
    return true;
  }
};

/// vitrine::ConvGeometry.
struct Conv {
  int64_t channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, out_h,
      out_w, dilation_h, dilation_w;
};
/// vitrine::InterpGeometry (mode: 0 nearest, 1 bilinear, 2 bicubic).
struct Interp {
  int mode;
  bool align_corners;
  double scale_h, scale_w;
};
/// vitrine::AdamStep.
struct Adam {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  bool decoupled;
};
/// vitrine::SgdStep.
struct Sgd {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;
};

// ---- elementwise.cu: memory, random numbers, elementwise ops ---------------------------------
/// dst = src, any strides, converting dtype (every pair, 16-bit included; CPU's rounding).
cudaError_t copy(const View& src, const View& dst, cudaStream_t stream);
/// dst[...] = value (any strides, any dtype).
cudaError_t fill(const View& dst, double value, cudaStream_t stream);
/// dst[i] = start + i * step (contiguous; float32, float64 or int64).
cudaError_t arange(const View& dst, double start, double step, cudaStream_t stream);
/// Philox4x32-10 at counter (offset + i) under key seed: the CPU's numbers, bit for bit in the
/// integer part (backends/cpu/random.cpp). dst contiguous.
cudaError_t uniform(const View& dst, uint64_t seed, uint64_t offset, double lo, double hi,
                    cudaStream_t stream);
cudaError_t normal(const View& dst, uint64_t seed, uint64_t offset, double mean, double std,
                   cudaStream_t stream);
cudaError_t randint(const View& dst, uint64_t seed, uint64_t offset, int64_t lo, int64_t hi,
                    cudaStream_t stream);
/// y = op(x); x any strides (already shaped like y), y contiguous.
cudaError_t unary(Unary op, const View& x, const View& y, double alpha, double beta,
                  cudaStream_t stream);
/// y = a op b; a, b any strides (0 on broadcast dims), y contiguous.
cudaError_t binary(Binary op, const View& a, const View& b, const View& y, cudaStream_t stream);
/// The epilogues' activation act: backend.h's Activation by value (the host checks that they
/// agree): the exact GELU, the tanh GELU, ReLU, SiLU (x sigmoid(x), as nn::SiLU's two ops).
constexpr int kActGelu = 0, kActGeluTanh = 1, kActRelu = 2, kActSilu = 3;
/// The epilogue of a product c [M, N] (contiguous, float32 or float64), backend.h's GemmEpilogue
/// in its order, in one pass (each pointer may be null):
///   v = c + bias[n] + add[m, n]        bias [N]; add rows of stride add_ld
///   gelu_out[m, n] = act(v)            contiguous, may be c
///   c[m, n] = v * act'(pre[m, n])      pre rows of stride pre_ld (else c = v)
/// act other than kActGelu: cudaErrorInvalidValue when out of range.
cudaError_t gemm_epilogue(Dt dtype, void* c, int64_t M, int64_t N, const void* bias,
                          const void* add, int64_t add_ld, void* gelu_out, const void* pre,
                          int64_t pre_ld, int act, cudaStream_t stream);
/// gemm_epilogue for a float32 c [M, N] (contiguous) with activation operands of their own dtypes
/// (float32 or bfloat16), and c_copy: the final c as bfloat16 [M, N] (null: none). bias, add as
/// gemm_epilogue's (null when the product already added them).
cudaError_t gemm_epilogue_mixed(float* c, int64_t M, int64_t N, const float* bias, const float* add,
                                int64_t add_ld, void* gelu_out, Dt gelu_dt, const void* pre,
                                Dt pre_dt, int64_t pre_ld, void* c_copy, int act,
                                cudaStream_t stream);
/// y = cond ? a : b.
cudaError_t where(const View& cond, const View& a, const View& b, const View& y,
                  cudaStream_t stream);

// ---- reduce.cu: reductions and index ops -----------------------------------------------------
/// Reduces x over the dims where y (same rank, keepdim layout) is 1 and x is not.
cudaError_t reduce(Reduce op, const View& x, const View& y, cudaStream_t stream);
cudaError_t index_select(const View& x, int dim, const View& index, const View& y,
                         cudaStream_t stream);
cudaError_t index_add(const View& y, int dim, const View& index, const View& src,
                      cudaStream_t stream);
cudaError_t gather(const View& x, int dim, const View& index, const View& y, cudaStream_t stream);
cudaError_t scatter_add(const View& y, int dim, const View& index, const View& src,
                        cudaStream_t stream);
/// Index validation (the CPU checks while it reads; here a kernel looks first): *first (device
/// memory) = the smallest flat position i of index (int64, any strides) whose value is neither
/// `allowed` nor in [lo, hi), or INT64_MAX when there is none.
cudaError_t first_out_of_range(const View& index, int64_t lo, int64_t hi, int64_t allowed,
                               int64_t* first, cudaStream_t stream);

// ---- nn.cu: the fused neural-network kernels (contiguous, reduced dim last) -------------------
cudaError_t softmax(const View& x, const View& y, bool log, cudaStream_t stream);
cudaError_t softmax_backward(const View& y, const View& dy, const View& dx, bool log,
                             cudaStream_t stream);
/// w, b: data == nullptr when absent. mean, rstd: float32 or the dtype of x, as the CPU's.
cudaError_t layer_norm(const View& x, const View& w, const View& b, double eps, const View& y,
                       const View& mean, const View& rstd, cudaStream_t stream);
cudaError_t layer_norm_backward(const View& x, const View& w, const View& mean, const View& rstd,
                                const View& dy, const View& dx, const View& dw, const View& db,
                                cudaStream_t stream);
cudaError_t cross_entropy(const View& logits, const View& target, int64_t ignore_index,
                          double label_smoothing, const View& loss, cudaStream_t stream);
cudaError_t cross_entropy_backward(const View& logits, const View& target, int64_t ignore_index,
                                   double label_smoothing, const View& dloss, const View& dlogits,
                                   cudaStream_t stream);
/// The attention softmax, in place: s[r, :] = softmax(scale * s[r, :]) for r < rows.
/// s: [rows, n] contiguous, float32 or float64.
cudaError_t scaled_softmax_rows(const View& s, int64_t rows, int64_t n, double scale,
                                cudaStream_t stream);
/// The attention softmax's backward, in place: dp[r, :] = scale * p[r, :] * (dp[r, :] -
/// sum_j dp[r, j] p[r, j]).   p, dp: [rows, n] contiguous.
cudaError_t scaled_softmax_rows_backward(const View& p, const View& dp, int64_t rows, int64_t n,
                                         double scale, cudaStream_t stream);

// ---- flash_attention.cu: FlashAttention-2 on bfloat16 tensor cores ---------------------------
/// Whether flash_attention takes these: dtype float32 or bfloat16, Dh 32, 64 or 128, B and H at
/// most 65535, and a GPU of compute capability 8.0 or above (bfloat16 wmma).
bool flash_attention_supported(Dt dtype, int64_t B, int64_t N, int64_t H, int64_t Dh);
/// Backend::flash_attention: qkv [B, N, 3, H, Dh] and out [B, N, H, Dh] contiguous, of dtype;
/// lse [B, H, N] float32.
cudaError_t flash_attention(Dt dtype, const void* qkv, void* out, float* lse, int64_t B, int64_t N,
                            int64_t H, int64_t Dh, double scale, bool causal, cudaStream_t stream);
/// Backend::flash_attention_backward into dqkv (every element written); D: [B, H, N] float32
/// scratch (rowsum(dout out), written and read here).
cudaError_t flash_attention_backward(Dt dtype, const void* qkv, const void* out, const void* dout,
                                     const float* lse, float* D, void* dqkv, int64_t B, int64_t N,
                                     int64_t H, int64_t Dh, double scale, bool causal,
                                     cudaStream_t stream);

// ---- image.cu: convolution columns and resizing ----------------------------------------------
/// One image (x [C, H, W], cols [K, L]) as Backend::im2col, or a batch in one launch: x [n, C, H,
/// W] -> cols [n, K, L] (any strides but a contiguous last dim; [K, n L] side by side is the
/// view with strides {L, n L, 1}). col2im the same way round.
cudaError_t im2col(const View& x, const View& cols, const Conv& g, cudaStream_t stream);
cudaError_t col2im(const View& cols, const View& dx, const Conv& g, cudaStream_t stream);
cudaError_t interpolate(const View& x, const View& y, const Interp& g, cudaStream_t stream);
cudaError_t interpolate_backward(const View& dy, const View& dx, const Interp& g,
                                 cudaStream_t stream);

// ---- optim.cu: optimizer updates, in place, contiguous ---------------------------------------
cudaError_t adam_step(const View& param, const View& grad, const View& exp_avg,
                      const View& exp_avg_sq, const Adam& o, cudaStream_t stream);
/// vitrine::AdamTensors.
struct AdamViews {
  View param, grad, exp_avg, exp_avg_sq;
};
/// adam_step on each of tensors[0, count), all of one dtype, in one launch per 48 tensors.
cudaError_t adam_step_multi(const AdamViews* tensors, int64_t count, const Adam& o,
                            cudaStream_t stream);
cudaError_t sgd_step(const View& param, const View& grad, const View& momentum_buf, const Sgd& o,
                     cudaStream_t stream);

}  // namespace vitrine::cuda
