// Uses the public API through the umbrella header: d/dx sum(x^2) at x = [1, 2, 3] is [2, 4, 6].
#include <vitrine.h>

#include <cstdio>

int main() {
  namespace vt = vitrine;
  vt::Tensor x = vt::ops::tensor({1, 2, 3});
  x.requires_grad_();
  vt::ops::sum(x * x).backward();
  auto g = x.grad().to_vector<float>();
  std::printf("grad %g %g %g\n", g[0], g[1], g[2]);
  return g[0] == 2 && g[1] == 4 && g[2] == 6 ? 0 : 1;
}
