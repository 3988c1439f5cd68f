#include "backends/threads.h"

#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string_view>

#include "backends/cpu/thread_pool.h"
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

void parallel_items(int64_t n, const std::function<void(int64_t)>& f) {
  cpu::parallel_chunks(n, 1, [&](int64_t begin, int64_t end) {
    // OpenBLAS (its OpenMP build) asks the calling thread's omp_get_max_threads() how many threads
    // to start: outside an OpenMP region, as our pool's workers are, it would start a team of its
    // own inside each item (more threads than cores, and a product whose bits depend on the
    // thread count). One thread per item, as the kernels of our own loops already are.
    const int outer = omp_get_max_threads();
    omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{outer};
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    const long s = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (s > 0) return static_cast<int64_t>(s);
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index2/size");  // "1024K"
    int64_t v = 0;
    char unit = 0;
    if (in >> v >> unit && v > 0) return unit == 'M' ? v << 20 : unit == 'K' ? v << 10 : v;
    return int64_t{1} << 20;
  }();
  return bytes;
}

}  // namespace vitrine
