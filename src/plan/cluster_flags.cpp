// A cluster from train's, plan's and simulate's flags (cluster.h, ClusterFlags).
#include "plan/cluster.h"

#include "core/error.h"
#include "core/units.h"

namespace pt::plan {

Cluster cluster_from_flags(const ClusterFlags& f) {
  bool shorthand = !f.workers.empty() || !f.bandwidth_gbps.empty();
  if (!f.file.empty() && shorthand)
    throw UsageError(str("--cluster '", f.file, "' and --workers/--bandwidth-gbps both describe the cluster; give one"));
  if (f.file.empty() && !shorthand)
    throw UsageError("no cluster: give --cluster FILE or --workers N[,N...] --bandwidth-gbps G[,G...]");
  if (shorthand && f.workers.empty()) throw UsageError(str("--bandwidth-gbps '", f.bandwidth_gbps, "' needs --workers"));
  if (shorthand && f.bandwidth_gbps.empty()) throw UsageError(str("--workers '", f.workers, "' needs --bandwidth-gbps"));
  Cluster c = shorthand ? cluster_from_shorthand(f.workers, f.bandwidth_gbps) : read_cluster(f.file);
  if (!f.allreduce.empty()) c.allreduce = parse_allreduce(f.allreduce, "--allreduce");
  if (!f.latency_us.empty()) {
    auto us = parse_double_list(f.latency_us, "--latency-us");
    if (us.size() != c.levels.size())
      throw UsageError(str("--latency-us '", f.latency_us, "' has ", us.size(), " levels but the cluster has ",
                           c.levels.size()));
    for (size_t k = 0; k < us.size(); ++k) {
      if (!(us[k] >= 0 && us[k] <= 1e7))
        throw UsageError(str("--latency-us: level ", k, " must be in 0..1e7 microseconds, got ", us[k]));
      c.levels[k].latency_us = us[k];
    }
  }
  if (!f.action_us.empty()) {
    auto us = parse_double_list(f.action_us, "--action-us");
    if (us.size() != 1 || !(us[0] >= 0 && us[0] <= 1e7))
      throw UsageError(str("--action-us: must be one number in 0..1e7 microseconds, got '", f.action_us, "'"));
    c.action_us = us[0];
  }
  return c;
}

}  // namespace pt::plan
