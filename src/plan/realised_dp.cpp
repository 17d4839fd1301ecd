// The pipetrain search's lookups, built once per search, and its plans read out of the filled
// table: each start's best first stages unfolded along their continuations (realised_dp.h).
#include "plan/realised_dp.h"

#include <algorithm>

#include "core/error.h"

namespace pt::plan::detail {

PipetrainDp::PipetrainDp(const StateSpace& space, const Cluster& on, const PlanOptions& plan_options)
    : s(space), cluster(on), options(plan_options), S(s.num_states()), W(cluster.workers()), last(s.last()),
      mem(memory_limit(cluster, options)), Q(mem > 0 ? std::min(W, S - 1) : 0),
      Lv(static_cast<int>(cluster.levels.size()) + 1), host_ms(host_ms_per_minibatch(cluster)) {
  level_to.assign(static_cast<size_t>(W) * (W + 1), -1);
  for (int w = 0; w < W; ++w)
    for (int n = 1; w + n < W; ++n) level_to[static_cast<size_t>(w) * (W + 1) + n] = cluster.range_level(w, w + n);
  links.resize(static_cast<size_t>(W) * (W + 1) * Lv);
  allreduce_below.assign(static_cast<size_t>(W) * (W + 1), kInfinity);
  for (int w = 0; w < W; ++w)
    for (int n = 1; w + n <= W; ++n) {
      double allreduce = cluster.range_allreduce_ms(w, w + n - 1, 1.0);
      for (int lam = 0; lam < (w > 0 ? Lv : 1); ++lam)
        links_at(w, n, lam) = stage_links(cluster, n, lam > 0 ? std::max(lam - 1, reach(w - 1, w + n - 1)) : -1,
                                          reach(w, w + n), allreduce);
      size_t i = static_cast<size_t>(w) * (W + 1) + n;
      if (n > 1) allreduce_below[i] = std::min(links_at(w, n, 0).allreduce_ms_per_byte, allreduce_below[i - 1]);
    }
  g.assign(at(Q, S - 1, W, Lv - 1) + 1, kInfinity);
  next_state.assign(g.size(), -1);
  replicas.assign(g.size(), 0);
  latency_at.resize(cluster.levels.size());
  ms_per_byte_at.resize(cluster.levels.size());
  for (size_t level = 0; level < cluster.levels.size(); ++level)
    latency_at[level] = cluster.latency_ms(static_cast<int>(level)),
    ms_per_byte_at[level] = cluster.transfer_ms(static_cast<int>(level), 1.0);
  slots_at.assign(static_cast<size_t>(W) * (W + 1), 0);
  for (int w = 0; w < W; ++w)
    for (int n = 1; w + n <= W; ++n) slots_at[static_cast<size_t>(w) * (W + 1) + n] = std::max(1, (W - w + n - 1) / n) * n;
  round_trip.assign(g.size(), 0);
  g[at(0, last, W, 0)] = 0;
  suffix.assign(sat(Q, S - 1, W) + 1, kInfinity);
  for (int q = 0; q <= Q; ++q)
    for (int w = W; w >= 0; --w)
      suffix[sat(q, last, w)] = std::min(g[at(q, last, w, 0)], w < W ? suffix[sat(q, last, w + 1)] : kInfinity);
  const int L = static_cast<int>(cluster.levels.size());
  std::vector<double> fastest_from(L + 1, 0);  // [level + 1]: the fastest level from it outwards
  for (int level = L - 1; level >= 0; --level)
    fastest_from[level + 1] = std::min(cluster.transfer_ms(level, 1.0), level + 1 < L ? fastest_from[level + 2] : kInfinity);
  in_floor.assign(static_cast<size_t>(W) * Lv, 0);
  out_floor.assign(W, 0);
  for (int w = 0; w < W; ++w) {
    for (int lam = 1; w > 0 && lam < Lv; ++lam)
      in_floor[static_cast<size_t>(w) * Lv + lam] = fastest_from[std::max(lam - 1, reach(w - 1, w)) + 1];
    out_floor[w] = fastest_from[reach(w, w + 1) + 1];
  }
}

std::vector<SearchStage> PipetrainDp::unfold(const Root& root) const {
  std::vector<SearchStage> stages;
  int k = 0, w = root.w, q = root.q, j = root.j, n = root.n, lam = 0;
  for (;;) {
    SearchStage st;
    st.from = k, st.to = j;
    for (int x = w; x < w + n; ++x) st.workers.push_back(x);
    stages.push_back(st);
    if (j == last) break;
    lam = lam_after(w, n), k = j, w += n, q = Q ? q - 1 : 0;
    size_t i = at(q, k, w, lam);
    j = next_state[i], n = replicas[i];
    PT_CHECK(j >= 0, "broken choice at state ", k, " worker ", w);
  }
  // Depth is the number of stages after, known only now when memory was not tracked.
  int p = static_cast<int>(stages.size());
  for (int i = 0, lam_i = 0; i < p; ++i) {
    auto& st = stages[i];
    int first = st.workers.front(), size = static_cast<int>(st.workers.size());
    StageEstimate e = stage(st.from, st.to, first, size, lam_i, p - i);
    st.compute_ms = e.compute_ms, st.comm_ms = e.comm_ms;
    lam_i = lam_after(first, size);
  }
  for (auto& st : stages)
    for (int& x : st.workers) x -= root.w;  // a smaller cluster's ids start at 0
  return stages;
}

SearchResult PipetrainDp::result(std::vector<double>* kth_from) {
  SearchResult r;
  // Best first: by value, then as the ties above (one-stage, smaller state, more replicas).
  std::stable_sort(roots.begin(), roots.end(), [&](const Root& a, const Root& b) {
    if (a.w != b.w) return a.w < b.w;
    if (a.t != b.t) return a.t < b.t;
    bool ao = a.j == last && a.n == W - a.w, bo = b.j == last && b.n == W - b.w;
    if (ao != bo) return ao;
    if (a.j != b.j) return a.j < b.j;
    return a.n > b.n;
  });
  // The best kept_from(w) first stages of the plans from worker w on, and data parallelism (one
  // stage on all of them) among them whenever it fits, so that the referee always weighs the
  // baseline too.
  auto pick = [&](int w, size_t from, size_t to, std::vector<SearchAlternative>& out) {
    int one_stage = -1;
    for (size_t i = from; i < to; ++i)
      if (roots[i].j == last && roots[i].n == W - w) one_stage = static_cast<int>(i - from);
    for (size_t i = 0; from + i < to && static_cast<int>(i) < kept_from(w); ++i) {
      bool last_slot = static_cast<int>(i) + 1 == kept_from(w) && i > 0;
      const Root& chosen = last_slot && one_stage > static_cast<int>(i) ? roots[from + one_stage] : roots[from + i];
      out.push_back({chosen.t, unfold(chosen)});
    }
  };
  auto data_parallel = [&](int w) {
    StageEstimate dp = stage(0, last, w, W - w, 0, 1);
    return mem <= 0 || dp.memory_bytes <= static_cast<double>(mem) ? dp.time_ms : kInfinity;
  };
  r.data_parallel_ms = data_parallel(0);
  if (options.fewer_workers) r.suffixes.resize(W);
  for (size_t from = 0, to; from < roots.size(); from = to) {
    int w = roots[from].w;
    for (to = from; to < roots.size() && roots[to].w == w; ++to) {
    }
    if (w == 0) {
      r.pipeline_ms = roots[from].t;
      pick(0, from, to, r.alternatives);
    } else {
      r.suffixes[w].data_parallel_ms = data_parallel(w);
      pick(w, from, to, r.suffixes[w].alternatives);
    }
  }
  if (!r.alternatives.empty()) r.stages = r.alternatives.front().stages;
  if (kth_from) {
    kth_from->assign(W, kInfinity);
    for (size_t from = 0, to; from < roots.size(); from = to) {
      for (to = from; to < roots.size() && roots[to].w == roots[from].w; ++to) {
      }
      int w = roots[from].w;
      if (to - from >= static_cast<size_t>(kept_from(w))) (*kth_from)[w] = roots[from + kept_from(w) - 1].t;
    }
  }
  return r;
}

}  // namespace pt::plan::detail
