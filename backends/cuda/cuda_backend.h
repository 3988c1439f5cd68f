// The CUDA backend, built by the host compiler: the Backend class around the kernels of
// backends/cuda/*.cu. It owns
//   - the stream: every kernel, copy and cuBLAS call of the device goes on one stream, in order,
//     so nothing synchronises except reads by the host (to_host);
//   - the caching allocator (backends/block_cache.h): freed blocks wait for reuse by size class,
//     so a training step calls cudaMalloc only in its first step (blocks are reused in stream
//     order, which is safe on one stream); when cudaMalloc fails, the cache is released and the
//     allocation tried again;
//   - cuBLAS: gemm and the products of attention (row-major products as column-major ones with
//     the operands swapped); float32 products in TF32 under set_float32_matmul_precision("high"),
//     with inputs rounded to bfloat16 inside cuBLAS (CUBLAS_COMPUTE_32F_FAST_16BF) and float32
//     accumulation under "medium".
// The interface is backends/backend.h, the same one the CPU implements; the CPU is the reference
// every kernel here is tested against (tests/backends/test_cuda_ops.cpp).
//
// The class is declared here and defined in three files by responsibility: cuda_backend.cpp
// (memory, copies, elementwise, index, normalisation, images, optimizers), cuda_gemm.cpp (the
// products: cuBLAS, cuBLASLt, the bfloat16 operands) and cuda_attention.cpp (attention, the
// materialised path and flash).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/block_cache.h"
#include "backends/conv_algorithm.h"
#include "backends/cuda/kernels.cuh"
#include "backends/cuda/lt_gemm.h"
#include "backends/gpu_paths.h"
#include "backends/matmul_precision.h"

namespace vitrine::cuda {

inline void check(cudaError_t e, const char* what) {
  VT_CHECK(e == cudaSuccess, "cuda: {} failed: {}", what, cudaGetErrorString(e));
}
/// A launcher's status: cudaErrorInvalidValue is its answer to a dtype it does not take.
inline void check_launch(cudaError_t e, const char* op, DType dtype) {
  VT_CHECK(e != cudaErrorInvalidValue, "cuda: {}: dtype {} is not supported", op,
           dtype_name(dtype));
  VT_CHECK(e == cudaSuccess, "cuda: {} failed: {}", op, cudaGetErrorString(e));
}
inline void check_blas(cublasStatus_t s, const char* what) {
  VT_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuda: cuBLAS {} failed: {}", what,
           cublasGetStatusString(s));
}

inline View view(const Strided& s) {
  View v;
  v.data = s.data;
  v.dtype = static_cast<Dt>(s.dtype);
  v.ndim = s.shape.size();
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = s.shape[d];
    v.strides[d] = s.strides[d];
  }
  return v;
}
/// A contiguous [n] view of raw memory.
inline View flat(void* data, DType dtype, int64_t n) {
  View v;
  v.data = data;
  v.dtype = static_cast<Dt>(dtype);
  v.ndim = 1;
  v.shape[0] = n;
  v.strides[0] = 1;
  return v;
}

/// Blocks below 512 bytes are rounded up to 512 (cudaMalloc's own granularity is larger).
constexpr size_t kMinBlock = 512;
/// Freed blocks kept for reuse; the cache is released when cudaMalloc fails anyway.
constexpr size_t kMaxCached = size_t{64} << 30;

/// Row-major operand of a product: pointer, transposed or not, leading dimension, batch stride.
struct Operand {
  const void* data;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
};

/// What a cuBLAS product takes besides its operands: op(A) and op(B), the data type of dtype t
/// (float32 or float64), and alpha and beta in its scale type (double for float64, else float),
/// passed by address. Not copyable: alpha() and beta() point into it.
struct BlasArgs {
  cublasOperation_t opa, opb;
  cudaDataType_t dt;
  double alpha_d, beta_d;
  float alpha_f, beta_f;
  BlasArgs(DType t, const Operand& a, const Operand& b, double alpha, double beta)
      : opa(a.trans ? CUBLAS_OP_T : CUBLAS_OP_N),
        opb(b.trans ? CUBLAS_OP_T : CUBLAS_OP_N),
        dt(t == DType::Float64 ? CUDA_R_64F : CUDA_R_32F),
        alpha_d(alpha),
        beta_d(beta),
        alpha_f(static_cast<float>(alpha)),
        beta_f(static_cast<float>(beta)) {}
  BlasArgs(const BlasArgs&) = delete;
  BlasArgs& operator=(const BlasArgs&) = delete;
  const void* alpha() const {
    return dt == CUDA_R_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  }
  const void* beta() const {
    return dt == CUDA_R_64F ? static_cast<const void*>(&beta_d) : &beta_f;
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() : cache_(kMaxCached, [](void* p) { (void)cudaFree(p); }) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_blas(cublasCreate(&blas_), "create");
    check_blas(cublasSetStream(blas_, stream_), "set stream");
  }
  // Never destroyed (a static that storages freed at exit may still reach), so no destructor.

  /// The stream every kernel, copy and cuBLAS call of the device goes on (NCCL waits for it).
  cudaStream_t stream() const { return stream_; }

  Device device() const override { return {DeviceType::CUDA, 0}; }

  // ---- memory ------------------------------------------------------------------------------
  StoragePtr allocate(size_t nbytes) override;
  MemoryStats memory_stats() override {
    return {counter_.current(), counter_.peak(), cache_.cached_bytes()};
  }
  void reset_peak_memory_stats() override { counter_.reset_peak(); }

  void copy(const Strided& src, const Strided& dst) override;
  void to_host(const void* src, void* host_dst, size_t nbytes) override;
  void from_host(const void* host_src, void* dst, size_t nbytes) override;
  void fill(const Strided& dst, double value) override {
    check_launch(cuda::fill(view(dst), value, stream_), "fill", dst.dtype);
  }
  void arange(const Strided& dst, double start, double step) override {
    check_launch(cuda::arange(view(dst), start, step, stream_), "arange", dst.dtype);
  }

  // ---- random numbers ----------------------------------------------------------------------
  void uniform(const Strided& dst, uint64_t seed, uint64_t offset, double lo, double hi) override {
    check_launch(cuda::uniform(view(dst), seed, offset, lo, hi, stream_), "rand", dst.dtype);
  }
  void normal(const Strided& dst, uint64_t seed, uint64_t offset, double mean,
              double std) override {
    check_launch(cuda::normal(view(dst), seed, offset, mean, std, stream_), "randn", dst.dtype);
  }
  void randint(const Strided& dst, uint64_t seed, uint64_t offset, int64_t lo,
               int64_t hi) override {
    check_launch(cuda::randint(view(dst), seed, offset, lo, hi, stream_), "randint", dst.dtype);
  }

  // ---- elementwise and reductions ----------------------------------------------------------
  void unary(UnaryOp op, const Strided& x, const Strided& y, double alpha, double beta) override;
  void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) override;
  void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& y) override {
    check_launch(cuda::where(view(cond), view(a), view(b), view(y), stream_), "where", a.dtype);
  }
  void reduce(ReduceOp op, const Strided& x, const Strided& y) override;

  // ---- matrix products ---------------------------------------------------------------------
  /// c[batch] (+)= a[batch] @ b[batch]; the batch dims are merged where a's and b's strides allow,
  /// and each merged run is one strided-batched cuBLAS call.
  void gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) override;
  /// c = a @ b and backend.h's epilogue: the product first (beta 0), then bias, residual, GELU
  /// and GELU's gradient in one pass over c (cuda::gemm_epilogue) instead of one pass each plus
  /// the bias broadcast into c before the product (Backend's default: a strided copy of [M, N]
  /// per linear layer; the strided copies, 49 of 59 of them these by the code, were 6% of a
  /// ViT-B/16 training step on an H200); a_row_sums as the default's.
  void gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                  const GemmEpilogue& ep) override;
  /// gemm_fused with bfloat16 a and b and a float32 c (the bfloat16 operands of linear layers,
  /// docs/cuda.md): the product on cuBLASLt with the bias, the residual (its C, beta 1) or the
  /// bias gradient (a_row_sums, BGRADB) in its epilogue, when it has a kernel for them; then one
  /// pass for GELU, GELU's gradient and c's bfloat16 copy, with what cuBLASLt did not add.
  void gemm_fused_16(const Strided& a, const Strided& b, const Strided& c, const GemmEpilogue& ep);
  static bool bf16_into_f32(const Strided& a, const Strided& c);

  /// gemm over the batch dims of c (a, b and c of one dtype).
  void gemm_batched(const Strided& a, const Strided& b, const Strided& c, bool accumulate,
                    int64_t M, int64_t N, int64_t K);

  // ---- index ops ---------------------------------------------------------------------------
  void index_select(const Strided& x, int dim, const Strided& index, const Strided& y) override;
  void index_add(const Strided& y, int dim, const Strided& index, const Strided& src) override;
  void gather(const Strided& x, int dim, const Strided& index, const Strided& y) override;
  void scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) override;

  // ---- fused neural-network kernels --------------------------------------------------------
  void softmax(const Strided& x, const Strided& y, bool log) override {
    check_launch(cuda::softmax(view(x), view(y), log, stream_), "softmax", x.dtype);
  }
  void softmax_backward(const Strided& y, const Strided& dy, const Strided& dx, bool log) override;
  void layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                  const Strided& y, const Strided& mean, const Strided& rstd) override;
  void layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                           const Strided& rstd, const Strided& dy, const Strided& dx,
                           const Strided& dw, const Strided& db) override;
  void cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                     double label_smoothing, const Strided& loss) override;
  void cross_entropy_backward(const Strided& logits, const Strided& target, int64_t ignore_index,
                              double label_smoothing, const Strided& dloss,
                              const Strided& dlogits) override;

  /// Attention as in backend.h, in four pieces that the fused entries chain: each product one
  /// batched cuBLAS call over all images and heads (gemm_rm_grid), and softmax over all B H N
  /// rows at once. q, k, v and
  /// their gradients are read and written in place in qkv / dqkv.
  ///   qkv, dqkv: [B, N, 3, H, Dh]   probs, dprobs: [B, H, N, N]   out, dout: [B, N, H, Dh]
  void attention(const Strided& qkv, double scale, const Strided& probs,
                 const Strided& out) override;

  void attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                          double scale, const Strided& dqkv) override;

  void attention_probs(const Strided& qkv, double scale, const Strided& probs) override;

  void attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) override;

  void attention_apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                const Strided& dprobs, const Strided& dqkv) override;

  void attention_probs_backward(const Strided& qkv, const Strided& probs, const Strided& dprobs,
                                double scale, const Strided& dqkv) override;

  /// FlashAttention-2 (backends/cuda/flash_attention.cu) where it applies: use_flash.
  bool flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                       const Strided& lse) override;
  /// Its backward. No precision test here: a forward that ran flash (under "medium") has its
  /// backward run flash too, whatever the precision is now.
  bool flash_attention_backward(const Strided& qkv, const Strided& out, const Strided& dout,
                                const Strided& lse, double scale, bool causal,
                                const Strided& dqkv) override;

  // ---- images and optimizers ---------------------------------------------------------------
  void im2col(const Strided& x, const Strided& cols, const ConvGeometry& g) override {
    check_launch(cuda::im2col(view(x), view(cols), conv(g), stream_), "im2col", x.dtype);
  }
  void col2im(const Strided& cols, const Strided& dx, const ConvGeometry& g) override {
    check_launch(cuda::col2im(view(cols), view(dx), conv(g), stream_), "col2im", cols.dtype);
  }
  /// The whole batch's convolution (groups 1), one im2col launch per chunk of images instead of
  /// one per image (ops/conv.cpp's path, the reference, runs under VITRINE_CONV=per-image):
  ///   cols [n, K, L] = im2col(x[b0 : b0 + n])        (one launch)
  ///   y[b] (+)= W [Cout, K] @ cols[b]                 (one strided-batched product, bias first)
  /// K = Cin kh kw, L = OH OW; a chunk's buffer stays under 2^24 elements (conv_chunk).
  bool conv2d_batched(const Strided& x, const Strided& w, const Strided& bias, const Strided& y,
                      const ConvGeometry& g) override;
  /// Its backward, the columns side by side ([K, n L], one im2col launch per chunk) so that dW is
  /// one product per chunk, written by the first (no fill) and accumulated by the others:
  ///   dY [Cout, n L] = dy[b0 : b0 + n] as [Cout, n, L]     (one copy)
  ///   dW [Cout, K] (+)= dY @ cols^T                        cols [K, n L] = im2col(x[b0 : b0 + n])
  ///   dcols [K, n L] = W^T @ dY,  dx[b0 : b0 + n] = col2im(dcols)   (one launch)
  bool conv2d_batched_backward(const Strided& x, const Strided& w, const Strided& dy,
                               const Strided& dx, const Strided& dw,
                               const ConvGeometry& g) override;
  void interpolate(const Strided& x, const Strided& y, const InterpGeometry& g) override {
    check_launch(cuda::interpolate(view(x), view(y), interp(g), stream_), "interpolate", x.dtype);
  }
  void interpolate_backward(const Strided& dy, const Strided& dx, const InterpGeometry& g) override;
  void adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                 const Strided& exp_avg_sq, const AdamStep& o) override;
  void adam_step_multi(std::span<const AdamTensors> tensors, const AdamStep& o) override;
  void sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                const SgdStep& o) override;

 private:
  /// The first value of index (int64) that is neither `allowed` nor in [lo, hi), and its flat
  /// position in at; at = -1 when every value is valid. It waits for the GPU: one 8-byte read.
  int64_t first_bad_index(const Strided& index, int64_t lo, int64_t hi, int64_t allowed,
                          int64_t& at);
  /// The CPU's error for an index outside [-size, size).
  void check_index(const Strided& index, int64_t size, const char* op, int dim);

  /// data + off elements of dtype t.
  static void* at(const void* data, DType t, int64_t off) {
    return const_cast<char*>(static_cast<const char*>(data) + off * dtype_size(t));
  }

  /// dP = dout v^T into dp [B, H, N, N];  dv = P^T dout into dqkv's v part.
  void apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout, void* dp,
                      const Strided& dqkv);

  /// From dP in ds [B, H, N, N] (overwritten with dS = P (dP - rowsum(dP P))): dq = scale dS k
  /// and dk = scale dS^T q into dqkv's q and k parts.
  void probs_backward(const Strided& qkv, const Strided& probs, void* ds, double scale,
                      const Strided& dqkv);

  /// Zeroes parts [first, first + count) of every token's (q, k, v) row of dqkv [B, N, 3, H, Dh].
  void zero_parts(const Strided& dqkv, int64_t first, int64_t count);

  /// Whether flash attention takes qkv: switched on (GpuPath::FlashAttention, opt-in until a
  /// GPU run passes it: VITRINE_FLASH_ATTENTION=1 or set_gpu_path_enabled), [B, N, 3, H, Dh]
  /// contiguous and not empty, float32 or bfloat16, Dh 32, 64 or 128, and a GPU with bfloat16
  /// tensor cores (sm_80 on). flash_attention also wants float32 under matmul precision "medium":
  /// it rounds q, k and v to bfloat16, what "medium" promises; "highest" and "high" keep the
  /// materialised attention and its numbers.
  static bool use_flash(const Strided& qkv);

  struct QkvDims {
    int64_t B, N, H, Dh;
  };
  static QkvDims qkv_dims(const Strided& qkv);
  static Conv conv(const ConvGeometry& g);
  /// Whether conv2d_batched takes dtype t (float32, float64) under the conv algorithm switch.
  /// Opt-in until a GPU run passes it (GpuPath::BatchedConv, gpu_paths.h).
  static bool batched_conv(DType t) {
    return (t == DType::Float32 || t == DType::Float64) &&
           conv_algorithm() != ConvAlgorithm::PerImage && gpu_path_enabled(GpuPath::BatchedConv);
  }
  /// Images per chunk of the batched convolution: the columns ([n, K, L]) and dy's copy ([Cout,
  /// n, L]) each under kConvBudget elements (at least one image).
  static int64_t conv_chunk(int64_t B, int64_t K, int64_t Cout, int64_t L) {
    constexpr int64_t kConvBudget = int64_t{1} << 24;
    return std::clamp<int64_t>(kConvBudget / (std::max(K, Cout) * L), 1, B);
  }
  /// Images [b0, b0 + m) of s (dim 0).
  static Strided images(const Strided& s, int64_t b0, int64_t m) {
    Strided r = s;
    r.data = at(s.data, s.dtype, b0 * s.strides[0]);
    r.shape[0] = m;
    return r;
  }
  static Interp interp(const InterpGeometry& g) {
    return {static_cast<int>(g.mode), g.align_corners, g.scale_h, g.scale_w};
  }
  /// A matmul operand [rows, cols] read in place from its last two strides.
  static Operand operand(const Strided& m, int64_t rows, int64_t cols);

  /// cuBLAS's compute type for dtype t: float64 in float64; float32 per
  /// set_float32_matmul_precision: full float32, TF32 ("high"), or inputs rounded to bfloat16
  /// inside cuBLAS ("medium"), always accumulating in float32.
  static cublasComputeType_t compute_type(DType t);

  /// Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C (ldc), batch times, C's batch
  /// stride c_batch (compute_type(t)). cuBLAS is column-major: a row-major matrix is its
  /// transpose, so C^T = op(B)^T op(A)^T is computed, with B first.
  void gemm_rm(DType t, int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
               const Operand& b, double beta, void* c, int64_t ldc, int64_t c_batch, int64_t batch);

  /// Whether float32 products under "medium" multiply bfloat16 copies of their inputs
  /// (gemm_rm_bf16). Given float32 inputs, CUBLAS_COMPUTE_32F_FAST_16BF ran TF32 kernels on an
  /// H200 (their names said so): 214 TFLOP/s on a 2048^3 product, where PyTorch's bfloat16 one
  /// ran at 371. VITRINE_CUDA_BF16_COPIES=0 goes back to that (read once).
  static bool bf16_copies();

  /// gemm_rm for float32 under "medium": A and B are copied to bfloat16 (each element rounded to
  /// nearest even, the CPU's conversion), then cuBLAS multiplies bfloat16 by bfloat16 with
  /// float32 accumulation and a float32 C: the numbers "medium" promises (matmul_precision.h),
  /// on bfloat16 tensor cores. A copy spans what its operand reads, in its own layout (same ld,
  /// same batch stride), so the product's arguments stay as they are.
  void gemm_rm_bf16(int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
                    const Operand& b, double beta, void* c, int64_t ldc, int64_t c_batch,
                    int64_t batch);

  /// gemm_rm with bfloat16 operands at a16 and b16 (laid out as a and b say) and a float32 C:
  /// bfloat16 tensor cores, float32 accumulation.
  void gemm_rm_16(int64_t M, int64_t N, int64_t K, double alpha, const void* a16, const Operand& a,
                  const void* b16, const Operand& b, double beta, void* c, int64_t ldc,
                  int64_t c_batch, int64_t batch);

  /// gemm_rm over a grid of outer x inner products in one cuBLAS call: product (o, i) reads A at
  /// a.data + o a_outer + i a.batch_stride elements, B likewise, and writes C at
  /// c + o c_outer + i c_batch. Attention's products per (image, head): q, k and v sit in qkv
  /// rows [B, N, 3, H, Dh], so no single stride steps over both images and heads; the grid's
  /// pointer lists (built here, copied to the GPU in stream order) make it one launch instead of
  /// one per image (64 small launches, 8 microseconds each, were 38% of a ViT-B/16 step on an
  /// H200).
  void gemm_rm_grid(DType t, int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
                    int64_t a_outer, const Operand& b, int64_t b_outer, double beta, void* c,
                    int64_t ldc, int64_t c_batch, int64_t c_outer, int64_t inner, int64_t outer);
  /// The device copy of a pointer list. With GpuPath::PointerLists on (opt-in until a GPU run
  /// passes it, gpu_paths.h) it is kept by its host contents: a training step's lists repeat
  /// (the caching allocator hands the same blocks to the same tensors), and a list seen before
  /// is not copied again. A kept copy is never written; when kPointerListsKept are kept, all are
  /// dropped (their blocks return to the cache, reused only by work queued after this product).
  /// Off, each call copies the list into a block held by `once` until the product is queued.
  const void** device_pointer_list(const std::vector<const void*>& ptrs, StoragePtr& once);

  /// cuBLAS wants ld >= 1 and >= the rows it steps over; a single row or column may say 1.
  static int ld(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  LtGemm lt_;
  BlockCache cache_;
  MemoryCounter counter_;
  std::map<std::vector<const void*>, StoragePtr> pointer_lists_;  // device_pointer_list's
};

}  // namespace vitrine::cuda
