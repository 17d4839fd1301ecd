// GPipe: Huang et al., "GPipe: Efficient Training of Giant Neural Networks using Pipeline
// Parallelism", NeurIPS 2019, §2.2. Fill-drain: every stage runs all m forwards, then all m
// backwards, then the minibatch flushes (all-reduce among replicas, Step). p = 4, m = 4
// (F and B one slot each for the picture; B is about 2F in practice; the simulator's --grid):
//
//   w0: 0F0 0F1 0F2 0F3   .   .   .   .   .   . 0B0 0B1 0B2 0B3
//   w1:   . 1F0 1F1 1F2 1F3   .   .   .   . 1B0 1B1 1B2 1B3   .
//   w2:   .   . 2F0 2F1 2F2 2F3   .   . 2B0 2B1 2B2 2B3   .   .
//   w3:   .   .   . 3F0 3F1 3F2 3F3 3B0 3B1 3B2 3B3   .   .   .
//
// Bubble (p-1)/(m+p-1); every stage stashes all m microbatches' activations.
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

Schedule gpipe(const plan::Plan& plan, int microbatches) {
  Schedule s = detail::skeleton(plan, "gpipe", microbatches, 1);
  detail::require_work_per_replica(s, microbatches);
  for (int st = 0; st < s.num_stages; ++st)
    for (int w : s.stage_workers[st]) {
      auto items = detail::items_of(s, st, w, microbatches);
      for (int k : items) s.add(w, ActionKind::kForward, st, k);
      for (int k : items) s.add(w, ActionKind::kBackward, st, k);
    }
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
