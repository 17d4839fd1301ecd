#pragma once
// The validator: every schedule is checked before anything runs it (docs/design.md).
//
// Checks, in order, each failure an InvalidSchedule naming the worker, the step (position in
// the worker's list) and the action, followed by the worker x step grid with the step marked:
//  1. placement: each action's stage is held by its worker, compute runs on worker_of(stage, mb),
//     peers are the workers of the neighbouring stage, W only where split_backward;
//  2. coverage: every microbatch is forwarded and backwarded (and W'd where split) exactly once
//     per stage;
//  3. order within a worker: F(s, k) after its input (RA, or F(s-1, k) on the same worker),
//     B after its F and its output gradient (RG, or B(s+1, k) on the same worker), W after B,
//     a send after the compute that produced its data;
//  4. every send matched by exactly one receive and vice versa;
//  5. no deadlock with blocking point-to-point semantics: the lists are replayed with each
//     send blocking until its receiver reaches the matching receive and each AllReduce blocking
//     until every replica reaches it (rendezvous, the strictest semantics: a schedule that is
//     safe under it is safe when sends are asynchronous too);
//  6. stash depth within the budget: on every replica, the weight versions alive at once (those
//     of the microbatches between F and their last backward, and the newest) are at most the
//     stage's weight_versions, which the runtime allocates (schedule.h).
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "schedule/schedule.h"

namespace pt::schedule {

struct InvalidSchedule : Error {
  using Error::Error;
};

struct WorkerCounts {
  int peak_stash = 0;       // most microbatches between F and their last backward (B, or W)
  int weight_versions = 1;  // most weight versions alive at once on one of its stages
};

struct ValidationReport {
  std::vector<WorkerCounts> workers;
  int steps = 0;  // rounds of the rendezvous replay (a rough depth of the schedule)
};

ValidationReport validate(const Schedule& s);

// Per worker: peak stash and weight versions, counted from the lists alone. A microbatch's
// version on a stage is the number of Steps its worker ran on that stage before its forward;
// the versions alive are those of the microbatches in flight plus the current one.
std::vector<WorkerCounts> stash_counts(const Schedule& s);

// The worker x step grid, one column per step; `marks` (worker, step) are shown as [2F0].
// Long schedules show the 24 steps around the first mark.
std::string format_grid(const Schedule& s, const std::vector<std::pair<int, int>>& marks = {},
                        bool compute_only = false);

}  // namespace pt::schedule
