// The weight gradient of a convolution on the CPU, ConvAlgorithm::Auto (which takes the direct
// tiles of backends/cpu/conv_direct.cpp where they run) against Implicit (the implicit GEMM, the
// path before them), on ResNet-8's layers for Fashion-MNIST: the backward of a convolution whose
// weight alone wants a gradient, the two alternating run by run in one process, medians in ms.
// The record it made: bench/results/2026-11-28-direct-weight-grad/ (issue 47; it was dw_ab.cpp
// there).
//   g++ -O2 -std=c++20 -I. -Ibuild bench/conv_weight_grad.cpp -o /tmp/cwg -Lbuild -lvitrine -lfmt
//   LD_LIBRARY_PATH=build /tmp/cwg [repeats = 9] [threads = 2] [batch = 128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "backends/conv_algorithm.h"
#include "vitrine.h"

using namespace vitrine;
static double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e3;
}
static void run(int argc, char** argv) {
  set_num_threads(argc > 2 ? atoi(argv[2]) : 2);
  int reps = argc > 1 ? atoi(argv[1]) : 9;
  int B = argc > 3 ? atoi(argv[3]) : 128;
  struct S {
    int cin, cout, hw, k, s, p;
  } shapes[] = {{1, 16, 28, 3, 1, 1},  {16, 16, 28, 3, 1, 1}, {16, 32, 28, 3, 2, 1},
                {32, 32, 14, 3, 1, 1}, {32, 64, 14, 3, 2, 1}, {64, 64, 7, 3, 1, 1}};
  double ta = 0, tb = 0;
  for (auto sh : shapes) {
    Tensor x0 = ops::randn({B, sh.cin, sh.hw, sh.hw});
    Tensor w0 = ops::mul(ops::randn({sh.cout, sh.cin, sh.k, sh.k}), 0.1).detach();
    std::vector<double> a, b;
    for (int r = 0; r < 2 * reps; ++r) {
      Tensor x = x0.detach();
      Tensor w = w0.detach().requires_grad_();
      set_conv_algorithm(ConvAlgorithm::Auto);
      Tensor y = ops::conv2d(x, w, Tensor(), {sh.s, sh.s}, {sh.p, sh.p});
      Tensor dy = ops::ones_like(y);
      set_conv_algorithm(r % 2 ? ConvAlgorithm::Implicit : ConvAlgorithm::Auto);
      auto t2 = std::chrono::steady_clock::now();
      y.backward(dy);
      auto t3 = std::chrono::steady_clock::now();
      (r % 2 ? b : a).push_back(std::chrono::duration<double>(t3 - t2).count());
    }
    ta += med(a);
    tb += med(b);
    std::printf("%2d->%2d %2dx%2d k%d s%d: dW direct %6.2f  before %6.2f ms  (%.2fx)\n", sh.cin,
                sh.cout, sh.hw, sh.hw, sh.k, sh.s, med(a), med(b), med(b) / med(a));
  }
  std::printf("total direct %.2f before %.2f\n", ta, tb);
}

int main(int argc, char** argv) {
  try {
    run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
