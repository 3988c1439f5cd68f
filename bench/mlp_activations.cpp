// ops::mlp (one op: the activation and its gradient in the products' epilogues) against the
// composition it replaces (linear, activation, linear, + residual: one op and one pass each), at
// a GPT block's MLP shapes: x [4 * 256, 384], hidden 1536, the block's residual added. Forward
// and backward (every input and parameter requires grad), float32, medians of `rounds` timed runs
// after two warm-ups (fused and plain alternating), for each activation (the tanh GELU is
// GPT-2's):
//   g++ -O2 -std=c++20 -I. -Ibuild bench/mlp_activations.cpp -o /tmp/mlp_act -Lbuild -lvitrine
//       -lfmt   (one line)
//   LD_LIBRARY_PATH=build /tmp/mlp_act 15
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/timing.h"
#include "vitrine.h"

using namespace vitrine;

using bench::median;
using bench::ms_since;

int main(int argc, char** argv) {
  try {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
    const int64_t M = 4 * 256, D = 384, H = 1536;
    std::printf("x [%lld, %lld], hidden %lld, %d threads, median of %d (ms)\n",
                static_cast<long long>(M), static_cast<long long>(D), static_cast<long long>(H),
                get_num_threads(), rounds);
    std::printf("%-10s %10s %10s %10s %10s %8s\n", "act", "fused fwd", "fused f+b", "plain fwd",
                "plain f+b", "f+b x");
    Generator gen(1);
    std::vector<Tensor> leaves = {ops::randn({M, D}, gen),    ops::randn({H, D}, gen) * 0.05,
                                  ops::randn({H}, gen) * 0.1, ops::randn({D, H}, gen) * 0.025,
                                  ops::randn({D}, gen) * 0.1, ops::randn({M, D}, gen)};
    for (Tensor& t : leaves) t.requires_grad_();
    const Tensor dy = ops::randn({M, D}, gen);
    for (Activation act :
         {Activation::GELUTanh, Activation::GELU, Activation::ReLU, Activation::SiLU}) {
      const std::shared_ptr<nn::Module> act_module = nn::activation_module(act);
      const auto fused = [&] {
        return ops::mlp(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], act, leaves[5]);
      };
      const auto plain = [&] {
        return ops::linear(act_module->forward(ops::linear(leaves[0], leaves[1], leaves[2])),
                           leaves[3], leaves[4]) +
               leaves[5];
      };
      // The two alternate round by round (and which goes first), so that a busy machine's
      // slow spells fall on both alike.
      const std::function<Tensor()> fns[2] = {fused, plain};
      std::vector<double> fwd[2], both[2];
      for (int r = 0; r < rounds + 2; ++r) {
        for (int j = 0; j < 2; ++j) {
          const int k = (r + j) % 2;
          for (Tensor& l : leaves) l.set_grad(Tensor());
          auto t0 = std::chrono::steady_clock::now();
          Tensor y;
          {
            NoGradGuard no_grad;
            y = fns[k]();
          }
          const double tf = ms_since(t0);
          t0 = std::chrono::steady_clock::now();
          y = fns[k]();
          y.backward(dy);
          const double tb = ms_since(t0);
          if (r >= 2) fwd[k].push_back(tf), both[k].push_back(tb);
        }
      }
      const double t[4] = {median(fwd[0]), median(both[0]), median(fwd[1]), median(both[1])};
      std::printf("%-10s %10.2f %10.2f %10.2f %10.2f %8.2f\n", nn::activation_name(act).c_str(),
                  t[0], t[1], t[2], t[3], t[3] / t[1]);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
