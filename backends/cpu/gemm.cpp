// CPU matrix multiply through OpenBLAS: c[batch] (+)= a[batch] @ b[batch].
// a: [..., M, K], b: [..., K, N], c: [..., M, N] contiguous. a and b are read in place: each may
// be row-major or transposed in its last two dims (ld taken from the strides) and broadcast
// (stride 0) in its batch dims, so no copies are made. Many small products run in parallel over
// the batch (OpenBLAS then runs single-threaded inside the OpenMP region); large ones use
// OpenBLAS's own threads. Large float32 products go to Vitrine's own GEMM (sgemm.cpp), which
// packs only a transposed B. One row against a large matrix runs as a GEMV.
#include <cblas.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/simd.h"
#include "backends/gemm_info.h"

namespace vitrine::cpu {

namespace {
/// From this many weights (N K), a product with one row (M = 1: generating one token, one
/// image's head) runs as a GEMV, which reads the matrix once in place; OpenBLAS's sgemm would
/// first copy all of it into packed panels (most of word_language_model's time per generated
/// word went to that copy of its 200 x 10000 decoder). From 2^14, not 2^20: a GPT's per-token
/// products in generation with the cache (384 x 1152 and smaller) are under 2^20, and their
/// packing was as long as the 384 x 50257 head's GEMV.
constexpr int64_t kGemvMinWeight = int64_t{1} << 14;

struct Layout {
  bool trans;
  int64_t ld;
};

Layout layout_of(const Strided& m, int64_t rows, int64_t cols) {
  const int nd = m.shape.size();
  Layout l{false, 0};
  bool ok = gemm_layout(rows, cols, m.strides[nd - 2], m.strides[nd - 1], l.trans, l.ld);
  VT_ASSERT(ok);  // ops/linalg.cpp makes other operands contiguous first
  return l;
}
}  // namespace

void CpuBackend::gemm(const Strided& a, const Strided& b, const Strided& c, bool accumulate) {
  if (a.dtype != c.dtype || b.dtype != c.dtype) {  // bfloat16 operands: float32 copies
    VT_CHECK(a.dtype == b.dtype && is_floating_point(a.dtype) && !is_float(a.dtype) &&
                 c.dtype == DType::Float32,
             "matmul: operands {} and {} into {} (expected one dtype, or 16-bit operands into "
             "float32)",
             dtype_name(a.dtype), dtype_name(b.dtype), dtype_name(c.dtype));
    StoragePtr ka, kb;
    gemm(as_dtype(a, c.dtype, ka), as_dtype(b, c.dtype, kb), c, accumulate);
    return;
  }
  const int nd = c.shape.size();
  VT_ASSERT(nd >= 2 && a.shape.size() == nd && b.shape.size() == nd && c.is_contiguous());
  const int64_t M = c.shape[nd - 2], N = c.shape[nd - 1], K = a.shape[nd - 1];
  VT_ASSERT(a.shape[nd - 2] == M && b.shape[nd - 2] == K && b.shape[nd - 1] == N);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) fill(c, 0);
    return;
  }
  const Layout la = layout_of(a, M, K), lb = layout_of(b, K, N);
  const int64_t batch = c.numel() / (M * N);
  Dims bshape;
  for (int i = 0; i < nd - 2; ++i) bshape.push_back(c.shape[i]);

  auto offsets = [&](int64_t bi, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (int d = nd - 3; d >= 0; --d) {
      int64_t i = bi % bshape[d];
      bi /= bshape[d];
      oa += i * a.strides[d];
      ob += i * b.strides[d];
    }
  };
  const auto ta = la.trans ? CblasTrans : CblasNoTrans, tb = lb.trans ? CblasTrans : CblasNoTrans;
  const bool small = M * N * K < 64 * 64 * 64;
  dispatch_float(c.dtype, "matmul", [&]<typename T>() {
    const T* ap = a.ptr<T>();
    const T* bp = b.ptr<T>();
    T* cp = c.ptr<T>();
    const T beta = accumulate ? T(1) : T(0);
    auto one = [&](int64_t bi) {
      int64_t oa, ob;
      offsets(bi, oa, ob);
      T* cb = cp + bi * M * N;
      if (M == 1 && N * K >= kGemvMinWeight) {  // one row against a large matrix: a GEMV
        const int64_t inc_a = la.trans ? la.ld : 1;
        const auto tr = lb.trans ? CblasNoTrans : CblasTrans;
        const int64_t rows = lb.trans ? N : K, cols = lb.trans ? K : N;
        if constexpr (std::is_same_v<T, float>)
          cblas_sgemv(CblasRowMajor, tr, rows, cols, 1.0f, bp + ob, lb.ld, ap + oa, inc_a, beta, cb,
                      1);
        else
          cblas_dgemv(CblasRowMajor, tr, rows, cols, 1.0, bp + ob, lb.ld, ap + oa, inc_a, beta, cb,
                      1);
        return;
      }
      if constexpr (std::is_same_v<T, float>) {
        if (!small && own_sgemm(M, N, K, ap + oa, la.ld, la.trans, bp + ob, lb.ld, lb.trans, cb, N,
                                accumulate))
          return;
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, ap + oa, la.ld, bp + ob, lb.ld, beta, cb,
                    N);
      } else
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, ap + oa, la.ld, bp + ob, lb.ld, beta, cb,
                    N);
    };
    if (batch > 1 && small) {
      parallel_chunks(batch, chunk_of(batch), [&](int64_t b0, int64_t b1) {
        for (int64_t bi = b0; bi < b1; ++bi) one(bi);
      });
    } else {
      for (int64_t bi = 0; bi < batch; ++bi) one(bi);
    }
  });
}

void CpuBackend::gemm_fused(const Strided& a, const Strided& b, const Strided& c,
                            const GemmEpilogue& ep) {
  // Float32: the epilogue is applied as the own GEMM writes C (no pass of its own).
  const auto plain_rows = [](const Strided* t) {  // [M, N] with unit column stride
    return t == nullptr || (t->shape.size() == 2 && t->strides[1] == 1);
  };
  const auto f32 = [](const Strided* t) { return t == nullptr || t->dtype == DType::Float32; };
  const bool plain = c.dtype == DType::Float32 && a.dtype == c.dtype && b.dtype == c.dtype &&
                     c.shape.size() == 2 && a.shape.size() == 2 && plain_rows(ep.add) &&
                     plain_rows(ep.gelu_out) && plain_rows(ep.gelu_pre) && f32(ep.gelu_out) &&
                     f32(ep.gelu_pre) && !ep.c_copy;
  if (plain) {
    const int64_t M = c.shape[0], N = c.shape[1], K = a.shape[1];
    if (M > 0 && N > 0 && K > 0) {
      const Layout la = layout_of(a, M, K), lb = layout_of(b, K, N);
      const auto ld = [](const Strided* t) { return t ? t->strides[0] : 0; };
      SgemmEpilogue se;
      se.bias = ep.bias ? ep.bias->ptr<float>() : nullptr;
      se.add = ep.add ? ep.add->ptr<float>() : nullptr;
      se.ld_add = ld(ep.add);
      se.gelu_out = ep.gelu_out ? ep.gelu_out->ptr<float>() : nullptr;
      se.ld_gelu = ld(ep.gelu_out);
      se.gelu_pre = ep.gelu_pre ? ep.gelu_pre->ptr<float>() : nullptr;
      se.ld_pre = ld(ep.gelu_pre);
      se.act = ep.act;
      se.a_row_sums = ep.a_row_sums ? ep.a_row_sums->ptr<float>() : nullptr;
      if (ep.fixed_rows) {  // (gemm_fixed_rows said yes: own_sgemm_fixed_rows takes it)
        const bool done =
            own_sgemm_fixed_rows(M, N, K, a.ptr<float>(), la.ld, la.trans, b.ptr<float>(), lb.ld,
                                 lb.trans, c.ptr<float>(), N, se);
        VT_ASSERT(done);
        return;
      }
      if (own_sgemm(M, N, K, a.ptr<float>(), la.ld, la.trans, b.ptr<float>(), lb.ld, lb.trans,
                    c.ptr<float>(), N, false, se))
        return;
    }
  }
  VT_ASSERT(!ep.fixed_rows || (plain && c.numel() == 0));  // (only where gemm_fixed_rows said)
  if (!plain || (!ep.gelu_out && !ep.gelu_pre)) return Backend::gemm_fused(a, b, c, ep);
  // OpenBLAS's product (a CPU without AVX-512, or a shape the own GEMM declines) with the bias,
  // residual and row sums, then the activation's step in one pass over the rows, by the own
  // GEMM's epilogue kernels (simd::activation): the same values as there.
  GemmEpilogue rest = ep;
  rest.gelu_out = rest.gelu_pre = nullptr;
  Backend::gemm_fused(a, b, c, rest);
  const int64_t M = c.shape[0], N = c.shape[1];
  float* cp = c.ptr<float>();
  parallel_for(M, N, [&](int64_t m) {
    float* cr = cp + m * N;
    if (ep.gelu_out)
      simd::activation(ep.act, cr, ep.gelu_out->ptr<float>() + m * ep.gelu_out->strides[0], N);
    if (ep.gelu_pre)
      simd::activation_backward(ep.act, ep.gelu_pre->ptr<float>() + m * ep.gelu_pre->strides[0], cr,
                                cr, N);
  });
}

bool CpuBackend::gemm_fixed_rows(int64_t K, int64_t N, DType dtype) const {
  return dtype == DType::Float32 && own_sgemm_takes_any_rows(N, K);
}

}  // namespace vitrine::cpu

namespace vitrine {

CpuGemmInfo cpu_gemm_info() {
  CpuGemmInfo info;
  info.openblas_core = openblas_get_corename();
  info.avx512 = cpu::cpu_has_avx512();
  info.openblas_current = cpu::openblas_kernels_current(info.openblas_core, info.avx512);
  switch (cpu::gemm_policy()) {
    case cpu::GemmPolicy::Off:
      info.own_gemm = "none (no AVX-512, or VITRINE_GEMM=openblas)";
      break;
    case cpu::GemmPolicy::SmallWeights:
      info.own_gemm = "weights up to 2^20 floats";
      break;
    case cpu::GemmPolicy::All:
      info.own_gemm = info.openblas_current ? "every shape (VITRINE_GEMM=own)"
                                            : "every shape (OpenBLAS's kernels are a fallback)";
      break;
  }
  return info;
}

bool cpu_own_sgemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_trans,
                   const float* b, int64_t ldb, bool b_trans, float* c, int64_t ldc) {
  return cpu::own_sgemm(M, N, K, a, lda, a_trans, b, ldb, b_trans, c, ldc, false);
}

}  // namespace vitrine
