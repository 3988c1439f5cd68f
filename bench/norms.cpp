// The fused rms_norm and group_norm (ops::fused_norms: Backend::rms_norm's row kernels; batch
// norm's statistics and one channel_affine pass for group_norm) against the compositions they
// replace, and layer_norm's fused kernels beside them for scale. Forward, and forward + backward
// (x and the affine parameters require grad; the backward from a fixed dy), float32, medians of
// `rounds` timed runs after two warm-ups, fused and composed alternating, at 1 and 2 threads:
//   g++ -O2 -std=c++20 -I. -Ibuild bench/norms.cpp -o /tmp/norms_bench -Lbuild -lvitrine -lfmt
//   LD_LIBRARY_PATH=build /tmp/norms_bench 21
// PyTorch 1.13's numbers for the same shapes: /usr/bin/python3 bench/norms_torch.py 21
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "vitrine.h"

using namespace vitrine;

namespace {

using bench::median;
using bench::ms_since;

struct Case {
  std::string name;
  std::vector<Tensor> leaves;  // x first, then the parameters
  std::function<Tensor(const std::vector<Tensor>&)> fn;
};

/// One timed run: the forward (no graph) or forward + backward from dy.
double run(const Case& c, const Tensor& dy, bool backward) {
  for (const Tensor& t : c.leaves) t.set_grad(Tensor());
  const auto t0 = std::chrono::steady_clock::now();
  if (backward) {
    Tensor y = c.fn(c.leaves);
    vitrine::backward({y}, {dy});
  } else {
    NoGradGuard no_grad;
    Tensor y = c.fn(c.leaves);
  }
  return ms_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 21;
    Generator gen(1);
    auto leaf = [&](const Dims& shape) { return ops::randn(shape, gen).requires_grad_(); };
    std::vector<Case> cases = {
        {"rms_norm [1024, 384]",
         {leaf({1024, 384}), leaf({384})},
         [](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {384}, in[1], 1e-6); }},
        {"rms_norm [256, 4096]",
         {leaf({256, 4096}), leaf({4096})},
         [](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], {4096}, in[1], 1e-6); }},
        {"group_norm [64, 64, 16, 16] G 32",
         {leaf({64, 64, 16, 16}), leaf({64}), leaf({64})},
         [](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 32, in[1], in[2]); }},
        {"group_norm [16, 128, 32, 32] G 32",
         {leaf({16, 128, 32, 32}), leaf({128}), leaf({128})},
         [](const std::vector<Tensor>& in) { return ops::group_norm(in[0], 32, in[1], in[2]); }},
        {"layer_norm [1024, 384]",
         {leaf({1024, 384}), leaf({384}), leaf({384})},
         [](const std::vector<Tensor>& in) {
           return ops::layer_norm(in[0], {384}, in[1], in[2], 1e-5);
         }},
    };
    std::printf("float32, median of %d (ms); composed = the ops the fused path replaces\n", rounds);
    std::printf("%-36s %3s %10s %10s %10s %10s %8s\n", "case", "thr", "fused fwd", "fused f+b",
                "comp fwd", "comp f+b", "f+b x");
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Case& c : cases) {
        const Tensor dy = ops::randn(c.leaves[0].shape(), gen);
        std::vector<double> t[2][2];  // [fused][backward]
        for (int i = 0; i < rounds + 2; ++i)
          for (int fused : {1, 0}) {
            ops::set_fused_norms(fused == 1);
            for (int b : {0, 1}) {
              const double ms = run(c, dy, b == 1);
              if (i >= 2) t[fused][b].push_back(ms);
            }
          }
        ops::set_fused_norms(true);
        const double ff = median(t[1][0]), fb = median(t[1][1]), cf = median(t[0][0]),
                     cb = median(t[0][1]);
        std::printf("%-36s %3d %10.3f %10.3f %10.3f %10.3f %8.2f\n", c.name.c_str(), threads, ff,
                    fb, cf, cb, cb / fb);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
