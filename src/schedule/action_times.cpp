#include <algorithm>

#include "schedule/generators.h"

namespace pt::schedule {

ActionTimes action_times_from_profile(const plan::Plan& plan, const profile::Profile& profile,
                                      const plan::Cluster& cluster, int microbatches) {
  const int stages = plan.num_stages();
  const double per = 1.0 / std::max(1, microbatches), host = cluster.action_ms();
  ActionTimes t;
  t.cluster = cluster;
  std::vector<int> stage_of(profile.num_layers(), 0);
  for (int st = 0; st < stages; ++st) {
    double forward = 0, backward = 0;
    for (int l : plan.stages[st].layers) {
      stage_of[l] = st;
      forward += profile::compute_forward_ms(profile, l, microbatches);
      backward += profile::compute_backward_ms(profile, l, microbatches);
    }
    // A recomputing stage runs its forward again before its B, as the simulator charges it.
    const double again = plan.stages[st].recompute ? forward : 0;
    t.forward_ms.push_back(forward * per + host);
    const double share = profile::input_gradient_share(profile, st, plan.stages[st].layers);
    t.input_grad_ms.push_back((again + backward * share) * per + host);
    t.weight_grad_ms.push_back(backward * per * (1 - share) + host);
  }
  for (double bytes : profile::cut_bytes(profile, stage_of, stages)) t.send_bytes.push_back(bytes * per);
  return t;
}

void weigh_by_profile(ScheduleOptions& options, const std::string& kind, const plan::Plan& plan,
                      const profile::Profile& profile, const plan::Cluster& cluster) {
  if (takes_activation_budget(kind)) options.activation_budget = activation_budget_from_profile(kind, plan, profile);
  if (takes_action_times(kind))
    options.action_times = action_times_from_profile(plan, profile, cluster, options.microbatches);
}

}  // namespace pt::schedule
