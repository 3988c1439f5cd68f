// The CUDA backend boundary: with a GPU, memory round-trips, fill and the allocator's statistics
// work and tensors on different devices meeting in one op are an error; without one (or in a
// CPU-only build) the error is clear. Skips visibly. The ops themselves: test_cuda_ops.cpp.
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
    skip(msg);
    CHECK((msg.find("no backend") != std::string::npos ||
           msg.find("no usable GPU") != std::string::npos));
    return;
  }
  CHECK(g.device() == gpu);
  check_close(g.to(kCPU), {1, 2, 3});
  Tensor z = ops::zeros({4}, kFloat32, gpu);
  check_close(z, {0, 0, 0, 0});
  check_close(ops::exp(g).to(kCPU), {std::exp(1.0), std::exp(2.0), std::exp(3.0)});
  CHECK_ERROR_CONTAINS(ops::add(x, g), "different devices", "cpu", "cuda");

  // The caching allocator: a freed block is reused, and the statistics count it.
  reset_peak_memory_stats(gpu);
  const size_t before = memory_stats(gpu).current;
  {
    Tensor big = ops::zeros({1 << 20}, kFloat32, gpu);
    CHECK(memory_stats(gpu).current >= before + (4u << 20));
  }
  MemoryStats m = memory_stats(gpu);
  CHECK(m.current == before);
  CHECK(m.peak >= before + (4u << 20));
  CHECK(m.cached >= (4u << 20));
}
