// Which kernels run the CPU backend's matrix products, for benchmark reports: OpenBLAS picks
// its kernel set by CPU model when it is loaded (and falls back to old ones on a model newer than
// its table), and Vitrine's own float32 GEMM (backends/cpu/sgemm.h) takes the products it is
// made for.
#pragma once
#include <string>

namespace vitrine {

struct CpuGemmInfo {
  std::string openblas_core;  ///< openblas_get_corename(), e.g. "SkylakeX", "Haswell", "Prescott"
  bool openblas_current;      ///< that kernel set is made for this CPU's vector width
  std::string own_gemm;       ///< which float32 products the own GEMM takes, in words
};

CpuGemmInfo cpu_gemm_info();

}  // namespace vitrine
