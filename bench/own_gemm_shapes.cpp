// How close the own GEMM (backends/cpu/sgemm.h) comes to the machine's limit, product by product.
//
// Prints the float32 FMA peak of this CPU (a loop of 24 independent AVX-512 fused multiply-adds
// on registers, nothing loaded: what no GEMM can beat) at 1 and 2 threads, then own_sgemm's
// GFLOP/s on the products of an fmnist training step (128 images of 50 tokens, dim 128, MLP 256)
// at the pool's thread count: the forward and dx (A row-major) and the weight gradients (A
// transposed); first, one small product whose operands stay in cache, which runs on one thread.
// Best of 7 timings of 20 calls each.
//
// Build from the repository root against a Release build (not part of the CMake build):
//   g++ -O3 -std=c++20 -I. bench/own_gemm_shapes.cpp -Lbuild-rel -lvitrine
//       -Wl,-rpath,$PWD/build-rel -pthread -o /tmp/own_gemm_shapes     (one line)
//   OMP_NUM_THREADS=2 /tmp/own_gemm_shapes
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "backends/cpu/sgemm.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// 24 chains of fused multiply-adds on registers: the FMA units' throughput, nothing else.
__attribute__((target("avx512f"))) float fma_loop(long iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b0 = _mm512_set1_ps(1.0000001f), b1 = _mm512_set1_ps(0.9999999f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; i += 2) {
      acc[i] = _mm512_fmadd_ps(acc[i], b0, b1);
      acc[i + 1] = _mm512_fmadd_ps(acc[i + 1], b1, b0);
    }
  }
  alignas(64) float lanes[16];
  float s = 0;
  for (const __m512& a : acc) {
    _mm512_store_ps(lanes, a);
    for (float v : lanes) s += v;
  }
  return s;
}

double fma_peak(int threads) {
  const long iters = 20'000'000;
  std::vector<float> out(threads);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { out[t] = fma_loop(iters); });
  for (auto& th : pool) th.join();
  return threads * iters * 24.0 * 32.0 / seconds_since(t0) / 1e9;  // 16 lanes x 2 flops
}

/// own_sgemm on C[M, N] = A[M, K] B[K, N]; A transposed when a_trans, B when b_trans.
double product(long M, long N, long K, bool a_trans, bool b_trans) {
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N);
  const long lda = a_trans ? M : K, ldb = b_trans ? K : N;
  const auto call = [&] {
    return vitrine::cpu::own_sgemm(M, N, K, a.data(), lda, a_trans, b.data(), ldb, b_trans,
                                   c.data(), N, false);
  };
  if (!call()) return -1;  // declined (no AVX-512, VITRINE_GEMM=openblas, shape)
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) call();
    best = std::min(best, seconds_since(t0) / 20);
  }
  return 2.0 * M * N * K / best / 1e9;
}

}  // namespace

int main() {
  std::printf("FMA peak: %.1f GFLOP/s on 1 thread, %.1f on 2\n", fma_peak(1), fma_peak(2));
  struct Shape {
    const char* what;
    long M, N, K;
    bool a_trans, b_trans;
  };
  const Shape shapes[] = {
      // A and B in L1 and L2, one thread (under 2^20 multiply-adds): the micro-kernel with
      // nothing to wait for, to set against the FMA peak of one thread
      {"in cache     A B", 48, 64, 256, false, false},
      {"qkv forward  x W^T", 6400, 384, 128, false, true},
      {"fc1 forward  x W^T", 6400, 256, 128, false, true},
      {"fc2 dx       dy W", 6400, 128, 256, false, false},
      {"qkv dx       dy W", 6400, 128, 384, false, false},
      {"qkv dW       dy^T x", 384, 128, 6400, true, false},
      {"proj dW      dy^T x", 128, 128, 6400, true, false},
      {"fc2 dW       dy^T x", 128, 256, 6400, true, false},
  };
  for (const Shape& s : shapes)
    std::printf("%-20s M %5ld  N %4ld  K %5ld  %6.1f GFLOP/s\n", s.what, s.M, s.N, s.K,
                product(s.M, s.N, s.K, s.a_trans, s.b_trans));
}
