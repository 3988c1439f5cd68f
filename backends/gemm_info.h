// Which kernels run the CPU backend's matrix products, for benchmark reports: OpenBLAS picks
// its kernel set by CPU model when it is loaded (and falls back to old ones on a model newer than
// its table), and Vitrine's own float32 GEMM (backends/cpu/sgemm.h) takes the products it is
// made for. Also that GEMM alone, for a benchmark of its own speed (vitrine-bench's per-product
// table), so that the tools reach it through this header rather than backends/cpu/sgemm.h.
#pragma once
#include <cstdint>
#include <string>

namespace vitrine {

struct CpuGemmInfo {
  std::string openblas_core;  ///< openblas_get_corename(), e.g. "SkylakeX", "Haswell", "Prescott"
  bool openblas_current;      ///< that kernel set is made for this CPU's vector width
  std::string own_gemm;       ///< which float32 products the own GEMM takes, in words
  bool avx512;                ///< this CPU runs AVX-512 (AVX512F), which the own GEMM needs
};

CpuGemmInfo cpu_gemm_info();

/// Vitrine's own float32 GEMM on the CPU, with no OpenBLAS call in its place:
/// C[M, N] = A[M, K] B[K, N], C row-major with row stride ldc; A row-major with row stride lda or,
/// when a_trans, stored transposed (A[m][k] = a[k * lda + m]); B row-major with row stride ldb or,
/// when b_trans, stored transposed (B[k][n] = b[n * ldb + k]). Returns false, having done nothing,
/// where the library would not take the product with it (no AVX-512, VITRINE_GEMM=openblas, a
/// shape it is not made for). A benchmark's entry point: the library's own matmuls choose it
/// themselves.
bool cpu_own_sgemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                   const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc);

}  // namespace vitrine
