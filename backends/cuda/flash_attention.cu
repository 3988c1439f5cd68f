// FlashAttention-2 (Dao, 2023) for multi-head self-attention: softmax(scale q k^T) v without the
// N x N probabilities in memory, forward and backward, on bfloat16 tensor cores (nvcuda::wmma
// 16x16x16 tiles, float32 accumulation). Plain C++ of the same tile loops, run against the
// materialised attention in float64, is tests/backends/flash_reference.h: read it first.
//
// Shapes (one image b and head h at a time; q, k, v read in place from the qkv projection):
//   qkv   [B, N, 3, H, Dh]  float32 or bfloat16; q = qkv[b, :, 0, h, :], k = [.., 1, ..], v = 2
//   out   [B, N, H, Dh]     qkv's dtype (the heads side by side, as the output projection reads)
//   lse   [B, H, N]         float32: lse[i] = log sum_j exp(S[i, j]), S = scale q k^T
//   dout, dqkv: the shapes of out and qkv. Dh: 32, 64 or 128 (a template parameter).
// float32 inputs are rounded to bfloat16 as a tile is loaded into shared memory (what matmul
// precision "medium" promises); every sum, the softmax and the accumulators are float32.
//
// Forward: one block of 4 warps per (query tile, head, image); warp w owns query rows 16w..16w+15.
//   shared:  Q [Br, Dh] bf16 (loaded once)    K, V [Bc, Dh] bf16 (one key tile at a time)
//            S [Br, Bc] float   P [Br, Bc] bf16   O [Br, Dh] float (the unnormalised output)
//   per row: m (running max of S), l (running sum of exp(S - m)), in registers
//   for each key tile j (causal: only tiles with a key <= the tile's last query):
//     S = scale Q K_j^T                                    (masked: -inf past N, or j > i)
//     m' = max(m, rowmax S),  P = exp(S - m'),  l = exp(m - m') l + rowsum P
//     O = exp(m - m') O + P V_j
//     m = m'
//   out = O / l,  lse = m + log l
// Backward (from lse, without softmax statistics recomputed):
//   1. flash_d_kernel:    D[i] = rowsum(dout[i] * out[i])             (one warp per row)
//   2. flash_dkdv_kernel: one block per (key tile, head, image); warp w owns key rows 16w.. of
//      dK, dV [Bc, Dh] (float accumulators in registers); for each query tile i:
//        P = exp(scale Q_i K^T - lse_i)   dP = dO_i V^T   dS = P (dP - D_i)    [Br, Bc]
//        dV += P^T dO_i     dK += scale dS^T Q_i
//   3. flash_dq_kernel:   one block per (query tile, head, image), the same P, dP, dS per key
//      tile, and dQ += scale dS K_j [Br, Dh] in registers.
//   dQ has a pass of its own (S and dP recomputed once more) rather than float atomics from the
//   key-tile blocks: every result is written by one block, in one order, so it is deterministic.
// Tiles past N are zero-filled and masked; rows and columns past N are never written.
// Sizes: Br = Bc = 64 rows, 4 warps of 32 threads; shared memory at Dh 128 is 110 KiB (forward),
// 120.5 KiB (dK dV) and 111.5 KiB (dQ), opted into above the default 48 KiB (sm_80 has 163 KiB,
// sm_90 227 KiB). Outputs are written (=), never accumulated into.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels.cuh"

// wmma on bfloat16 needs sm_80; the kernels trap on an older device (the backend does not launch
// them there: flash_attention_supported).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define VT_FLASH_TENSOR_CORES 1
#else
#define VT_FLASH_TENSOR_CORES 0
#endif

namespace vitrine::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kBr = 64;  // query rows of a tile
constexpr int kBc = 64;  // key rows of a tile
constexpr int kWarps = 4;
constexpr int kFlashThreads = kWarps * 32;
static_assert(kBr == kWarps * 16 && kBc == kWarps * 16, "a warp owns 16 rows of each tile");
// Row padding in elements: keeps wmma's rows 32-byte aligned and staggers shared-memory banks.
constexpr int kPadH = 8;           // bf16 rows
constexpr int kPadF = 4;           // float rows
constexpr int kLdS = kBc + kPadF;  // S, dP: [Br, Bc] float
constexpr int kLdP = kBc + kPadH;  // P, dS: [Br, Bc] bf16

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(bf16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline bf16 from_float<bf16>(float v) {
  return __float2bfloat16(v);  // round to nearest even, the CPU's conversion
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// dst[r][d] (bf16, row stride ld) = src[(row0 + r) stride + d] for row0 + r < N, else 0;
/// r < rows, d < Dh. All threads of the block take part.
template <int Dh, typename T>
__device__ void load_tile(bf16* dst, int ld, const T* src, int64_t stride, int row0, int rows,
                          int N) {
  for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e % Dh, n = row0 + r;
    dst[r * ld + d] = __float2bfloat16(n < N ? to_float(src[int64_t{n} * stride + d]) : 0.0f);
  }
}

/// vals[r] = src[row0 + r] for row0 + r < N, else `fill` (r < rows): a tile's lse or D.
__device__ void load_rows(float* vals, const float* src, int row0, int rows, int N, float fill) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    vals[r] = row0 + r < N ? src[row0 + r] : fill;
}

/// C [16, 16 n] (float, row stride ldc) = A [16, Dh] B^T with B [16 n, Dh]: a warp's strip of
/// S = Q K^T (or dP = dO V^T); A and B bf16 row-major with row stride lda, ldb.
template <int Dh, int n>
__device__ void strip_abt(const bf16* a, int lda, const bf16* b, int ldb, float* c, int ldc) {
  for (int j = 0; j < n; ++j) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < Dh / 16; ++k) {
      FragA fa;
      FragBT fb;  // B^T [Dh, 16] is column-major with stride ldb
      wmma::load_matrix_sync(fa, a + k * 16, lda);
      wmma::load_matrix_sync(fb, b + j * 16 * ldb + k * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + j * 16, acc, ldc, wmma::mem_row_major);
  }
}

/// Writes a warp's accumulator strip acc[c] ([16, 16] each, c < Dh / 16) times `mul` to rows
/// row0 .. row0 + 15 (those < N) of dst (row stride `stride`, T), through a [16, 16] float
/// staging area of the warp (row stride ld).
template <int Dh, typename T>
__device__ void store_strip(FragC (&acc)[Dh / 16], float mul, float* stage, int ld, T* dst,
                            int64_t stride, int row0, int N) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < Dh / 16; ++c) {
    wmma::store_matrix_sync(stage, acc[c], ld, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = e / 16, d = e % 16;
      if (row0 + r < N)
        dst[int64_t{row0 + r} * stride + c * 16 + d] = from_float<T>(mul * stage[r * ld + d]);
    }
    __syncwarp();
  }
}

/// Shared-memory bytes of each kernel at head dim Dh (every section a multiple of 128 bytes).
template <int Dh>
struct Smem {
  static constexpr int ldh = Dh + kPadH;  // bf16 tiles [rows, Dh]
  static constexpr int ldo = Dh + kPadF;  // float O [Br, Dh]
  static constexpr size_t tile = size_t{kBr} * ldh * sizeof(bf16);
  static constexpr size_t s = size_t{kBr} * kLdS * sizeof(float);
  static constexpr size_t p = size_t{kBr} * kLdP * sizeof(bf16);
  static constexpr size_t o = size_t{kBr} * ldo * sizeof(float);
  static constexpr size_t rows = size_t{kBr} * sizeof(float);
  // Q, K, V, S, P, O, alpha
  static constexpr size_t forward = 3 * tile + s + p + o + rows;
  // K, V, Q, dO, S, dP, P, dS, lse, D
  static constexpr size_t dkdv = 4 * tile + 2 * s + 2 * p + 2 * rows;
  // Q, dO, K, V, S, dP, dS, lse, D
  static constexpr size_t dq = 4 * tile + 2 * s + p + 2 * rows;
  static_assert(tile % 128 == 0 && s % 128 == 0 && p % 128 == 0 && o % 128 == 0);
};

// ---- forward ---------------------------------------------------------------------------------
// grid (ceil(N / Br), H, B), kFlashThreads threads.
template <typename T, int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(const T* qkv, T* out, float* lse, int N, int H, float scale, bool causal) {
#if VT_FLASH_TENSOR_CORES
  using L = Smem<Dh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kBr * L::ldh;
  bf16* vs = ks + kBc * L::ldh;
  float* ss = reinterpret_cast<float*>(vs + kBc * L::ldh);
  bf16* ps = reinterpret_cast<bf16*>(ss + kBr * kLdS);
  float* os = reinterpret_cast<float*>(ps + kBr * kLdP);
  float* alpha = os + kBr * L::ldo;

  const int q0 = blockIdx.x * kBr, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t{3} * H * Dh;  // qkv's row stride
  const T* q = qkv + int64_t{b} * N * row + int64_t{h} * Dh;
  const T* k = q + int64_t{H} * Dh;
  const T* v = q + int64_t{2} * H * Dh;

  load_tile<Dh>(qs, L::ldh, q, row, q0, kBr, N);
  for (int e = threadIdx.x; e < kBr * L::ldo; e += blockDim.x) os[e] = 0.0f;
  // Each lane holds m and l of the warp's 16 rows (the same values in every lane).
  float m[16], l[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) m[i] = -INFINITY, l[i] = 0.0f;

  const int last_query = min(q0 + kBr, N) - 1;
  const int tiles = causal ? last_query / kBc + 1 : (N + kBc - 1) / kBc;
  const int r0 = warp * 16;  // the warp's first row in the tile
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * kBc;
    __syncthreads();  // every warp is done with the previous K, V
    load_tile<Dh>(ks, L::ldh, k, row, k0, kBc, N);
    load_tile<Dh>(vs, L::ldh, v, row, k0, kBc, N);
    __syncthreads();
    // S [16, Bc] = Q_w K^T (unscaled)
    strip_abt<Dh, kBc / 16>(qs + r0 * L::ldh, L::ldh, ks, L::ldh, ss + r0 * kLdS, kLdS);
    __syncwarp();
    // The online softmax, one row at a time: lane c takes columns c, c + 32.
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int r = r0 + i, qi = q0 + r;
      float s[kBc / 32], tile_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < kBc / 32; ++u) {
        const int c = lane + 32 * u, kj = k0 + c;
        const bool keep = kj < N && !(causal && kj > qi);
        s[u] = keep ? scale * ss[r * kLdS + c] : -INFINITY;
        tile_max = fmaxf(tile_max, s[u]);
      }
      const float m_new = fmaxf(m[i], warp_max(tile_max));
      const float ref = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: all 0
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kBc / 32; ++u) {
        const float p = __expf(s[u] - ref);
        ps[r * kLdP + lane + 32 * u] = __float2bfloat16(p);  // for P V
        sum += p;  // l (and so lse) from the float32 P, as FlashAttention-2
      }
      const float a = __expf(m[i] - ref);  // exp(-inf) = 0 on the first tile
      l[i] = a * l[i] + warp_sum(sum);
      m[i] = m_new;
      if (lane == 0) alpha[r] = a;
    }
    __syncwarp();
    // O_w = alpha O_w + P_w V   [16, Dh]
    for (int i = 0; i < 16; ++i) {
      const float a = alpha[r0 + i];
      for (int d = lane; d < Dh; d += 32) os[(r0 + i) * L::ldo + d] *= a;
    }
    __syncwarp();
    for (int c = 0; c < Dh / 16; ++c) {
      FragC acc;
      wmma::load_matrix_sync(acc, os + r0 * L::ldo + c * 16, L::ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kBc / 16; ++kk) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, ps + r0 * kLdP + kk * 16, kLdP);
        wmma::load_matrix_sync(fb, vs + kk * 16 * L::ldh + c * 16, L::ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + r0 * L::ldo + c * 16, acc, L::ldo, wmma::mem_row_major);
    }
  }
  __syncwarp();
  // out = O / l, lse = m + log l  (rows < N)
  const int64_t out_row = int64_t{H} * Dh;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int qi = q0 + r0 + i;
    if (qi >= N) break;
    const float inv = 1.0f / l[i];
    T* o = out + (int64_t{b} * N + qi) * out_row + int64_t{h} * Dh;
    for (int d = lane; d < Dh; d += 32) o[d] = from_float<T>(os[(r0 + i) * L::ldo + d] * inv);
    if (lane == 0) lse[(int64_t{b} * H + h) * N + qi] = m[i] + logf(l[i]);
  }
#else
  __trap();
#endif
}

// ---- backward --------------------------------------------------------------------------------
/// D[(b H + h) N + n] = sum_d dout[b, n, h, d] out[b, n, h, d]: one warp per (b, n, h) row.
/// dout rounded to bfloat16 as the tiles of dP = dO V^T have it, so that D is rowsum(dP P) of
/// the same dO (dS = P (dP - D) is a difference of the two).
template <typename T>
__global__ void flash_d_kernel(const T* out, const T* dout, float* D, int64_t rows, int N, int H,
                               int Dh) {
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; r < rows; r += warps) {
    float sum = 0.0f;
    for (int d = lane; d < Dh; d += 32)
      sum += to_float(out[r * Dh + d]) *
             __bfloat162float(__float2bfloat16(to_float(dout[r * Dh + d])));
    sum = warp_sum(sum);
    const int64_t h = r % H, n = (r / H) % N, b = r / (int64_t{H} * N);
    if (lane == 0) D[(b * H + h) * N + n] = sum;
  }
}

/// The shared part of both backward kernels, for the warp's rows r0 .. r0 + 15 of a query tile
/// (q0) against a key tile (k0): S = Q K^T and dP = dO V^T into ss and dps, then
///   P = exp(scale S - lse) (0 where masked),  dS = P (dP - D)
/// into ps (bf16; when ps is not null) and dss (bf16).
template <int Dh>
__device__ void recompute_strip(const bf16* qs, const bf16* dos, const bf16* ks, const bf16* vs,
                                const float* lse_s, const float* d_s, float* ss, float* dps,
                                bf16* ps, bf16* dss, int r0, int q0, int k0, int N, float scale,
                                bool causal) {
  constexpr int ldh = Smem<Dh>::ldh;
  const int lane = threadIdx.x % 32;
  strip_abt<Dh, kBc / 16>(qs + r0 * ldh, ldh, ks, ldh, ss + r0 * kLdS, kLdS);
  strip_abt<Dh, kBc / 16>(dos + r0 * ldh, ldh, vs, ldh, dps + r0 * kLdS, kLdS);
  __syncwarp();
  for (int i = 0; i < 16; ++i) {
    const int r = r0 + i, qi = q0 + r;
    for (int c = lane; c < kBc; c += 32) {
      const int kj = k0 + c;
      const bool keep = qi < N && kj < N && !(causal && kj > qi);
      const float p = keep ? __expf(scale * ss[r * kLdS + c] - lse_s[r]) : 0.0f;
      if (ps) ps[r * kLdP + c] = __float2bfloat16(p);
      dss[r * kLdP + c] = __float2bfloat16(p * (dps[r * kLdS + c] - d_s[r]));
    }
  }
  __syncwarp();
}

// grid (ceil(N / Bc), H, B), kFlashThreads threads. Writes the k and v parts of dqkv.
template <typename T, int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dkdv_kernel(const T* qkv, const T* dout, const float* lse, const float* D, T* dqkv, int N,
                      int H, float scale, bool causal) {
#if VT_FLASH_TENSOR_CORES
  using L = Smem<Dh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + kBc * L::ldh;
  bf16* qs = vs + kBc * L::ldh;
  bf16* dos = qs + kBr * L::ldh;
  float* ss = reinterpret_cast<float*>(dos + kBr * L::ldh);
  float* dps = ss + kBr * kLdS;
  bf16* ps = reinterpret_cast<bf16*>(dps + kBr * kLdS);
  bf16* dss = ps + kBr * kLdP;
  float* lse_s = reinterpret_cast<float*>(dss + kBr * kLdP);
  float* d_s = lse_s + kBr;

  const int k0 = blockIdx.x * kBc, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int64_t row = int64_t{3} * H * Dh, out_row = int64_t{H} * Dh;
  const T* q = qkv + int64_t{b} * N * row + int64_t{h} * Dh;
  const T* k = q + int64_t{H} * Dh;
  const T* v = q + int64_t{2} * H * Dh;
  const T* dout_bh = dout + int64_t{b} * N * out_row + int64_t{h} * Dh;
  const float* lse_bh = lse + (int64_t{b} * H + h) * N;
  const float* d_bh = D + (int64_t{b} * H + h) * N;

  load_tile<Dh>(ks, L::ldh, k, row, k0, kBc, N);
  load_tile<Dh>(vs, L::ldh, v, row, k0, kBc, N);
  FragC dk[Dh / 16], dv[Dh / 16];  // the warp's key rows 16w.. of dK, dV [Bc, Dh]
#pragma unroll
  for (int c = 0; c < Dh / 16; ++c) {
    wmma::fill_fragment(dk[c], 0.0f);
    wmma::fill_fragment(dv[c], 0.0f);
  }
  const int r0 = warp * 16;
  // Causal: query tiles from the one holding query k0 (earlier queries see none of these keys).
  const int first = causal ? k0 / kBr : 0, tiles = (N + kBr - 1) / kBr;
  for (int t = first; t < tiles; ++t) {
    const int q0 = t * kBr;
    __syncthreads();  // every warp is done with the previous Q, dO, P, dS
    load_tile<Dh>(qs, L::ldh, q, row, q0, kBr, N);
    load_tile<Dh>(dos, L::ldh, dout_bh, out_row, q0, kBr, N);
    load_rows(lse_s, lse_bh, q0, kBr, N, 0.0f);
    load_rows(d_s, d_bh, q0, kBr, N, 0.0f);
    __syncthreads();
    recompute_strip<Dh>(qs, dos, ks, vs, lse_s, d_s, ss, dps, ps, dss, r0, q0, k0, N, scale,
                        causal);
    __syncthreads();  // dV and dK read every warp's rows of P and dS
    // dV_w += P^T dO,  dK_w += dS^T Q   ([16, Dh] each; P^T's rows are P's columns 16w..)
    for (int kk = 0; kk < kBr / 16; ++kk) {
      FragAT pt, dst;
      wmma::load_matrix_sync(pt, ps + kk * 16 * kLdP + r0, kLdP);
      wmma::load_matrix_sync(dst, dss + kk * 16 * kLdP + r0, kLdP);
#pragma unroll
      for (int c = 0; c < Dh / 16; ++c) {
        FragB fdo, fq;
        wmma::load_matrix_sync(fdo, dos + kk * 16 * L::ldh + c * 16, L::ldh);
        wmma::load_matrix_sync(fq, qs + kk * 16 * L::ldh + c * 16, L::ldh);
        wmma::mma_sync(dv[c], pt, fdo, dv[c]);
        wmma::mma_sync(dk[c], dst, fq, dk[c]);
      }
    }
  }
  // The warp's strip of ss is its own (only this warp wrote or read it): staging for the stores.
  T* dk_out = dqkv + int64_t{b} * N * row + int64_t{H} * Dh + int64_t{h} * Dh;
  T* dv_out = dk_out + int64_t{H} * Dh;
  __syncwarp();
  store_strip<Dh>(dk, scale, ss + r0 * kLdS, kLdS, dk_out, row, k0 + r0, N);
  store_strip<Dh>(dv, 1.0f, ss + r0 * kLdS, kLdS, dv_out, row, k0 + r0, N);
#else
  __trap();
#endif
}

// grid (ceil(N / Br), H, B), kFlashThreads threads. Writes the q part of dqkv.
template <typename T, int Dh>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dq_kernel(const T* qkv, const T* dout, const float* lse, const float* D, T* dqkv, int N,
                    int H, float scale, bool causal) {
#if VT_FLASH_TENSOR_CORES
  using L = Smem<Dh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + kBr * L::ldh;
  bf16* ks = dos + kBr * L::ldh;
  bf16* vs = ks + kBc * L::ldh;
  float* ss = reinterpret_cast<float*>(vs + kBc * L::ldh);
  float* dps = ss + kBr * kLdS;
  bf16* dss = reinterpret_cast<bf16*>(dps + kBr * kLdS);
  float* lse_s = reinterpret_cast<float*>(dss + kBr * kLdP);
  float* d_s = lse_s + kBr;

  const int q0 = blockIdx.x * kBr, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int64_t row = int64_t{3} * H * Dh, out_row = int64_t{H} * Dh;
  const T* q = qkv + int64_t{b} * N * row + int64_t{h} * Dh;
  const T* k = q + int64_t{H} * Dh;
  const T* v = q + int64_t{2} * H * Dh;
  const T* dout_bh = dout + int64_t{b} * N * out_row + int64_t{h} * Dh;

  load_tile<Dh>(qs, L::ldh, q, row, q0, kBr, N);
  load_tile<Dh>(dos, L::ldh, dout_bh, out_row, q0, kBr, N);
  load_rows(lse_s, lse + (int64_t{b} * H + h) * N, q0, kBr, N, 0.0f);
  load_rows(d_s, D + (int64_t{b} * H + h) * N, q0, kBr, N, 0.0f);
  FragC dq[Dh / 16];  // the warp's query rows 16w.. of dQ [Br, Dh]
#pragma unroll
  for (int c = 0; c < Dh / 16; ++c) wmma::fill_fragment(dq[c], 0.0f);
  const int r0 = warp * 16;
  const int last_query = min(q0 + kBr, N) - 1;
  const int tiles = causal ? last_query / kBc + 1 : (N + kBc - 1) / kBc;
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * kBc;
    __syncthreads();  // every warp is done with the previous K, V (and Q, dO, lse, D are loaded)
    load_tile<Dh>(ks, L::ldh, k, row, k0, kBc, N);
    load_tile<Dh>(vs, L::ldh, v, row, k0, kBc, N);
    __syncthreads();
    recompute_strip<Dh>(qs, dos, ks, vs, lse_s, d_s, ss, dps, nullptr, dss, r0, q0, k0, N, scale,
                        causal);
    // dQ_w += dS_w K   [16, Dh]   (dS_w: the warp's own rows)
    for (int kk = 0; kk < kBc / 16; ++kk) {
      FragA fds;
      wmma::load_matrix_sync(fds, dss + r0 * kLdP + kk * 16, kLdP);
#pragma unroll
      for (int c = 0; c < Dh / 16; ++c) {
        FragB fk;
        wmma::load_matrix_sync(fk, ks + kk * 16 * L::ldh + c * 16, L::ldh);
        wmma::mma_sync(dq[c], fds, fk, dq[c]);
      }
    }
  }
  __syncwarp();
  store_strip<Dh>(dq, scale, ss + r0 * kLdS, kLdS, dqkv + int64_t{b} * N * row + int64_t{h} * Dh,
                  row, q0 + r0, N);
#else
  __trap();
#endif
}

/// Opts a kernel into `bytes` of dynamic shared memory (above the default 48 KiB).
template <typename K>
cudaError_t allow_smem(K kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

template <typename T, int Dh>
cudaError_t forward_for(const void* qkv, void* out, float* lse, int64_t B, int64_t N, int64_t H,
                        float scale, bool causal, cudaStream_t stream) {
  auto kernel = flash_forward_kernel<T, Dh>;
  const size_t bytes = Smem<Dh>::forward;
  if (cudaError_t e = allow_smem(kernel, bytes); e != cudaSuccess) return e;
  const dim3 grid((N + kBr - 1) / kBr, H, B);
  kernel<<<grid, kFlashThreads, bytes, stream>>>(static_cast<const T*>(qkv), static_cast<T*>(out),
                                                 lse, static_cast<int>(N), static_cast<int>(H),
                                                 scale, causal);
  return cudaGetLastError();
}

template <typename T, int Dh>
cudaError_t backward_for(const void* qkv, const void* out, const void* dout, const float* lse,
                         float* D, void* dqkv, int64_t B, int64_t N, int64_t H, float scale,
                         bool causal, cudaStream_t stream) {
  const T* x = static_cast<const T*>(qkv);
  const T* dy = static_cast<const T*>(dout);
  T* dx = static_cast<T*>(dqkv);
  const int n = static_cast<int>(N), h = static_cast<int>(H);
  const int64_t rows = B * N * H;
  constexpr int kDThreads = 256;
  const int64_t blocks = std::min<int64_t>((rows + kDThreads / 32 - 1) / (kDThreads / 32), 65535);
  flash_d_kernel<T><<<static_cast<unsigned>(blocks), kDThreads, 0, stream>>>(
      static_cast<const T*>(out), dy, D, rows, n, h, Dh);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;

  auto dkdv = flash_dkdv_kernel<T, Dh>;
  if (cudaError_t e = allow_smem(dkdv, Smem<Dh>::dkdv); e != cudaSuccess) return e;
  const dim3 kgrid((N + kBc - 1) / kBc, H, B);
  dkdv<<<kgrid, kFlashThreads, Smem<Dh>::dkdv, stream>>>(x, dy, lse, D, dx, n, h, scale, causal);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;

  auto dq = flash_dq_kernel<T, Dh>;
  if (cudaError_t e = allow_smem(dq, Smem<Dh>::dq); e != cudaSuccess) return e;
  const dim3 qgrid((N + kBr - 1) / kBr, H, B);
  dq<<<qgrid, kFlashThreads, Smem<Dh>::dq, stream>>>(x, dy, lse, D, dx, n, h, scale, causal);
  return cudaGetLastError();
}

/// Calls f.template operator()<T, Dh>() for T float32 / bfloat16 and Dh 32 / 64 / 128;
/// cudaErrorInvalidValue for anything else.
template <typename F>
cudaError_t dispatch_flash(Dt dtype, int64_t Dh, F&& f) {
  auto by_dim = [&]<typename T>() -> cudaError_t {
    switch (Dh) {
      case 32:
        return f.template operator()<T, 32>();
      case 64:
        return f.template operator()<T, 64>();
      case 128:
        return f.template operator()<T, 128>();
      default:
        return cudaErrorInvalidValue;
    }
  };
  if (dtype == Dt::F32) return by_dim.template operator()<float>();
  if (dtype == Dt::BF16) return by_dim.template operator()<bf16>();
  return cudaErrorInvalidValue;
}

}  // namespace

bool flash_attention_supported(Dt dtype, int64_t B, int64_t N, int64_t H, int64_t Dh) {
  if ((dtype != Dt::F32 && dtype != Dt::BF16) || (Dh != 32 && Dh != 64 && Dh != 128)) return false;
  // The grid is (N / Br, H, B): at most 65535 heads and images.
  if (B < 1 || B > 65535 || N < 1 || N > INT32_MAX / 2 || H < 1 || H > 65535) return false;
  static const bool tensor_cores = [] {
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 8;
  }();
  return tensor_cores;
}

cudaError_t flash_attention(Dt dtype, const void* qkv, void* out, float* lse, int64_t B, int64_t N,
                            int64_t H, int64_t Dh, double scale, bool causal, cudaStream_t stream) {
  return dispatch_flash(dtype, Dh, [&]<typename T, int D>() {
    return forward_for<T, D>(qkv, out, lse, B, N, H, static_cast<float>(scale), causal, stream);
  });
}

cudaError_t flash_attention_backward(Dt dtype, const void* qkv, const void* out, const void* dout,
                                     const float* lse, float* D, void* dqkv, int64_t B, int64_t N,
                                     int64_t H, int64_t Dh, double scale, bool causal,
                                     cudaStream_t stream) {
  return dispatch_flash(dtype, Dh, [&]<typename T, int Dim>() {
    return backward_for<T, Dim>(qkv, out, dout, lse, D, dqkv, B, N, H, static_cast<float>(scale),
                                causal, stream);
  });
}

}  // namespace vitrine::cuda
