#pragma once
// One worker of a multi-process (`gloo`) pipeline job, run in this process. Every process of the
// job builds the same JobLayout (pipeline_job.h) and runs the same per-worker segment loop as
// the threads transport; only the worker holding the last stage's replica 0 reports progress.
#include <functional>
#include <memory>
#include <string>

#include "runtime/gloo_transport.h"
#include "runtime/pipeline_job.h"
#include "runtime/worker_runner.h"

namespace pt::runtime {

// Runs worker config.rank. The result's trace holds world-size entries, only this worker's
// filled; train.steps/final_loss/test_accuracy are meaningful on the reporting worker
// (reporting_worker()). `worker_out`, when given, receives the worker (tests read its
// replicas). Throws RuntimeFailure "worker <rank> at <action>: <cause>"; by then the transport is
// aborted, so this process can exit without waiting for its peers.
PipelineResult run_gloo_worker(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                               const PipelineOptions& options, const GlooConfig& config,
                               std::unique_ptr<Worker>* worker_out = nullptr);

// The CLI's gloo path for a process started as one worker (RANK or OMPI_COMM_WORLD_RANK set):
// reads the environment, runs the worker, and on the reporting worker calls on_result; each
// worker writes its trace to trace_path + ".worker<rank>" when trace_path is set (the launcher
// merges them into trace_path). Returns the exit code; on failure prints
// "pipetrain worker <rank>: <action>: <cause>" to stderr and returns 1.
int train_with_gloo(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                    const PipelineOptions& options, const std::string& trace_path,
                    const std::function<void(const PipelineResult&)>& on_result);

}  // namespace pt::runtime
