#include "plan/link_fit.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/units.h"

namespace pt::plan {

double AlphaBeta::ms(double bytes) const {
  return latency_us * 1e-3 + bytes / (bandwidth_gbps * kBytesPerSecPerGbps) * 1e3;
}

namespace {

// Weighted least squares of t = a + c x, weights w; {a, c}.
std::pair<double, double> weighted_line(const std::vector<LinkPoint>& p, bool through_zero) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& q : p) {
    double w = 1 / (q.ms * q.ms);
    sw += w, sx += w * q.bytes, sy += w * q.ms, sxx += w * q.bytes * q.bytes, sxy += w * q.bytes * q.ms;
  }
  if (through_zero) return {0.0, sxy / sxx};
  double det = sw * sxx - sx * sx;
  return {(sy * sxx - sx * sxy) / det, (sw * sxy - sx * sy) / det};
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<LinkPoint>& points) {
  std::set<double> sizes;
  for (const auto& p : points) {
    if (!(p.ms > 0) || !std::isfinite(p.ms)) throw ConfigError(str("link fit: a time of ", p.ms, " ms for ", p.bytes, " bytes"));
    sizes.insert(p.bytes);
  }
  if (sizes.size() < 2) throw ConfigError("link fit: needs times for at least two message sizes");
  auto [a, c] = weighted_line(points, false);
  if (a < 0) std::tie(a, c) = weighted_line(points, true);
  AlphaBeta fit;
  fit.latency_us = a * 1e3;
  // c: ms per byte. Where the time does not grow with the bytes, no rate can be measured.
  fit.bandwidth_gbps = c > 0 ? std::min(kUnmeasurableGbps, 1e3 / c / kBytesPerSecPerGbps) : kUnmeasurableGbps;
  if (c <= 0) {  // the latency alone: the weighted mean time
    double sw = 0, sy = 0;
    for (const auto& q : points) sw += 1 / (q.ms * q.ms), sy += 1 / q.ms;
    fit.latency_us = sy / sw * 1e3;
  }
  for (const auto& p : points) fit.max_error = std::max(fit.max_error, std::abs(fit.ms(p.bytes) - p.ms) / p.ms);
  return fit;
}

Cluster calibrated_cluster(const Cluster& shape, const std::vector<LevelCalibration>& levels,
                           const std::vector<AllreduceCheck>& checks, const std::string& transport,
                           const std::string& when) {
  Cluster c = shape;
  json record = {{"when", when}, {"transport", transport}, {"levels", json::array()}, {"allreduce", json::array()}};
  for (size_t k = 0; k < c.levels.size(); ++k) {
    auto it = std::find_if(levels.begin(), levels.end(), [&](const LevelCalibration& l) { return l.level == static_cast<int>(k); });
    if (it == levels.end()) {
      if (c.levels[k].fan_out > 1) throw ConfigError(str("calibrate: level ", k, " (", c.levels[k].name, ") was not measured"));
      continue;
    }
    c.levels[k].bandwidth_gbps = it->fit.bandwidth_gbps;
    c.levels[k].latency_us = it->fit.latency_us;
    json points = json::array();
    for (const auto& p : it->points) points.push_back({p.bytes, p.ms});
    record["levels"].push_back({{"level", k},
                                {"name", c.levels[k].name},
                                {"workers", {it->a, it->b}},
                                {"latency_us", it->fit.latency_us},
                                {"bandwidth_gbps", it->fit.bandwidth_gbps},
                                {"max_error", it->fit.max_error},
                                {"points_bytes_ms", points}});
  }
  for (const auto& a : checks)
    record["allreduce"].push_back({{"group", a.group},
                                   {"bytes", a.bytes},
                                   {"measured_ms", a.measured_ms},
                                   {"modelled_ms", a.modelled_ms},
                                   {"error", a.modelled_ms / a.measured_ms - 1}});
  c.calibration = record;
  return c;
}

}  // namespace pt::plan
