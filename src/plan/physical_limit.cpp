#include "plan/physical_limit.h"

#include <map>
#include <utility>

namespace pt::plan {

PhysicalLimit physical_limit(const Plan& plan, const PlanEstimate& exact, const profile::Profile& profile,
                             const Cluster& cluster) {
  PhysicalLimit limit;
  for (const auto& st : exact.stages) limit.compute_ms = std::max(limit.compute_ms, st.compute_ms);
  // Microbatches may compute faster per sample than the whole minibatch the estimate takes.
  limit.compute_ms *= profile::microbatch_share_floor(profile);
  // Bytes and messages per minibatch out of and into each (worker, level).
  struct Use {
    double out = 0, in = 0, messages_out = 0, messages_in = 0;
  };
  std::map<std::pair<int, int>, Use> bytes;
  for (const auto& l : exact.links)
    bytes[{l.worker, l.level}] = {l.egress_bytes, l.ingress_bytes, l.egress_messages, l.ingress_messages};
  for (const auto& st : plan.stages) {
    if (st.replicas < 2) continue;
    auto parameters = static_cast<double>(profile::parameter_bytes(profile, st.layers));
    // Every phase moves its bytes each way over each ring member's link of its level, in at
    // least `steps` messages (one bucket; more buckets only add messages).
    for (const auto& phase : cluster.allreduce_phases(st.workers, parameters))
      for (const auto& ring : phase.rings)
        for (int w : ring) {
          Use& b = bytes[{w, phase.level}];
          b.out += phase.bytes / st.replicas, b.in += phase.bytes / st.replicas;
          b.messages_out += static_cast<double>(phase.steps) / st.replicas;
          b.messages_in += static_cast<double>(phase.steps) / st.replicas;
        }
  }
  for (const auto& [at, b] : bytes) {
    int level = at.second;
    double latency = cluster.latency_ms(level);
    limit.link_ms = std::max({limit.link_ms, cluster.transfer_ms(level, b.out) + b.messages_out * latency,
                              cluster.transfer_ms(level, b.in) + b.messages_in * latency});
  }
  return limit;
}

}  // namespace pt::plan
