#pragma once
// Cluster: a hierarchy of levels, innermost first, as in PipeDream's optimizer (DESIGN.md).
// Worker w's position at level k is (w / prod(fan_out[0..k-1])) % fan_out[k]; two workers
// talk over the innermost level that contains both.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json_doc.h"
#include "core/units.h"

namespace pt::plan {

struct Level {
  std::string name;
  int fan_out = 1;             // units of the level below grouped at this level
  double bandwidth_gbps = 0;   // between units of the level below (1 Gbps = 1.25e8 B/s)
  double bandwidth_bytes_per_s() const { return bandwidth_gbps * kBytesPerSecPerGbps; }
};

struct Cluster {
  std::vector<Level> levels;             // innermost first
  int64_t memory_bytes_per_worker = 0;   // 0 = unlimited

  int workers() const;
  // Index of the innermost level that contains both workers (a != b).
  int level_between(int a, int b) const;
  double bandwidth_bytes_per_s(int a, int b) const;
  // Workers in one unit of level k's children (1 for k = 0): PipeDream's `w`.
  int workers_per_unit_below(int level) const;
  std::string describe() const;  // "4x4 (server 96 Gbps, network 10 Gbps)"

  static Cluster flat(int workers, double bandwidth_gbps, int64_t memory_bytes = 0);
};

inline constexpr int kClusterVersion = 1;
// The most workers a cluster or a plan may have: bounds every count read from a file before
// it sizes a vector or narrows to int.
inline constexpr int kMaxWorkers = 1000000;

json to_json(const Cluster& c);
Cluster cluster_from_json(const json& doc, const std::string& source);
Cluster read_cluster(const std::string& path);
// The CLI shorthand: --workers 4,4 --bandwidth-gbps 80,10 (innermost first).
Cluster cluster_from_shorthand(const std::string& workers, const std::string& bandwidth_gbps,
                               int64_t memory_bytes = 0);

// The cluster as every subcommand's flags give it: --cluster FILE, or the shorthand.
struct ClusterFlags {
  std::string file;            // --cluster FILE
  std::string workers;         // --workers 4 or 4,4
  std::string bandwidth_gbps;  // --bandwidth-gbps 1 or 80,10
};
// Throws UsageError naming the flags when neither form, both, or half the shorthand is given.
Cluster cluster_from_flags(const ClusterFlags& f);

}  // namespace pt::plan
