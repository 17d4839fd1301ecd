// Interleaved 1F1B: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
// Clusters Using Megatron-LM", SC 2021, §2.2.2. The plan has p * v stages; stage s runs on worker
// s % p as its model chunk s / p, so each worker holds v small chunks and a microbatch visits
// every worker v times. Forwards go in groups of p microbatches, chunk by chunk
// (chunk 0 of mb 0..p-1, chunk 1 of mb 0..p-1, ...); backwards the same with the chunks reversed.
// Worker w warms up with (p - w - 1) * 2 + (v - 1) * p forwards, then alternates one forward and
// one backward, then drains. p = 2, v = 2, m = 4 (stages 0,2 on w0 and 1,3 on w1; one slot each):
//
//   w0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3
//   w1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3
//   (each worker's order, not to scale)
//
// The bubble shrinks by v: (p-1)/(v*m + p-1) with per-chunk times F/v, B/v. When m is not a
// multiple of p the last group is short and the closed form can deadlock; then the same
// forward/backward queues and warm-up limit are ordered by the unit clock (clock_order.h).
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "schedule/clock_order.h"
#include "schedule/generator_util.h"
#include "schedule/generators.h"

namespace pt::schedule {

namespace {
// The (chunk, microbatch) order in which a worker runs its forwards (or backwards).
std::vector<std::pair<int, int>> chunk_order(int p, int v, int m, bool forward) {
  std::vector<std::pair<int, int>> order;
  for (int first = 0; first < m; first += p)
    for (int c = 0; c < v; ++c)
      for (int k = first; k < std::min(m, first + p); ++k) order.emplace_back(forward ? c : v - 1 - c, k);
  return order;
}
}  // namespace

Schedule interleaved(const plan::Plan& plan, int microbatches, int chunks) {
  Schedule s = detail::looped_skeleton(plan, "interleaved", microbatches, chunks);
  const int p = s.num_workers();
  int total = chunks * microbatches;
  auto fwd = chunk_order(p, chunks, microbatches, true);
  auto bwd = chunk_order(p, chunks, microbatches, false);
  std::vector<detail::WorkerQueues> queues(p);
  for (int w = 0; w < p; ++w) {
    // Megatron runs everything as warm-up when m == p (its "all_warmup" case). One chunk a worker
    // warms up as 1F1B does (p - w - 1): Megatron's 2(p - w - 1) ran VGG-16 on 4 workers at
    // GPipe's 869 ms a minibatch, where 1F1B's 782 (one_chunk_note says it is 1F1B).
    int warmup = chunks == 1        ? std::min(total, p - w - 1)
                 : microbatches == p ? total
                                     : std::min(total, (p - w - 1) * 2 + (chunks - 1) * p);
    if (microbatches % p != 0) {
      // Megatron's closed form needs whole groups; with a short last group it can deadlock,
      // so the same queues and warm-up limit are ordered by the unit clock instead.
      for (int i = 0; i < total; ++i) {
        queues[w].forwards.emplace_back(fwd[i].first * p + w, fwd[i].second);
        queues[w].backwards.emplace_back(bwd[i].first * p + w, bwd[i].second);
      }
      queues[w].limit = warmup + 1;
      continue;
    }
    for (int i = 0; i < warmup; ++i) s.add(w, ActionKind::kForward, fwd[i].first * p + w, fwd[i].second);
    for (int i = 0; i < total; ++i) {
      if (i + warmup < total) s.add(w, ActionKind::kForward, fwd[i + warmup].first * p + w, fwd[i + warmup].second);
      s.add(w, ActionKind::kBackward, bwd[i].first * p + w, bwd[i].second);
    }
  }
  if (microbatches % p != 0) detail::clock_order(s, queues);
  detail::append_flush(s, 0);
  return s;
}

}  // namespace pt::schedule
