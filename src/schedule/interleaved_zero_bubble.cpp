// Interleaved zero bubble: the looped placement of interleaved 1F1B (Narayanan et al., SC 2021:
// stage s on worker s % p as its chunk s / p) with the backward split into B and W as in Qi et
// al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), the W's filling what would be bubbles;
// torch.distributed.pipelining ships it as ScheduleInterleavedZeroBubble. The order is
// zero_bubble_clock's (zero_bubble_clock.h) under a budget of (v + 1) p - 1
// chunk-microbatches between F and W on every worker: what interleaved 1F1B's first worker holds
// at its peak (its warm-up 2 (p - 1) + (v - 1) p, and one more in the steady state).
// p = 2, v = 2, m = 4 (stages 0, 2 on w0 and 1, 3 on w1):
//
//   w0: 0F0 0F1 2F0 2F1 2B0 2W0 0B0 2B1 0F2 0B1 ...   (the golden grid in the test is the whole order)
#include <algorithm>

#include "core/error.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"
#include "schedule/zero_bubble_clock.h"

namespace pt::schedule {

int interleaved_zero_bubble_limit(int workers, int chunks) { return std::max(chunks, (chunks + 1) * workers - 1); }

Schedule interleaved_zero_bubble(const plan::Plan& plan, int microbatches, int chunks, const ActionTimes& times) {
  Schedule s = detail::looped_skeleton(plan, "interleaved-zb", microbatches, chunks);
  const int stages = s.num_stages, p = s.num_workers();
  s.split_backward.assign(stages, true);
  detail::ChunkBudget b;
  b.adds.assign(stages, 1.0);
  b.limit.assign(p, interleaved_zero_bubble_limit(p, chunks) + 1e-9);
  std::vector<std::vector<int>> chunk_stages(p);
  for (int st = 0; st < stages; ++st) chunk_stages[st % p].push_back(st);
  detail::zero_bubble_clock(s, chunk_stages, b, times, "interleaved-zb");
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
