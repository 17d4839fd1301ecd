#pragma once
// `compare`'s rows, decided here so that the command only prints them: each schedule's best
// configuration by the joint search (plan, microbatches, recomputation, bucket), then data
// parallelism as users run it, weak (every worker a minibatch) and strong (one minibatch split
// over the workers), each replayed to its steady state at the bucket it runs fastest with, as
// `train` pins it, with the memory model's fullest worker.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "profile/profile.h"
#include "schedule/generators.h"

namespace pt::referee {

struct ComparisonOptions {
  schedule::ScheduleOptions schedule;  // microbatches: pinned where given (microbatches_given)
  bool microbatches_given = false;
  int chunks = 0;                      // interleaved's chunks per worker, pinned (0: searched)
  int64_t memory_bytes = 0;            // per worker; 0: the cluster's (plan::memory_limit)
  bool weight_prediction = true;       // the runtime's (MemoryOptions::weight_prediction)
  // What a user waiting on the search should hear (a slow search's progress, a schedule skipped).
  std::function<void(const std::string&)> note = [](const std::string&) {};
};

struct ComparisonRow {
  std::string kind;     // the schedule, "dp" or "dp-split"
  std::string plan;     // its configuration: shape, x chunks, m microbatches, bN bucket, rc
  std::string cell;     // `plan` shortened for the table; empty: `plan`
  metrics::Metrics m;
  std::string scaling;  // data parallelism only: "weak" (the baseline) or "strong"
  int64_t peak_memory = 0;  // the memory model's, fullest worker
};

struct Comparison {
  std::vector<ComparisonRow> rows;
  std::string plan_note;   // how the schedules' plans were chosen
  double dp_rate = 0;      // the weak dp row's samples/s (0: none), the speedups' base
  int64_t memory_cap = 0;  // per worker (0: none)
};

Comparison compare_schedules(const profile::Profile& prof, const plan::Cluster& cluster, const ComparisonOptions& options);

// The schedules compare searches, in its table's order.
const std::vector<std::string>& compared_schedules();

}  // namespace pt::referee
