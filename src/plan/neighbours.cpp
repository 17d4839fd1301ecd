// The plans near a plan (neighbour_plans, the referee's local search) and the smaller
// clusters a plan may leave workers of idle (smaller_clusters), planner.h.
#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "plan/planner.h"
#include "plan/planner_internal.h"

namespace pt::plan {
namespace {

// The unit counts below n that smaller_clusters tries, most first: every one up to
// kEveryCountUpTo units; above, the eight just below n and n x j / 16, so that a cluster of
// 1,024 plans 23 smaller ones, not 1,023 (a plan on 1,000 of them differs from one on 1,008 by
// less than the simulator's noise).
constexpr int kEveryCountUpTo = 32;
std::vector<int> fewer_units(int n) {
  std::set<int, std::greater<int>> ks;
  for (int k = n - 1; k >= 1; --k)
    if (n <= kEveryCountUpTo || k >= n - 8 || k == 1) ks.insert(k);
  if (n > kEveryCountUpTo)
    for (int j = 1; j < 16; ++j) ks.insert(n * j / 16);
  return {ks.begin(), ks.end()};
}

}  // namespace

std::vector<Cluster> smaller_clusters(const Cluster& cluster) {
  std::vector<Cluster> out;
  Cluster unit = cluster;
  while (!unit.levels.empty()) {
    for (int k : fewer_units(unit.levels.back().fan_out)) {
      Cluster c = unit;
      c.levels.back().fan_out = k;
      if (k == 1 && c.levels.size() > 1) c.levels.pop_back();  // one unit: the level below's cluster
      out.push_back(c);
    }
    if (unit.levels.size() == 1) break;
    unit.levels.pop_back();  // one unit of the outermost level, already listed (k = 1)
  }
  return out;
}

std::vector<Plan> neighbour_plans(const Plan& plan, const profile::Profile& profile, const Cluster& cluster,
                                  const PlanOptions& options) {
  std::vector<Plan> shapes;  // replicas and layers changed; workers assigned below
  auto add = [&](Plan p) {
    for (auto& st : p.stages) std::sort(st.layers.begin(), st.layers.end());
    shapes.push_back(std::move(p));
  };
  int S = plan.num_stages();
  for (int i = 0; i + 1 < S; ++i) {
    const auto& a = plan.stages[i].layers;
    const auto& b = plan.stages[i + 1].layers;
    if (a.size() > 1) {  // a's last layer to b
      Plan p = plan;
      p.stages[i].layers.pop_back();
      p.stages[i + 1].layers.push_back(a.back());
      add(std::move(p));
    }
    if (b.size() > 1) {  // b's first layer to a
      Plan p = plan;
      p.stages[i + 1].layers.erase(p.stages[i + 1].layers.begin());
      p.stages[i].layers.push_back(b.front());
      add(std::move(p));
    }
    // Merged, then any one replica to any other stage (or none): not under --straight, where
    // no stage is replicated (the climbs made 3-1-1-1-1 of ResNet-101's straight plans).
    if (options.straight) continue;
    Plan m = plan;
    m.stages[i].layers.insert(m.stages[i].layers.end(), b.begin(), b.end());
    m.stages[i].replicas += plan.stages[i + 1].replicas;
    m.stages.erase(m.stages.begin() + i + 1);
    for (int to = 0; to < m.num_stages(); ++to) {
      if (to == i) continue;
      Plan p = m;
      p.stages[i].replicas -= 1, p.stages[to].replicas += 1;
      add(std::move(p));
    }
    add(std::move(m));
  }
  for (int from = 0; from < S; ++from)
    for (int to = 0; to < S && plan.stages[from].replicas > 1; ++to)
      if (to != from) {
        Plan p = plan;
        p.stages[from].replicas -= 1, p.stages[to].replicas += 1;
        add(std::move(p));
      }
  // Each placed as the exact model predicts fastest, side by side (GNMT-16 on 4x4: 300 shapes,
  // three placements each), kept in the order made.
  std::vector<Plan> placed(shapes.size());
  side_by_side(shapes.size(), [&](size_t i) {
    assign_workers(shapes[i]);
    try {
      check_plan_fits(shapes[i], profile, "neighbour plan");
    } catch (const ConfigError&) {
      return;  // a moved layer's input would come from a later stage
    }
    placed[i] = detail::best_placed(shapes[i], profile, cluster, options);
  });
  std::vector<Plan> out;
  for (Plan& p : placed)
    if (!p.stages.empty()) out.push_back(std::move(p));
  std::stable_sort(out.begin(), out.end(), [](const Plan& a, const Plan& b) {
    return a.pipeline_ms_per_minibatch < b.pipeline_ms_per_minibatch;
  });
  return out;
}

}  // namespace pt::plan
