#include <algorithm>
#include <limits>

#include "core/error.h"
#include "plan/planner.h"

namespace pt::plan {

Plan even_split(const profile::Profile& profile, int stages) {
  int n = profile.num_layers();
  if (stages < 1 || stages > n)
    throw UsageError(str("--stages: ", stages, " stages is not possible for '", profile.model,
                         "' with ", n, " layers (use 1..", n, ")"));
  // prefix[i] = compute of layers [0, i)
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + profile.layers[i].forward_ms + profile.layers[i].backward_ms;
  // best[k][i]: smallest max-stage time splitting layers [0, i) into k stages.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        double t = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        // Ties go to the later cut so that equal-cost layers spread evenly.
        if (t <= best[k][i]) {
          best[k][i] = t;
          cut[k][i] = j;
        }
      }
  Plan p;
  p.model = profile.model;
  for (const auto& t : profile.ties) p.ties.push_back(t.layers);
  p.batch_size = profile.batch_size;
  p.cost_model = "even";
  p.stages.resize(stages);
  for (int k = stages, i = n; k >= 1; --k) {
    int j = cut[k][i];
    for (int l = j; l < i; ++l) p.stages[k - 1].layers.push_back(l);
    p.stages[k - 1].compute_ms = prefix[i] - prefix[j];
    i = j;
  }
  assign_workers(p);
  p.pipeline_ms_per_minibatch = best[stages][n];
  p.data_parallel_ms_per_minibatch = prefix[n];
  return p;
}

}  // namespace pt::plan
