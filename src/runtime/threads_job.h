#pragma once
// The `threads` transport's job: every worker a thread of this process, tensors handed over in
// memory (thread_transport.h), each running its share through worker_runner.h.
#include <memory>
#include <vector>

#include "runtime/worker_runner.h"

namespace pt::runtime {

// All workers as threads of this process. `workers_out`, when given, receives the workers
// (tests inspect their replicas). Throws RuntimeFailure naming the worker, the action and the
// cause of the first failure.
PipelineResult train_pipeline(const ModelFactory& factory, const model::DataSplit& data, const plan::Plan& plan,
                              const PipelineOptions& options,
                              std::vector<std::unique_ptr<Worker>>* workers_out = nullptr);

}  // namespace pt::runtime
