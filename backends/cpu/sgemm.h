// Vitrine's own float32 matrix multiply, for the products a ViT spends its time in: activations
// [M, K] (M = batch x tokens, large) times a weight (K and N a few hundred). OpenBLAS packs both
// operands into its own layout at every call; packing the activations costs a full read and write
// of them (about a tenth of a training step on the fmnist model). Here A is read where it is,
// broadcast one float at a time into an AVX-512 micro-kernel that keeps a 12 x 32 tile of C in
// registers; B is read in place too when row-major, and packed only when it is a transposed
// weight (small: K x N). A linear layer's bias, a residual and GELU (or GELU's gradient) are
// applied as C is written, instead of in passes of their own (SgemmEpilogue).
#pragma once
#include <cstdint>
#include <string_view>

#include "backends/backend.h"           // Activation
#include "backends/cpu/cpu_features.h"  // cpu_has_avx512, for gemm_policy_for's callers

namespace vitrine::cpu {

/// Which float32 products own_sgemm takes, decided once per process:
///   Off           none (no AVX-512, or VITRINE_GEMM=openblas)
///   SmallWeights  weights up to 2^20 floats (ViT-S/16's all); OpenBLAS's blocking does the larger
///                 ones as well
///                 (the default, when OpenBLAS runs kernels made for this CPU)
///   All           every shape it is made for (VITRINE_GEMM=own, or OpenBLAS fell back to old
///                 kernels on a CPU it does not know: see openblas_get_corename)
enum class GemmPolicy { Off, SmallWeights, All };
/// This process's policy: gemm_policy_for(VITRINE_GEMM, the CPU's AVX-512, OpenBLAS's kernels).
GemmPolicy gemm_policy();
/// The rule, for given inputs: env "openblas" or no AVX-512: Off; env "own": All; else
/// SmallWeights when OpenBLAS's kernels are current for an AVX-512 CPU, All when they are a
/// fallback (Prescott on an Emerald Rapids Xeon, Haswell on a Zen 5).
GemmPolicy gemm_policy_for(std::string_view env, bool avx512, std::string_view openblas_core);

/// The first n of 16 lanes as an AVX-512 mask's bits (all for n >= 16, none for n <= 0): the own
/// GEMM's and the direct convolutions' masked loads and stores of a row's end.
inline uint16_t first_lanes(int64_t n) {
  return static_cast<uint16_t>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}
/// Whether an OpenBLAS kernel set (openblas_get_corename(), any case) is made for this CPU's
/// vector width. On a CPU with AVX-512 only the AVX-512 sets count (SkylakeX, Cooperlake,
/// SapphireRapids); on one with AVX2 but not AVX-512, the AVX2 sets (Haswell, Zen) count too.
/// OpenBLAS picks its kernels by CPU model when it is loaded, and on a model newer than its table
/// falls back to old ones: Debian 12's 0.3.21 runs its SSE3 "Prescott" kernels on an Intel Xeon
/// of 2024 (Emerald Rapids), about a fifth of the sgemm speed of its AVX-512 kernels there, and
/// its AVX2 "Haswell" kernels on an AMD Zen 5 (family 26), whose full-width AVX-512 units then
/// stay idle.
bool openblas_kernels_current(std::string_view core, bool avx512);

/// What own_sgemm does to C as it writes it, beyond the product (a fused "epilogue"):
///   C[m][n] = (A B)[m][n] + bias[n] + add[m][n]          (each term when given)
/// and then, once a block of C is final (after the last depth slice), while it is in cache:
///   gelu_out[m][n] = act(C[m][n])                       (fc1 and its activation, the exact
///                                                        GELU unless act says; may be C)
///   C[m][n] *= act'(gelu_pre[m][n])                     (the gradient at fc1's output from the
///                                                        one at the activation's, dy W2)
/// With a bias or an add, accumulate is ignored (the tile starts from them instead of from C).
struct SgemmEpilogue {
  const float* bias = nullptr;  // [N]
  const float* add = nullptr;   // add[m * ld_add + n]: a residual
  int64_t ld_add = 0;
  float* gelu_out = nullptr;  // gelu_out[m * ld_gelu + n]
  int64_t ld_gelu = 0;
  const float* gelu_pre = nullptr;  // gelu_pre[m * ld_pre + n]
  int64_t ld_pre = 0;
  Activation act = Activation::GELU;  // what gelu_out and gelu_pre compute (simd::activation)
  /// Also a_row_sums[m] = sum_k A[m][k] ([M]; A transposed only, else the product is declined):
  /// a linear layer's bias gradient, summed as its weight gradient dy^T x reads dy.
  float* a_row_sums = nullptr;
};

/// C[M, N] = A[M, K] B[K, N] (+ C when accumulate), float32, C row-major with row stride ldc,
/// then the epilogue ep (above).
/// A is row-major (A[m][k] = a[m * lda + k]) or, when a_trans, stored transposed (A[m][k] =
/// a[k * lda + m]: dy^T in a weight gradient). B is row-major (B[k][n] = b[k * ldb + n]), read in
/// place, or, when b_trans, stored transposed (B[k][n] = b[n * ldb + k]: a weight [N, K] used as
/// its transpose), packed first.
/// Returns false, having done nothing, when it does not take the product (a CPU without AVX-512,
/// a shape it is not made for: fewer than 48 rows, 16 columns or a depth of 8, or a weight of
/// over 2^20 floats under GemmPolicy::SmallWeights, or VITRINE_GEMM=openblas in the
/// environment); the caller then calls OpenBLAS and applies the epilogue itself.
bool own_sgemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
               const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc, bool accumulate,
               const SgemmEpilogue& ep = {});

/// Whether own_sgemm_fixed_rows takes products [M, K] x [K, N] at every M: this CPU runs the own
/// GEMM (gemm_policy) and the shape is one it is made for whatever M (N >= 16, K >= 8, and
/// under SmallWeights a weight N K of at most 2^20 floats).
bool own_sgemm_takes_any_rows(int64_t N, int64_t K);

/// own_sgemm at any M, one row included, where own_sgemm_takes_any_rows(N, K) (false, having
/// done nothing, elsewhere). Every element of C is then a sum over k in depth slices of 256,
/// each a plain sequential sum, by one thread: a row's bits depend on its row of A, on B and on
/// the epilogue alone, not on M, the thread count or the row's place (batch-invariant mode's
/// products on a whole batch, Backend::GemmEpilogue::fixed_rows).
bool own_sgemm_fixed_rows(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                          bool a_trans, const float* b, int64_t ldb, bool b_trans, float* c,
                          int64_t ldc, const SgemmEpilogue& ep);

/// own_sgemm for a product inside a parallel loop's chunk (it runs on the calling thread), taking
/// any number of rows: a convolution's 16 output channels (backends/cpu/conv_batched.cpp), where
/// there is no OpenBLAS call to prefer. No epilogue. false as own_sgemm's.
bool own_sgemm_in_chunk(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                        const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc,
                        bool accumulate);

/// own_sgemm_in_chunk with B's rows where a table says: B[k][n] = b[b_rows[k] + n] (row-major
/// A, no transposes). An implicit-GEMM convolution's product (backends/cpu/conv_implicit.cpp):
/// row (c, i, j) of its B is the zero-padded input shifted by tap (i, j), read in place, where
/// im2col wrote kh kw copies of it. false as own_sgemm's.
bool own_sgemm_rows_in_chunk(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                             const float* b, const int64_t* b_rows, float* c, int64_t ldc,
                             bool accumulate);

}  // namespace vitrine::cpu
