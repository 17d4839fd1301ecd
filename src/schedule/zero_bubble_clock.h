#pragma once
// The zero-bubble order for workers that hold several chunks (internal to src/schedule): the V
// schedules (zero_bubble_v.cpp) and interleaved zero bubble (interleaved_zero_bubble.cpp) differ
// only in where the chunks sit and in the budget.
#include <string>
#include <vector>

#include "schedule/generators.h"
#include "schedule/schedule.h"

namespace pt::schedule::detail {

struct ChunkBudget {
  std::vector<double> adds;   // [stage] what an F holds until its W (any unit; 1 = count chunk-microbatches)
  std::vector<double> limit;  // [worker] the most it holds at once
};

// Appends every F, B and W of `s` (single-replica stages, split backwards; `chunks[w]` = worker
// w's stages in pipeline order). Whenever a worker is free it runs the first of
//   1. a B whose inputs are there (its own F, and the next stage's gradient): the earliest
//      microbatch, the later chunk on a tie;
//   2. an F whose input is there and that leaves room, within the worker's limit, for the same
//      microbatch in each of its later chunks (so a microbatch that enters always gets through,
//      and its W frees the room): the later chunk first, as it brings a microbatch's B sooner;
//   3. its oldest W;
// until all have run. On the clock of `times` (generators.h) each action takes its stage's time
// and a hand-over to another worker arrives after its message, each worker's port sending and
// receiving one at a time; without times every action is one slot and hand-overs are free (the
// papers' unit clock). Where messages take as long as the computes (vgg16 at 10 Gbps), the unit
// clock's order has workers wait on a gradient still in flight while an F could run; where they
// are short, a choice on true times can start a W just before a B's gradient arrives and hold
// up the critical path: sim::weigh_schedule keeps the times only where they simulate sooner.
// InternalError (naming `kind`) if no worker can ever run again.
void zero_bubble_clock(Schedule& s, const std::vector<std::vector<int>>& chunks, const ChunkBudget& budget,
                       const ActionTimes& times, const std::string& kind);

}  // namespace pt::schedule::detail
