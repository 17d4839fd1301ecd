#pragma once
// The one place a worker's job is run, whatever the transport: threads start one worker per
// thread of this process (pipeline_job.h), gloo one per process (gloo_job.h); they differ only
// in how workers start and how tensors move. Here: the segments (training, test evaluations,
// checkpoints), the losses, progress and result on the reporting worker, and the error that
// names the worker and what it was doing.
#include <vector>

#include "runtime/pipeline_job.h"

namespace pt::runtime {

// The worker that holds the last stage's replica 0: it reports losses and test accuracy.
int reporting_worker(const schedule::Schedule& s);

// A worker's failure: "worker <rank> at <action>: <cause>". `consequence`: it stopped because
// another worker aborted the job (JobAborted), so it is not the root cause.
struct WorkerFailure : RuntimeFailure {
  WorkerFailure(const std::string& what, bool consequence) : RuntimeFailure(what), consequence(consequence) {}
  bool consequence;
};

struct WorkerRun {
  bool reports = false;  // this is the reporting worker: `train` is filled
  TrainResult train;     // steps, seconds and samples/s (evaluations excluded), final loss, test accuracy
  std::vector<schedule::TraceEvent> trace;
};

// Runs worker.rank()'s share of the job; trace times are relative to trace_origin_ms (wall_ms()).
// Throws WorkerFailure; the caller aborts the transport so that the other workers stop.
WorkerRun run_worker(Worker& worker, Transport& transport, const JobLayout& job, const plan::Plan& plan,
                     const PipelineOptions& o, const model::DataSplit& data, double trace_origin_ms);

}  // namespace pt::runtime
