// The pipetrain model's search. g(k, w[, q]) is the smallest slowest-stage time for the layers
// after state k on workers w..W-1 (with exactly q stages when memory is limited, since a stage's
// stash depth is the number of stages from it to the end):
//   g(k, w, q) = min over states j ⊋ k and replicas n of
//                max(stage(k→j on workers w..w+n-1, depth q), g(j, w+n, q-1)),
//   g(all, W, 0) = 0.
// It is solved from the last state backwards, so each stage knows its depth. Lower bounds
// (a stage is never faster than its compute C/n) prune most of the (j, n) pairs.
#include <algorithm>

#include "core/error.h"
#include "plan/pipetrain_cost.h"
#include "plan/search.h"

namespace pt::plan {

SearchResult search_pipetrain(const StateSpace& s, const Cluster& cluster, const PlanOptions& options) {
  const int S = s.num_states(), W = cluster.workers(), last = s.last();
  const int64_t mem = memory_limit(cluster, options);
  const int Q = mem > 0 ? std::min(W, S - 1) : 0;  // q = 0: depth not tracked
  // Each state's strict supersets by increasing compute, so that once a stage's compute alone
  // reaches the best time found, every later superset can be skipped at once.
  std::vector<int> by_compute(S);
  for (int j = 0; j < S; ++j) by_compute[j] = j;
  std::stable_sort(by_compute.begin(), by_compute.end(),
                   [&](int a, int b) { return s.compute_ms[a] < s.compute_ms[b]; });
  std::vector<std::vector<int>> supersets(S);
  for (int j : by_compute)
    for (int k : s.strict_subsets[j]) supersets[k].push_back(j);
  // The links of a stage on workers w..w+n-1, per (w, n): it has a previous stage when w > 0 and
  // a next one when w + n < W (the search numbers workers stage by stage). Looked up in the inner
  // loop; a first stage's input and a last stage's output carry 0 bytes.
  auto spanning = [&](int lo, int hi) { return hi < W ? level_spanning(cluster, lo, hi) : -1; };
  std::vector<StageLinks> links(static_cast<size_t>(W) * (W + 1));
  auto links_at = [&](int w, int n) -> StageLinks& { return links[static_cast<size_t>(w) * (W + 1) + n]; };
  for (int w = 0; w < W; ++w)
    for (int n = 1; w + n <= W; ++n)
      links_at(w, n) = stage_links(cluster, n, w > 0 ? spanning(w - 1, w + n - 1) : -1, spanning(w, w + n),
                                   spanning(w, w + n - 1));

  auto at = [&](int q, int k, int w) { return (static_cast<size_t>(q) * S + k) * (W + 1) + w; };
  std::vector<double> g(at(Q, S - 1, W) + 1, kInfinity);
  std::vector<int> next_state(g.size(), -1), replicas(g.size(), 0);
  g[at(0, last, W)] = 0;
  // suffix[at(q, j, w)]: the best g(j, w', q) over w' >= w, a lower bound on the rest of the
  // pipeline after a stage that ends at state j, whatever its replica count.
  std::vector<double> suffix = g;
  for (int q = 0; q <= Q; ++q)
    for (int w = W - 1; w >= 0; --w) suffix[at(q, last, w)] = std::min(g[at(q, last, w)], suffix[at(q, last, w + 1)]);

  auto stage = [&](int k, int j, int w, int n, int depth) {
    return pipetrain_stage(s.compute_ms[j] - s.compute_ms[k], s.frontier_bytes[k],
                           j != last ? s.frontier_bytes[j] : 0, s.parameter_bytes[j] - s.parameter_bytes[k],
                           s.activation_bytes[j] - s.activation_bytes[k], n, depth,
                           links_at(w, n));
  };

  for (int k = S - 2; k >= 0; --k)
    for (int w = W - 1; w >= (k > 0 ? 1 : 0); --w)  // a later state needs an earlier stage
      for (int q = (Q ? 1 : 0); q <= std::min(Q, W - w); ++q) {
        double best = kInfinity;
        int best_j = -1, best_n = 0;
        // Start from the one-stage option (the rest on every free worker): a finite bound early
        // lets the compute bound below skip most pairs.
        if (!options.straight || w + 1 == W) {
          double bytes = s.activation_bytes[last] - s.activation_bytes[k] + s.parameter_bytes[last] -
                         s.parameter_bytes[k];
          if (q <= 1 && (!Q || bytes <= static_cast<double>(mem)))
            best = stage(k, last, w, W - w, 1).time_ms, best_j = last, best_n = W - w;
        }
        for (int j : supersets[k]) {
          double compute = s.compute_ms[j] - s.compute_ms[k];
          if (compute / (W - w) > best) break;  // and so for every later superset
          double state_bytes = s.activation_bytes[j] - s.activation_bytes[k] + s.parameter_bytes[j] -
                               s.parameter_bytes[k];
          if (Q && q * state_bytes > static_cast<double>(mem)) continue;
          if (suffix[at(Q ? q - 1 : 0, j, w + 1)] > best) continue;
          // The last stage takes every worker left; any other leaves one for the rest.
          int n_max = options.straight ? 1 : j == last ? W - w : W - w - 1;
          int n_min = j == last ? W - w : 1;
          for (int n = n_max; n >= n_min; --n) {
            if (compute / n > best) break;
            double rest = g[at(Q ? q - 1 : 0, j, w + n)];
            if (rest > best) continue;
            double t = std::max(stage(k, j, w, n, q).time_ms, rest);
            // Ties go to the one-stage option, then the smaller state index, then the most
            // replicas: the choice does not depend on the order the supersets are visited in.
            bool one_stage = best_j == last && best_n == W - w;
            if (t < best || (t == best && !one_stage && (j < best_j || (j == best_j && n > best_n))))
              best = t, best_j = j, best_n = n;
          }
        }
        size_t i = at(q, k, w);
        g[i] = best, next_state[i] = best_j, replicas[i] = best_n;
        suffix[i] = std::min(best, suffix[at(q, k, w + 1)]);
      }

  SearchResult r;
  int q_best = 0;
  for (int q = (Q ? 1 : 0); q <= Q; ++q)
    if (g[at(q, 0, 0)] < g[at(q_best, 0, 0)]) q_best = q;
  r.pipeline_ms = g[at(q_best, 0, 0)];
  StageEstimate dp = stage(0, last, 0, W, 1);
  bool dp_fits = mem <= 0 || dp.memory_bytes <= static_cast<double>(mem);
  r.data_parallel_ms = dp_fits ? dp.time_ms : kInfinity;
  if (r.pipeline_ms == kInfinity) return r;
  for (int k = 0, w = 0, q = q_best; k != last;) {
    size_t i = at(q, k, w);
    int j = next_state[i], n = replicas[i];
    PT_CHECK(j >= 0, "broken choice at state ", k, " worker ", w);
    SearchStage st;
    st.from = k, st.to = j;
    for (int x = w; x < w + n; ++x) st.workers.push_back(x);
    r.stages.push_back(st);
    k = j, w += n, q = Q ? q - 1 : 0;
  }
  // Depth is the number of stages after, known only now when memory was not tracked.
  int p = static_cast<int>(r.stages.size());
  for (int i = 0; i < p; ++i) {
    auto& st = r.stages[i];
    StageEstimate e = stage(st.from, st.to, st.workers.front(), static_cast<int>(st.workers.size()), p - i);
    st.compute_ms = e.compute_ms, st.comm_ms = e.comm_ms;
  }
  return r;
}

}  // namespace pt::plan
