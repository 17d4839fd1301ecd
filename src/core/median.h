#pragma once
// The median of repeated measurements (the profiler's, calibrate's and the link fit's): of an
// even count, the mean of the middle two. Empty: 0. And what a profile keeps of its rounds
// (typical_mean) and how far they disagreed (round_spread).
#include <algorithm>
#include <vector>

namespace pt {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// How far repeated timings disagree: the 10th to the 90th percentile (nearest ranks: of N sorted,
// the ceil(N/10)-th and the ceil(9N/10)-th), over the median; from 10 rounds on one stall does
// not count, a busy spell does (of 9 or fewer the upper rank is the largest). Fewer than two, or
// a median of 0: 0.
inline double round_spread(std::vector<double> v) {
  const double mid = median(v);
  if (v.size() < 2 || mid <= 0) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return (v[(9 * n + 9) / 10 - 1] - v[(n + 9) / 10 - 1]) / mid;
}

// The mean of repeated timings, less those over twice their median: a run's rate follows its
// actions' mean time, and a timing that long was a stall (the thread descheduled, another
// process's burst), not the work's own spread. Empty: 0.
inline double typical_mean(const std::vector<double>& v) {
  const double limit = 2 * median(v);
  double sum = 0;
  int kept = 0;
  for (double x : v)
    if (x <= limit) sum += x, ++kept;
  return kept > 0 ? sum / kept : 0;
}

}  // namespace pt
