// The zero-bubble schedules' activation budget from a profile (generators.h): bytes per stage, and
// 1F1B's peak on the same workers as the reference a budget is a share of.
#include <algorithm>
#include <cmath>

#include "core/error.h"
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

std::vector<double> v_worker_limits(const std::string& kind, const ActivationBudget& budget) {
  const int stages = static_cast<int>(budget.stage_held.size()), p = stages / 2;
  std::vector<double> limits;
  for (int w = 0; w < p; ++w) {
    double first = budget.stage_held[w], later = budget.stage_held[stages - 1 - w];
    // As many whole microbatches of its first chunk as if its later stashed alike, within the
    // papers' count: a raise never adds part of one.
    double firsts =
        std::floor(std::min(v_schedule_share(kind, p) * 2 * p - 1, (budget.per_worker - first) / first) + 1e-9);
    limits.push_back(std::max({budget.per_worker, first + later, later + firsts * first}));
  }
  return limits;
}

std::string activation_budget_note(const std::string& kind, const ActivationBudget& budget) {
  if (!is_v_schedule(kind) || budget.stage_held.empty() || budget.per_worker <= 0) return "";
  const int stages = static_cast<int>(budget.stage_held.size());
  std::vector<double> limits = v_worker_limits(kind, budget);
  std::vector<int> raised;
  for (int w = 0; w < static_cast<int>(limits.size()); ++w)
    if (limits[w] > budget.per_worker * (1 + 1e-9)) raised.push_back(w);
  if (raised.empty()) return "";
  // The worst of them, told in full: what the budget left it, and what it holds instead.
  int w = *std::max_element(raised.begin(), raised.end(), [&](int a, int b) { return limits[a] < limits[b]; });
  const int later = stages - 1 - w;
  auto fits = [&](double limit) {  // microbatches of its first chunk beside one of its later
    return std::max(1, static_cast<int>(std::floor((limit - budget.stage_held[later]) / budget.stage_held[w] + 1e-9)));
  };
  std::string who = str(raised.size() == 1 ? "worker " : "workers ");
  for (size_t i = 0; i < raised.size(); ++i) who += str(i ? ", " : "", raised[i]);
  auto times = [&](double x) { return str(std::round(x / budget.per_worker * 100) / 100); };
  const int room = fits(budget.per_worker);
  return str(kind, ": its budget (", kind == "zb-v" ? "1F1B's peak" : kind + "'s share of 1F1B's peak",
             " of stashed activations) leaves ", who, " less room to pipeline than chunks that stash alike: on worker ",
             w, " stage ", later, " stashes ", times(budget.stage_held[later]),
             "x the budget a microbatch, leaving room for ", room, room == 1 ? " microbatch" : " microbatches",
             " of stage ", w, " beside it. It may hold up to ", fits(limits[w]), " there instead (as many as if stage ",
             later, " stashed like stage ", w, ", within the paper's count), ", times(limits[w]),
             "x the budget; the memory figures count what it holds");
}

}  // namespace pt::schedule
