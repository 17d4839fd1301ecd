// The zero-bubble schedules' activation budget from a profile (generators.h): bytes per stage, and
// 1F1B's peak on the same workers as the reference a budget is a share of.
#include <algorithm>

#include "plan/planner.h"
#include "schedule/generators.h"

namespace pt::schedule {

ActivationBudget activation_budget_from_profile(const std::string& kind, const plan::Plan& plan,
                                                const profile::Profile& profile) {
  auto stash = [&](const std::vector<int>& layers) {
    double b = 0;
    for (int l : layers) b += static_cast<double>(profile::stash_bytes(profile, l));
    return b;
  };
  ActivationBudget out;
  for (const auto& st : plan.stages) out.stage_held.push_back(stash(st.layers));
  const bool v = is_v_schedule(kind);
  const int p = std::max(1, v ? plan.num_stages() / 2 : plan.num_stages());
  plan::Plan straight = plan::even_split(profile, std::min(p, profile.num_layers()));
  double one_f_one_b = 0;  // 1F1B's stage s stashes p - s microbatches at its peak
  for (int st = 0; st < straight.num_stages(); ++st)
    one_f_one_b = std::max(one_f_one_b, (p - st) * stash(straight.stages[st].layers));
  out.per_worker = v ? one_f_one_b * v_schedule_share(kind, p) : one_f_one_b;
  return out;
}

}  // namespace pt::schedule
