#pragma once
// What `pipetrain plan` decides once the search has its candidates, so that the command only
// parses its flags and prints (docs/design.md, apps/): the plan it writes, the figures that plan
// records, and the notes that say why it was chosen and what it trades. Three ways to a plan:
//  - the referee (referee.h): the candidates replayed under the pipedream schedule, the fastest
//    chosen with its all-reduce bucket;
//  - the joint search (joint_search.h): schedule, microbatches and recomputation too, under a
//    memory cap;
//  - PipeDream's optimizer (--cost-model pipedream): its one plan, simulated, its memory checked
//    by the memory model.
#include <string>

#include "plan/plan.h"
#include "plan/plan_command.h"
#include "referee/joint_search.h"

namespace pt::referee {

// What `plan` was asked beyond the search's own options.
struct PlanRequest {
  bool joint = false;  // the joint search, with `joint_options`, rather than the referee alone
  JointOptions joint_options;
  // The memory model's options for every path (--no-weight-prediction: the runtime's weight
  // prediction off); the joint search takes them as joint_options.memory.
  schedule::MemoryOptions memory;
  // --bucket-mb as given (the options' bucket_bytes is it rounded to bytes), and whether it was:
  // else the referee gives the choice the bucket it runs fastest with.
  double bucket_mb = 0;
  bool bucket_given = false;
  int top = 0;           // --top K: the K best candidates, with why each lost
  bool explain = false;  // --explain: the choice's stages, links and memory
};

struct PlanDecision {
  plan::Plan plan;   // what `plan` writes: the choice, its figures, and notes (Plan::notes)
  plan::Plan shown;  // the plan as its schedule runs it, for the table
  bool one_worker_fits = true;  // whether the table may advise one worker (format_plan_table)
  std::string summary;  // the lines under the table (the joint search's choice in words)
  std::string reports;  // --top's and --explain's, each after a blank line
  // The --top best candidates as plan files run them (the first is `plan`): the schedule they
  // were replayed under, the bucket each was timed with, their simulated time as the prediction.
  // So each can be trained and measured (plan --save-top DIR); the joint search's, placed as they run.
  std::vector<plan::Plan> top;
};

// Throws ConfigError where no candidate can run or none fits the memory cap.
PlanDecision decide_plan(const plan::PlanOutcome& searched, const PlanRequest& request);

// The plan as its schedule runs it: interleaved and V schedules run several of its stages on one
// worker, where the file numbers a worker per stage (a zb-v plan of 4 stages on 2 workers read
// "on 4 workers", stage 3 on worker 3).
plan::Plan as_run(const plan::Plan& p);

}  // namespace pt::referee
