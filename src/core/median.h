#pragma once
// The median of repeated measurements (the profiler's, calibrate's and the link fit's): of an
// even count, the mean of the middle two. Empty: 0.
#include <algorithm>
#include <vector>

namespace pt {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace pt
