#include "tools/bench/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "ops/ops.h"

namespace vitrine::bench {

double forward_flops(const models::ViTConfig& c) {
  const double P = static_cast<double>(c.num_patches()), N = P + c.prefix_tokens();
  const double D = c.dim, M = c.mlp_dim, K = c.num_classes;
  const double patch_values = static_cast<double>(c.proj_channels()) * c.kernel() * c.kernel();
  double f = 2 * P * patch_values * D;
  // The convolutional stem: per stage, a 3x3 convolution onto its (strided) grid.
  const std::vector<int64_t> strides = c.stem_strides();
  int64_t in = c.channels, h = c.image_h, w = c.image_w;
  for (size_t i = 0; i < c.stem.size(); ++i) {
    h /= strides[i], w /= strides[i];
    f += 2.0 * static_cast<double>(h * w) * static_cast<double>(c.stem[i] * 9 * in);
    in = c.stem[i];
  }
  const double block = 2 * N * D * 3 * D + 4 * N * N * D + 2 * N * D * D + 4 * N * D * M;
  f += c.depth * block;
  if (c.representation > 0) f += 2 * D * c.representation;
  f += 2 * (c.representation > 0 ? c.representation : D) * K;
  return f;
}

Stats stats_of(std::vector<double> values) {
  Stats s;
  s.runs = values;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  s.min = values.front();
  s.max = values.back();
  return s;
}

nlohmann::json to_json(const Stats& s, bool with_runs) {
  nlohmann::json j = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
  if (with_runs) j["runs"] = s.runs;
  return j;
}

std::vector<double> time_repeats(const std::function<void()>& f, int64_t warmup, int64_t repeats,
                                 int64_t steps, const std::function<void()>& sync) {
  using clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < warmup; ++i) f();
  if (sync) sync();
  std::vector<double> seconds;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < steps; ++i) f();
    if (sync) sync();
    seconds.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  return seconds;
}

double sgemm_peak_gflops(int64_t n, int reps, const Device& device) {
  Tensor a = ops::full({n, n}, 0.5, kFloat32, device),
         b = ops::full({n, n}, 0.25, kFloat32, device);
  double best = 0;
  for (int r = 0; r < reps + (device.is_cpu() ? 0 : 1); ++r) {  // a GPU's first call warms up
    const auto t0 = std::chrono::steady_clock::now();
    Tensor c = ops::matmul(a, b);
    if (!device.is_cpu()) (void)c.select(0, 0).select(0, 0).item();  // waits for the GPU
    if (r == 0 && !device.is_cpu()) continue;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

double current_rss_mb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace vitrine::bench
