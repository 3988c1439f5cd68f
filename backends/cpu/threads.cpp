#include "backends/threads.h"

#include <cblas.h>
#include <omp.h>

#include "backends/error.h"

namespace vitrine {

void set_num_threads(int n) {
  VT_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got {}", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace vitrine
