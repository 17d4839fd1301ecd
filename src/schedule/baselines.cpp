// The two baselines, as schedules on the same runtime (docs/design.md: never separate engines).
//
// Data parallelism: every worker holds the whole model (one stage of all the plan's layers,
// plan.workers replicas); microbatch k runs on worker k % n, a worker accumulates the
// gradients of its microbatches one at a time, then all workers all-reduce (ring) and step.
// n = 3, m = 3:
//   w0: 0F0 0B0 AR ST        time = m/n x (F+B) + ring all-reduce 2(n-1)/n x bytes / bandwidth
//   w1: 0F1 0B1 AR ST
//   w2: 0F2 0B2 AR ST
//
// Plain model parallelism: the plan's stages with one microbatch in flight (each stage runs
// F k, B k before F k+1, and stage 0's B k is the last thing microbatch k does), the textbook
// baseline of the PipeDream paper's Figure 2. p = 3, m = 2:
//   w0: 0F0  .   .   .   .  0B0 0F1  .   .   .   .  0B1
//   w1:  .  1F0  .   .  1B0  .   .  1F1  .   .  1B1
//   w2:  .   .  2F0 2B0  .   .   .   .  2F1 2B1          bubble (p-1)/p
#include <algorithm>

#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

Schedule data_parallel(const plan::Plan& plan, int microbatches) {
  plan::Plan whole;
  whole.workers = plan.workers;
  whole.stages.resize(1);
  for (const auto& st : plan.stages) {
    whole.stages[0].layers.insert(whole.stages[0].layers.end(), st.layers.begin(), st.layers.end());
    whole.stages[0].recompute = whole.stages[0].recompute || st.recompute;
  }
  std::sort(whole.stages[0].layers.begin(), whole.stages[0].layers.end());
  whole.stages[0].replicas = plan.workers;
  plan::assign_workers(whole);
  Schedule s = detail::skeleton(whole, "dp", microbatches, 1);
  detail::require_work_per_replica(s, microbatches);
  for (int w = 0; w < s.num_workers(); ++w)
    for (int k : detail::items_of(s, 0, w, microbatches)) {
      s.add(w, ActionKind::kForward, 0, k);
      s.add(w, ActionKind::kBackward, 0, k);
    }
  detail::append_flush(s, 0);
  return s;
}

Schedule model_parallel(const plan::Plan& plan, int microbatches) {
  Schedule s = detail::skeleton(plan, "mp", microbatches, 1);
  detail::require_work_per_replica(s, microbatches);
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st])
      for (int k : detail::items_of(s, st, w, microbatches)) {
        s.add(w, ActionKind::kForward, st, k);
        s.add(w, ActionKind::kBackward, st, k);
      }
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
