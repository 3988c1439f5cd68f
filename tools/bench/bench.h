// What vitrine-bench measures, as functions the tool and the tests share: analytic FLOP counts of
// a ViT, the statistics of repeated timings, the machine's sgemm peak and the process's memory.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/vit.h"

namespace vitrine::bench {

/// Model FLOPs of one image's forward pass, counting 2 per multiply-add in the matmuls only
/// (the convention of the ViT and PaLM papers; elementwise work is not counted). With P patches,
/// N = P + prefix tokens, width D, MLP width M, K classes and C*p*p values per patch:
///   patch embedding 2 P (C p p) D
///   per block       2 N D 3D (qkv) + 2 N N D (scores) + 2 N N D (weighted sum)
///                   + 2 N D D (proj) + 2 N D M (fc1) + 2 N M D (fc2)
///   head            2 D K
double forward_flops(const models::ViTConfig& c);
/// A training step's FLOPs per image: forward plus backward, taken as 3 x forward (the backward
/// of a matmul is two matmuls of the same size).
inline double train_flops(const models::ViTConfig& c) { return 3 * forward_flops(c); }

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

/// The resident set now and its peak so far (getrusage), in MiB.
double current_rss_mb();
double peak_rss_mb();

}  // namespace vitrine::bench
