#pragma once
// Workers that outnumber their host's cores, placed on them: the runtime pins each worker to its
// core (job/core_pinning.h), and the simulator shares each core among the workers placed on it
// (SimOptions::placement). Left to itself, the kernel does not share 2 cores among 4 threads as
// one pool: in the demo's plan (3 replicas of mnist-cnn's first stage, one of the rest, 1f1b, 4
// microbatches) the replica holding 2 of the 4 microbatches took 11.6 ms a minibatch for 7.3 ms of
// its own compute, where sharing the cores as one pool gives it 9.8; pinned as placed here, the
// run measured the same (x0.99 of the wall time, farm-bench) and shares its cores as simulated.
#include <vector>

#include "schedule/schedule.h"
#include "sim/stage_costs.h"

namespace pt::sim {

// Each worker's core, 0..cores-1: the busiest first (its computes and steps per minibatch of the
// schedule, by the stages' costs), each on the core with the least work placed yet (the lowest of
// equals). Every worker its own core where they are no more than the cores; empty for cores < 1.
std::vector<int> place_on_cores(const schedule::Schedule& s, const std::vector<StageCost>& costs, int cores);

}  // namespace pt::sim
