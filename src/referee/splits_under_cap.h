#pragma once
// The splits the joint search tries under its memory cap (internal to src/referee), beside a
// configuration over it: model parallelism's fewest bytes among the splits whose every worker
// fits, a pipeline's most balanced such split (planner.h: balanced_split_fitting). VGG-16 under
// 100 MB on 4 workers had no 1F1B plan from the balanced splits alone (their smallest 114 MiB),
// where model parallelism's fit at 95.
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "plan/cluster.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "referee/joint_search.h"
#include "referee/joint_trials.h"
#include "schedule/memory.h"
#include "schedule/schedule.h"

namespace pt::referee::detail {

// Whether a trial has such a split: a pipeline of two stages or more (of chunks: one worker each).
bool splits_under_cap(const Trial& t);
// Whether its workers each hold chunks (the V and interleaved schedules): a worker's memory is
// its chunks' together, so no stage fits on its own, and the split is plan::rebalance_chunks'.
bool held_in_chunks(const Trial& t);

// A stage's memory is weighed by the memory model at its place among the stages, without
// recomputation or else with it (the joint search adds it where a stage is over): on the trial's
// schedule, the layers either side of it on the stages before and after (model parallelism
// holds the same wherever a stage stands: the layers either side a stage each). The schedule's
// lists are the trial's, only their layers moved: a zero-bubble order weighed by the layers'
// times may differ a little. Weighing every range was minutes on DenseNet-121's 429 layers, so
// each place's longest stage from each first layer is found by a sweep, as if a longer stage, or
// one starting earlier, never held less: where one does, a split is missed or tried over the cap,
// never chosen over it (the joint search weighs each whole plan again).
class SplitsUnderCap {
 public:
  // `shape`: a trial over the cap (its kind, settings and plan: replicas, workers and stash
  // depths each split keeps); `p` the profile at the profile's own batch.
  SplitsUnderCap(const profile::Profile& p, const Trial& shape, const plan::Cluster& cluster, const JointOptions& joint);

  // `tried` (the shape's plan; model parallelism's, any number of stages) with its layers split
  // so that every worker fits the cap: none where none does. A pipeline's split weighs the link
  // across its workers, as link_aware_split does; a chunked one's two, with the link and without.
  std::vector<plan::Plan> splits(const plan::Plan& tried);

 private:
  std::optional<plan::Plan> split_chunks(const plan::Plan& tried, double ms_per_byte);
  double ms_per_byte(const plan::Plan& tried);
  schedule::Schedule& probe(int stages);
  bool fits(int place, int first, int end);
  bool anywhere() const { return trial_.kind == "mp"; }  // a stage holds the same at every place

  profile::Profile p_;
  Trial trial_;
  const plan::Cluster& cluster_;
  const JointOptions& joint_;
  schedule::MemoryOptions memory_;  // the joint search's, the optimizer's state copies settled
  int n_;
  std::vector<int64_t> parameters_;          // prefix sums
  std::map<int, schedule::Schedule> probes_;  // by stage count: the lists whose layers fits() moves
  std::map<std::pair<int, int>, std::vector<int>> kept_;  // by stage count and worker: weight_versions_kept
  std::vector<std::vector<int>> longest_;     // [place][first layer] -> the end of its longest stage that fits
};

}  // namespace pt::referee::detail
