// The CPU's feature answers (backends/cpu/cpu_features.h) against the loader's own, the own GEMM
// as a tool reaches it through the public backends/gemm_info.h (cpu_own_sgemm, what vitrine-bench
// times), and env_switch.h's readers of the VITRINE_* variables.
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/sgemm.h"
#include "backends/env_switch.h"
#include "backends/gemm_info.h"
#include "test_util.h"

using namespace vitrine;

TEST_CASE("cpu features: AVX-512 and AVX2 + FMA as the loader sees them") {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  CHECK(cpu::cpu_has_avx512() == (__builtin_cpu_supports("avx512f") != 0));
  CHECK(cpu::cpu_has_avx2_fma() ==
        (__builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0));
  if (cpu::cpu_has_avx512()) CHECK(cpu::cpu_has_avx2_fma());  // every AVX-512 CPU has both
#else
  CHECK_FALSE(cpu::cpu_has_avx512());
  CHECK_FALSE(cpu::cpu_has_avx2_fma());
#endif
  CHECK(cpu_gemm_info().avx512 == cpu::cpu_has_avx512());
}

TEST_CASE("cpu_own_sgemm: the own GEMM through the public header, or false where it declines") {
  const int64_t M = 60, N = 40, K = 24;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(M * K), b(N * K);  // A [M, K] row-major, B stored as its transpose [N, K]
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  std::vector<float> c(M * N, 7.0f);
  const bool taken = cpu_own_sgemm(M, N, K, a.data(), K, false, b.data(), K, true, c.data(), N);
  CHECK(taken == (cpu::gemm_policy() != cpu::GemmPolicy::Off));
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(a[m * K + k]) * double(b[n * K + k]);
      worst = std::max(worst, std::abs((taken ? ref : 7.0) - c[m * N + n]));
    }
  CHECK(worst < 1e-5);  // the product, or C untouched
  // Fewer than 48 rows: not a shape it is made for, on any machine; C stays as it was.
  std::vector<float> small(4 * N, 3.0f);
  CHECK_FALSE(cpu_own_sgemm(4, N, K, a.data(), K, false, b.data(), K, true, small.data(), N));
  for (float v : small) CHECK(v == 3.0f);
}

TEST_CASE("env_value and env_switch_on: unset, empty, 0 and other values") {
  const char* name = "VITRINE_TEST_ENV_SWITCH_READER";
  unsetenv(name);
  CHECK(env_value(name).empty());
  CHECK(env_value(name, "auto") == "auto");
  CHECK(env_switch_on(name));
  setenv(name, "", 1);
  CHECK(env_value(name, "auto").empty());  // set but empty: as it is
  CHECK(env_switch_on(name));
  setenv(name, "0", 1);
  CHECK(env_value(name) == "0");
  CHECK_FALSE(env_switch_on(name));
  setenv(name, "own", 1);
  CHECK(env_value(name, "auto") == "own");
  CHECK(env_switch_on(name));
  unsetenv(name);
}
