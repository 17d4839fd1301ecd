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
  // The cost engine's network rules (DESIGN.md, "One cost model"): every worker has, per level,
  // a full-duplex link of that level's bandwidth; a group talks over the innermost level
  // holding all of it. -1 for fewer than two distinct workers (no link used).
  int group_level(const std::vector<int>& group) const;
  int range_level(int lo, int hi) const;  // the group lo..hi (units are ranges of ids)
  // Time of `bytes` over one link of `level` (0 for level -1).
  double transfer_ms(int level, double bytes) const;
  // Ring all-reduce of `bytes` among `group`: 2 (n - 1) / n x bytes over one link of the
  // group's level each way (0 for one worker).
  double ring_allreduce_ms(const std::vector<int>& group, double bytes) const;
  // The runtime's gradient all-reduce bucket unless told otherwise (train --bucket-mb): PyTorch
  // DDP's 25 MiB. Each bucket is reduced during the backward once its gradients are final.
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;
  double bandwidth_bytes_per_s(int a, int b) const;
  // Workers in one unit of level k's children (1 for k = 0): PipeDream's `w`.
  int workers_per_unit_below(int level) const;
  std::string describe() const;  // "4x4 (server 96 Gbps, network 10 Gbps)"

  static Cluster flat(int workers, double bandwidth_gbps, int64_t memory_bytes = 0);
};

// Round-robin replication (1F1B-RR, as PipeDream runs it): minibatch k runs on replica
// k % replicas of every stage, so replica a of a stage with m replicas sends to replica b of
// the next stage with n replicas in the minibatches k = a (mod m), k = b (mod n).
inline int replica_for(int64_t minibatch, int replicas) { return static_cast<int>(minibatch % replicas); }

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
