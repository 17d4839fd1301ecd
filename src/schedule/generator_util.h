#pragma once
// Helpers shared by the generators (internal to src/schedule).
#include <string>
#include <vector>

#include "plan/plan.h"
#include "schedule/schedule.h"

namespace pt::schedule::detail {

// A schedule with the plan's stages and placement and empty action lists.
Schedule skeleton(const plan::Plan& plan, const std::string& kind, int microbatches, int minibatches);

// The V placement (zb-v, v-half, v-min, dualpipev): 2p single-replica stages on p workers, worker
// w holding stage w and stage 2p - 1 - w; two chunks, every backward split. ConfigError for a plan
// of an odd number of stages or with replicas.
Schedule v_skeleton(const plan::Plan& plan, const std::string& kind, int microbatches);

// The looped placement (interleaved, interleaved-zb): p x chunks single-replica stages on p
// workers, stage s on worker s % p. UsageError for chunks < 1, ConfigError for a plan that does
// not suit.
Schedule looped_skeleton(const plan::Plan& plan, const std::string& kind, int microbatches, int chunks);

// Throws ConfigError unless every replica of every stage gets at least one of `items`.
void require_work_per_replica(const Schedule& s, int items);

// The microbatches (out of `items`) that `worker` runs for `stage`, in order.
std::vector<int> items_of(const Schedule& s, int stage, int worker, int items);

// Forwards a replica keeps in flight in 1F1B: the workers from its stage to the end divided by
// its stage's replicas (PipeDream's NOAM generalised to every stage), at least 1.
int one_f_one_b_warmup(const Schedule& s, int stage);

// Appends, for `worker`, warm-up forwards then one backward / one forward, then the rest of
// the backwards. `after_backward(k)` runs after each B (to add AllReduce/Step), or, with
// `after_next_forward`, after the forward that follows that B.
template <typename AfterBackward>
void append_1f1b(Schedule& s, int worker, int stage, const std::vector<int>& items, int warmup,
                 AfterBackward after_backward, bool after_next_forward = false) {
  int n = static_cast<int>(items.size());
  if (warmup > n) warmup = n;
  for (int i = 0; i < warmup; ++i) s.add(worker, ActionKind::kForward, stage, items[i]);
  for (int i = 0; i < n; ++i) {
    s.add(worker, ActionKind::kBackward, stage, items[i]);
    if (!after_next_forward) after_backward(items[i]);
    if (i + warmup < n) s.add(worker, ActionKind::kForward, stage, items[i + warmup]);
    if (after_next_forward) after_backward(items[i]);
  }
}

// Appends, on every worker, AllReduce(stage, id) for replicated stages and Step(stage, id),
// stages in ascending order.
void append_flush(Schedule& s, int id);


}  // namespace pt::schedule::detail
