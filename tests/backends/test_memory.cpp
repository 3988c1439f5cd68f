// The CPU allocator's statistics (backends/memory_stats.h) and the float32 matmul precision
// setting (backends/matmul_precision.h).
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;

TEST_CASE("memory_stats: the CPU allocator counts blocks in use, the peak and the cache") {
  reset_peak_memory_stats(kCPU);
  const MemoryStats start = memory_stats(kCPU);
  CHECK(start.peak == start.current);
  {
    Tensor big = ops::zeros({1 << 20}, kFloat32);  // 4 MiB: a cached size class
    const MemoryStats during = memory_stats(kCPU);
    CHECK(during.current >= start.current + (4u << 20));
    CHECK(during.peak >= during.current);
  }
  const MemoryStats after = memory_stats(kCPU);
  CHECK(after.current == start.current);
  CHECK(after.peak >= start.current + (4u << 20));
  CHECK(after.cached >= (4u << 20));  // the freed block waits for reuse
  reset_peak_memory_stats(kCPU);
  CHECK(memory_stats(kCPU).peak == memory_stats(kCPU).current);
}

TEST_CASE("memory_stats: a block over 32 MiB goes back to the system when freed, not the cache") {
  const MemoryStats start = memory_stats(kCPU);
  {
    Tensor big = ops::zeros({10 << 20}, kFloat32);  // 40 MiB
    CHECK(memory_stats(kCPU).current >= start.current + (40u << 20));
    // its own mapping, aligned to 2 MiB (huge pages: backends/cpu/memory.cpp), zeroed by ops
    CHECK(reinterpret_cast<uintptr_t>(big.strided().data) % (size_t{2} << 20) == 0);
    CHECK(ops::sum(big).item<float>() == 0.0f);
    Tensor ones = ops::ones({10 << 20}, kFloat32);
    CHECK(ops::sum(ones).item<float>() == float(10 << 20));  // (exact: integers below 2^24)
  }
  const MemoryStats after = memory_stats(kCPU);
  CHECK(after.current == start.current);
  CHECK(after.cached == start.cached);
}

TEST_CASE("set_float32_matmul_precision: highest, high or medium, anything else an error") {
  CHECK(get_float32_matmul_precision() == "highest");
  CHECK(float32_matmul_precision() == MatmulPrecision::Highest);
  set_float32_matmul_precision("high");
  CHECK(float32_matmul_precision() == MatmulPrecision::High);
  set_float32_matmul_precision("medium");
  CHECK(get_float32_matmul_precision() == "medium");
  CHECK_ERROR_CONTAINS(set_float32_matmul_precision("low"), "'low'", "highest, high or medium");
  CHECK(float32_matmul_precision() == MatmulPrecision::Medium);  // unchanged by the bad call
  // The CPU computes in float32 whatever the setting.
  Tensor a = ops::tensor({1.0 + 1.0 / 1024, 1}), b = ops::tensor({1, 1});
  CHECK(ops::matmul(a, b).item() == 2.0 + 1.0 / 1024);
  set_float32_matmul_precision("highest");
  CHECK(float32_matmul_precision() == MatmulPrecision::Highest);
  // train.precision's and vitrine-bench --precision's names.
  CHECK(std::string(float32_matmul_precision_for("bf16")) == "medium");
  CHECK(std::string(float32_matmul_precision_for("tf32")) == "high");
  CHECK(std::string(float32_matmul_precision_for("fp32")) == "highest");
}
