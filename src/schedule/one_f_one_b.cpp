// 1F1B with a flush: PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
// Training", ICML 2021, §3.2) = DAPPLE's early-backward schedule (Fan et al., PPoPP 2021).
// Stage i runs p - i warm-up forwards, then alternates one backward and one forward, then
// drains the backwards, and the minibatch flushes. p = 4, m = 6, F = B = one slot:
//
//   w0: 0F0 0F1 0F2 0F3  .   .   .  0B0 0F4 0B1 0F5 0B2  .  0B3  .  0B4  .  0B5
//   w1:  .  1F0 1F1 1F2  .   .  1B0 1F3 1B1 1F4 1B2 1F5 1B3  .  1B4  .  1B5
//   w2:  .   .  2F0 2F1  .  2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4  .  2B5
//   w3:  .   .   .  3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5
//
// Same bubble as GPipe, (p-1)/(m+p-1), but stage i stashes at most min(p-i, m) microbatches.
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

Schedule one_f_one_b(const plan::Plan& plan, int microbatches) {
  Schedule s = detail::skeleton(plan, "1f1b", microbatches, 1);
  detail::require_work_per_replica(s, microbatches);
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st])
      detail::append_1f1b(s, w, st, detail::items_of(s, st, w, microbatches),
                          detail::one_f_one_b_warmup(s, st), [](int) {});
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
