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

// Least squares of t = a + c x over the points; {a, c}.
std::pair<double, double> line(const std::vector<LinkPoint>& p) {
  double n = static_cast<double>(p.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& q : p) sx += q.bytes, sy += q.ms, sxx += q.bytes * q.bytes, sxy += q.bytes * q.ms;
  double det = n * sxx - sx * sx;
  return {(sy * sxx - sx * sxy) / det, (n * sxy - sx * sy) / det};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<LinkPoint>& unsorted) {
  std::vector<LinkPoint> points = unsorted;
  std::set<double> sizes;
  for (const auto& p : points) {
    if (!(p.ms > 0) || !std::isfinite(p.ms)) throw ConfigError(str("link fit: a time of ", p.ms, " ms for ", p.bytes, " bytes"));
    sizes.insert(p.bytes);
  }
  if (sizes.size() < 2) throw ConfigError("link fit: needs times for at least two message sizes");
  std::sort(points.begin(), points.end(), [](const LinkPoint& a, const LinkPoint& b) { return a.bytes < b.bytes; });
  // The rate from the large messages (within 256x of the largest; at least the two largest
  // sizes): a shaper's burst (tc tbf) or a cache lets small ones through faster than the rate
  // that large transfers, the ones a plan's time is made of, get.
  double largest = points.back().bytes;
  std::vector<LinkPoint> large;
  for (const auto& p : points)
    if (p.bytes * 256 >= largest) large.push_back(p);
  std::set<double> large_sizes;
  for (const auto& p : large) large_sizes.insert(p.bytes);
  if (large_sizes.size() < 2) {
    large.clear();
    for (const auto& p : points)
      if (p.bytes >= *std::next(sizes.rbegin())) large.push_back(p);
  }
  double c = line(large).second;  // ms per byte
  AlphaBeta fit;
  fit.bandwidth_gbps = c > 0 ? std::min(kUnmeasurableGbps, 1e3 / c / kBytesPerSecPerGbps) : kUnmeasurableGbps;
  double per_byte = 1e3 / (fit.bandwidth_gbps * kBytesPerSecPerGbps);
  // The latency from the small messages (the three smallest sizes): what their bytes at that
  // rate leave of their time.
  std::vector<double> rest;
  double third = *std::next(sizes.begin(), std::min<size_t>(2, sizes.size() - 1));
  for (const auto& p : points)
    if (p.bytes <= third) rest.push_back(p.ms - p.bytes * per_byte);
  fit.latency_us = std::max(0.0, median(rest)) * 1e3;
  for (const auto& p : points) fit.max_error = std::max(fit.max_error, std::abs(fit.ms(p.bytes) - p.ms) / p.ms);
  return fit;
}

Cluster calibrated_cluster(const Cluster& shape, const std::vector<LevelCalibration>& levels,
                           const std::vector<AllreduceCheck>& checks, double action_us, const std::string& transport,
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
  HostFit host = fit_allreduce_host(c, checks);
  c.reduce_us_per_mib = host.reduce_us_per_mib, c.allreduce_step_us = host.step_us;
  record["reduce_us_per_mib"] = c.reduce_us_per_mib;
  record["allreduce_step_us"] = c.allreduce_step_us;
  c.action_us = action_us;
  record["action_us"] = action_us;
  for (const auto& a : checks)
    record["allreduce"].push_back({{"group", a.group},
                                   {"bytes", a.bytes},
                                   {"measured_ms", a.measured_ms},
                                   {"modelled_ms", c.allreduce_ms(a.group, a.bytes)},
                                   {"error", c.allreduce_ms(a.group, a.bytes) / a.measured_ms - 1}});
  c.calibration = record;
  return c;
}

HostFit fit_allreduce_host(const Cluster& links, const std::vector<AllreduceCheck>& checks) {
  Cluster bare = links;
  bare.reduce_us_per_mib = bare.allreduce_step_us = 0;
  // excess_i = a x steps_i + b x reduced_i (ms per step, ms per byte), each row divided by its
  // measured time: least squares of the relative errors, so that the 16 MiB all-reduce over every
  // worker (seconds on the testbed) cannot buy its last percent with a term that puts the 1 MiB
  // one over a server 128% off (calibrate on VGG-16's 4x4 testbed did).
  std::vector<double> steps, reduced, excess;
  for (const auto& a : checks) {
    double n = 0, r = 0;
    for (const auto& phase : bare.allreduce_phases(a.group, a.bytes)) n += phase.steps, r += phase.reduced_bytes;
    double w = a.measured_ms > 0 ? 1 / a.measured_ms : 0;
    steps.push_back(n * w), reduced.push_back(r * w), excess.push_back((a.measured_ms - bare.allreduce_ms(a.group, a.bytes)) * w);
  }
  auto dot = [](const std::vector<double>& u, const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < u.size(); ++i) s += u[i] * v[i];
    return s;
  };
  auto squares = [&](double x, double y) {
    double r = 0;
    for (size_t i = 0; i < excess.size(); ++i) r += std::pow(excess[i] - x * steps[i] - y * reduced[i], 2);
    return r;
  };
  auto worst = [&](double x, double y) {
    double r = 0;
    for (size_t i = 0; i < excess.size(); ++i) r = std::max(r, std::abs(excess[i] - x * steps[i] - y * reduced[i]));
    return r;
  };
  // Least squares with both terms >= 0: the unconstrained optimum where it is feasible, else the
  // better of each term alone, else none.
  double ss = dot(steps, steps), rr = dot(reduced, reduced), sr = dot(steps, reduced);
  double se = dot(steps, excess), re = dot(reduced, excess);
  std::vector<std::pair<double, double>> tries{{0, 0}};
  if (ss > 0) tries.push_back({std::max(0.0, se / ss), 0});
  if (rr > 0) tries.push_back({0, std::max(0.0, re / rr)});
  double det = ss * rr - sr * sr;
  if (det > 1e-12 * ss * rr) {
    double a = (se * rr - re * sr) / det, b = (re * ss - se * sr) / det;
    if (a >= 0 && b >= 0) tries.push_back({a, b});
  }
  auto best = *std::min_element(tries.begin(), tries.end(), [&](const auto& p, const auto& q) {
    return squares(p.first, p.second) < squares(q.first, q.second);
  });
  // Terms that model the worst check worse than the links alone model nothing the host does.
  if (worst(best.first, best.second) > worst(0, 0)) best = {0, 0};
  return {best.second * (1 << 20) * 1e3, best.first * 1e3};  // ms per byte -> us per MiB; ms -> us
}

}  // namespace pt::plan
