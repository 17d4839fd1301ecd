// ZB-H1: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, §3 (the handcrafted
// schedule H1). The backward is split into B (gradient of the input, on the critical path) and
// W (gradient of the weights, needed only before the Step). Warm-up is 1F1B's, but a stage runs
// a pending W where 1F1B would wait, and stage i keeps at most p - i microbatches between F and W,
// so memory is no higher than 1F1B's. The order is what this rule gives with F = B = W = one slot
// (the paper's assumption), found by stepping a unit clock. p = 4, m = 6:
//
//   w0: 0F0 0F1 0F2 0F3  .   .  0B0 0W0 0F4 0B1 0W1 0F5 0B2 0W2  .  0B3 0W3 ...
//   w1:  .  1F0 1F1 1F2  .  1B0 1W0 1F3 1B1 1W1 1F4 1B2 1W2 1F5 1B3 ...
//   w2:  .   .  2F0 2F1 2B0 2W0 2F2 2B1 2W1 2F3 2B2 2W2 2F4 2B3 ...
//   w3:  .   .   .  3F0 3B0 3W0 3F1 3B1 3W1 3F2 3B2 3W2 3F3 ...
//
// Bubble (p-1)(F+B-W) instead of 1F1B's (p-1)(F+B+W): a third of it when F = B = W.
#include "core/error.h"
#include "schedule/clock_order.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

Schedule zb_h1(const plan::Plan& plan, int microbatches) {
  for (int st = 0; st < plan.num_stages(); ++st)
    if (plan.stages[st].replicas != 1)
      throw ConfigError(str("zb-h1: stage ", st, " has ", plan.stages[st].replicas,
                            " replicas; zb-h1 needs single-replica stages"));
  Schedule s = detail::skeleton(plan, "zb-h1", microbatches, 1);
  s.split_backward.assign(s.num_stages, true);
  std::vector<detail::WorkerQueues> queues(s.num_workers());
  for (int i = 0; i < s.num_stages; ++i) {
    auto& q = queues[s.stage_workers[i][0]];
    for (int k = 0; k < microbatches; ++k) {
      q.forwards.emplace_back(i, k);
      q.backwards.emplace_back(i, k);
    }
    q.limit = s.num_stages - i;  // 1F1B's stash on stage i
  }
  detail::clock_order(s, queues);
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
