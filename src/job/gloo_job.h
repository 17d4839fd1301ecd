#pragma once
// One worker of a multi-process (`gloo`) pipeline job, run in this process. Every process of the
// job holds the same Job (job.h: made once in each process, or inherited from the launcher that
// forked it) and runs the same per-worker segment loop as the threads transport; only the
// worker holding the last stage's replica 0 reports progress.
#include <functional>
#include <memory>
#include <string>

#include "job/job.h"
#include "job/worker_runner.h"
#include "profile/profile.h"
#include "runtime/gloo_transport.h"

namespace pt::job {

// Runs worker config.rank of `job`; `described` is the model make_job was given (its digest is
// compared with every other worker's at rendezvous, its ties make all-reduce groups). The
// result's trace holds world-size entries, only this worker's filled;
// train.steps/final_loss/test_accuracy are meaningful on the reporting worker. `worker_out`,
// when given, receives the worker (tests read its replicas). `trace_path`, where given, gets this
// worker's part of the trace as TRACE.worker<rank> (the launcher merges them). Rank 0 holds the checkpoint
// folder's lock. Throws RuntimeFailure "worker <rank> at <action>: <cause>", said on stderr
// (after "pipetrain ") before the transport is aborted, so this process can exit without waiting
// for its peers, whose exits may bring the launcher's SIGTERM here. Once the workers agree on
// `data`, this process releases what the worker's stages never read (worker_data.h).
PipelineResult run_gloo_worker(const Job& job, const ModelFactory& factory, const model::LayeredModel& described,
                               model::DataSplit& data, const runtime::GlooConfig& config,
                               std::unique_ptr<runtime::Worker>* worker_out = nullptr, const std::string& trace_path = "");

// The shared memory each worker maps resident for its transfers where a gloo job's workers share
// a host (PipelineResult::shared_memory): both rings of each channel that carries tensors, filled
// once 4 MiB has crossed each way, and each all-reduce group's slots (ShmAllreduce::touched_bytes)
// for messages of its stages' gradients, or of the bucket where smaller. The loss lists'
// channels carry a few bytes a step and count none. `gradients`: each worker's gradient bytes
// (schedule::WorkerMemory::gradients). `ties`: the profile's trainable ties, whose copies on
// different workers sum their gradients whole in a group of their own (tied_gradients.h): a
// Llama's tied embedding of 16 MiB mapped 13.6 MiB more than the rings counted.
std::vector<int64_t> shared_memory_per_worker(const Job& job, const std::vector<int64_t>& gradients,
                                              const std::vector<profile::Tie>& ties);

// A library caller's road: make_job, then run_gloo_worker, `data` kept whole.
PipelineResult run_gloo_worker(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                               const PipelineOptions& options, const runtime::GlooConfig& config,
                               std::unique_ptr<runtime::Worker>* worker_out = nullptr);

// The CLI's gloo path for a process started as one worker (RANK or OMPI_COMM_WORLD_RANK set):
// reads the environment, runs the worker, and on the reporting worker calls on_result (once the
// job is over: what it throws, a diverged loss, propagates to the command); each
// worker writes its trace to trace_path + ".worker<rank>" when trace_path is set (the launcher
// merges them into trace_path). Returns the exit code; on failure prints
// "pipetrain worker <rank>: <action>: <cause>" to stderr and returns 1. `started_apart`: by
// torchrun or mpirun, not this launcher.
int train_with_gloo(const Job& job, const ModelFactory& factory, const model::LayeredModel& described,
                    model::DataSplit& data, const std::string& trace_path,
                    const std::function<void(const PipelineResult&)>& on_result, bool started_apart = false);

}  // namespace pt::job
