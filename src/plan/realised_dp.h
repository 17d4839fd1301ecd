#pragma once
// The pipetrain search's table and its lookups (internal to src/plan): g(k, w, λ[, q]) with
// each cell's choice, what its inner loop reads (links, floors, levels per worker range), and
// the plans unfolded from the first stages' choices. realised_search.cpp fills the table (its
// comment gives the recurrence); realised_dp.cpp builds the lookups and reads the plans out.
#include <cstdint>
#include <vector>

#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/planner.h"
#include "plan/search.h"
#include "plan/state_space.h"

namespace pt::plan::detail {

struct PipetrainDp {
  PipetrainDp(const StateSpace& space, const Cluster& cluster, const PlanOptions& options);

  // The table from the last state backwards, and the first stages' choices (`roots`).
  // bound_from[w]: a time no lower than the `candidates`-th best first stage of the plans
  // starting at worker w (kInfinity: none known), which prunes boundaries no returned plan crosses.
  void fill(const std::vector<double>& bound_from);
  // The plans of the best first stages from each start, best first (kth_from, if given, receives
  // each start's `candidates`-th best first stage; kInfinity: fewer).
  SearchResult result(std::vector<double>* kth_from);

  // range_level(lo, hi) where hi < W; -1 past the last worker.
  int reach(int lo, int hi) const {
    return hi < W ? level_to[static_cast<size_t>(lo) * (W + 1) + (hi - lo)] : -1;
  }
  StageLinks& links_at(int w, int n, int lam) { return links[(static_cast<size_t>(w) * (W + 1) + n) * Lv + lam]; }
  const StageLinks& links_at(int w, int n, int lam) const {
    return links[(static_cast<size_t>(w) * (W + 1) + n) * Lv + lam];
  }
  // λ' of the stage after one on w..w+n-1.
  int lam_after(int w, int n) const { return w + n < W ? reach(w, w + n) + 1 : 0; }
  size_t at(int q, int k, int w, int lam) const { return ((static_cast<size_t>(q) * S + k) * (W + 1) + w) * Lv + lam; }
  size_t sat(int q, int k, int w) const { return (static_cast<size_t>(q) * S + k) * (W + 1) + w; }
  // The stage k→j on workers w..w+n-1 after λ, `depth` stages from the end.
  StageEstimate stage(int k, int j, int w, int n, int lam, int depth) const {
    return realised_stage(s.compute_ms[j] - s.compute_ms[k] + host_ms, s.frontier_bytes[k],
                           j != last ? s.frontier_bytes[j] : 0, s.parameter_bytes[j] - s.parameter_bytes[k],
                           s.activation_bytes[j] - s.activation_bytes[k], n, depth,
                           links_at(w, n, lam), s.backward_ms[j] - s.backward_ms[k], options.bucket_bytes);
  }
  // The rest after a stage k→j on w..w+n-1 (g(all, W, ·, 0) sits at λ = 0).
  size_t rest_at(int q, int j, int w, int n) const { return at(q, j, w + n, lam_after(w, n)); }
  // How many first stages each start keeps: `candidates` for the whole cluster's, for a smaller
  // cluster's suffix_candidates where set.
  int kept_from(int w) const {
    return w > 0 && options.suffix_candidates > 0 ? options.suffix_candidates : options.candidates;
  }
  // A plan from its first stage's choice, following each state's best continuation.
  struct Root {
    double t;
    int q, j, n, w;  // w: the first worker (0 unless a smaller cluster's)
  };
  std::vector<SearchStage> unfold(const Root& root) const;

  const StateSpace& s;
  const Cluster& cluster;
  const PlanOptions& options;
  const int S, W, last;
  const int64_t mem;
  const int Q;  // q = 0: depth not tracked
  // λ takes Lv values: level index + 1, 0 meaning no previous stage (w = 0).
  const int Lv;
  const double host_ms;
  // range_level(w, w + n) for every w, n: looked up in the inner loop, where computing it is
  // most of the search's time on a 16-worker cluster.
  std::vector<int> level_to;
  // The links of a stage on workers w..w+n-1 after λ, per (w, n, λ): it has a previous stage
  // when w > 0 and a next one when w + n < W (the search numbers workers stage by stage). Looked
  // up in the inner loop; a first stage's input and a last stage's output carry 0 bytes.
  std::vector<StageLinks> links;
  // allreduce_below[w * (W + 1) + n]: the least a replica's share of a byte's all-reduce takes
  // on w..w+m-1 for any 2 <= m <= n. With the compute over n, a floor on the stage's time on
  // every replica count from n down to 2.
  std::vector<double> allreduce_below;
  // g, at(q, k, w, λ), and each cell's choice: the next state and the replicas.
  std::vector<double> g;
  std::vector<int> next_state, replicas;
  // One message at a level (Cluster::message_ms), as the inner loop reads it: its latency and
  // a millisecond per byte; and the minibatches in flight on a stage of w..w+n-1 under
  // PipeDream's rule (in_flight_bound's divisor).
  std::vector<double> latency_at, ms_per_byte_at, slots_at;
  // round_trip[i]: the chosen continuation's round trip (in_flight_bound), carried up the table.
  std::vector<double> round_trip;
  // suffix[sat(q, j, w)]: the best g(j, w', λ, q) over w' >= w and every λ, a lower bound on the
  // rest of the pipeline after a stage that ends at state j, whatever its replica count.
  std::vector<double> suffix;
  // The least a byte of a stage's input or output on w.. after λ takes on one replica, whatever
  // its replicas: more of them only reach up to outer levels (range_level), so the fastest level
  // from the one a single replica crosses up bounds them all. [w * Lv + λ] for the input,
  // [w] for the output; 0 where there is none.
  std::vector<double> in_floor, out_floor;
  // The first stage's every choice (j, n) with its value, per q: the alternatives.
  std::vector<Root> roots;
};

}  // namespace pt::plan::detail
