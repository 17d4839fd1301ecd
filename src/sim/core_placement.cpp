#include "sim/core_placement.h"

#include <algorithm>
#include <numeric>

namespace pt::sim {

std::vector<int> place_on_cores(const schedule::Schedule& s, const std::vector<StageCost>& costs, int cores) {
  const int n = s.num_workers();
  if (cores < 1) return {};
  std::vector<int> out(n, 0);
  if (n <= cores) {
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  std::vector<double> work(n, 0);
  for (int w = 0; w < n; ++w)
    for (const schedule::Action& a : s.actions[w]) {
      if (schedule::is_compute(a.kind)) work[w] += compute_ms(s, a, costs[a.stage]);
      if (a.kind == schedule::ActionKind::kStep) work[w] += costs[a.stage].step_ms;
    }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return work[a] > work[b]; });
  std::vector<double> load(cores, 0);
  for (int w : order) {
    int core = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    out[w] = core;
    load[core] += work[w];
  }
  return out;
}

}  // namespace pt::sim
