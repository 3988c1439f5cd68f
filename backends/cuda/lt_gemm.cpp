#include "backends/cuda/lt_gemm.h"
#include "backends/gpu_paths.h"

#include <algorithm>

namespace vitrine::cuda {

namespace {
/// 32 MiB: what NVIDIA recommends for cuBLAS on Hopper (the split-K and stream-K kernels).
constexpr size_t kWorkspace = size_t{32} << 20;

/// The largest power of two (at most 256) that divides the address: cuBLASLt's heuristic picks
/// kernels for the alignment it is told (256 bytes unless told less).
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

/// cuBLASLt is opt-in until a GPU run passes it (GpuPath::CudaLt: VITRINE_CUDA_LT=1 or
/// set_gpu_path_enabled); off, every product runs on cuBLAS with the epilogue pass.
bool lt_enabled() { return gpu_path_enabled(GpuPath::CudaLt); }
}  // namespace

bool LtGemm::ready() {
  if (failed_ || !lt_enabled()) return false;
  if (handle_) return true;
  if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS ||
      cudaMalloc(&workspace_, kWorkspace) != cudaSuccess) {
    (void)cudaGetLastError();
    failed_ = true;
    return false;
  }
  return true;
}

LtGemm::Plan LtGemm::make_plan(const LtProduct& p, int epilogue, int align) {
  Plan plan;
  const cublasOperation_t opa = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t opb = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto ep = static_cast<cublasLtEpilogue_t>(epilogue);
  bool ok =
      cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  ok = ok &&
       cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) ==
           CUBLAS_STATUS_SUCCESS;
  // Column-major layouts: cuBLASLt's A is m x k (k x m stored when transposed), B k x n.
  const uint64_t m = p.N, n = p.M, k = p.K;
  ok = ok &&
       cublasLtMatrixLayoutCreate(&plan.la, CUDA_R_16BF, p.b.trans ? k : m, p.b.trans ? m : k,
                                  p.b.ld) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&plan.lb, CUDA_R_16BF, p.a.trans ? n : k, p.a.trans ? k : n,
                                  p.a.ld) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&plan.lc, CUDA_R_32F, m, n, p.add ? p.add_ld : p.ldc) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&plan.ld, CUDA_R_32F, m, n, p.ldc) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = nullptr;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
  if (ok) {
    const uint64_t ws = kWorkspace;
    const uint32_t al = static_cast<uint32_t>(align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ok = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.la, plan.lb, plan.lc, plan.ld,
                                        pref, 1, &result, &found) == CUBLAS_STATUS_SUCCESS &&
         found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (ok) plan.algo = result.algo;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  plan.ok = ok;
  return plan;
}

bool LtGemm::run(const LtProduct& p, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0 || p.K <= 0 || (p.bias && p.a_row_sums) || !ready()) return false;
  // The vectors have no alignment preference of their own: 16 bytes or the other way.
  if ((p.bias && alignment(p.bias) < 16) || (p.a_row_sums && alignment(p.a_row_sums) < 16))
    return false;
  const int epilogue = p.bias         ? CUBLASLT_EPILOGUE_BIAS
                       : p.a_row_sums ? CUBLASLT_EPILOGUE_BGRADB
                                      : CUBLASLT_EPILOGUE_DEFAULT;
  const int align = std::min(
      {alignment(p.a.data), alignment(p.b.data), alignment(p.c), p.add ? alignment(p.add) : 256});
  const Key key{
      p.M,      p.N,  p.K, p.a.trans, p.b.trans, p.a.ld, p.b.ld, p.ldc, p.add ? p.add_ld : -1,
      epilogue, align};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, make_plan(p, epilogue, align)).first;
  Plan& plan = it->second;
  if (!plan.ok) return false;
  if (p.bias) {
    const void* bias = p.bias;
    if (cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias) != CUBLAS_STATUS_SUCCESS)
      return false;
  }
  if (p.a_row_sums) {
    void* sums = p.a_row_sums;
    if (cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &sums,
                                       sizeof sums) != CUBLAS_STATUS_SUCCESS)
      return false;
  }
  const float alpha = 1.0f, beta = p.add ? 1.0f : 0.0f;
  const void* c_in = p.add ? static_cast<const void*>(p.add) : p.c;
  const cublasStatus_t s =
      cublasLtMatmul(handle_, plan.desc, &alpha, p.b.data, plan.la, p.a.data, plan.lb, &beta, c_in,
                     plan.lc, p.c, plan.ld, &plan.algo, workspace_, kWorkspace, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    plan.ok = false;  // never again for this shape: the fallback from now on
    return false;
  }
  return true;
}

}  // namespace vitrine::cuda
