// What the single-file benchmark programs under bench/ share: a stopwatch and the median.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

/// Milliseconds since t0.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The median of v (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
