#pragma once
// Orders a worker's forwards and backwards by stepping a unit clock (internal to src/schedule).
// Used for interleaved 1F1B where Megatron's closed form has no valid order (microbatches not a
// multiple of the workers).
#include <utility>
#include <vector>

#include "schedule/schedule.h"

namespace pt::schedule::detail {

struct WorkerQueues {
  std::vector<std::pair<int, int>> forwards;   // (stage, mb) in the order to run them
  std::vector<std::pair<int, int>> backwards;  // (stage, mb) in the order to run them
  int limit = 1;  // most microbatches between F and B
};

// Appends F/B to each worker of `s` (single-replica stages): in each slot a worker runs its next
// backward if its inputs are done, else its next forward if its inputs are done and fewer than
// `limit` microbatches are in flight. F and B take one slot each.
void clock_order(Schedule& s, const std::vector<WorkerQueues>& queues);

}  // namespace pt::schedule::detail
