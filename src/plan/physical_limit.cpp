#include "plan/physical_limit.h"

#include <map>
#include <utility>

namespace pt::plan {

PhysicalLimit physical_limit(const Plan& plan, const PlanEstimate& exact, const profile::Profile& profile,
                             const Cluster& cluster) {
  PhysicalLimit limit;
  for (const auto& st : exact.stages) limit.compute_ms = std::max(limit.compute_ms, st.compute_ms);
  // Bytes per minibatch out of and into each (worker, level).
  std::map<std::pair<int, int>, std::pair<double, double>> bytes;
  for (const auto& l : exact.links) bytes[{l.worker, l.level}] = {l.egress_bytes, l.ingress_bytes};
  for (const auto& st : plan.stages) {
    if (st.replicas < 2) continue;
    double parameters = 0;
    for (int l : st.layers) parameters += static_cast<double>(profile.layers[l].parameter_bytes);
    // Every phase moves its bytes each way over each ring member's link of its level.
    for (const auto& phase : cluster.allreduce_phases(st.workers, parameters))
      for (const auto& ring : phase.rings)
        for (int w : ring) {
          auto& b = bytes[{w, phase.level}];
          b.first += phase.bytes / st.replicas, b.second += phase.bytes / st.replicas;
        }
  }
  for (const auto& [at, b] : bytes)
    limit.link_ms = std::max(limit.link_ms, cluster.transfer_ms(at.second, std::max(b.first, b.second)));
  return limit;
}

}  // namespace pt::plan
