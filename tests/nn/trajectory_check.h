// Comparing optimizer trajectories with PyTorch's (test_optim.cpp, test_lbfgs.cpp): a relative
// and absolute tolerance per dtype, one CHECK per vector naming its worst element, and the
// largest errors seen, printed with VT_OPTIM_REPORT=1.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"

namespace vt_test {

struct Tolerance {
  double rtol, atol;
};
/// float64: 1e-10 relative (1e-12 absolute); float32: 1e-5 (1e-7)
inline Tolerance tolerance(vitrine::DType dtype) {
  return dtype == vitrine::kFloat64 ? Tolerance{1e-10, 1e-12} : Tolerance{1e-5, 1e-7};
}

/// The largest errors seen against PyTorch, for VT_OPTIM_REPORT.
struct Errors {
  double max_abs = 0, max_rel = 0, max_ratio = 0;  // ratio: error / tolerance
  void report(const std::string& what) const {
    if (std::getenv("VT_OPTIM_REPORT"))
      MESSAGE(what << ": max abs error " << max_abs << ", max rel error " << max_rel
                   << ", max error / tolerance " << max_ratio);
  }
};

/// Checks values against expected (|a - e| <= atol + rtol |e|), one CHECK for the worst element.
inline void check_values(const std::vector<double>& got, const std::vector<double>& expected,
                         Tolerance tol, Errors& err) {
  REQUIRE(got.size() == expected.size());
  double worst = 0;  // error / allowed
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - expected[i]);
    err.max_abs = std::max(err.max_abs, e);
    if (expected[i] != 0) err.max_rel = std::max(err.max_rel, e / std::fabs(expected[i]));
    const double ratio = e / (tol.atol + tol.rtol * std::fabs(expected[i]));
    if (!(ratio <= worst)) {
      worst = ratio;
      at = i;
    }
  }
  err.max_ratio = std::max(err.max_ratio, worst);
  CHECK_MESSAGE(worst <= 1, "element " << at << ": got " << got[at] << ", expected " << expected[at]
                                       << " (" << worst << " x the tolerance)");
}

}  // namespace vt_test
