// The CUDA backend boundary: with a GPU, memory round-trips and fill work and unimplemented
// kernels say so; without one (or in a CPU-only build) the error is clear. Skips visibly.
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

TEST_CASE("cuda: round trip and fill, or a clear error without a GPU") {
  Device gpu = Device::parse("cuda");
  Tensor x = ops::tensor({1, 2, 3});
  Tensor g;
  try {
    g = x.to(gpu);
  } catch (const Error& e) {
    std::string msg = e.what();
    MESSAGE("skipped: " << msg);
    CHECK((msg.find("no backend") != std::string::npos ||
           msg.find("no usable GPU") != std::string::npos));
    return;
  }
  CHECK(g.device() == gpu);
  check_close(g.to(kCPU), {1, 2, 3});
  Tensor z = ops::zeros({4}, kFloat32, gpu);
  check_close(z, {0, 0, 0, 0});
  CHECK_ERROR_CONTAINS(ops::exp(g), "cuda", "not implemented");
}
