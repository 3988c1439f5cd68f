// FlashAttention-2's tile loops in plain C++ (float64): the algorithm of
// backends/cuda/flash_attention.cu, step for step, without tensor cores, so that the tiling, the
// online softmax, the masks at the edges and the backward from the log-sum-exp are proven on the
// CPU (tests/backends/test_flash_reference.cpp) before the kernel runs. Read beside that file:
// the same names (Q tile [Br, Dh], K and V tiles [Bc, Dh], S [Br, Bc], running max m and sum l).
//   qkv  [B, N, 3, H, Dh]   out, dout [B, N, H, Dh]   lse [B, H, N]   dqkv [B, N, 3, H, Dh]
// (contiguous, row-major). causal: query i sees keys j <= i. Tile sizes are parameters (the
// kernel's are 64 and 64) so that tests can put tile edges anywhere.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace vt_test::flash {

struct Tiles {
  int64_t br = 64;  // query rows of a tile
  int64_t bc = 64;  // key rows of a tile
};

struct Shape {
  int64_t B, N, H, Dh;
  int64_t row() const { return 3 * H * Dh; }  // qkv's row stride
  /// qkv[b, n, part, h, d]
  int64_t qkv(int64_t b, int64_t n, int64_t part, int64_t h) const {
    return ((b * N + n) * 3 + part) * H * Dh + h * Dh;
  }
  /// out[b, n, h, :]
  int64_t out(int64_t b, int64_t n, int64_t h) const { return ((b * N + n) * H + h) * Dh; }
  /// lse[b, h, n]
  int64_t stat(int64_t b, int64_t h, int64_t n) const { return (b * H + h) * N + n; }
};

/// Whether query i sees key j (both < N).
inline bool visible(int64_t i, int64_t j, int64_t N, bool causal) {
  return i < N && j < N && !(causal && j > i);
}

/// Key tiles a query tile starting at q0 visits: all, or (causal) up to the one holding its last
/// query.
inline int64_t key_tiles(int64_t q0, const Shape& s, const Tiles& t, bool causal) {
  const int64_t last_query = std::min(q0 + t.br, s.N) - 1;
  return causal ? last_query / t.bc + 1 : (s.N + t.bc - 1) / t.bc;
}

/// S[r][c] = scale q[q0 + r] . k[k0 + c] for the tile, -inf where not visible.
inline void scores(const double* qkv, const Shape& s, int64_t b, int64_t h, int64_t q0, int64_t k0,
                   const Tiles& t, double scale, bool causal, std::vector<double>& S) {
  S.assign(t.br * t.bc, -std::numeric_limits<double>::infinity());
  for (int64_t r = 0; r < t.br; ++r)
    for (int64_t c = 0; c < t.bc; ++c) {
      const int64_t i = q0 + r, j = k0 + c;
      if (!visible(i, j, s.N, causal)) continue;
      const double *q = qkv + s.qkv(b, i, 0, h), *k = qkv + s.qkv(b, j, 1, h);
      double dot = 0;
      for (int64_t d = 0; d < s.Dh; ++d) dot += q[d] * k[d];
      S[r * t.bc + c] = scale * dot;
    }
}

/// The forward: one (query tile, head, image) at a time, as the kernel's blocks.
inline void forward(const double* qkv, const Shape& s, double scale, bool causal, double* out,
                    double* lse, const Tiles& t = {}) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> S, O, m, l;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t q0 = 0; q0 < s.N; q0 += t.br) {
        O.assign(t.br * s.Dh, 0.0);  // unnormalised output [Br, Dh]
        m.assign(t.br, -inf);        // running row max of S
        l.assign(t.br, 0.0);         // running row sum of exp(S - m)
        for (int64_t kt = 0; kt < key_tiles(q0, s, t, causal); ++kt) {
          const int64_t k0 = kt * t.bc;
          scores(qkv, s, b, h, q0, k0, t, scale, causal, S);
          for (int64_t r = 0; r < t.br; ++r) {
            double* srow = &S[r * t.bc];
            const double m_new = std::max(m[r], *std::max_element(srow, srow + t.bc));
            const double ref = m_new == -inf ? 0.0 : m_new;  // no visible key yet: P = 0
            double sum = 0;
            for (int64_t c = 0; c < t.bc; ++c) sum += srow[c] = std::exp(srow[c] - ref);  // P
            const double alpha = std::exp(m[r] - ref);
            l[r] = alpha * l[r] + sum;
            m[r] = m_new;
            // O = alpha O + P V
            for (int64_t d = 0; d < s.Dh; ++d) {
              double pv = 0;
              for (int64_t c = 0; c < t.bc && k0 + c < s.N; ++c)
                pv += srow[c] * qkv[s.qkv(b, k0 + c, 2, h) + d];
              O[r * s.Dh + d] = alpha * O[r * s.Dh + d] + pv;
            }
          }
        }
        for (int64_t r = 0; r < t.br && q0 + r < s.N; ++r) {
          for (int64_t d = 0; d < s.Dh; ++d) out[s.out(b, q0 + r, h) + d] = O[r * s.Dh + d] / l[r];
          lse[s.stat(b, h, q0 + r)] = m[r] + std::log(l[r]);
        }
      }
}

/// P = exp(S - lse) and dS = P (dO V^T - D) of a (query tile, key tile) pair, as both backward
/// kernels recompute them; 0 where not visible.
inline void recompute(const double* qkv, const double* dout, const double* lse, const double* D,
                      const Shape& s, int64_t b, int64_t h, int64_t q0, int64_t k0, const Tiles& t,
                      double scale, bool causal, std::vector<double>& P, std::vector<double>& dS) {
  scores(qkv, s, b, h, q0, k0, t, scale, causal, P);
  dS.assign(t.br * t.bc, 0.0);
  for (int64_t r = 0; r < t.br; ++r)
    for (int64_t c = 0; c < t.bc; ++c) {
      const int64_t i = q0 + r, j = k0 + c;
      double& p = P[r * t.bc + c];
      if (!visible(i, j, s.N, causal)) {
        p = 0;
        continue;
      }
      p = std::exp(p - lse[s.stat(b, h, i)]);
      const double *dy = dout + s.out(b, i, h), *v = qkv + s.qkv(b, j, 2, h);
      double dp = 0;
      for (int64_t d = 0; d < s.Dh; ++d) dp += dy[d] * v[d];
      dS[r * t.bc + c] = p * (dp - D[s.stat(b, h, i)]);
    }
}

/// The backward: D = rowsum(dout out); dK, dV per key tile over the query tiles; dQ per query
/// tile over the key tiles. Writes all of dqkv.
inline void backward(const double* qkv, const double* out, const double* dout, const double* lse,
                     const Shape& s, double scale, bool causal, double* dqkv, const Tiles& t = {}) {
  std::vector<double> D(s.B * s.H * s.N), P, dS, acc_k, acc_v, acc_q;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t h = 0; h < s.H; ++h) {
        double sum = 0;
        for (int64_t d = 0; d < s.Dh; ++d)
          sum += dout[s.out(b, n, h) + d] * out[s.out(b, n, h) + d];
        D[s.stat(b, h, n)] = sum;
      }
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      // dK, dV: one key tile at a time (the kernel's flash_dkdv_kernel blocks).
      for (int64_t k0 = 0; k0 < s.N; k0 += t.bc) {
        acc_k.assign(t.bc * s.Dh, 0.0);
        acc_v.assign(t.bc * s.Dh, 0.0);
        const int64_t first = causal ? k0 / t.br : 0;  // earlier queries see none of these keys
        for (int64_t q0 = first * t.br; q0 < s.N; q0 += t.br) {
          recompute(qkv, dout, lse, D.data(), s, b, h, q0, k0, t, scale, causal, P, dS);
          for (int64_t c = 0; c < t.bc; ++c)
            for (int64_t r = 0; r < t.br && q0 + r < s.N; ++r) {
              const double p = P[r * t.bc + c], ds = dS[r * t.bc + c];
              const double *dy = dout + s.out(b, q0 + r, h), *q = qkv + s.qkv(b, q0 + r, 0, h);
              for (int64_t d = 0; d < s.Dh; ++d) {
                acc_v[c * s.Dh + d] += p * dy[d];  // dV += P^T dO
                acc_k[c * s.Dh + d] += ds * q[d];  // dK += dS^T Q
              }
            }
        }
        for (int64_t c = 0; c < t.bc && k0 + c < s.N; ++c)
          for (int64_t d = 0; d < s.Dh; ++d) {
            dqkv[s.qkv(b, k0 + c, 1, h) + d] = scale * acc_k[c * s.Dh + d];
            dqkv[s.qkv(b, k0 + c, 2, h) + d] = acc_v[c * s.Dh + d];
          }
      }
      // dQ: one query tile at a time (flash_dq_kernel), over the key tiles the forward visited.
      for (int64_t q0 = 0; q0 < s.N; q0 += t.br) {
        acc_q.assign(t.br * s.Dh, 0.0);
        for (int64_t kt = 0; kt < key_tiles(q0, s, t, causal); ++kt) {
          const int64_t k0 = kt * t.bc;
          recompute(qkv, dout, lse, D.data(), s, b, h, q0, k0, t, scale, causal, P, dS);
          for (int64_t r = 0; r < t.br; ++r)
            for (int64_t c = 0; c < t.bc && k0 + c < s.N; ++c) {
              const double ds = dS[r * t.bc + c];
              const double* k = qkv + s.qkv(b, k0 + c, 1, h);
              for (int64_t d = 0; d < s.Dh; ++d) acc_q[r * s.Dh + d] += ds * k[d];  // dQ += dS K
            }
        }
        for (int64_t r = 0; r < t.br && q0 + r < s.N; ++r)
          for (int64_t d = 0; d < s.Dh; ++d)
            dqkv[s.qkv(b, q0 + r, 0, h) + d] = scale * acc_q[r * s.Dh + d];
      }
    }
}

}  // namespace vt_test::flash
