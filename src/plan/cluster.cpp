#include "plan/cluster.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

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
  int level = -1;
  for (int w : group)
    if (w != group.front()) level = std::max(level, level_between(group.front(), w));
  return level;
}

int Cluster::range_level(int lo, int hi) const { return lo == hi ? -1 : level_between(lo, hi); }

double Cluster::transfer_ms(int level, double bytes) const {
  return level < 0 ? 0 : bytes / levels[level].bandwidth_bytes_per_s() * 1e3;
}

double Cluster::ring_allreduce_ms(const std::vector<int>& group, double bytes) const {
  double n = static_cast<double>(group.size());
  return n < 2 ? 0 : transfer_ms(group_level(group), 2.0 * (n - 1) / n * bytes);
}

double Cluster::bandwidth_bytes_per_s(int a, int b) const {
  return levels[level_between(a, b)].bandwidth_bytes_per_s();
}

std::string Cluster::describe() const {
  std::ostringstream os;
  for (size_t k = 0; k < levels.size(); ++k) os << (k ? "x" : "") << levels[k].fan_out;
  os << " (";
  for (size_t k = 0; k < levels.size(); ++k)
    os << (k ? ", " : "") << levels[k].name << " " << levels[k].bandwidth_gbps << " Gbps";
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
    levels.push_back({{"name", l.name}, {"fan_out", l.fan_out}, {"bandwidth_gbps", l.bandwidth_gbps}});
  json doc = {{"format", format_tag("cluster", kClusterVersion)}, {"levels", levels}};
  if (c.memory_bytes_per_worker > 0) doc["memory_bytes_per_worker"] = c.memory_bytes_per_worker;
  return doc;
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
  Cluster c;
  JsonField levels = root["levels"];
  if (levels.size() == 0) levels.fail("must list at least one level");
  for (size_t i = 0; i < levels.size(); ++i) {
    JsonField f = levels[i];
    Level l;
    l.name = f.has("name") ? f["name"].as_string() : str("level", i);
    l.fan_out = static_cast<int>(f["fan_out"].as_int_in(1, kMaxWorkers));
    l.bandwidth_gbps = f["bandwidth_gbps"].as_number();
    if (l.bandwidth_gbps <= 0) f["bandwidth_gbps"].fail(str("must be > 0, got ", l.bandwidth_gbps));
    c.levels.push_back(l);
  }
  if (root.has("memory_bytes_per_worker"))
    c.memory_bytes_per_worker = root["memory_bytes_per_worker"].as_int_at_least(0);
  check_cluster(c, source);
  return c;
}

Cluster read_cluster(const std::string& path) { return cluster_from_json(read_json_file(path), path); }

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
    if (bw[k] <= 0) throw UsageError(str("--bandwidth-gbps: level ", k, " must be > 0, got ", bw[k]));
    std::string name = k + 1 == fan.size() ? "network" : (k < 3 ? names[k] : str("level", k));
    c.levels.push_back({name, static_cast<int>(fan[k]), bw[k]});
  }
  c.memory_bytes_per_worker = memory_bytes;
  check_cluster(c, "--workers");
  return c;
}

Cluster cluster_from_flags(const ClusterFlags& f) {
  bool shorthand = !f.workers.empty() || !f.bandwidth_gbps.empty();
  if (!f.file.empty() && shorthand)
    throw UsageError(str("--cluster '", f.file, "' and --workers/--bandwidth-gbps both describe the cluster; give one"));
  if (!f.file.empty()) return read_cluster(f.file);
  if (!shorthand) throw UsageError("no cluster: give --cluster FILE or --workers N[,N...] --bandwidth-gbps G[,G...]");
  if (f.workers.empty()) throw UsageError(str("--bandwidth-gbps '", f.bandwidth_gbps, "' needs --workers"));
  if (f.bandwidth_gbps.empty()) throw UsageError(str("--workers '", f.workers, "' needs --bandwidth-gbps"));
  return cluster_from_shorthand(f.workers, f.bandwidth_gbps);
}

}  // namespace pt::plan
