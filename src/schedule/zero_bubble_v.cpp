// The V schedules: ZB-V (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024,
// §6) and the controllable-memory V-Half and V-Min (Qi, Sun, Wan, Huang, Lin, "Pipeline
// Parallelism with Controllable Memory", NeurIPS 2024). The plan has 2p stages (model chunks) on
// p workers placed in a V: worker w holds chunk w and chunk 2p - 1 - w, so worker 0 runs the
// first and the last chunk and worker p - 1 the two middle ones back to back (its hand-over from
// chunk p - 1 to chunk p stays on the worker). The backward is split into B (input gradient, on
// the critical path) and W (weight gradient, any time before the Step), and W fills what would
// be bubbles.
//
// The order is zero_bubble_clock's (zero_bubble_clock.h: on the profile's clock, or a unit one
// without a profile, a ready B first, then a ready F that leaves its microbatch room in the later
// chunk, then the oldest W) under a budget
// of chunk-microbatches between F and W. A chunk is half a 1F1B stage, so `limit`
// chunk-microbatches hold limit / 2 microbatches of a whole stage: zb-v 2p (p of them, what
// 1F1B's first stage holds), v-half p + 2 ((p + 2) / 2), v-min 2 (p + 4) / 3 ((p + 4) / 3), the
// papers' budgets; with a profile the budget is in bytes (activation_budget_from_profile). The papers'
// handcrafted orders reach their bubbles at those budgets; this greedy order is measured against
// 1F1B in the simulator (tests/schedule/zero_bubble_v_test.cpp, docs/results.md).
// p = 2, m = 4, zb-v (stages 0, 3 on w0 and 1, 2 on w1), each worker's order:
//
//   w0: 0F0 0F1 0F2 3F0 3B0 3W0 3F1 3B1 0B0 ...   (the golden grid in the test is the whole order)
#include <algorithm>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"
#include "schedule/zero_bubble_clock.h"

namespace pt::schedule {

int v_schedule_limit(const std::string& kind, int p) {
  if (kind == "v-half") return p + 2;                 // (p + 2) / 2 microbatches of a whole stage
  if (kind == "v-min") return 2 * (p + 4) / 3;        // (p + 4) / 3 of them, rounded down: within it
  return 2 * p;                                       // zb-v: p of them, 1F1B's first stage
}

double v_schedule_share(const std::string& kind, int p) {
  if (kind == "v-half") return (p + 2.0) / (2.0 * p);
  if (kind == "v-min") return (p + 4.0) / (3.0 * p);
  return 1.0;
}

Schedule zb_v(const plan::Plan& plan, int microbatches, const std::string& kind, const ActivationBudget& budget,
              const ActionTimes& times) {
  Schedule s = detail::v_skeleton(plan, kind, microbatches);
  const int stages = s.num_stages, p = stages / 2;

  // What an F of each stage adds, and each worker's budget (v_worker_limits; counted: at least a
  // microbatch through both of its chunks, so that the V always moves).
  const bool weighed = !budget.stage_held.empty();
  if (weighed && static_cast<int>(budget.stage_held.size()) != stages)
    throw InternalError(str(kind, ": a budget for ", budget.stage_held.size(), " stages, the plan has ", stages));
  detail::ChunkBudget b;
  b.adds = weighed ? budget.stage_held : std::vector<double>(stages, 1.0);
  if (weighed) b.limit = v_worker_limits(kind, budget);
  std::vector<std::vector<int>> chunks(p);
  for (int w = 0; w < p; ++w) {
    chunks[w] = {w, stages - 1 - w};
    if (!weighed) b.limit.push_back(std::max(2, v_schedule_limit(kind, p)));
    b.limit[w] *= 1 + 1e-9;
  }
  detail::zero_bubble_clock(s, chunks, b, times, kind);
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
