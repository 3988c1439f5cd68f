// What vitrine-bench measures, as functions the tool and the tests share: analytic FLOP counts of
// a ViT, the statistics of repeated timings, the machine's sgemm and FMA peaks, the own GEMM on a
// training step's products, and the process's memory.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/vit.h"
#include "nn/module.h"

namespace vitrine::bench {

/// Model FLOPs of one image's forward pass, counting 2 per multiply-add in the matmuls only
/// (the convention of the ViT and PaLM papers; elementwise work is not counted). With P patches,
/// N = P + prefix tokens, width D, attention inner width I (heads x head width: D unless
/// dim_head is set), MLP width M, K classes and C*p*p values per patch:
///   patch embedding 2 P (C p p) D
///   per block       2 N D 3I (qkv) + 2 N N I (scores) + 2 N N I (weighted sum)
///                   + 2 N I D (proj) + 2 N D M (fc1) + 2 N M D (fc2)
///   head            2 D K
double forward_flops(const models::ViTConfig& c);
/// A training step's FLOPs per image: forward plus backward, taken as 3 x forward (the backward
/// of a matmul is two matmuls of the same size).
inline double train_flops(const models::ViTConfig& c) { return 3 * forward_flops(c); }

/// The same count for any model, measured: one forward pass of a [1, C, H, W] input (no
/// gradients) with every Conv2d and Linear counting 2 per multiply-add of its product,
///   Conv2d  2 numel(y) (Cin / groups) kh kw,   Linear  2 numel(y) in_features,
/// and nothing else (so a ViT's attention products are missing: use the analytic count there).
double forward_flops(nn::Module& model, const Dims& input_shape);

/// Median, min and max of a sample (the median of an even count is the mean of the middle two).
struct Stats {
  double median = 0, min = 0, max = 0;
  std::vector<double> runs;
};
Stats stats_of(std::vector<double> values);
nlohmann::json to_json(const Stats& s, bool with_runs = true);

/// Calls f warmup times untimed, then `repeats` times `steps` calls, timed per repeat: the
/// seconds of each repeat. sync (when given) runs after the warm-up and at the end of each
/// repeat, inside its time: on a GPU it waits for the queued work, as torch.cuda.synchronize.
std::vector<double> time_repeats(const std::function<void()>& f, int64_t warmup, int64_t repeats,
                                 int64_t steps, const std::function<void()>& sync = {});

/// The best GFLOP/s of an n x n x n float32 matmul over a few calls: on the CPU one OpenBLAS
/// sgemm with the current threads, on a GPU one cuBLAS call at the current matmul precision.
double sgemm_peak_gflops(int64_t n = 2048, int reps = 5, const Device& device = kCPU);

/// The float32 FMA throughput of `threads` threads, in GFLOP/s: each runs 24 independent chains
/// of AVX-512 fused multiply-adds on registers (16 lanes x 2 flops per FMA), nothing loaded from
/// memory, the ceiling no matrix product can pass; the best of three runs of about 0.05 s. 0 on a
/// CPU without AVX-512.
double fma_peak_gflops(int threads);

/// One float32 product of a training step, C[M, N] = A[M, K] B[K, N]: A stored transposed when
/// a_trans (dy^T in dW = dy^T x), B when b_trans (a weight W [out, in] in x W^T).
struct Product {
  std::string name;
  int64_t M, N, K;
  bool a_trans, b_trans;
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * K; }
};
/// The products of one block's linear layers (qkv, proj, fc1, fc2) in a training step of ViT c
/// at this batch, rows = batch x tokens. For a layer with weight W [out, in]:
///   forward  x W^T   [rows, out] = [rows, in] [in, out]     (B transposed)
///   dx       dy W    [rows, in]  = [rows, out] [out, in]
///   dW       dy^T x  [out, in]   = [out, rows] [rows, in]   (A transposed)
std::vector<Product> block_products(const models::ViTConfig& c, int64_t batch);
/// The own GEMM's (cpu_own_sgemm, backends/gemm_info.h) best GFLOP/s on p, on the pool's threads:
/// the fastest of `repeats` timings of `steps` calls, after one untimed call. 0 when it does not
/// take the product (no AVX-512, VITRINE_GEMM=openblas, a shape or weight it is not made for).
double own_sgemm_gflops(const Product& p, int64_t repeats = 7, int64_t steps = 20);

/// The resident set now and its peak so far (getrusage), in MiB.
double current_rss_mb();
double peak_rss_mb();

}  // namespace vitrine::bench
