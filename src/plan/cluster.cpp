#include "plan/cluster.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/input_limits.h"
#include "core/units.h"
#include "plan/link_fit.h"

namespace pt::plan {

int Cluster::workers() const {
  int n = 1;
  for (const auto& l : levels) n *= l.fan_out;
  return n;
}

int Cluster::workers_per_unit_below(int level) const {
  int w = 1;
  for (int k = 0; k < level; ++k) w *= levels[k].fan_out;
  return w;
}

int Cluster::level_between(int a, int b) const {
  PT_CHECK(a != b && a >= 0 && b >= 0 && a < workers() && b < workers(), "workers ", a, ", ", b);
  for (int k = 0; k < static_cast<int>(levels.size()); ++k) {
    int unit = workers_per_unit_below(k + 1);
    if (a / unit == b / unit) return k;
  }
  PT_CHECK(false, "no level holds both workers");
  return -1;
}

int Cluster::group_level(const std::vector<int>& group) const {
  // Units are ranges of ids, so a unit holds the whole group when it holds the least and the
  // greatest member.
  if (group.empty()) return -1;
  auto [lo, hi] = std::minmax_element(group.begin(), group.end());
  return *lo == *hi ? -1 : level_between(*lo, *hi);
}

int Cluster::range_level(int lo, int hi) const { return lo == hi ? -1 : level_between(lo, hi); }

double Cluster::transfer_ms(int level, double bytes) const {
  return level < 0 ? 0 : bytes / levels[level].bandwidth_bytes_per_s() * 1e3;
}

double Cluster::message_ms(int level, double bytes) const { return latency_ms(level) + transfer_ms(level, bytes); }

namespace {
AllreducePhase ring_phase(int level, double n, double bytes) {
  return {level, 2.0 * (n - 1) / n * bytes, 2 * (static_cast<int>(n) - 1), (n - 1) / n * bytes, {}};
}
// The three phases of a hierarchical all-reduce of m units of k members, inside units at `inner`:
// each unit's ring, the k shard rings (member i of every unit), each unit's gather.
std::vector<AllreducePhase> hierarchical_phases(int inner, int level, double k, double m, double bytes,
                                                const std::vector<std::vector<int>>& units = {}) {
  std::vector<AllreducePhase> out = {ring_phase(inner, k, bytes), ring_phase(level, m, bytes / k),
                                     {inner, (k - 1) / k * bytes, static_cast<int>(k) - 1, 0, {}}};
  out[0].rings = out[2].rings = units;
  for (size_t i = 0; !units.empty() && i < units.front().size(); ++i) {
    out[1].rings.emplace_back();
    for (const auto& u : units) out[1].rings.back().push_back(u[i]);
  }
  return out;
}
// The phases' time at the links' rates and the host's summing, latency left out.
double phases_ms(const Cluster& c, const std::vector<AllreducePhase>& phases) {
  double ms = 0;
  for (const auto& p : phases) ms += c.transfer_ms(p.level, p.bytes) + c.reduce_ms(p.reduced_bytes);
  return ms;
}
int units_level(const Cluster& c, const std::vector<std::vector<int>>& units) {
  int inner = -1;
  for (const auto& u : units) inner = std::max(inner, c.group_level(u));
  return inner;
}
}  // namespace

std::vector<std::vector<int>> Cluster::allreduce_units(const std::vector<int>& unsorted) const {
  if (allreduce != Allreduce::kHierarchical || unsorted.size() < 4) return {};
  std::vector<int> group = unsorted;
  std::sort(group.begin(), group.end());
  int level = group_level(group);
  if (level < 1) return {};
  int per_unit = workers_per_unit_below(level);
  std::vector<std::vector<int>> units;
  for (int w : group) {
    if (units.empty() || units.back().front() / per_unit != w / per_unit) units.emplace_back();
    units.back().push_back(w);
  }
  for (const auto& u : units)
    if (u.size() != units.front().size() || u.size() < 2) return {};
  // Only where it is faster than the ring (with an inner level as slow as the outer, it is not).
  double k = static_cast<double>(units.front().size()), m = static_cast<double>(units.size());
  double hier = phases_ms(*this, hierarchical_phases(units_level(*this, units), level, k, m, 1.0));
  double ring = transfer_ms(level, ring_phase(level, static_cast<double>(group.size()), 1.0).bytes);
  return hier < ring ? units : std::vector<std::vector<int>>{};
}

std::vector<AllreducePhase> Cluster::allreduce_phases(const std::vector<int>& group, double bytes) const {
  if (group.size() < 2) return {};
  auto units = allreduce_units(group);
  if (units.empty()) {
    AllreducePhase ring = ring_phase(group_level(group), static_cast<double>(group.size()), bytes);
    ring.rings = {group};
    return {ring};
  }
  return hierarchical_phases(units_level(*this, units), group_level(group), static_cast<double>(units.front().size()),
                             static_cast<double>(units.size()), bytes, units);
}

double Cluster::ring_step_ms(const AllreducePhase& unit, double bytes) const {
  double share = bytes / unit.steps;
  double ms = latency_ms(unit.level) + std::max(allreduce_step_us * 1e-3, transfer_ms(unit.level, unit.bytes * share)) +
              reduce_ms(unit.reduced_bytes * share);
  return ring_corrections.empty() ? ms : ms * ring_correction(unit, bytes);
}

double Cluster::ring_correction(const AllreducePhase& unit, double bytes) const {
  if (unit.rings.size() > 1) return 1;
  for (const auto& r : ring_corrections) {
    if (r.level != unit.level || r.steps != unit.steps) continue;
    const auto& f = r.bytes_factor;
    if (bytes <= f.front().first) return f.front().second;
    if (bytes >= f.back().first) return f.back().second;
    size_t i = 1;
    while (f[i].first < bytes) ++i;
    double t = std::log(bytes / f[i - 1].first) / std::log(f[i].first / f[i - 1].first);
    return f[i - 1].second + t * (f[i].second - f[i - 1].second);
  }
  return 1;
}

void Cluster::correct_rings(const std::vector<std::tuple<std::vector<int>, double, double>>& measured,
                            const Cluster& terms) {
  PT_CHECK(terms.ring_corrections.empty() && terms.workers() == workers(), "terms of another shape or corrected");
  std::vector<RingCorrection> out;
  for (const auto& [group, bytes, ms] : measured) {
    auto phases = terms.allreduce_phases(group, 1.0);
    if (phases.size() != 1 || !(bytes > 0) || !(ms > 0)) continue;
    double factor = std::max(1.0, ms / terms.allreduce_ms(phases, bytes));
    auto it = std::find_if(out.begin(), out.end(), [&](const RingCorrection& r) {
      return r.level == phases[0].level && r.steps == phases[0].steps;
    });
    if (it == out.end()) it = out.insert(out.end(), RingCorrection{phases[0].level, phases[0].steps, {}});
    it->bytes_factor.emplace_back(bytes, factor);
  }
  for (auto& r : out) {
    std::sort(r.bytes_factor.begin(), r.bytes_factor.end());
    // One size measured twice: the later keeps its place, the earlier goes (interpolation needs distinct sizes).
    auto last = std::unique(r.bytes_factor.rbegin(), r.bytes_factor.rend(),
                            [](const auto& a, const auto& b) { return a.first == b.first; });
    r.bytes_factor.erase(r.bytes_factor.begin(), last.base());
  }
  ring_corrections = std::move(out);
}

double Cluster::allreduce_ms(const std::vector<AllreducePhase>& unit_phases, double bytes) const {
  double ms = 0;
  for (const auto& p : unit_phases) ms += p.steps * ring_step_ms(p, bytes);
  return ms;
}

double Cluster::allreduce_ms(const std::vector<int>& group, double bytes) const {
  return allreduce_ms(allreduce_phases(group, 1.0), bytes);
}

double Cluster::allreduce_ms_per_byte(const std::vector<int>& group) const {
  return phases_ms(*this, allreduce_phases(group, 1.0));
}

double Cluster::range_allreduce_ms(int lo, int hi, double bytes) const {
  if (allreduce == Allreduce::kRing) {  // without building the group: the search asks for every range
    if (hi <= lo) return 0;
    AllreducePhase ring = ring_phase(-1, hi - lo + 1, bytes);
    return transfer_ms(range_level(lo, hi), ring.bytes) + reduce_ms(ring.reduced_bytes);
  }
  std::vector<int> group(hi - lo + 1);
  std::iota(group.begin(), group.end(), lo);
  return phases_ms(*this, allreduce_phases(group, bytes));  // latency left out, as the ring's
}

double Cluster::bandwidth_bytes_per_s(int a, int b) const {
  return levels[level_between(a, b)].bandwidth_bytes_per_s();
}

std::string Cluster::describe() const {
  std::ostringstream os;
  for (size_t k = 0; k < levels.size(); ++k) os << (k ? "x" : "") << levels[k].fan_out;
  os << " (";
  for (size_t k = 0; k < levels.size(); ++k)
  {
    os << (k ? ", " : "") << levels[k].name << " " << levels[k].bandwidth_gbps << " Gbps";
    if (levels[k].latency_us > 0) os << " " << levels[k].latency_us << " us";
  }
  if (allreduce == Allreduce::kHierarchical) os << ", hierarchical all-reduce";
  if (action_us > 0) os << ", " << action_us << " us per action";
  if (host_cores > 0) os << ", the workers sharing one host's " << host_cores << " cores";
  os << ")";
  return os.str();
}

Cluster Cluster::flat(int workers, double bandwidth_gbps, int64_t memory_bytes) {
  Cluster c;
  c.levels.push_back({"network", workers, bandwidth_gbps});
  c.memory_bytes_per_worker = memory_bytes;
  return c;
}

json to_json(const Cluster& c) {
  json levels = json::array();
  for (const auto& l : c.levels)
  {
    json level = {{"name", l.name}, {"fan_out", l.fan_out}, {"bandwidth_gbps", l.bandwidth_gbps}};
    if (l.latency_us > 0) level["latency_us"] = l.latency_us;
    levels.push_back(level);
  }
  json doc = {{"format", format_tag("cluster", kClusterVersion)}, {"levels", levels}};
  if (c.memory_bytes_per_worker > 0) doc["memory_bytes_per_worker"] = c.memory_bytes_per_worker;
  if (c.allreduce != Cluster::Allreduce::kRing) doc["allreduce"] = allreduce_name(c.allreduce);
  if (c.reduce_us_per_mib > 0) doc["reduce_us_per_mib"] = c.reduce_us_per_mib;
  if (c.allreduce_step_us > 0) doc["allreduce_step_us"] = c.allreduce_step_us;
  if (c.action_us > 0) doc["action_us"] = c.action_us;
  if (c.process_bytes > 0) doc["process_bytes"] = c.process_bytes;
  if (!c.core_rates.empty()) doc["core_rates"] = c.core_rates;
  if (c.core_share < 1) doc["core_share"] = c.core_share;
  if (c.host_cores > 0) doc["host_cores"] = c.host_cores;
  if (!c.calibration.is_null()) doc["calibration"] = c.calibration;
  return doc;
}

std::string Cluster::calibrated_over() const {
  if (!calibration.is_object() || !calibration.contains("transport") || !calibration["transport"].is_string()) return "";
  return calibration["transport"].get<std::string>();
}

double Cluster::core_rate(int running, int cores) const {
  if (running <= 0) return 1;
  size_t n = static_cast<size_t>(running);
  // Rates measured on host_cores cores say nothing of another count (simulate --cores 4 on a
  // cluster calibrated on 2 ran as on 2).
  if (core_rates.empty() || (host_cores > 0 && cores != host_cores))
    return std::min(1.0, static_cast<double>(cores) / running);
  if (n <= core_rates.size()) return core_rates[n - 1];
  // Past the measured, the last rate shared out as time-slicing shares the cores: a list shorter
  // than the cores (a hand-edited [1] on 2) halved 2 workers' rate, where 2 cores run them whole.
  auto slicing = [cores](double k) { return cores > 0 ? std::min(1.0, cores / k) : 1.0 / k; };
  return core_rates.back() * slicing(running) / slicing(static_cast<double>(core_rates.size()));
}

namespace {
void check_cluster(const Cluster& c, const std::string& source) {
  double workers = 1;
  for (const auto& l : c.levels) workers *= l.fan_out;
  if (workers > kMaxWorkers)
    throw FormatError(str(source, ": ", workers, " workers is more than pipetrain supports (", kMaxWorkers, ")"));
}
}  // namespace

Cluster cluster_from_json(const json& doc, const std::string& source) {
  JsonField root(doc, source, "");
  expect_format(root, "cluster", kClusterVersion);
  root.only_fields({"format", "levels", "memory_bytes_per_worker", "allreduce", "reduce_us_per_mib", "allreduce_step_us",
                    "action_us", "process_bytes", "core_rates", "core_share", "host_cores", "calibration"});
  Cluster c;
  c.source = str("'", source, "'");
  JsonField levels = root["levels"];
  if (levels.size() == 0) levels.fail("must list at least one level");
  for (size_t i = 0; i < levels.size(); ++i) {
    JsonField f = levels[i];
    f.only_fields({"name", "fan_out", "bandwidth_gbps", "latency_us"});
    Level l;
    l.name = f.has("name") ? f["name"].as_string() : str("level", i);
    if (l.name.empty()) f["name"].fail("must name the level (a blank read \"2x2 ( 10 Gbps\"), or be left out");
    l.fan_out = static_cast<int>(f["fan_out"].as_int_in(1, kMaxWorkers));
    l.bandwidth_gbps = f["bandwidth_gbps"].as_number();
    if (!(l.bandwidth_gbps >= kMinBandwidthGbps && l.bandwidth_gbps <= kMaxBandwidthGbps))
      f["bandwidth_gbps"].fail(str("must be in ", kMinBandwidthGbps, "..", kMaxBandwidthGbps, " Gbit/s, got ", l.bandwidth_gbps));
    if (f.has("latency_us")) {
      l.latency_us = f["latency_us"].as_number();
      if (!(l.latency_us >= 0 && l.latency_us <= 1e7))
        f["latency_us"].fail(str("must be in 0..1e7 microseconds, got ", l.latency_us));
    }
    c.levels.push_back(l);
  }
  if (root.has("memory_bytes_per_worker"))
    c.memory_bytes_per_worker = root["memory_bytes_per_worker"].as_int_at_least(0);
  if (root.has("allreduce")) {
    JsonField f = root["allreduce"];
    std::string name = f.as_string();
    if (name != "ring" && name != "hierarchical") f.fail(str("must be \"ring\" or \"hierarchical\", got \"", name, "\""));
    c.allreduce = parse_allreduce(name, source);
  }
  // The host's terms: optional, 0 when absent.
  auto host_term = [&root](const char* field, const char* unit) {
    if (!root.has(field)) return 0.0;
    double v = root[field].as_number();
    if (!(v >= 0 && v <= 1e7)) root[field].fail(str("must be in 0..1e7 ", unit, ", got ", v));
    return v;
  };
  c.reduce_us_per_mib = host_term("reduce_us_per_mib", "microseconds per MiB");
  c.allreduce_step_us = host_term("allreduce_step_us", "microseconds");
  c.action_us = host_term("action_us", "microseconds");
  if (root.has("process_bytes")) c.process_bytes = root["process_bytes"].as_int_in(0, int64_t{1} << 50);
  if (root.has("core_rates")) {
    JsonField rates = root["core_rates"];
    if (rates.size() > static_cast<size_t>(kMaxWorkers)) rates.fail("lists more rates than workers");
    for (size_t k = 0; k < rates.size(); ++k) {
      // Each against one compute alone, which calibrate never measures beating: [1, 1.9] predicted two
      // computes on 2 cores faster than a core each, and a first rate of 0.5 one alone at half speed.
      double r = rates[k].as_number();
      if (k == 0 && r != 1) rates[k].fail(str("must be 1: the rate of one compute alone against itself, got ", r));
      // (A calibrate of 2026-11-29 wrote medians a little over 1, its noise: the message says what to do.)
      if (!(r > 0 && r <= 1))
        rates[k].fail(str("must be a rate in (0, 1] of one compute alone, got ", r,
                          r > 1 ? " (calibrate caps its medians at 1: calibrate again, or write 1)" : ""));
      c.core_rates.push_back(r);
    }
  }
  if (root.has("core_share")) {
    c.core_share = root["core_share"].as_number();
    if (!(c.core_share > 0 && c.core_share <= 1))
      root["core_share"].fail(str("must be a share in (0, 1] of one core alone, got ", c.core_share));
  }
  if (root.has("host_cores")) c.host_cores = static_cast<int>(root["host_cores"].as_int_in(0, kMaxWorkers));
  if (root.has("calibration")) {
    const json& record = doc["calibration"];
    if (!record.is_object()) root["calibration"].fail("must be an object (what `pipetrain calibrate` measured)");
    c.calibration = record;
  }
  check_cluster(c, source);
  if (root.has("calibration")) correct_rings_as_measured(c, root["calibration"]);
  return c;
}

Cluster read_cluster(const std::string& path) {
  return cluster_from_json(parse_json(read_input(path, InputKind::cluster), path), path);
}

Cluster cluster_from_shorthand(const std::string& workers, const std::string& bandwidth_gbps,
                               int64_t memory_bytes) {
  auto fan = parse_int_list(workers, "--workers");
  auto bw = parse_double_list(bandwidth_gbps, "--bandwidth-gbps");
  if (fan.size() != bw.size())
    throw UsageError(str("--workers '", workers, "' has ", fan.size(), " levels but --bandwidth-gbps '",
                         bandwidth_gbps, "' has ", bw.size()));
  static const char* names[] = {"server", "rack", "pod"};
  Cluster c;
  for (size_t k = 0; k < fan.size(); ++k) {
    if (fan[k] < 1 || fan[k] > 100000)
      throw UsageError(str("--workers: level ", k, " fan-out must be in 1..100000, got ", fan[k]));
    if (!(bw[k] >= kMinBandwidthGbps && bw[k] <= kMaxBandwidthGbps))
      throw UsageError(str("--bandwidth-gbps: level ", k, " must be in ", kMinBandwidthGbps, "..", kMaxBandwidthGbps,
                           " Gbit/s, got ", bw[k]));
    std::string name = k + 1 == fan.size() ? "network" : (k < 3 ? names[k] : str("level", k));
    c.levels.push_back({name, static_cast<int>(fan[k]), bw[k]});
  }
  c.memory_bytes_per_worker = memory_bytes;
  c.source = str("--workers '", workers, "'");
  double total = 1;
  for (const auto& l : c.levels) total *= l.fan_out;
  if (total > kMaxWorkers)  // a flag's error (exit 2), where check_cluster's is a file's
    throw UsageError(str("--workers: ", total, " workers is more than pipetrain supports (", kMaxWorkers, ")"));
  return c;
}

Cluster::Allreduce parse_allreduce(const std::string& name, const std::string& where) {
  if (name == "ring") return Cluster::Allreduce::kRing;
  if (name == "hierarchical") return Cluster::Allreduce::kHierarchical;
  throw UsageError(str(where, ": must be ring or hierarchical, got '", name, "'"));
}

const char* allreduce_name(Cluster::Allreduce a) { return a == Cluster::Allreduce::kHierarchical ? "hierarchical" : "ring"; }

}  // namespace pt::plan
