// The CUDA backend's matrix products (the class: cuda_backend.h): cuBLAS for row-major products
// (as column-major ones with the operands swapped), batched and gridded; the float32 precisions;
// the bfloat16 operands of linear layers on cuBLASLt with epilogues (lt_gemm.h), docs/cuda.md.
#include <cstdlib>
#include <string_view>

#include "backends/cuda/cuda_backend.h"
#include "backends/env_switch.h"
#include "backends/gpu_paths.h"

namespace vitrine::cuda {

static_assert(static_cast<int>(Activation::GELU) == kActGelu &&
              static_cast<int>(Activation::GELUTanh) == kActGeluTanh &&
              static_cast<int>(Activation::ReLU) == kActRelu &&
              static_cast<int>(Activation::SiLU) == kActSilu);

namespace {
/// Whether the epilogue kernels apply ep's activation themselves: the exact GELU always (it has
/// run on GPUs); the tanh GELU, ReLU and SiLU of ops::mlp only under VITRINE_CUDA_FUSED_ACT=1
/// until a GPU run has passed them (docs/cuda.md). Otherwise Backend::gemm_fused's default steps
/// run (the product, then the elementwise ops one pass each): slower, and right.
bool epilogue_act(const Backend::GemmEpilogue& ep) {
  if (ep.act == Activation::GELU || (!ep.gelu_out && !ep.gelu_pre)) return true;
  static const bool on = [] {
    const std::string_view s = env_value("VITRINE_CUDA_FUSED_ACT");
    VT_CHECK(s.empty() || s == "0" || s == "1",
             "VITRINE_CUDA_FUSED_ACT: '{}' is not a switch value (expected 1 to fuse the tanh "
             "GELU, ReLU and SiLU into the products' epilogues, or 0 not to)",
             s);
    return s == "1";
  }();
  return on;
}
}  // namespace

void CudaBackend::gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) {
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

void CudaBackend::gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                             const GemmEpilogue& ep) {
  if (!epilogue_act(ep)) {
    Backend::gemm_fused(a, b, c, ep);
    return;
  }
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
                     ep.gelu_pre ? ep.gelu_pre->strides[0] : 0, static_cast<int>(ep.act), stream_),
                 "gemm epilogue", c.dtype);
  if (ep.a_row_sums) {
    Strided sums = *ep.a_row_sums;  // as [M, 1], the layout reduce writes
    sums.shape = Dims{a.shape[0], 1};
    sums.strides = Dims{1, 1};
    reduce(ReduceOp::Sum, a, sums);
  }
}

void CudaBackend::gemm_fused_16(const Strided& a, const Strided& b, const Strided& c,
                                const GemmEpilogue& ep) {
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
  check_launch(cuda::gemm_epilogue_mixed(
                   static_cast<float*>(c.data), M, N, by_lt ? nullptr : f32(ep.bias),
                   by_lt ? nullptr : f32(ep.add), add_ld, ep.gelu_out ? ep.gelu_out->data : nullptr,
                   static_cast<Dt>(ep.gelu_out ? ep.gelu_out->dtype : DType::Float32),
                   ep.gelu_pre ? ep.gelu_pre->data : nullptr,
                   static_cast<Dt>(ep.gelu_pre ? ep.gelu_pre->dtype : DType::Float32), pre_ld,
                   ep.c_copy ? ep.c_copy->data : nullptr, static_cast<int>(ep.act), stream_),
               "gemm epilogue (bfloat16 operands)", c.dtype);
}

bool CudaBackend::bf16_into_f32(const Strided& a, const Strided& c) {
  return a.dtype == DType::BFloat16 && c.dtype == DType::Float32;
}

void CudaBackend::gemm_batched(const Strided& a, const Strided& b, const Strided& c,
                               bool accumulate, int64_t M, int64_t N, int64_t K) {
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

Operand CudaBackend::operand(const Strided& m, int64_t rows, int64_t cols) {
  const int nd = m.shape.size();
  Operand o{m.data, false, 0, 0};
  const bool ok = gemm_layout(rows, cols, m.strides[nd - 2], m.strides[nd - 1], o.trans, o.ld);
  VT_ASSERT(ok);  // ops/linalg.cpp makes other operands contiguous first
  return o;
}

cublasComputeType_t CudaBackend::compute_type(DType t) {
  if (t == DType::Float64) return CUBLAS_COMPUTE_64F;
  const MatmulPrecision p = float32_matmul_precision();
  return p == MatmulPrecision::High     ? CUBLAS_COMPUTE_32F_FAST_TF32
         : p == MatmulPrecision::Medium ? CUBLAS_COMPUTE_32F_FAST_16BF
                                        : CUBLAS_COMPUTE_32F;
}

void CudaBackend::gemm_rm(DType t, int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
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
                                        a.batch_stride, g.beta(), c, g.dt, ld(ldc), c_batch, batch,
                                        compute_type(t), CUBLAS_GEMM_DEFAULT),
             "gemm");
}

bool CudaBackend::bf16_copies() {
  static const bool on = env_switch_on("VITRINE_CUDA_BF16_COPIES");
  return on;
}

void CudaBackend::gemm_rm_bf16(int64_t M, int64_t N, int64_t K, double alpha, const Operand& a,
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
  StoragePtr ca = allocate(static_cast<size_t>(na) * 2), cb = allocate(static_cast<size_t>(nb) * 2);
  check_launch(cuda::copy(flat(const_cast<void*>(a.data), DType::Float32, na),
                          flat(ca->data, DType::BFloat16, na), stream_),
               "matmul (bfloat16 copy)", DType::Float32);
  check_launch(cuda::copy(flat(const_cast<void*>(b.data), DType::Float32, nb),
                          flat(cb->data, DType::BFloat16, nb), stream_),
               "matmul (bfloat16 copy)", DType::Float32);
  gemm_rm_16(M, N, K, alpha, ca->data, a, cb->data, b, beta, c, ldc, c_batch, batch);
  // ca, cb return to the cache now; whatever reuses them is queued after this product.
}

void CudaBackend::gemm_rm_16(int64_t M, int64_t N, int64_t K, double alpha, const void* a16,
                             const Operand& a, const void* b16, const Operand& b, double beta,
                             void* c, int64_t ldc, int64_t c_batch, int64_t batch) {
  const BlasArgs g(DType::Float32, a, b, alpha, beta);  // float32 C and scales
  check_blas(cublasGemmStridedBatchedEx(blas_, g.opb, g.opa, N, M, K, g.alpha(), b16, CUDA_R_16BF,
                                        ld(b.ld), b.batch_stride, a16, CUDA_R_16BF, ld(a.ld),
                                        a.batch_stride, g.beta(), c, g.dt, ld(ldc), c_batch, batch,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "gemm (bfloat16)");
}

void CudaBackend::gemm_rm_grid(DType t, int64_t M, int64_t N, int64_t K, double alpha,
                               const Operand& a, int64_t a_outer, const Operand& b, int64_t b_outer,
                               double beta, void* c, int64_t ldc, int64_t c_batch, int64_t c_outer,
                               int64_t inner, int64_t outer) {
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
  StoragePtr once;  // the list's copy when lists are not kept: returned to the cache after the call
  const void** d = device_pointer_list(ptrs, once);
  const BlasArgs g(t, a, b, alpha, beta);
  check_blas(
      cublasGemmBatchedEx(blas_, g.opb, g.opa, N, M, K, g.alpha(), d + n, g.dt, ld(b.ld), d, g.dt,
                          ld(a.ld), g.beta(), const_cast<void**>(d + 2 * n), g.dt, ld(ldc),
                          static_cast<int>(n), compute_type(t), CUBLAS_GEMM_DEFAULT),
      "gemm (batched)");
}

const void** CudaBackend::device_pointer_list(const std::vector<const void*>& ptrs,
                                              StoragePtr& once) {
  constexpr size_t kPointerListsKept = 128;
  const bool keep = gpu_path_enabled(GpuPath::PointerLists);
  if (auto it = pointer_lists_.find(ptrs); keep && it != pointer_lists_.end())
    return static_cast<const void**>(it->second->data);
  if (pointer_lists_.size() >= kPointerListsKept) pointer_lists_.clear();
  StoragePtr dev = allocate(ptrs.size() * sizeof(void*));
  // A pageable source is staged before cudaMemcpyAsync returns: ptrs may go right after.
  check(cudaMemcpyAsync(dev->data, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice,
                        stream_),
        "copying a gemm's pointer lists");
  auto* d = static_cast<const void**>(dev->data);
  if (keep)
    pointer_lists_.emplace(ptrs, std::move(dev));
  else
    once = std::move(dev);  // whatever reuses its block is queued after the product
  return d;
}

}  // namespace vitrine::cuda
