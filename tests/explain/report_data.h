// Small synthetic report data for the explain report tests (tests/explain/test_report.cpp and
// the browser test): real PNGs of known pixels, names that need escaping.
#pragma once
#include "explain/report.h"

namespace vt_test {

/// Two images ("shoe <&> 1" with a head grid and notes, "bag" without), each with the original
/// and the overlays of three methods ("rollout", "chefer", "a<&>b"); attention distances of 3
/// layers x 4 heads; patch 4. The PNGs are 8 x 8 (the grid 8 x 17), each of one colour made from
/// its index, so that a decoded image can be matched to the one that went in.
vitrine::explain::ReportData sample_report();

/// The methods of sample_report, in order.
const std::vector<std::string>& sample_methods();

}  // namespace vt_test
