#pragma once
// The zero-bubble order on a unit clock for workers that hold several chunks (internal to
// src/schedule): the V schedules (zero_bubble_v.cpp) and interleaved zero bubble
// (interleaved_zero_bubble.cpp) differ only in where the chunks sit and in the budget.
#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace pt::schedule::detail {

struct ChunkBudget {
  std::vector<double> adds;   // [stage] what an F holds until its W (any unit; 1 = count chunk-microbatches)
  std::vector<double> limit;  // [worker] the most it holds at once
};

// Appends every F, B and W of `s` (single-replica stages, split backwards; `chunks[w]` = worker
// w's stages in pipeline order). In each slot (F = B = W = one slot) a worker runs the first of
//   1. a B whose inputs are done (its own F, and the next stage's B): the earliest microbatch,
//      the later chunk on a tie;
//   2. an F whose input is done and that leaves room, within the worker's limit, for the same
//      microbatch in each of its later chunks (so a microbatch that enters always gets through,
//      and its W frees the room): the later chunk first, as it brings a microbatch's B sooner;
//   3. its oldest W;
// until all have run. InternalError (naming `kind`) if no worker can ever run again.
void zero_bubble_clock(Schedule& s, const std::vector<std::vector<int>>& chunks, const ChunkBudget& budget,
                       const std::string& kind);

}  // namespace pt::schedule::detail
