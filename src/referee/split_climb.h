#pragma once
// The joint search's climb over a configuration's split (internal to src/referee): its layers'
// boundaries moved one layer at a time, each split replayed, the fastest kept, until no move is
// faster. The even and link-aware splits the search starts from balance the layers' compute and,
// at most, their bytes over one link's time; the simulator sees more (a worker's sends behind its
// compute, both directions of a cut, the warm-up), and on a 5-layer profile at 10 Gbit/s split
// [0] | [1, 2, 3] | [4] ran 1F1B at 22.669 ms a minibatch where the best of those splits ran
// 25.496 (the pipedream plans get the referee's own climb, referee.h).
#include <chrono>
#include <functional>
#include <vector>

#include "plan/plan.h"
#include "referee/joint_trials.h"

namespace pt::referee::detail {

// The splits one layer away from `p`: a stage's last layer moved to the stage after it, or its
// first to the stage before, where each keeps a layer; replicas, workers and in-flight kept.
std::vector<plan::Plan> moved_boundaries(const plan::Plan& p);
// Between two stages that are runs of layers, the boundary moved farther, each way, to the nearest
// cut that crosses fewer bytes than it does and fewer than a layer beside it (`bytes_after`:
// profile::bytes_after_each_layer). A move of a layer at a time climbs no hill: GNMT-16's 2 stages
// under GPipe at 1 Gbit/s ended at a cut crossing 12.5 MiB, each move a layer slower, where the
// cut between encoder and decoder, two layers away and crossing 6.2, ran 21% faster.
std::vector<plan::Plan> jumped_boundaries(const plan::Plan& p, const std::vector<double>& bytes_after);

// A trial that fits, weighed: its objective, and whether it splits a BatchNorm model's batch into
// microbatches too small (few_batch_norm_samples: ranked after every other).
struct Weighed {
  double objective = 0;
  bool few_batch_norm_samples = false;
  Trial trial;
};

// A trial's objective where it runs and fits (infinity where not); weighing it may rank it.
using WeighTrial = std::function<double(const Trial&)>;

// Steepest descent from `start` (its objective `start_objective`) over moved_boundaries, and over
// jumped_boundaries where none of those gains; the trial it ends on. Each move must gain more than the replay's rounding. Past `deadline` no move
// is weighed (`timed_out` set).
Trial climb_split(const Trial& start, double start_objective, const WeighTrial& weigh,
                  const std::vector<double>& bytes_after, std::chrono::steady_clock::time_point deadline,
                  bool& timed_out);

// The trials the climb starts from, of those that fit: for each schedule kind but pipedream's
// and data parallelism, the best of each shape (the kind's settings, the stage count, each
// stage's replicas and workers), at most `per_kind` of them, in the search's order (few BatchNorm
// samples last: such shapes, often the fastest, had taken every start from the one chosen).
std::vector<Weighed> climb_starts(const std::vector<Weighed>& fits, int per_kind);

}  // namespace pt::referee::detail
