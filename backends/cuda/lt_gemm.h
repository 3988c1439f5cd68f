// cuBLASLt products with epilogues: a linear layer's bias (and residual) added by the GEMM as it
// writes its output, and the bias gradient summed by the GEMM as it reads dy, instead of a pass
// of their own over the output (cuda_backend.cpp's gemm_fused falls back to that pass whenever
// cuBLASLt declines a product). Used for the bfloat16 operands of linear layers (docs/cuda.md):
// A and B bfloat16, C and D float32, float32 accumulation.
//
// Row-major to column-major as everywhere in the backend: row-major c[M, N] = a[M, K] b[K, N] is
// column-major c^T[N, M] = b^T[N, K] a^T[K, M], so cuBLASLt's "A" is our b and its "B" our a,
// with its m = N, n = M, k = K. Then
//   our bias[n] added to every row of c    = cuBLASLt's CUBLASLT_EPILOGUE_BIAS (a vector over
//                                            the rows of its D)
//   our a_row_sums[m] = sum_k a[m][k]      = CUBLASLT_EPILOGUE_BGRADB (its B summed over k)
//   our residual add[m][n]                 = its C with beta 1 (C and D distinct layouts)
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace vitrine::cuda {

/// A row-major operand: op(X) is [rows, cols]; stored transposed when trans; ld its row stride.
struct LtOperand {
  const void* data;
  bool trans;
  int64_t ld;
};

/// One product c[M, N] (float32, row stride ldc) = a[M, K] b[K, N] (bfloat16), and what may
/// come with it (each when non-null): bias[N] added to every row; add[M, N] (row stride add_ld,
/// may be c) added; a_row_sums[M] = the sums of op(a)'s rows (never with bias).
struct LtProduct {
  int64_t M, N, K;
  LtOperand a, b;
  float* c;
  int64_t ldc;
  const float* bias = nullptr;
  const float* add = nullptr;
  int64_t add_ld = 0;
  float* a_row_sums = nullptr;
};

class LtGemm {
 public:
  /// Runs p on stream; false when cuBLASLt has no kernel for it (the caller computes it
  /// another way). The answer is kept per shape, layout, epilogue and alignment: a training
  /// step asks the same few dozen questions every step.
  bool run(const LtProduct& p, cudaStream_t stream);

 private:
  struct Plan {
    bool ok = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int64_t,
                         int, int>;  // M N K ta tb lda ldb ldc add_ld epilogue align
  Plan make_plan(const LtProduct& p, int epilogue, int align);
  bool ready();

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  bool failed_ = false;  // no handle or workspace: every product falls back
  std::map<Key, Plan> plans_;
};

}  // namespace vitrine::cuda
