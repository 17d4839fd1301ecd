#include "plan/link_fit.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/median.h"
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

namespace {
std::vector<std::tuple<std::vector<int>, double, double>> measured_allreduces(const std::vector<AllreduceCheck>& checks) {
  std::vector<std::tuple<std::vector<int>, double, double>> out;
  for (const auto& a : checks) out.emplace_back(a.group, a.bytes, a.measured_ms);
  return out;
}
}  // namespace

Cluster calibrated_cluster(const Cluster& shape, const std::vector<LevelCalibration>& levels,
                           const std::vector<AllreduceCheck>& checks, double action_us, const std::string& transport,
                           const std::string& when) {
  Cluster c = shape;
  c.ring_corrections.clear();  // the terms are fitted to the links alone
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
  c.correct_rings(measured_allreduces(checks), c);
  return c;
}

void correct_rings_as_measured(Cluster& c, const JsonField& record) {
  CalibrationRecord r = read_calibration_record(record, c);
  // Scaled for an emulation (bench/emulated_cluster.sh): checked, its levels' times no longer the
  // terms' (it had turned every check of the record off: a measured_ms of -1 passed).
  if (record.has("emulated")) {
    JsonField scales = record["emulated"];
    scales.only_fields({"time_scale", "byte_scale"});
    for (const char* f : {"time_scale", "byte_scale"})
      if (!(scales[f].as_number() > 0)) scales[f].fail(str("must be > 0, got ", scales[f].as_number()));
    return;
  }
  Cluster terms = c;
  terms.ring_corrections.clear();
  // Each term as written beside the measurements, within the limits of the cluster's own fields;
  // the record's points' fit where a hand-written record leaves it out.
  auto term = [](const JsonField& owner, const char* field, double fallback, double lo, double hi, const char* unit) {
    if (!owner.has(field)) return fallback;
    double v = owner[field].as_number();
    if (!(v >= lo && v <= hi)) owner[field].fail(str("must be in ", lo, "..", hi, " ", unit, ", got ", v));
    return v;
  };
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const LevelCalibration& l = r.levels[i];
    Level& level = terms.levels[l.level];
    level.latency_us = term(record["levels"][i], "latency_us", l.fit.latency_us, 0, 1e7, "microseconds");
    level.bandwidth_gbps = term(record["levels"][i], "bandwidth_gbps", l.fit.bandwidth_gbps, kMinBandwidthGbps,
                                kMaxBandwidthGbps, "Gbit/s");
  }
  terms.reduce_us_per_mib = term(record, "reduce_us_per_mib", terms.reduce_us_per_mib, 0, 1e7, "microseconds per MiB");
  terms.allreduce_step_us = term(record, "allreduce_step_us", terms.allreduce_step_us, 0, 1e7, "microseconds");
  c.correct_rings(measured_allreduces(r.checks), terms);
}

HostFit fit_allreduce_host(const Cluster& links, const std::vector<AllreduceCheck>& checks) {
  // Relative errors (each check's over its measured time), so that the 16 MiB all-reduce over
  // every worker (seconds on the testbed) cannot buy its last percent with terms that put the
  // 1 MiB one over a server 128% off (calibrate on VGG-16's 4x4 testbed did). At a host step h
  // the summing rate is a one-variable least squares (>= 0); h itself is searched, since a step
  // costs max(h, its message) (Cluster::ring_step_ms) and the errors are not linear in it.
  Cluster model = links;
  model.reduce_us_per_mib = 0;
  std::vector<double> reduced;  // bytes each member sums, over the measured time
  double longest = 0;
  for (const auto& a : checks) {
    double r = 0;
    for (const auto& phase : links.allreduce_phases(a.group, a.bytes)) r += phase.reduced_bytes;
    reduced.push_back(a.measured_ms > 0 ? r / a.measured_ms : 0);
    longest = std::max(longest, a.measured_ms);
  }
  struct Fit {
    double step_ms = 0, ms_per_byte = 0, squares = 0;
    std::vector<double> under;  // [check] -> how far under its measured time it is modelled (< 0: over)
  };
  // The least squares weighs only the checks the links alone model under what they took: the
  // terms are for those. A check the links already put over (a hand-over's latency charged to
  // every ring step of a small all-reduce) pulls a summing rate fitted over all of them to 0:
  // calibrate on 2 threads, 16 KiB 245% over, left 1 and 16 MiB modelled 94% and 99.6% under.
  std::vector<char> weighed(checks.size(), 1);
  auto fit_at = [&](double step_ms, bool summing) {
    Fit f{step_ms, 0, 0, {}};
    model.allreduce_step_us = step_ms * 1e3;
    std::vector<double> excess;
    for (const auto& a : checks)
      excess.push_back(a.measured_ms > 0 ? (a.measured_ms - model.allreduce_ms(a.group, a.bytes)) / a.measured_ms : 0);
    double re = 0, rr = 0;
    for (size_t i = 0; i < excess.size(); ++i)
      if (weighed[i]) re += reduced[i] * excess[i], rr += reduced[i] * reduced[i];
    if (summing && rr > 0) f.ms_per_byte = std::max(0.0, re / rr);
    for (size_t i = 0; i < excess.size(); ++i) {
      double e = excess[i] - f.ms_per_byte * reduced[i];
      f.under.push_back(e);
      if (weighed[i]) f.squares += e * e;
    }
    return f;
  };
  const Fit bare = fit_at(0, false);
  for (size_t i = 0; i < checks.size(); ++i) weighed[i] = bare.under[i] > 0;
  // h over 0, a log grid up to the longest check, and the steps' own message times (where a
  // check's cost bends), then refined between the best one's neighbours.
  std::vector<double> grid{0};
  for (double h = 1e-4; h < longest; h *= 1.05) grid.push_back(h);
  for (const auto& a : checks)
    for (const auto& phase : links.allreduce_phases(a.group, a.bytes))
      grid.push_back(links.transfer_ms(phase.level, phase.bytes / phase.steps));
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  size_t at = 0;
  Fit best = fit_at(0, true);
  for (size_t i = 1; i < grid.size(); ++i) {
    Fit f = fit_at(grid[i], true);
    if (f.squares < best.squares) best = f, at = i;
  }
  double lo = grid[at > 0 ? at - 1 : 0], hi = grid[std::min(at + 1, grid.size() - 1)];
  const double golden = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 100 && hi - lo > 1e-12 * std::max(1.0, hi); ++i) {
    double x1 = hi - golden * (hi - lo), x2 = lo + golden * (hi - lo);
    if (fit_at(x1, true).squares < fit_at(x2, true).squares) hi = x2;
    else lo = x1;
  }
  Fit refined = fit_at((lo + hi) / 2, true);
  if (refined.squares < best.squares) best = refined;
  // The host's terms only add time: they are for the checks the links alone model under what
  // they took. They stay where they bring the worst of those closer by more than they move any
  // check farther off: not where they buy the last percent of one check with another (the 4x4
  // testbed's 1 MiB over all 16, 15.8% over where the links alone were within a few percent).
  // A check the links alone already put over, which no term can help, is weighed by the factor
  // it is off rather than its error over its time: a small all-reduce's latency puts it 2-3.5x
  // over on threads, where the summing term's tens of microseconds add 100 points of error while
  // it brings the large ones in from 8x-280x under (refused for that, the 16 MiB all-reduce was
  // modelled 99% under what it took).
  auto off = [&](const Fit& f, size_t i) {
    double x = 1 - f.under[i];  // modelled over measured
    return bare.under[i] < 0 ? std::log(x) : std::abs(f.under[i]);
  };
  auto stays = [&](const Fit& f) {
    double worst_before = 0, worst_after = 0, farther = 0;
    for (size_t i = 0; i < checks.size(); ++i) {
      if (bare.under[i] > 0) worst_before = std::max(worst_before, bare.under[i]), worst_after = std::max(worst_after, std::abs(f.under[i]));
      farther = std::max(farther, off(f, i) - off(bare, i));
    }
    return farther <= 0 || farther < worst_before - worst_after;
  };
  // A host step fitted to the checks under may cost one over more than it gains; summing alone then.
  if (!stays(best)) best = stays(fit_at(0, true)) ? fit_at(0, true) : bare;
  return {best.ms_per_byte * (1 << 20) * 1e3, best.step_ms * 1e3};  // ms per byte -> us per MiB; ms -> us
}

CalibrationRecord read_calibration_record(const JsonField& record, const Cluster& shape) {
  CalibrationRecord out;
  static const json kNone = json::array();
  // What calibrate writes: a misspelt field ("latency" for latency_us) was ignored without a word.
  record.only_fields({"when", "transport", "levels", "allreduce", "reduce_us_per_mib", "allreduce_step_us", "action_us",
                      "refitted", "emulated"});
  // What is there is checked; what is not (a hand-written record of its transport alone) --refit
  // requires (refit_calibration).
  JsonField measured = record.has("levels") ? record["levels"] : JsonField(kNone, "", "");
  for (size_t i = 0; i < measured.size(); ++i) {
    JsonField l = measured[i];
    l.only_fields({"level", "name", "workers", "latency_us", "bandwidth_gbps", "max_error", "points_bytes_ms"});
    LevelCalibration lc;
    lc.level = static_cast<int>(l["level"].as_int_in(0, static_cast<int64_t>(shape.levels.size()) - 1));
    auto pair = l["workers"].as_int_list();
    if (pair.size() != 2) l["workers"].fail(str("must be two workers, got ", pair.size()));
    for (int64_t w : pair)
      if (w < 0 || w >= shape.workers())
        l["workers"].fail(str("names worker ", w, ", not among the cluster's ", shape.workers(), " workers"));
    if (pair[0] == pair[1]) l["workers"].fail(str("names worker ", pair[0], " twice (a link joins two workers)"));
    lc.a = static_cast<int>(pair[0]), lc.b = static_cast<int>(pair[1]);
    // A shape edited after calibrate (a level's fan_out) puts its measured pairs and all-reduces
    // on other links than the ones measured, and their corrections on other rings.
    if (int joined = shape.level_between(lc.a, lc.b); joined != lc.level)
      l["workers"].fail(str("names workers ", lc.a, " and ", lc.b, ", joined at level ", joined, " (",
                            shape.levels[joined].name, ") of this cluster, not at level ", lc.level,
                            ", where calibrate measured them: the levels' fan_out changed after; calibrate again"));
    JsonField points = l["points_bytes_ms"];
    for (size_t k = 0; k < points.size(); ++k) {
      if (points[k].size() != 2) points[k].fail("must be [bytes, ms], got " + brief(points[k].raw()));
      lc.points.push_back({static_cast<double>(points[k][0].as_int_in(1, kMostCalibratedBytes)),
                           points[k][1].as_non_negative()});
    }
    try {
      lc.fit = fit_alpha_beta(lc.points);
    } catch (const ConfigError& e) {
      points.fail(e.what());
    }
    out.levels.push_back(lc);
  }
  JsonField reduces = record.has("allreduce") ? record["allreduce"] : JsonField(kNone, "", "");
  for (size_t i = 0; i < reduces.size(); ++i) {
    JsonField a = reduces[i];
    a.only_fields({"group", "bytes", "measured_ms", "modelled_ms", "error"});
    AllreduceCheck c;
    c.group = read_allreduce_group(a["group"], shape.workers());
    c.bytes = static_cast<double>(a["bytes"].as_int_in(1, kMostCalibratedBytes));
    c.measured_ms = a["measured_ms"].as_non_negative();
    if (!(c.measured_ms > 0 && c.measured_ms <= kMostAllreduceMs))
      a["measured_ms"].fail(str("must be a time in (0, ", kMostAllreduceMs, "] ms (calibrate measures one in seconds), got ",
                                c.measured_ms));
    out.checks.push_back(c);
  }
  out.action_us = record.has("action_us") ? record["action_us"].as_non_negative() : 0;
  out.transport = record["transport"].as_string();
  if (out.transport != "threads" && out.transport != "gloo")
    record["transport"].fail(str("must be threads or gloo (what calibrate measured over), got '", out.transport, "'"));
  if (record.has("when")) out.when = record["when"].as_string();
  return out;
}

Cluster refit_calibration(const Cluster& calibrated, const std::string& source) {
  if (calibrated.calibration.is_null())
    throw FormatError(str(source, ": no field 'calibration': a typed cluster has nothing measured to fit again"));
  JsonField record(calibrated.calibration, source, "calibration");
  if (record.has("emulated"))
    record["emulated"].fail(
        "present: this cluster's levels were scaled for an emulation; refit the cluster calibrate wrote");
  for (const char* field : {"levels", "allreduce", "when"}) (void)record[field];  // the measurements, required here
  CalibrationRecord r = read_calibration_record(record, calibrated);
  // Each level of more than one worker is fitted again from its points: one the record lacks was
  // refused as "calibrate: level 1 (rack) was not measured", naming no file.
  for (size_t k = 0; k < calibrated.levels.size(); ++k)
    if (calibrated.levels[k].fan_out > 1 &&
        std::none_of(r.levels.begin(), r.levels.end(), [&](const LevelCalibration& l) { return l.level == static_cast<int>(k); }))
      record["levels"].fail(str("holds no measurements of level ", k, " (", calibrated.levels[k].name,
                                "), which joins ", calibrated.levels[k].fan_out, " below it: nothing to fit it from; ",
                                "calibrate the cluster again"));
  Cluster shape = calibrated;
  shape.reduce_us_per_mib = shape.allreduce_step_us = shape.action_us = 0;
  shape.calibration = nullptr;
  Cluster out = calibrated_cluster(shape, r.levels, r.checks, r.action_us, r.transport, r.when);
  out.calibration["refitted"] = true;
  return out;
}

std::vector<int> read_allreduce_group(const JsonField& group, int workers) {
  std::vector<int> out;
  for (int64_t w : group.as_int_list()) {
    if (w < 0 || w >= workers) group.fail(str("names worker ", w, ", not among the cluster's ", workers, " workers"));
    if (std::find(out.begin(), out.end(), static_cast<int>(w)) != out.end())
      group.fail(str("names worker ", w, " twice"));
    out.push_back(static_cast<int>(w));
  }
  if (out.size() < 2) group.fail(str("names ", out.size(), " worker", out.size() == 1 ? "" : "s", "; an all-reduce joins two or more"));
  return out;
}

}  // namespace pt::plan
