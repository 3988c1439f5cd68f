// NCHW against NHWC for the CPU convolution (docs/performance.md, "Layout"): the product of a
// convolution in each orientation on Vitrine's own GEMM, one thread, one group of images as the
// batched path runs them (the implicit GEMM's chunk of 1024 columns at 56x56), alternating
// rounds, medians:
//   NCHW  Y [Cout, pixels] = W [Cout, K] cols [K, pixels]   (B, the activations, read in place)
//   NHWC  Y [pixels, Cout] = cols [pixels, K] W^T [K, Cout]   (B, the weight, packed)
// Build against a build folder and run on one thread:
//   g++ -O2 -std=c++20 -I. -Ibuild bench/conv_layout_gemm.cpp -o /tmp/g -Lbuild -lvitrine -lfmt
//   LD_LIBRARY_PATH=build OMP_NUM_THREADS=1 /tmp/g
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "backends/cpu/sgemm.h"
using namespace vitrine::cpu;
int main() {
  struct S {
    const char* name;
    int cout, K, P;
  } shapes[] = {{"ResNet-8 16->16 3x3 28x28 (group of 2)", 16, 144, 1568},
                {"ResNet-8 32->32 3x3 14x14 (group of 6)", 32, 288, 1176},
                {"ResNet-8 64->64 3x3 7x7 (group of 21)", 64, 576, 1029},
                {"ResNet-18 64->64 3x3 56x56 (1024 pixels)", 64, 576, 1024},
                {"ResNet-18 128->128 3x3 28x28 (2 images)", 128, 1152, 1568},
                {"ResNet-18 256->256 3x3 14x14 (6 images)", 256, 2304, 1176}};
  for (auto s : shapes) {
    std::vector<float> w(s.cout * s.K, 0.01f), cols(s.K * s.P, 0.5f), colsT(s.P * s.K, 0.5f),
        y(s.cout * s.P);
    std::vector<double> t[2];
    for (int r = 0; r < 40; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (r % 2 == 0)  // NCHW: M = Cout, N = pixels, B = cols read in place
        own_sgemm_in_chunk(s.cout, s.P, s.K, w.data(), s.K, false, cols.data(), s.P, false,
                           y.data(), s.P, false);
      else  // NHWC: M = pixels, N = Cout, B = W^T (the weight [Cout, K] as stored, packed)
        own_sgemm_in_chunk(s.P, s.cout, s.K, colsT.data(), s.K, false, w.data(), s.K, true,
                           y.data(), s.cout, false);
      t[r % 2].push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    for (auto& v : t) std::sort(v.begin(), v.end());
    const double f = 2.0 * s.cout * s.K * s.P;
    std::printf("%-42s NCHW %6.1f GFLOP/s  NHWC %6.1f GFLOP/s  (NHWC %.2fx)\n", s.name,
                f / t[0][10] / 1e9, f / t[1][10] / 1e9, t[0][10] / t[1][10]);
  }
}
