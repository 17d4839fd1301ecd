// ZB-H1: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (the handcrafted
// schedule H1). The backward is split into B (gradient of the input, on the critical path) and
// W (gradient of the weights, needed only before the Step). The order is 1F1B's (warm-up of
// p - i forwards, then one B / one F) with the W of a microbatch run i backwards later on stage
// i, so the later stages push B's upstream without stopping for W and catch up on their W's
// in the drain. Stage i then holds at most (p - i) + i = p microbatches between F and W: the
// peak (on stage 0) stays 1F1B's when the stages stash alike. Where they do not (an even split by
// time of a model whose blocks differ in bytes), an ActivationBudget of 1F1B's peak makes a
// heavier stage defer fewer W's. p = 4, m = 6, F = B = W = one slot:
//
//   w0: 0F0 0F1 0F2 0F3   .   .   . 0B0 0W0 0F4 0B1 0W1 0F5 0B2 0W2 0B3 0W3 0B4 0W4 0B5 0W5
//   w1:   . 1F0 1F1 1F2   .   . 1B0 1F3 1B1 1W0 1F4 1B2 1W1 1F5 1B3 1W2 1B4 1W3 1B5 1W4 1W5
//   w2:   .   . 2F0 2F1   . 2B0 2F2 2B1 2F3 2B2 2W0 2F4 2B3 2W1 2F5 2B4 2W2 2B5 2W3 2W4 2W5
//   w3:   .   .   . 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3W0 3F4 3B4 3W1 3F5 3B5 3W2 3W3 3W4 3W5
//
// Makespan 3m + (p-1) slots for m >= p: bubble (p-1)(F+B-W), a third of 1F1B's (p-1)(F+B+W).
// With m < p no order can hide the first microbatch's F and B chains, so the bubble is larger.
#include <algorithm>
#include <deque>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

Schedule zb_h1(const plan::Plan& plan, int microbatches, const ActivationBudget& budget) {
  for (int st = 0; st < plan.num_stages(); ++st)
    if (plan.stages[st].replicas != 1)
      throw ConfigError(str("zb-h1: stage ", st, " has ", plan.stages[st].replicas,
                            " replicas; zb-h1 needs single-replica stages"));
  Schedule s = detail::skeleton(plan, "zb-h1", microbatches, 1);
  s.split_backward.assign(s.num_stages, true);
  const int p = s.num_stages, m = microbatches;
  if (!budget.stage_held.empty() && static_cast<int>(budget.stage_held.size()) != p)
    throw InternalError(str("zb-h1: a budget for ", budget.stage_held.size(), " stages, the plan has ", p));
  for (int i = 0; i < p; ++i) {
    int w = s.stage_workers[i][0], warmup = std::min(p - i, m);
    // W's deferred by `delay` backwards: warmup + delay microbatches held between F and W, within
    // the budget where one is given (a stage of more bytes than stage 0 defers fewer).
    int delay = i;
    if (!budget.stage_held.empty() && budget.stage_held[i] > 0) {
      auto fits = static_cast<int>(budget.per_worker / budget.stage_held[i] * (1 + 1e-9));
      delay = std::clamp(fits - warmup, 0, i);
    }
    std::deque<int> pending_w;
    for (int k = 0; k < warmup; ++k) s.add(w, ActionKind::kForward, i, k);
    for (int k = 0; k < m; ++k) {
      s.add(w, ActionKind::kBackward, i, k);
      pending_w.push_back(k);
      if (k >= delay) {
        s.add(w, ActionKind::kBackwardWeight, i, pending_w.front());
        pending_w.pop_front();
      }
      if (k + warmup < m) s.add(w, ActionKind::kForward, i, k + warmup);
    }
    for (int k : pending_w) s.add(w, ActionKind::kBackwardWeight, i, k);
  }
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
