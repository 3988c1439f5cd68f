#include "tools/bench/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "autograd/grad_mode.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "vitrine.h"  // the public API, with the own GEMM (gemm_info.h)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace vitrine::bench {

double forward_flops(const models::ViTConfig& c) {
  const double P = static_cast<double>(c.num_patches()), N = P + c.prefix_tokens();
  const double D = c.dim, M = c.mlp_dim, K = c.num_classes, I = c.inner_dim();
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
  const double block = 2 * N * D * 3 * I + 4 * N * N * I + 2 * N * I * D + 4 * N * D * M;
  f += c.depth * block;
  if (c.representation > 0) f += 2 * D * c.representation;
  f += 2 * (c.representation > 0 ? c.representation : D) * K;
  return f;
}

double forward_flops(nn::Module& model, const Dims& input_shape) {
  double flops = 0;
  std::vector<std::pair<nn::Module*, int64_t>> hooks;
  for (const auto& [name, m] : model.named_modules()) {
    (void)name;
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      const double per_output = static_cast<double>(conv->weight.numel() / conv->weight.size(0));
      hooks.emplace_back(m, m->register_forward_hook(
                                [&flops, per_output](nn::Module&, const Tensor&, const Tensor& y) {
                                  flops += 2 * per_output * static_cast<double>(y.numel());
                                  return Tensor();
                                }));
    } else if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
      const double in = static_cast<double>(lin->in_features);
      hooks.emplace_back(
          m, m->register_forward_hook([&flops, in](nn::Module&, const Tensor&, const Tensor& y) {
            flops += 2 * in * static_cast<double>(y.numel());
            return Tensor();
          }));
    }
  }
  const bool was_training = model.is_training();
  model.eval();
  {
    NoGradGuard no_grad;
    Generator gen(0);
    (void)model(ops::randn(input_shape, gen));
  }
  model.train(was_training);
  for (const auto& [m, handle] : hooks) m->remove_forward_hook(handle);
  return flops;
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

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
/// 24 chains of fused multiply-adds, iters x 24 FMAs on registers; returns their lanes' sum (so
/// that the loop is not optimised away).
__attribute__((target("avx512f"))) float fma_chains(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b0 = _mm512_set1_ps(1.0000001f), b1 = _mm512_set1_ps(0.9999999f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; i += 2) {
      acc[i] = _mm512_fmadd_ps(acc[i], b0, b1);
      acc[i + 1] = _mm512_fmadd_ps(acc[i + 1], b1, b0);
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}
#endif

}  // namespace

double fma_peak_gflops(int threads) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (!cpu_gemm_info().avx512 || threads < 1) return 0;
  constexpr int64_t kIters = 5'000'000;  // about 0.05 s at 2.5 GHz
  double best = 0;
  for (int r = 0; r < 3; ++r) {  // the best of three: a peak, not a moment of a busy host
    std::vector<float> sums(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&sums, t] { sums[t] = fma_chains(kIters); });
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, threads * static_cast<double>(kIters) * 24 * 32 / s / 1e9);
  }
  return best;
#else
  (void)threads;
  return 0;
#endif
}

std::vector<Product> block_products(const models::ViTConfig& c, int64_t batch) {
  const int64_t rows = batch * (c.num_patches() + c.prefix_tokens());
  struct Layer {
    const char* name;
    int64_t out, in;
  };
  const Layer layers[] = {{"qkv", 3 * c.inner_dim(), c.dim},
                          {"proj", c.dim, c.inner_dim()},
                          {"fc1", c.mlp_dim, c.dim},
                          {"fc2", c.dim, c.mlp_dim}};
  std::vector<Product> ps;
  for (const Layer& l : layers) {
    const std::string n = l.name;
    ps.push_back({n + " forward", rows, l.out, l.in, false, true});
    ps.push_back({n + " dx", rows, l.in, l.out, false, false});
    ps.push_back({n + " dW", l.out, l.in, rows, true, false});
  }
  return ps;
}

double own_sgemm_gflops(const Product& p, int64_t repeats, int64_t steps) {
  std::vector<float> a(static_cast<size_t>(p.M * p.K), 0.5f),
      b(static_cast<size_t>(p.K * p.N), 0.25f), c(static_cast<size_t>(p.M * p.N));
  const int64_t lda = p.a_trans ? p.M : p.K, ldb = p.b_trans ? p.K : p.N;
  bool taken = true;
  const auto call = [&] {
    taken = cpu_own_sgemm(p.M, p.N, p.K, a.data(), lda, p.a_trans, b.data(), ldb, p.b_trans,
                          c.data(), p.N);
  };
  call();
  if (!taken) return 0;
  const std::vector<double> s = time_repeats(call, 0, repeats, steps);
  return p.flops() * static_cast<double>(steps) / *std::min_element(s.begin(), s.end()) / 1e9;
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
