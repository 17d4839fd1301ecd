#pragma once
// How a job's minibatches are cut into segments: the runs of one schedule between which the
// pipeline drains for an evaluation, a checkpoint or an epoch's end.
#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "schedule/schedule.h"

namespace pt::job {

// The minibatches run by each schedule repetition: synchronous schedules one at a time;
// asynchronous ones an epoch at a time (the pipeline drains at each epoch's end, where test
// accuracy is measured), in multiples of every stage's replica count, and cut every
// `checkpoint_every` and every `eval_every` minibatches (each rounded up to that multiple) so
// that checkpoints and evaluations see a drained pipeline.
// Training starts at minibatch `first_step` (a resumed checkpoint's step).
struct Segment {
  int64_t first_minibatch = 0;
  int minibatches = 1;
  bool ends_epoch = false;
  int64_t epoch = 0;
  bool checkpoint = false;  // a checkpoint is written after it
  bool evaluate = false;    // test accuracy is measured after it (epoch ends and eval_every)
};
std::vector<Segment> plan_segments(const schedule::Schedule& typical, const plan::Plan& plan, int64_t per_epoch,
                                   int64_t total_steps, int64_t first_step = 0, int64_t checkpoint_every = 0,
                                   int64_t eval_every = 0);

// The minibatches pipedream's replicas take together, each a whole minibatch in turn: the lcm of
// its stages' replica counts. 1 for the others: a flushing schedule's and 2bw's replicas split
// each minibatch's microbatches (2bw skipped a minibatch of each epoch, and rounded
// --eval-every, for rounds it does not have).
int64_t replica_round(const schedule::Schedule& typical, const plan::Plan& plan);

}  // namespace pt::job
