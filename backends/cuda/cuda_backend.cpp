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
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backends/backend.h"
#include "backends/block_cache.h"
#include "backends/cuda/kernels.cuh"
#include "backends/cuda/lt_gemm.h"
#include "backends/matmul_precision.h"

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

namespace {
void check(cudaError_t e, const char* what) {
  VT_CHECK(e == cudaSuccess, "cuda: {} failed: {}", what, cudaGetErrorString(e));
}
/// A launcher's status: cudaErrorInvalidValue is its answer to a dtype it does not take.
void check_launch(cudaError_t e, const char* op, DType dtype) {
  VT_CHECK(e != cudaErrorInvalidValue, "cuda: {}: dtype {} is not supported", op,
           dtype_name(dtype));
  VT_CHECK(e == cudaSuccess, "cuda: {} failed: {}", op, cudaGetErrorString(e));
}
void check_blas(cublasStatus_t s, const char* what) {
  VT_CHECK(s == CUBLAS_STATUS_SUCCESS, "cuda: cuBLAS {} failed: {}", what,
           cublasGetStatusString(s));
}

View view(const Strided& s) {
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
View flat(void* data, DType dtype, int64_t n) {
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

}  // namespace

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
  StoragePtr allocate(size_t nbytes) override {
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
  MemoryStats memory_stats() override {
    return {counter_.current(), counter_.peak(), cache_.cached_bytes()};
  }
  void reset_peak_memory_stats() override { counter_.reset_peak(); }

  void copy(const Strided& src, const Strided& dst) override {
    VT_ASSERT(src.shape == dst.shape);
    if (src.dtype == dst.dtype && src.is_contiguous() && dst.is_contiguous()) {
      check(cudaMemcpyAsync(dst.data, src.data, src.numel() * dtype_size(src.dtype),
                            cudaMemcpyDeviceToDevice, stream_),
            "cudaMemcpyAsync");
      return;
    }
    check_launch(cuda::copy(view(src), view(dst), stream_), "copy", dst.dtype);
  }
  void to_host(const void* src, void* host_dst, size_t nbytes) override {
    check(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync to host");
    check(cudaStreamSynchronize(stream_), "reading the GPU's results");
  }
  void from_host(const void* host_src, void* dst, size_t nbytes) override {
    check(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync from host");
    // The host buffer may be freed as soon as we return.
    check(cudaStreamSynchronize(stream_), "copying to the GPU");
  }
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
  void unary(UnaryOp op, const Strided& x, const Strided& y, double alpha, double beta) override {
    check_launch(cuda::unary(static_cast<Unary>(op), view(x), view(y), alpha, beta, stream_),
                 "unary op", x.dtype);
  }
  void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& y) override {
    check_launch(cuda::binary(static_cast<Binary>(op), view(a), view(b), view(y), stream_),
                 "binary op", a.dtype);
  }
  void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& y) override {
    check_launch(cuda::where(view(cond), view(a), view(b), view(y), stream_), "where", a.dtype);
  }
  void reduce(ReduceOp op, const Strided& x, const Strided& y) override {
    check_launch(cuda::reduce(static_cast<Reduce>(op), view(x), view(y), stream_), "reduce",
                 x.dtype);
  }

  // ---- matrix products ---------------------------------------------------------------------
  /// c[batch] (+)= a[batch] @ b[batch]; the batch dims are merged where a's and b's strides allow,
  /// and each merged run is one strided-batched cuBLAS call.
  void gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) override {
    const int nd = c.shape.size();
    VT_ASSERT(nd >= 2 && a.shape.size() == nd && b.shape.size() == nd && c.is_contiguous());
    const int64_t M = c.shape[nd - 2], N = c.shape[nd - 1], K = a.shape[nd - 1];
    VT_ASSERT(a.shape[nd - 2] == M && b.shape[nd - 2] == K && b.shape[nd - 1] == N);
    VT_CHECK(is_float(c.dtype), "matmul: dtype {} is not supported (expected float32 or float64)",
             dtype_name(c.dtype));
    VT_CHECK(a.dtype == b.dtype && (a.dtype == c.dtype || bf16_into_f32(a, c)),
             "matmul: operands {} and {} into {} (expected one dtype, or bfloat16 operands into "
             "float32)",
             dtype_name(a.dtype), dtype_name(b.dtype), dtype_name(c.dtype));
    if (c.numel() == 0) return;  // M, N or a batch dim is 0
    if (K == 0) {
      if (!accumulate) fill(c, 0);
      return;
    }
    gemm_batched(a, b, c, accumulate, M, N, K);
  }
  /// c = a @ b and backend.h's epilogue: the product first (beta 0), then bias, residual, GELU
  /// and GELU's gradient in one pass over c (cuda::gemm_epilogue) instead of one pass each plus
  /// the bias broadcast into c before the product (Backend's default: a strided copy of [M, N]
  /// per linear layer; the strided copies, 49 of 59 of them these by the code, were 6% of a
  /// ViT-B/16 training step on an H200); a_row_sums as the default's.
  void gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                  const GemmEpilogue& ep) override {
    if (bf16_into_f32(a, c) && b.dtype == a.dtype) {
      gemm_fused_16(a, b, c, ep);
      return;
    }
    auto rows_ok = [&](const Strided* t) {
      return !t || (t->shape.size() == 2 && t->shape == c.shape &&
                    (t->strides[1] == 1 || t->shape[1] == 1) && t->dtype == c.dtype);
    };
    const bool fused = c.shape.size() == 2 && c.is_contiguous() &&
                       (c.dtype == DType::Float32 || c.dtype == DType::Float64) &&
                       (!ep.bias || (ep.bias->is_contiguous() && ep.bias->dtype == c.dtype)) &&
                       rows_ok(ep.add) && rows_ok(ep.gelu_pre) &&
                       (!ep.gelu_out || (ep.gelu_out->is_contiguous() && rows_ok(ep.gelu_out))) &&
                       !(ep.gelu_out && ep.gelu_pre) &&  // both: no caller; the default's order
                       !ep.c_copy;
    if (!fused) {
      Backend::gemm_fused(a, b, c, ep);
      return;
    }
    gemm(a, b, c, /*accumulate=*/false);
    if (ep.bias || ep.add || ep.gelu_out || ep.gelu_pre)
      check_launch(cuda::gemm_epilogue(
                       static_cast<Dt>(c.dtype), c.data, c.shape[0], c.shape[1],
                       ep.bias ? ep.bias->data : nullptr, ep.add ? ep.add->data : nullptr,
                       ep.add ? ep.add->strides[0] : 0, ep.gelu_out ? ep.gelu_out->data : nullptr,
                       ep.gelu_pre ? ep.gelu_pre->data : nullptr,
                       ep.gelu_pre ? ep.gelu_pre->strides[0] : 0, stream_),
                   "gemm epilogue", c.dtype);
    if (ep.a_row_sums) {
      Strided sums = *ep.a_row_sums;  // as [M, 1], the layout reduce writes
      sums.shape = Dims{a.shape[0], 1};
      sums.strides = Dims{1, 1};
      reduce(ReduceOp::Sum, a, sums);
    }
  }
  /// gemm_fused with bfloat16 a and b and a float32 c (the bfloat16 operands of linear layers,
  /// docs/cuda.md): the product on cuBLASLt with the bias, the residual (its C, beta 1) or the
  /// bias gradient (a_row_sums, BGRADB) in its epilogue, when it has a kernel for them; then one
  /// pass for GELU, GELU's gradient and c's bfloat16 copy, with what cuBLASLt did not add.
  void gemm_fused_16(const Strided& a, const Strided& b, const Strided& c, const GemmEpilogue& ep) {
    VT_ASSERT(c.shape.size() == 2 && a.shape.size() == 2 && c.is_contiguous());
    const int64_t M = c.shape[0], N = c.shape[1], K = a.shape[1];
    auto f32 = [](const Strided* t) { return t ? static_cast<const float*>(t->data) : nullptr; };
    auto rows = [&](const Strided* t, const char* what) {  // [M, N], unit column stride
      VT_CHECK(!t || (t->shape == c.shape && (t->strides[1] == 1 || N == 1)),
               "linear (bfloat16 operands): {} must be [{}, {}] rows", what, M, N);
      return t ? t->strides[0] : 0;
    };
    VT_CHECK(
        (!ep.bias || (ep.bias->dtype == DType::Float32 && ep.bias->is_contiguous())) &&
            (!ep.add || ep.add->dtype == DType::Float32) &&
            (!ep.a_row_sums || ep.a_row_sums->dtype == DType::Float32) &&
            (!ep.c_copy || (ep.c_copy->dtype == DType::BFloat16 && ep.c_copy->is_contiguous())) &&
            (!ep.gelu_out || ep.gelu_out->is_contiguous()) && !(ep.gelu_out && ep.gelu_pre),
        "linear (bfloat16 operands): an epilogue operand of an unexpected dtype or layout");
    const int64_t add_ld = rows(ep.add, "the residual"), pre_ld = rows(ep.gelu_pre, "gelu_pre");
    if (M == 0 || N == 0) return;
    bool by_lt = false;  // cuBLASLt added the bias, the residual or the row sums itself
    if (K == 0) {
      fill(c, 0);
    } else {
      const Operand oa = operand(a, M, K), ob = operand(b, K, N);
      LtProduct p{M,
                  N,
                  K,
                  {oa.data, oa.trans, oa.ld},
                  {ob.data, ob.trans, ob.ld},
                  static_cast<float*>(c.data),
                  N};
      p.bias = f32(ep.bias);
      p.add = f32(ep.add);
      p.add_ld = add_ld;
      p.a_row_sums = static_cast<float*>(ep.a_row_sums ? ep.a_row_sums->data : nullptr);
      by_lt = lt_.run(p, stream_);
      if (!by_lt) gemm_rm_16(M, N, K, 1.0, oa.data, oa, ob.data, ob, 0.0, c.data, N, M * N, 1);
    }
    if (ep.a_row_sums && !by_lt) {  // the bfloat16 a's rows, summed in float32
      Strided sums = *ep.a_row_sums;
      sums.shape = Dims{M, 1};
      sums.strides = Dims{1, 1};
      StoragePtr keep;
      reduce(ReduceOp::Sum, as_dtype(a, DType::Float32, keep), sums);
    }
    const bool pass = (!by_lt && (ep.bias || ep.add)) || ep.gelu_out || ep.gelu_pre || ep.c_copy;
    if (!pass) return;
    check_launch(
        cuda::gemm_epilogue_mixed(
            static_cast<float*>(c.data), M, N, by_lt ? nullptr : f32(ep.bias),
            by_lt ? nullptr : f32(ep.add), add_ld, ep.gelu_out ? ep.gelu_out->data : nullptr,
            static_cast<Dt>(ep.gelu_out ? ep.gelu_out->dtype : DType::Float32),
            ep.gelu_pre ? ep.gelu_pre->data : nullptr,
            static_cast<Dt>(ep.gelu_pre ? ep.gelu_pre->dtype : DType::Float32), pre_ld,
            ep.c_copy ? ep.c_copy->data : nullptr, stream_),
        "gemm epilogue (bfloat16 operands)", c.dtype);
  }
  static bool bf16_into_f32(const Strided& a, const Strided& c) {
    return a.dtype == DType::BFloat16 && c.dtype == DType::Float32;
  }

  /// gemm over the batch dims of c (a, b and c of one dtype).
  void gemm_batched(const Strided& a, const Strided& b, const Strided& c, bool accumulate,
                    int64_t M, int64_t N, int64_t K) {
    const int nd = c.shape.size();
    Operand oa = operand(a, M, K), ob = operand(b, K, N);
    // The batch: an outer part iterated here, and the innermost run of dims whose strides
    // chain (stride[d] == stride[d + 1] * shape[d + 1] for a and b alike) batched by cuBLAS.
    int first = nd - 2;  // the batch dims [first, nd - 2) form the inner run
    int64_t inner = 1;
    if (nd > 2) {
      first = nd - 3;
      inner = c.shape[first];
      oa.batch_stride = a.strides[first];
      ob.batch_stride = b.strides[first];
      while (first > 0 && a.strides[first - 1] == a.strides[first] * c.shape[first] &&
             b.strides[first - 1] == b.strides[first] * c.shape[first]) {
        --first;
        inner *= c.shape[first];
      }
    }
    const int64_t outer = c.numel() / (M * N * inner);
    const size_t es = dtype_size(c.dtype), ea = dtype_size(a.dtype);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t oa_off = 0, ob_off = 0, rest = o;
      for (int d = first - 1; d >= 0; --d) {
        const int64_t i = rest % c.shape[d];
        rest /= c.shape[d];
        oa_off += i * a.strides[d];
        ob_off += i * b.strides[d];
      }
      Operand pa = oa, pb = ob;
      pa.data = static_cast<const char*>(a.data) + oa_off * ea;
      pb.data = static_cast<const char*>(b.data) + ob_off * ea;
      gemm_rm(a.dtype, M, N, K, 1.0, pa, pb, accumulate ? 1.0 : 0.0,
              static_cast<char*>(c.data) + o * inner * M * N * es, N, M * N, inner);
    }
  }

  // ---- index ops ---------------------------------------------------------------------------
  void index_select(const Strided& x, int dim, const Strided& index, const Strided& y) override {
    check_index(index, x.shape[dim], "index_select", dim);
    check_launch(cuda::index_select(view(x), dim, view(index), view(y), stream_), "index_select",
                 x.dtype);
  }
  void index_add(const Strided& y, int dim, const Strided& index, const Strided& src) override {
    check_index(index, y.shape[dim], "index_add", dim);
    check_launch(cuda::index_add(view(y), dim, view(index), view(src), stream_), "index_add",
                 y.dtype);
  }
  void gather(const Strided& x, int dim, const Strided& index, const Strided& y) override {
    check_index(index, x.shape.empty() ? 1 : x.shape[dim], "gather", dim);
    check_launch(cuda::gather(view(x), dim, view(index), view(y), stream_), "gather", x.dtype);
  }
  void scatter_add(const Strided& y, int dim, const Strided& index, const Strided& src) override {
    check_index(index, y.shape.empty() ? 1 : y.shape[dim], "scatter_add", dim);
    check_launch(cuda::scatter_add(view(y), dim, view(index), view(src), stream_), "scatter_add",
                 y.dtype);
  }

  // ---- fused neural-network kernels --------------------------------------------------------
  void softmax(const Strided& x, const Strided& y, bool log) override {
    check_launch(cuda::softmax(view(x), view(y), log, stream_), "softmax", x.dtype);
  }
  void softmax_backward(const Strided& y, const Strided& dy, const Strided& dx, bool log) override {
    check_launch(cuda::softmax_backward(view(y), view(dy), view(dx), log, stream_),
                 "softmax_backward", y.dtype);
  }
  void layer_norm(const Strided& x, const Strided& w, const Strided& b, double eps,
                  const Strided& y, const Strided& mean, const Strided& rstd) override {
    check_launch(
        cuda::layer_norm(view(x), view(w), view(b), eps, view(y), view(mean), view(rstd), stream_),
        "layer_norm", x.dtype);
  }
  void layer_norm_backward(const Strided& x, const Strided& w, const Strided& mean,
                           const Strided& rstd, const Strided& dy, const Strided& dx,
                           const Strided& dw, const Strided& db) override {
    check_launch(cuda::layer_norm_backward(view(x), view(w), view(mean), view(rstd), view(dy),
                                           view(dx), view(dw), view(db), stream_),
                 "layer_norm_backward", x.dtype);
  }
  void cross_entropy(const Strided& logits, const Strided& target, int64_t ignore_index,
                     double label_smoothing, const Strided& loss) override {
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
  void cross_entropy_backward(const Strided& logits, const Strided& target, int64_t ignore_index,
                              double label_smoothing, const Strided& dloss,
                              const Strided& dlogits) override {
    check_launch(cuda::cross_entropy_backward(view(logits), view(target), ignore_index,
                                              label_smoothing, view(dloss), view(dlogits), stream_),
                 "cross_entropy_backward", logits.dtype);
  }

  /// Attention as in backend.h, in four pieces that the fused entries chain: each product one
  /// batched cuBLAS call over all images and heads (gemm_rm_grid), and softmax over all B H N
  /// rows at once. q, k, v and
  /// their gradients are read and written in place in qkv / dqkv.
  ///   qkv, dqkv: [B, N, 3, H, Dh]   probs, dprobs: [B, H, N, N]   out, dout: [B, N, H, Dh]
  void attention(const Strided& qkv, double scale, const Strided& probs,
                 const Strided& out) override {
    attention_probs(qkv, scale, probs);
    attention_apply(qkv, probs, out);
  }

  void attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                          double scale, const Strided& dqkv) override {
    const auto [B, N, H, Dh] = qkv_dims(qkv);
    VT_ASSERT(dqkv.is_contiguous() && dqkv.numel() == qkv.numel());
    StoragePtr scratch = allocate(B * H * N * N * dtype_size(qkv.dtype));  // dP, then dS
    apply_backward(qkv, probs, dout, scratch->data, dqkv);
    probs_backward(qkv, probs, scratch->data, scale, dqkv);
    // scratch returns to the cache now; the kernels that read it come first in the stream.
  }

  void attention_probs(const Strided& qkv, double scale, const Strided& probs) override {
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

  void attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) override {
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

  void attention_apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                const Strided& dprobs, const Strided& dqkv) override {
    const auto [B, N, H, Dh] = qkv_dims(qkv);
    VT_ASSERT(dprobs.is_contiguous() && dprobs.numel() == B * H * N * N && dqkv.is_contiguous() &&
              dqkv.numel() == qkv.numel());
    apply_backward(qkv, probs, dout, dprobs.data, dqkv);
    zero_parts(dqkv, 0, 2);  // dq, dk
  }

  void attention_probs_backward(const Strided& qkv, const Strided& probs, const Strided& dprobs,
                                double scale, const Strided& dqkv) override {
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

  /// FlashAttention-2 (backends/cuda/flash_attention.cu) where it applies: use_flash.
  bool flash_attention(const Strided& qkv, double scale, bool causal, const Strided& out,
                       const Strided& lse) override {
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
  /// Its backward. No precision test here: a forward that ran flash (under "medium") has its
  /// backward run flash too, whatever the precision is now.
  bool flash_attention_backward(const Strided& qkv, const Strided& out, const Strided& dout,
                                const Strided& lse, double scale, bool causal,
                                const Strided& dqkv) override {
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

  // ---- images and optimizers ---------------------------------------------------------------
  void im2col(const Strided& x, const Strided& cols, const ConvGeometry& g) override {
    check_launch(cuda::im2col(view(x), view(cols), conv(g), stream_), "im2col", x.dtype);
  }
  void col2im(const Strided& cols, const Strided& dx, const ConvGeometry& g) override {
    check_launch(cuda::col2im(view(cols), view(dx), conv(g), stream_), "col2im", cols.dtype);
  }
  void interpolate(const Strided& x, const Strided& y, const InterpGeometry& g) override {
    check_launch(cuda::interpolate(view(x), view(y), interp(g), stream_), "interpolate", x.dtype);
  }
  void interpolate_backward(const Strided& dy, const Strided& dx,
                            const InterpGeometry& g) override {
    check_launch(cuda::interpolate_backward(view(dy), view(dx), interp(g), stream_),
                 "interpolate_backward", dy.dtype);
  }
  void adam_step(const Strided& param, const Strided& grad, const Strided& exp_avg,
                 const Strided& exp_avg_sq, const AdamStep& o) override {
    const Adam a{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.step, o.decoupled};
    check_launch(
        cuda::adam_step(view(param), view(grad), view(exp_avg), view(exp_avg_sq), a, stream_),
        "adam_step", param.dtype);
  }
  void sgd_step(const Strided& param, const Strided& grad, const Strided& momentum_buf,
                const SgdStep& o) override {
    const Sgd s{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.first};
    check_launch(cuda::sgd_step(view(param), view(grad), view(momentum_buf), s, stream_),
                 "sgd_step", param.dtype);
  }

 private:
  /// The first value of index (int64) that is neither `allowed` nor in [lo, hi), and its flat
  /// position in at; at = -1 when every value is valid. It waits for the GPU: one 8-byte read.
  int64_t first_bad_index(const Strided& index, int64_t lo, int64_t hi, int64_t allowed,
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
  /// The CPU's error for an index outside [-size, size).
  void check_index(const Strided& index, int64_t size, const char* op, int dim) {
    int64_t at = 0;
    const int64_t bad = first_bad_index(index, -size, size, -size, at);
    VT_CHECK(at < 0, "{}: index {} is out of range for dim {} of size {}", op, bad, dim, size);
  }

  /// data + off elements of dtype t.
  static void* at(const void* data, DType t, int64_t off) {
    return const_cast<char*>(static_cast<const char*>(data) + off * dtype_size(t));
  }

  /// dP = dout v^T into dp [B, H, N, N];  dv = P^T dout into dqkv's v part.
  void apply_backward(const Strided& qkv, const Strided& probs, const Strided& dout, void* dp,
                      const Strided& dqkv) {
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
    gemm_rm_grid(t, N, Dh, N, 1.0, {probs.data, true, N, N * N}, H * N * N,
                 {dout.data, false, D, Dh}, N * D, 0.0, at(dqkv.data, t, 2 * D), row, Dh, N * row,
                 H, B);
  }

  /// From dP in ds [B, H, N, N] (overwritten with dS = P (dP - rowsum(dP P))): dq = scale dS k
  /// and dk = scale dS^T q into dqkv's q and k parts.
  void probs_backward(const Strided& qkv, const Strided& probs, void* ds, double scale,
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

  /// Zeroes parts [first, first + count) of every token's (q, k, v) row of dqkv [B, N, 3, H, Dh].
  void zero_parts(const Strided& dqkv, int64_t first, int64_t count) {
    const auto [B, N, H, Dh] = qkv_dims(dqkv);
    const size_t es = dtype_size(dqkv.dtype), part = H * Dh * es;
    check(cudaMemset2DAsync(at(dqkv.data, dqkv.dtype, first * H * Dh), 3 * part, 0, count * part,
                            B * N, stream_),
          "attention zero");
  }

  /// Whether flash attention takes qkv: switched on (VITRINE_FLASH_ATTENTION=0 turns it off,
  /// for A/B runs; read once), [B, N, 3, H, Dh] contiguous and not empty, float32 or bfloat16,
  /// Dh 32, 64 or 128, and a GPU with bfloat16 tensor cores (sm_80 on). flash_attention also
  /// wants float32 under matmul precision "medium": it rounds q, k and v to bfloat16, what
  /// "medium" promises; "highest" and "high" keep the materialised attention and its numbers.
  static bool use_flash(const Strided& qkv) {
    static const bool on = [] {
      const char* v = std::getenv("VITRINE_FLASH_ATTENTION");
      return !(v && std::string_view(v) == "0");
    }();
    if (!on || qkv.shape.size() != 5 || qkv.shape[2] != 3 || !qkv.is_contiguous() ||
        qkv.numel() == 0)
      return false;
    return cuda::flash_attention_supported(static_cast<Dt>(qkv.dtype), qkv.shape[0], qkv.shape[1],
                                           qkv.shape[3], qkv.shape[4]);
  }

  struct QkvDims {
    int64_t B, N, H, Dh;
  };
  static QkvDims qkv_dims(const Strided& qkv) {
    VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
    return {qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
  }
  static Conv conv(const ConvGeometry& g) {
    return {g.channels, g.height, g.width, g.kernel_h, g.kernel_w,   g.stride_h,  g.stride_w,
            g.pad_h,    g.pad_w,  g.out_h, g.out_w,    g.dilation_h, g.dilation_w};
  }
  static Interp interp(const InterpGeometry& g) {
    return {static_cast<int>(g.mode), g.align_corners, g.scale_h, g.scale_w};
  }
  /// A matmul operand [rows, cols] read in place from its last two strides.
  static Operand operand(const Strided& m, int64_t rows, int64_t cols) {
    const int nd = m.shape.size();
    Operand o{m.data, false, 0, 0};
    const bool ok = gemm_layout(rows, cols, m.strides[nd - 2], m.strides[nd - 1], o.trans, o.ld);
    VT_ASSERT(ok);  // ops/linalg.cpp makes other operands contiguous first
    return o;
  }

  /// cuBLAS's compute type for dtype t: float64 in float64; float32 per
  /// set_float32_matmul_precision: full float32, TF32 ("high"), or inputs rounded to bfloat16
  /// inside cuBLAS ("medium"), always accumulating in float32.
  static cublasComputeType_t compute_type(DType t) {
    if (t == DType::Float64) return CUBLAS_COMPUTE_64F;
    const MatmulPrecision p = float32_matmul_precision();
    return p == MatmulPrecision::High     ? CUBLAS_COMPUTE_32F_FAST_TF32
           : p == MatmulPrecision::Medium ? CUBLAS_COMPUTE_32F_FAST_16BF
                                          : CUBLAS_COMPUTE_32F;
  }

  /// Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C (ldc), batch times, C's batch
  /// stride c_batch (compute_type(t)). cuBLAS is column-major: a row-major matrix is its
  /// transpose, so C^T = op(B)^T op(A)^T is computed, with B first.
  void gemm_rm(DType t, int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
               const Operand& b, double beta, void* c, int64_t ldc, int64_t c_batch,
               int64_t batch) {
    if (t == DType::BFloat16) {  // bfloat16 operands, float32 c
      gemm_rm_16(M, N, K, alpha, a.data, a, b.data, b, beta, c, ldc, c_batch, batch);
      return;
    }
    if (t == DType::Float32 && float32_matmul_precision() == MatmulPrecision::Medium &&
        bf16_copies()) {
      gemm_rm_bf16(M, N, K, alpha, a, b, beta, c, ldc, c_batch, batch);
      return;
    }
    const BlasArgs g(t, a, b, alpha, beta);
    check_blas(cublasGemmStridedBatchedEx(blas_, g.opb, g.opa, N, M, K, g.alpha(), b.data, g.dt,
                                          ld(b.ld), b.batch_stride, a.data, g.dt, ld(a.ld),
                                          a.batch_stride, g.beta(), c, g.dt, ld(ldc), c_batch,
                                          batch, compute_type(t), CUBLAS_GEMM_DEFAULT),
               "gemm");
  }

  /// Whether float32 products under "medium" multiply bfloat16 copies of their inputs
  /// (gemm_rm_bf16). Given float32 inputs, CUBLAS_COMPUTE_32F_FAST_16BF ran TF32 kernels on an
  /// H200 (their names said so): 214 TFLOP/s on a 2048^3 product, where PyTorch's bfloat16 one
  /// ran at 371. VITRINE_CUDA_BF16_COPIES=0 goes back to that (read once).
  static bool bf16_copies() {
    static const bool on = [] {
      const char* v = std::getenv("VITRINE_CUDA_BF16_COPIES");
      return !(v && std::string_view(v) == "0");
    }();
    return on;
  }

  /// gemm_rm for float32 under "medium": A and B are copied to bfloat16 (each element rounded to
  /// nearest even, the CPU's conversion), then cuBLAS multiplies bfloat16 by bfloat16 with
  /// float32 accumulation and a float32 C: the numbers "medium" promises (matmul_precision.h),
  /// on bfloat16 tensor cores. A copy spans what its operand reads, in its own layout (same ld,
  /// same batch stride), so the product's arguments stay as they are.
  void gemm_rm_bf16(int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
                    const Operand& b, double beta, void* c, int64_t ldc, int64_t c_batch,
                    int64_t batch) {
    // Elements from an operand's start to its last one: op(X) [rows, cols], stored transposed
    // when trans.
    auto span = [batch](const Operand& o, int64_t rows, int64_t cols) {
      const int64_t r = o.trans ? cols : rows, n = o.trans ? rows : cols;
      return (r - 1) * o.ld + n + (batch - 1) * o.batch_stride;
    };
    VT_ASSERT(M > 0 && N > 0 && K > 0 && batch > 0);  // gemm returns before empty products
    const int64_t na = span(a, M, K), nb = span(b, K, N);
    StoragePtr ca = allocate(static_cast<size_t>(na) * 2),
               cb = allocate(static_cast<size_t>(nb) * 2);
    check_launch(cuda::copy(flat(const_cast<void*>(a.data), DType::Float32, na),
                            flat(ca->data, DType::BFloat16, na), stream_),
                 "matmul (bfloat16 copy)", DType::Float32);
    check_launch(cuda::copy(flat(const_cast<void*>(b.data), DType::Float32, nb),
                            flat(cb->data, DType::BFloat16, nb), stream_),
                 "matmul (bfloat16 copy)", DType::Float32);
    gemm_rm_16(M, N, K, alpha, ca->data, a, cb->data, b, beta, c, ldc, c_batch, batch);
    // ca, cb return to the cache now; whatever reuses them is queued after this product.
  }

  /// gemm_rm with bfloat16 operands at a16 and b16 (laid out as a and b say) and a float32 C:
  /// bfloat16 tensor cores, float32 accumulation.
  void gemm_rm_16(int64_t M, int64_t N, int64_t K, double alpha, const void* a16, const Operand& a,
                  const void* b16, const Operand& b, double beta, void* c, int64_t ldc,
                  int64_t c_batch, int64_t batch) {
    const BlasArgs g(DType::Float32, a, b, alpha, beta);  // float32 C and scales
    check_blas(cublasGemmStridedBatchedEx(blas_, g.opb, g.opa, N, M, K, g.alpha(), b16, CUDA_R_16BF,
                                          ld(b.ld), b.batch_stride, a16, CUDA_R_16BF, ld(a.ld),
                                          a.batch_stride, g.beta(), c, g.dt, ld(ldc), c_batch,
                                          batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "gemm (bfloat16)");
  }

  /// gemm_rm over a grid of outer x inner products in one cuBLAS call: product (o, i) reads A at
  /// a.data + o a_outer + i a.batch_stride elements, B likewise, and writes C at
  /// c + o c_outer + i c_batch. Attention's products per (image, head): q, k and v sit in qkv
  /// rows [B, N, 3, H, Dh], so no single stride steps over both images and heads; the grid's
  /// pointer lists (built here, copied to the GPU in stream order) make it one launch instead of
  /// one per image (64 small launches, 8 microseconds each, were 38% of a ViT-B/16 step on an
  /// H200).
  void gemm_rm_grid(DType t, int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
                    int64_t a_outer, const Operand& b, int64_t b_outer, double beta, void* c,
                    int64_t ldc, int64_t c_batch, int64_t c_outer, int64_t inner, int64_t outer) {
    const int64_t n = inner * outer;
    if (n == 0) return;
    std::vector<const void*> ptrs(3 * n);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = o * inner + i;
        ptrs[k] = at(a.data, t, o * a_outer + i * a.batch_stride);
        ptrs[n + k] = at(b.data, t, o * b_outer + i * b.batch_stride);
        ptrs[2 * n + k] = at(c, t, o * c_outer + i * c_batch);
      }
    // A pageable source is staged before cudaMemcpyAsync returns: ptrs may go right after.
    StoragePtr dev = allocate(ptrs.size() * sizeof(void*));
    check(cudaMemcpyAsync(dev->data, ptrs.data(), ptrs.size() * sizeof(void*),
                          cudaMemcpyHostToDevice, stream_),
          "copying a gemm's pointer lists");
    auto* d = static_cast<const void**>(dev->data);
    const BlasArgs g(t, a, b, alpha, beta);
    check_blas(
        cublasGemmBatchedEx(blas_, g.opb, g.opa, N, M, K, g.alpha(), d + n, g.dt, ld(b.ld), d, g.dt,
                            ld(a.ld), g.beta(), const_cast<void**>(d + 2 * n), g.dt, ld(ldc),
                            static_cast<int>(n), compute_type(t), CUBLAS_GEMM_DEFAULT),
        "gemm (batched)");
    // dev returns to the cache now; whatever reuses it is queued after this product.
  }

  /// cuBLAS wants ld >= 1 and >= the rows it steps over; a single row or column may say 1.
  static int ld(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  LtGemm lt_;
  BlockCache cache_;
  MemoryCounter counter_;
};

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
