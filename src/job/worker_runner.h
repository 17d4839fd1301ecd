#pragma once
// The one place a worker's job is run, whatever the transport: threads start one worker per
// thread of this process (threads_job.h), gloo one per process (gloo_job.h); they differ only
// in how workers start and how tensors move. Here: the segments (training, test evaluations,
// checkpoints), the losses, progress and result on the reporting worker, and the error that
// names the worker and what it was doing.
#include <vector>

#include "job/job.h"
#include "job/training_clock.h"
#include "runtime/checkpoint.h"

namespace pt::job {

// A worker's failure: "worker <rank> at <action>: <cause>". `consequence`: it stopped because
// another worker aborted the job (JobAborted), so it is not the root cause. `diverged`: the
// reporting worker found the job's loss not finite (runtime::TrainingDiverged), said as it is:
// the loss is the job's, not its worker's, and is reported between actions.
struct WorkerFailure : RuntimeFailure {
  WorkerFailure(const std::string& what, bool consequence, bool diverged = false)
      : RuntimeFailure(what), consequence(consequence), diverged(diverged) {}
  bool consequence;
  bool diverged;
};

struct WorkerRun {
  bool reports = false;  // this is the reporting worker: `train` is filled
  runtime::TrainResult train;  // steps, seconds and samples/s (evaluations excluded), final loss, test accuracy
  std::vector<schedule::TraceEvent> trace;
  std::vector<std::pair<double, double>> pauses;  // schedule::Trace::pauses, this worker's
};

// The per-worker loop both transports share: runs every segment's schedule and, at epoch ends
// (when the job's options evaluate), the test-set evaluation through the pipeline.
// With a checkpoint folder, the workers write a checkpoint after the segments that call for
// one (collectively, through `transport`); a resumed job first loads the checkpoint's layers.
// `on_evaluated(segment, evaluation)` is called after the pause's evaluation, before its
// checkpoint is written (the figures < 0 where there was none, and on workers without the last
// stage). `clock` stops at each pause's barrier and at the job's end (the collective of them all)
// and resumes after the pause.
// `trained(segment)`, where given, is called on every worker after each segment's training (once
// every worker has ended it, where a pause or the job's end follows), before its pause.
using EvaluatedCallback = std::function<void(const Segment&, const runtime::Evaluation&)>;
using TrainedCallback = std::function<void(const Segment&)>;
// `run_loss()`, where given, is the run's loss so far (the reporting worker's; called on every
// worker before each checkpoint, after `trained`), which the checkpoint judges and records.
using RunLossSource = std::function<runtime::RunLoss()>;
// Builds the worker's stages and loads the checkpoint the job resumes from, if any; charged to
// the calling thread's account (run_worker calls it before its start barrier).
void prepare_worker(runtime::Worker& worker, const Job& job);
// Each segment runs the schedule the job made for it (Job::schedule_of): the runner derives none.
// The worker is prepared first (prepare_worker).
void run_worker_segments(runtime::Worker& worker, runtime::Transport& transport, const Job& job,
                         const model::DataSplit& data, TrainingClock& clock, const EvaluatedCallback& on_evaluated,
                         const TrainedCallback& trained = nullptr, const RunLossSource& run_loss = nullptr);

// Every worker's `mine` (a measured peak), on every worker: a collective of all of them.
std::vector<int64_t> gather_peaks(runtime::Transport& transport, int64_t mine);

// Runs worker.rank()'s share of the job; trace times are relative to trace_origin_ms (wall_ms()).
// Throws WorkerFailure; the caller aborts the transport so that the other workers stop.
// `memory`: the worker's account (build_worker_model), charged with what its training allocates.
WorkerRun run_worker(runtime::Worker& worker, runtime::Transport& transport, const Job& job,
                     const model::DataSplit& data, double trace_origin_ms, std::shared_ptr<model::MemoryAccount> memory);

}  // namespace pt::job
