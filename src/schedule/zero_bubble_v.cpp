// The V schedules: ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024,
// §6) and the controllable-memory V-Half and V-Min (Qi, Sun, Wan, Huang, Lin, "Pipeline
// Parallelism with Controllable Memory", NeurIPS 2024). The plan has 2p stages (model chunks) on
// p workers placed in a V: worker w holds chunk w and chunk 2p - 1 - w, so worker 0 runs the
// first and the last chunk and worker p - 1 the two middle ones back to back (its hand-over from
// chunk p - 1 to chunk p stays on the worker). The backward is split into B (input gradient, on
// the critical path) and W (weight gradient, any time before the Step), and W fills what would
// be bubbles.
//
// The order is built on a unit clock (F = B = W = one slot per chunk): in each slot a worker
// runs the first of
//   1. a B whose inputs are done (its own F, and the chunk after's B), the earliest microbatch
//      first, the later chunk on a tie;
//   2. an F whose input is done, while fewer than `limit` chunk-microbatches sit between their F
//      and their W on the worker, the later chunk first (it brings a microbatch's B sooner); the
//      first chunk leaves the later one a place, so a microbatch in the V always gets through;
//   3. the oldest W,
// then the remaining W's. A chunk is half a 1F1B stage, so `limit` chunk-microbatches hold
// limit / 2 microbatches of a whole stage: zb-v 2p (p of them, what 1F1B's first stage holds),
// v-half p + 2 ((p + 2) / 2), v-min 2 (p + 4) / 3 ((p + 4) / 3), the papers' budgets. The papers'
// handcrafted orders reach their bubbles at those budgets; this greedy order is measured against
// 1F1B in the simulator (tests/schedule/zero_bubble_v_test.cpp, docs/results.md).
// p = 2, m = 4, zb-v (stages 0, 3 on w0 and 1, 2 on w1), each worker's order:
//
//   w0: 0F0 0F1 0F2 3F0 3B0 3W0 3F1 3B1 0B0 ...   (the golden grid in the test is the whole order)
#include <algorithm>
#include <deque>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "plan/planner.h"
#include "schedule/generators.h"

namespace pt::schedule {

namespace {

constexpr int kNotYet = -1;

struct VWorker {
  int chunk_stage[2];         // [chunk] -> stage: w, then 2p - 1 - w
  int next_f[2] = {0, 0};     // [chunk] -> its next forward's microbatch
  int next_b[2] = {0, 0};     // [chunk] -> its next backward's microbatch
  std::deque<std::pair<int, int>> pending_w;  // (stage, mb) whose B ran, oldest first
  double held = 0;            // what its chunk-microbatches between F and W hold (VBudget's unit)
};

}  // namespace

int v_schedule_limit(const std::string& kind, int p) {
  if (kind == "v-half") return p + 2;                 // (p + 2) / 2 microbatches of a whole stage
  if (kind == "v-min") return (2 * (p + 4) + 2) / 3;  // (p + 4) / 3 of them, rounded up
  return 2 * p;                                       // zb-v: p of them, 1F1B's first stage
}

VBudget v_budget_from_profile(const std::string& kind, const plan::Plan& plan, const profile::Profile& profile) {
  auto stash = [&](const std::vector<int>& layers) {
    double b = 0;
    for (int l : layers) b += static_cast<double>(profile::stash_bytes(profile, l));
    return b;
  };
  VBudget out;
  for (const auto& st : plan.stages) out.stage_held.push_back(stash(st.layers));
  const int p = std::max(1, plan.num_stages() / 2);
  plan::Plan straight = plan::even_split(profile, std::min(p, profile.num_layers()));
  double one_f_one_b = 0;  // 1F1B's stage s stashes p - s microbatches at its peak
  for (int st = 0; st < straight.num_stages(); ++st) one_f_one_b = std::max(one_f_one_b, (p - st) * stash(straight.stages[st].layers));
  out.per_worker = one_f_one_b * v_schedule_limit(kind, p) / (2.0 * p);
  return out;
}

Schedule zb_v(const plan::Plan& plan, int microbatches, const std::string& kind, const VBudget& budget) {
  int stages = plan.num_stages();
  if (stages < 2 || stages % 2 != 0)
    throw ConfigError(str(kind, ": the plan has ", stages, " stages; ", kind, " needs two per worker (2 x workers "
                          "stages, placed in a V)"));
  for (int st = 0; st < stages; ++st)
    if (plan.stages[st].replicas != 1)
      throw ConfigError(str(kind, ": stage ", st, " has ", plan.stages[st].replicas, " replicas; ", kind,
                            " needs single-replica stages"));
  const int p = stages / 2, m = microbatches;
  plan::Plan placed = plan;
  placed.workers = p;
  for (int st = 0; st < stages; ++st) placed.stages[st].workers = {std::min(st, stages - 1 - st)};
  Schedule s = detail::skeleton(placed, kind, microbatches, 1);
  s.chunks = 2;
  s.split_backward.assign(stages, true);

  // Finish slot of each F and B by (stage, mb): an action may use it from that slot on.
  std::vector<std::vector<int>> f_done(stages, std::vector<int>(m, kNotYet)), b_done = f_done;
  auto done_by = [](int at, int t) { return at != kNotYet && at <= t; };
  std::vector<VWorker> workers(p);
  for (int w = 0; w < p; ++w) workers[w].chunk_stage[0] = w, workers[w].chunk_stage[1] = stages - 1 - w;
  // What an F of each stage adds, and each worker's budget: at least a microbatch through both of
  // its chunks, so that the V always moves.
  const bool weighed = !budget.stage_held.empty();
  if (weighed && static_cast<int>(budget.stage_held.size()) != stages)
    throw InternalError(str(kind, ": a budget for ", budget.stage_held.size(), " stages, the plan has ", stages));
  std::vector<double> adds(stages, 1.0);
  if (weighed) adds = budget.stage_held;
  std::vector<double> limit(p);
  for (int w = 0; w < p; ++w) {
    double both = adds[w] + adds[stages - 1 - w];
    limit[w] = std::max(both, weighed ? budget.per_worker : v_schedule_limit(kind, p)) * (1 + 1e-9);
  }
  int remaining = 3 * stages * m;  // F, B and W of every chunk and microbatch
  for (int t = 0; remaining > 0; ++t) {
    bool any = false;
    for (int w = 0; w < p; ++w) {
      VWorker& v = workers[w];
      // 1. A ready B: the earliest microbatch, the later chunk on a tie.
      int best = -1;
      for (int c : {1, 0}) {
        int st = v.chunk_stage[c], k = v.next_b[c];
        if (k >= m || !done_by(f_done[st][k], t)) continue;
        if (st + 1 < stages && !done_by(b_done[st + 1][k], t)) continue;
        if (best < 0 || k < v.next_b[best]) best = c;
      }
      if (best >= 0) {
        int st = v.chunk_stage[best], k = v.next_b[best]++;
        s.add(w, ActionKind::kBackward, st, k);
        b_done[st][k] = t + 1;
        v.pending_w.emplace_back(st, k);
        --remaining, any = true;
        continue;
      }
      // 2. A ready F within the memory limit, the later chunk first. The first chunk leaves
      // the later one a place: a microbatch that reaches it always gets through, and its W
      // frees the place (with every place taken by first-chunk forwards, nothing would move).
      {
        for (int c : {1, 0}) {
          int st = v.chunk_stage[c], k = v.next_f[c];
          if (k >= m || (st > 0 && !done_by(f_done[st - 1][k], t))) continue;
          if (v.held + adds[st] > limit[w]) continue;
          if (c == 0 && v.held + adds[st] + adds[v.chunk_stage[1]] > limit[w]) continue;
          s.add(w, ActionKind::kForward, st, k);
          f_done[st][k] = t + 1;
          ++v.next_f[c], v.held += adds[st];
          --remaining, any = true;
          best = c;
          break;
        }
        if (best >= 0) continue;
      }
      // 3. The oldest W.
      if (!v.pending_w.empty()) {
        auto [st, k] = v.pending_w.front();
        v.pending_w.pop_front();
        s.add(w, ActionKind::kBackwardWeight, st, k);
        v.held -= adds[st];
        --remaining, any = true;
      }
    }
    // Nothing ran while work remains: every worker waits on another's slot still to come, or
    // is at its memory limit with no W left; the place kept for the later chunk rules that out,
    // but a silent endless loop would be worse than saying so.
    if (!any) {
      bool waiting = false;  // some F or B is done in a later slot
      for (int st = 0; st < stages && !waiting; ++st)
        for (int k = 0; k < m && !waiting; ++k)
          waiting = (f_done[st][k] != kNotYet && f_done[st][k] > t) || (b_done[st][k] != kNotYet && b_done[st][k] > t);
      if (!waiting) throw InternalError(str("zb-v: no worker can run at slot ", t, " with ", remaining, " actions left"));
    }
  }
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
