// CPU fused multi-head self-attention, forward and backward. One task per (batch, head): its
// scores, softmax and weighted sum stay in cache, and the tasks run in parallel over B x H
// (OpenBLAS runs single-threaded inside the parallel region). q, k and v are read in place from
// the qkv projection's output [B, N, 3, H, Dh] (row stride 3 H Dh), and the output is written
// with the heads side by side [B, N, H, Dh], so no transposes or copies are made.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

/// c = alpha op(a) op(b) + beta c, row-major, in T's precision.
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// rows rows of n in place: p = softmax(p) per row.
template <typename T>
void softmax_rows(T* p, int64_t rows, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    simd::softmax_rows(p, p, rows, n, 1.0f);
  } else {
    for (int64_t r = 0; r < rows; ++r, p += n) {
      T m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = p[i] > m ? p[i] : m;
      T s = 0;
      for (int64_t i = 0; i < n; ++i) s += p[i] = std::exp(p[i] - m);
      for (int64_t i = 0; i < n; ++i) p[i] /= s;
    }
  }
}

/// One row of n in place: d = p (d - sum(d p)).
template <typename T>
void softmax_backward_row(const T* p, T* d, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    simd::softmax_backward_row(p, d, d, n);
  } else {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += d[i] * p[i];
    for (int64_t i = 0; i < n; ++i) d[i] = p[i] * (d[i] - s);
  }
}

struct Dims5 {
  int64_t B, N, H, Dh;
};

Dims5 qkv_dims(const Strided& qkv) {
  VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
  return {qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
}

}  // namespace

// qkv: [B, N, 3, H, Dh]; probs: [B, H, N, N]; out: [B, N, H, Dh]
void CpuBackend::attention(const Strided& qkv, double scale, const Strided& probs,
                           const Strided& out) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && out.is_contiguous() && probs.numel() == B * H * N * N &&
            out.numel() == B * N * H * Dh);
  const int64_t D = H * Dh, row = 3 * D;  // row: the stride between tokens in qkv
  dispatch_float(qkv.dtype, "attention", [&]<typename T>() {
    parallel_for(B * H, 4 * N * N * Dh, [&](int64_t bh) {
      const int64_t b = bh / H, h = bh % H;
      const T* q = qkv.ptr<T>() + b * N * row + h * Dh;
      const T* k = q + D;
      const T* v = q + 2 * D;
      T* p = probs.ptr<T>() + bh * N * N;
      blas_gemm<T>(false, true, N, N, Dh, static_cast<T>(scale), q, row, k, row, T(0), p,
                   N);  // [N, N]
      softmax_rows(p, N, N);
      blas_gemm<T>(false, false, N, Dh, N, T(1), p, N, v, row, T(0),
                   out.ptr<T>() + b * N * D + h * Dh,
                   D);  // [N, Dh]
    });
  });
}

// dout: [B, N, H, Dh]; dqkv: [B, N, 3, H, Dh], every element written
void CpuBackend::attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                    double scale, const Strided& dqkv) {
  const auto [B, N, H, Dh] = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && dout.is_contiguous() && dqkv.is_contiguous() &&
            dqkv.numel() == qkv.numel() && dout.numel() == B * N * H * Dh);
  const int64_t D = H * Dh, row = 3 * D;
  dispatch_float(qkv.dtype, "attention_backward", [&]<typename T>() {
    parallel_for(B * H, 8 * N * N * Dh, [&](int64_t bh) {
      thread_local std::vector<T> scratch;
      scratch.resize(N * N);
      T* ds = scratch.data();  // dP, then dS, [N, N]
      const int64_t b = bh / H, h = bh % H;
      const int64_t off = b * N * row + h * Dh;
      const T* q = qkv.ptr<T>() + off;
      const T *k = q + D, *v = q + 2 * D;
      T* dq = dqkv.ptr<T>() + off;
      T *dk = dq + D, *dv = dq + 2 * D;
      const T* p = probs.ptr<T>() + bh * N * N;
      const T* go = dout.ptr<T>() + b * N * D + h * Dh;  // [N, Dh], row stride D
      const T s = static_cast<T>(scale);
      blas_gemm<T>(false, true, N, N, Dh, T(1), go, D, v, row, T(0), ds, N);  // dP = dO v^T
      blas_gemm<T>(true, false, N, Dh, N, T(1), p, N, go, D, T(0), dv, row);  // dv = P^T dO
      for (int64_t i = 0; i < N; ++i) softmax_backward_row(p + i * N, ds + i * N, N);
      blas_gemm<T>(false, false, N, Dh, N, s, ds, N, k, row, T(0), dq, row);  // dq = s dS k
      blas_gemm<T>(true, false, N, Dh, N, s, ds, N, q, row, T(0), dk, row);   // dk = s dS^T q
    });
  });
}

}  // namespace vitrine::cpu
