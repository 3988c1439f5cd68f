// The BLAS in use is OpenBLAS's OpenMP build (linked from its own directory with a runpath), whose
// thread count follows omp_set_num_threads as Vitrine's own loops do.
#include <cblas.h>

#include "test_util.h"

extern "C" char* openblas_get_config(void);
extern "C" int openblas_get_parallel(void);

TEST_CASE("openblas: the OpenMP build is the one in use") {
  std::string config = openblas_get_config();
  INFO("openblas_get_config(): " << config);
  CHECK(config.find("USE_OPENMP") != std::string::npos);
  CHECK(openblas_get_parallel() == 2);  // 0: sequential, 1: pthreads, 2: OpenMP
}
