// CPU fused multi-head self-attention, forward and backward. One task per (batch, head): its
// scores, softmax and weighted sum stay in cache, and the tasks run in parallel over B x H
// (OpenBLAS runs single-threaded inside the parallel region). q, k and v are read in place from
// the qkv projection's output [B, N, 3, H, Dh] (row stride 3 H Dh), and the output is written
// with the heads side by side [B, N, H, Dh], so no transposes or copies are made. In float32 the
// per-head products go through Vitrine's own GEMM (sgemm.h; it reads q, k, v and the gradients in
// place, where OpenBLAS would pack them at every call), in float64 through OpenBLAS. The scale is
// applied inside the softmax and its backward, so every product is a plain one. The same four
// per-head pieces (probabilities, their application, and the two backwards) also run one at a
// time, for the split ops that keep the probabilities in the graph (ops::attention_probs/apply).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/sgemm.h"
#include "backends/cpu/simd.h"

namespace vitrine::cpu {

namespace {

/// c = op(a) op(b), row-major, in T's precision (c's previous contents are overwritten).
template <typename T>
void head_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T* c, int64_t ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    if (own_sgemm(m, n, k, a, lda, ta, b, ldb, tb, c, ldc, false)) return;
    cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  }
}

/// rows rows of n in place: p = softmax(scale p) per row.
template <typename T>
void softmax_rows(T* p, int64_t rows, int64_t n, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    simd::softmax_rows(p, p, rows, n, scale);
  } else {
    for (int64_t r = 0; r < rows; ++r, p += n) {
      T m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = p[i] > m ? p[i] : m;
      T s = 0;
      for (int64_t i = 0; i < n; ++i) s += p[i] = std::exp(scale * (p[i] - m));
      for (int64_t i = 0; i < n; ++i) p[i] /= s;
    }
  }
}

/// One row of n: ds = scale p (dp - sum(dp p)), the gradient of the scores before the scale (dS
/// of S = scale q k^T, with the scale that dq and dk carry). ds may be dp.
template <typename T>
void softmax_backward_row(const T* p, const T* dp, T* ds, int64_t n, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    simd::softmax_backward_row(p, dp, ds, n);
    for (int64_t i = 0; i < n; ++i) ds[i] *= scale;
  } else {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += dp[i] * p[i];
    for (int64_t i = 0; i < n; ++i) ds[i] = scale * p[i] * (dp[i] - s);
  }
}

struct Dims5 {
  int64_t B, N, H, Dh;
};

Dims5 qkv_dims(const Strided& qkv) {
  VT_ASSERT(qkv.shape.size() == 5 && qkv.shape[2] == 3 && qkv.is_contiguous());
  return {qkv.shape[0], qkv.shape[1], qkv.shape[3], qkv.shape[4]};
}

/// Where one (image b, head h) lives: q, k, v (and dq, dk, dv) are [N, Dh] with row stride
/// row = 3 D at qkv + qkv_off (+ D, + 2 D); its probabilities [N, N] at probs + p_off; its output
/// (and dout) [N, Dh] with row stride D at out + o_off.
struct Head {
  int64_t N, Dh, D, row, qkv_off, p_off, o_off;
  Head(const Dims5& d, int64_t bh) {
    const int64_t b = bh / d.H, h = bh % d.H;
    N = d.N, Dh = d.Dh, D = d.H * d.Dh, row = 3 * D;
    qkv_off = b * N * row + h * Dh, p_off = bh * N * N, o_off = b * N * D + h * Dh;
  }
};

// The four pieces of attention for one head; the kernels below run them over B x H in parallel.

/// p = softmax(scale q k^T)   [N, N]
template <typename T>
void probs_head(const Head& hd, const T* q, double scale, T* p) {
  const T* k = q + hd.D;
  head_gemm<T>(false, true, hd.N, hd.N, hd.Dh, q, hd.row, k, hd.row, p, hd.N);  // S = q k^T
  softmax_rows(p, hd.N, hd.N, static_cast<T>(scale));
}

/// o = p v   [N, Dh], row stride D
template <typename T>
void apply_head(const Head& hd, const T* p, const T* v, T* o) {
  head_gemm<T>(false, false, hd.N, hd.Dh, hd.N, p, hd.N, v, hd.row, o, hd.D);
}

/// dp = dout v^T [N, N];  dv = p^T dout [N, Dh] (row stride 3 D)
template <typename T>
void apply_backward_head(const Head& hd, const T* p, const T* v, const T* go, T* dp, T* dv) {
  head_gemm<T>(false, true, hd.N, hd.N, hd.Dh, go, hd.D, v, hd.row, dp, hd.N);
  head_gemm<T>(true, false, hd.N, hd.Dh, hd.N, p, hd.N, go, hd.D, dv, hd.row);
}

/// ds = scale dS from dp (ds may be dp);  dq = ds k,  dk = ds^T q   (row stride 3 D)
template <typename T>
void probs_backward_head(const Head& hd, const T* p, const T* dp, T* ds, const T* q, double scale,
                         T* dq) {
  const int64_t N = hd.N;
  for (int64_t i = 0; i < N; ++i)
    softmax_backward_row(p + i * N, dp + i * N, ds + i * N, N, static_cast<T>(scale));
  head_gemm<T>(false, false, N, hd.Dh, N, ds, N, q + hd.D, hd.row, dq, hd.row);  // dq
  head_gemm<T>(true, false, N, hd.Dh, N, ds, N, q, hd.row, dq + hd.D, hd.row);   // dk
}

/// Zeroes the [N, Dh] block at x (row stride row).
template <typename T>
void zero_head(const Head& hd, T* x) {
  for (int64_t i = 0; i < hd.N; ++i) std::fill_n(x + i * hd.row, hd.Dh, T(0));
}

/// The calling thread's [N, N] scratch block.
template <typename T>
T* scratch_block(int64_t N) {
  thread_local std::vector<T> scratch;
  scratch.resize(static_cast<size_t>(N * N));
  return scratch.data();
}

}  // namespace

// qkv: [B, N, 3, H, Dh]; probs: [B, H, N, N]; out: [B, N, H, Dh]
void CpuBackend::attention(const Strided& qkv, double scale, const Strided& probs,
                           const Strided& out) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && out.is_contiguous() &&
            probs.numel() == d.B * d.H * d.N * d.N && out.numel() == d.B * d.N * d.H * d.Dh);
  dispatch_float(qkv.dtype, "attention", [&]<typename T>() {
    parallel_for(d.B * d.H, 4 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      const T* q = qkv.ptr<T>() + hd.qkv_off;
      T* p = probs.ptr<T>() + hd.p_off;
      probs_head(hd, q, scale, p);  // while p is in cache:
      apply_head(hd, p, q + 2 * hd.D, out.ptr<T>() + hd.o_off);
    });
  });
}

// dout: [B, N, H, Dh]; dqkv: [B, N, 3, H, Dh], every element written
void CpuBackend::attention_backward(const Strided& qkv, const Strided& probs, const Strided& dout,
                                    double scale, const Strided& dqkv) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && dout.is_contiguous() && dqkv.is_contiguous() &&
            dqkv.numel() == qkv.numel() && dout.numel() == d.B * d.N * d.H * d.Dh);
  dispatch_float(qkv.dtype, "attention_backward", [&]<typename T>() {
    parallel_for(d.B * d.H, 8 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      T* ds = scratch_block<T>(d.N);  // dP, then dS
      const T* q = qkv.ptr<T>() + hd.qkv_off;
      const T* p = probs.ptr<T>() + hd.p_off;
      T* dq = dqkv.ptr<T>() + hd.qkv_off;
      apply_backward_head(hd, p, q + 2 * hd.D, dout.ptr<T>() + hd.o_off, ds, dq + 2 * hd.D);
      probs_backward_head(hd, p, ds, ds, q, scale, dq);
    });
  });
}

void CpuBackend::attention_probs(const Strided& qkv, double scale, const Strided& probs) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && probs.numel() == d.B * d.H * d.N * d.N);
  dispatch_float(qkv.dtype, "attention_probs", [&]<typename T>() {
    parallel_for(d.B * d.H, 2 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      probs_head(hd, qkv.ptr<T>() + hd.qkv_off, scale, probs.ptr<T>() + hd.p_off);
    });
  });
}

void CpuBackend::attention_apply(const Strided& qkv, const Strided& probs, const Strided& out) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && out.is_contiguous() &&
            probs.numel() == d.B * d.H * d.N * d.N && out.numel() == d.B * d.N * d.H * d.Dh);
  dispatch_float(qkv.dtype, "attention_apply", [&]<typename T>() {
    parallel_for(d.B * d.H, 2 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      apply_head(hd, probs.ptr<T>() + hd.p_off, qkv.ptr<T>() + hd.qkv_off + 2 * hd.D,
                 out.ptr<T>() + hd.o_off);
    });
  });
}

void CpuBackend::attention_apply_backward(const Strided& qkv, const Strided& probs,
                                          const Strided& dout, const Strided& dprobs,
                                          const Strided& dqkv) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && dout.is_contiguous() && dprobs.is_contiguous() &&
            dqkv.is_contiguous() && dqkv.numel() == qkv.numel() &&
            dprobs.numel() == probs.numel() && dout.numel() == d.B * d.N * d.H * d.Dh);
  dispatch_float(qkv.dtype, "attention_apply_backward", [&]<typename T>() {
    parallel_for(d.B * d.H, 4 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      T* dq = dqkv.ptr<T>() + hd.qkv_off;
      apply_backward_head(hd, probs.ptr<T>() + hd.p_off, qkv.ptr<T>() + hd.qkv_off + 2 * hd.D,
                          dout.ptr<T>() + hd.o_off, dprobs.ptr<T>() + hd.p_off, dq + 2 * hd.D);
      zero_head(hd, dq);
      zero_head(hd, dq + hd.D);
    });
  });
}

void CpuBackend::attention_probs_backward(const Strided& qkv, const Strided& probs,
                                          const Strided& dprobs, double scale,
                                          const Strided& dqkv) {
  const Dims5 d = qkv_dims(qkv);
  VT_ASSERT(probs.is_contiguous() && dprobs.is_contiguous() && dqkv.is_contiguous() &&
            dqkv.numel() == qkv.numel() && dprobs.numel() == probs.numel());
  dispatch_float(qkv.dtype, "attention_probs_backward", [&]<typename T>() {
    parallel_for(d.B * d.H, 4 * d.N * d.N * d.Dh, [&](int64_t bh) {
      const Head hd(d, bh);
      T* dq = dqkv.ptr<T>() + hd.qkv_off;
      probs_backward_head(hd, probs.ptr<T>() + hd.p_off, dprobs.ptr<T>() + hd.p_off,
                          scratch_block<T>(d.N), qkv.ptr<T>() + hd.qkv_off, scale, dq);
      zero_head(hd, dq + 2 * hd.D);
    });
  });
}

}  // namespace vitrine::cpu
