#pragma once
// The `threads` transport's job: every worker a thread of this process, tensors handed over in
// memory (thread_transport.h), each running its share through worker_runner.h.
#include <memory>
#include <vector>

#include "job/worker_runner.h"

namespace pt::job {

// All workers of `job` as threads of this process; the process holds the checkpoint folder's
// lock while they run. `workers_out`, when given, receives the workers (tests inspect their
// replicas). Throws RuntimeFailure naming the worker, the action and the cause of the first
// failure.
PipelineResult run_on_threads(const Job& job, const ModelFactory& factory, const model::DataSplit& data,
                              std::vector<std::unique_ptr<runtime::Worker>>* workers_out = nullptr);

// What the threads hub holds besides the workers' tensors at a step's end: it sums each
// replicated stage's gradients in a copy of its own (ThreadHub::allreduce_add) until every
// replica has taken the sum (none where the gradients hold no values: emulated). Left out, mlp
// (33.6M parameters) under dp on 4 threads was modelled at 1.76 GiB where the OS counted 1.89.
int64_t hub_sum_bytes(const Job& job, const profile::Profile& profile);

// A library caller's road: make_job (the factory's description checks the plan), then
// run_on_threads.
PipelineResult train_pipeline(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                              const PipelineOptions& options,
                              std::vector<std::unique_ptr<runtime::Worker>>* workers_out = nullptr);

}  // namespace pt::job
