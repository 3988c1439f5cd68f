#include "backends/threads.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <string_view>

#include "backends/cpu/thread_wait.h"
#include "backends/error.h"

namespace vitrine {

void set_num_threads(int n) {
  VT_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got {}", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

std::string thread_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  if (vitrine_thread_wait_default_applied() != 0)
    return fmt::format("GOMP_SPINCOUNT={} (Vitrine's default)", cpu::kDefaultSpinCount);
  std::string words;
  if (policy != nullptr) words = fmt::format("OMP_WAIT_POLICY={}", policy);
  if (spins != nullptr)
    words += fmt::format("{}GOMP_SPINCOUNT={}", words.empty() ? "" : " ", spins);
  return words.empty() ? "libgomp's default" : words + " (set by the user)";
}

}  // namespace vitrine
