// The CPU's flash attention (backends/cpu/flash_attention.cpp) against the materialised paths, on
// ViT-like shapes (non-causal ops::attention, as nn::MultiheadSelfAttention runs it) and GPT-like
// ones (scaled_dot_product_attention with is_causal on the parts of one qkv tensor, as a GPT block
// runs it): forward and backward, float32, medians of `rounds` timed runs after two warm-ups, the
// two paths alternating round by round (so that a busy machine slows both alike):
//   g++ -O2 -std=c++20 -I. -Ibuild bench/flash_attention.cpp -o /tmp/fa -Lbuild -lvitrine -lfmt
//   LD_LIBRARY_PATH=build /tmp/fa [rounds] [threads] [N Dh causal B H]   (one shape of the
//   caller's)
// "materialised" is backends/cpu/attention.cpp (ops::attention) or sdpa's composition of matmul,
// softmax and matmul (causal); "flash" is flash_attention.cpp (cpu::FlashMode::On); the last
// column is what the library picks by itself (flash_wanted). On one thread the times are the
// thread's CPU time, on more the wall time. Each path is checked to be the one
// that ran (the output's graph node).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "backends/cpu/flash_attention.h"
#include "vitrine.h"

using namespace vitrine;

namespace {

struct Case {
  const char* name;
  int64_t B, N, H, Dh;
  bool causal;
};

/// Milliseconds of wall time, or on one thread of this thread's CPU time (which a busy machine's
/// other processes do not inflate: on one thread every kernel, OpenBLAS's too, runs on the caller).
double now_ms() {
  if (get_num_threads() == 1) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Whether the graph below out holds a node named name (a short walk: the op sits a few views
/// below the output).
bool has_node(const Tensor& out, std::string_view name) {
  std::vector<std::shared_ptr<Node>> todo{out.grad_fn()};
  for (int steps = 0; !todo.empty() && steps < 16; ++steps) {
    const std::shared_ptr<Node> n = todo.back();
    todo.pop_back();
    if (!n) continue;
    if (n->name == name) return true;
    for (const Edge& e : n->inputs) todo.push_back(e.node);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
    if (argc > 2) set_num_threads(std::atoi(argv[2]));
    std::vector<Case> cases = {
        {"ViT fmnist", 32, 50, 4, 32, false}, {"ViT cifar10", 32, 65, 3, 64, false},
        {"ViT-S/16", 4, 197, 6, 64, false},   {"T=64", 4, 64, 6, 64, false},
        {"T=256", 4, 256, 6, 64, false},      {"GPT T=64", 4, 64, 6, 64, true},
        {"GPT T=256", 4, 256, 6, 64, true},   {"GPT T=1024", 1, 1024, 6, 64, true},
    };
    if (argc > 3) {  // one shape of the caller's: N Dh causal [B H]
      const auto arg = [&](int i, int64_t d) { return argc > i ? std::atoll(argv[i]) : d; };
      cases = {{"custom", arg(6, 4), arg(3, 64), arg(7, 6), arg(4, 64), arg(5, 0) != 0}};
    }
    std::printf("%d threads, median of %d (ms of %s)\n", get_num_threads(), rounds,
                get_num_threads() == 1 ? "the thread's CPU time" : "wall time");
    std::printf("%-12s %-28s %-7s %21s %21s  %s\n", "", "shape", "", "materialised fwd  bwd",
                "flash fwd  bwd", "auto");
    for (const Case& c : cases) {
      Generator gen(1);
      const int64_t D = c.H * c.Dh;
      Tensor qkv = ops::randn({c.B, c.N, 3 * D}, gen).requires_grad_();
      const Tensor dy = ops::randn({c.B, c.N, D}, gen);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.Dh));
      const auto forward = [&] {
        if (!c.causal) return ops::attention(qkv, c.H, scale);
        const Tensor parts = qkv.reshape({c.B, c.N, 3, c.H, c.Dh}).permute({2, 0, 3, 1, 4});
        return ops::scaled_dot_product_attention(parts.select(0, 0), parts.select(0, 1),
                                                 parts.select(0, 2), Tensor(), 0, true)
            .transpose(1, 2)
            .reshape({c.B, c.N, D});
      };
      std::vector<double> t[2][2];  // [path][forward, backward]
      for (int r = 0; r < rounds + 2; ++r)
        for (int path = 0; path < 2; ++path) {
          const cpu::FlashModeGuard mode(path ? cpu::FlashMode::On : cpu::FlashMode::Off);
          qkv.set_grad(Tensor());
          double t0 = now_ms();
          Tensor out = forward();
          const double f = now_ms() - t0;
          VT_CHECK(has_node(out, "flash_attention") == (path == 1), "{}: the wrong path ran",
                   c.name);
          t0 = now_ms();
          out.backward(dy);
          const double b = now_ms() - t0;
          if (r >= 2) t[path][0].push_back(f), t[path][1].push_back(b);
        }
      for (auto& p : t)
        for (auto& v : p) std::sort(v.begin(), v.end());
      const auto med = [](const std::vector<double>& v) { return v[v.size() / 2]; };
      std::printf("%-12s B=%-3ld N=%-5ld H=%ld Dh=%-4ld %-7s %9.3f %9.3f   %9.3f %9.3f  %s\n",
                  c.name, static_cast<long>(c.B), static_cast<long>(c.N), static_cast<long>(c.H),
                  static_cast<long>(c.Dh), c.causal ? "causal" : "full", med(t[0][0]), med(t[0][1]),
                  med(t[1][0]), med(t[1][1]),
                  cpu::flash_wanted(c.N, c.Dh, c.causal) ? "flash" : "materialised");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
