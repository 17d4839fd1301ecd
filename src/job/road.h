#pragma once
// A request from its road to its result, the same for `pipetrain train` and a library caller:
// prepare_job reads the profile once, settles the request, makes the job (every check, once)
// and places its workers on this host's cores; run_job runs it on its road (request.h, Road).
#include <functional>
#include <string>

#include "job/job.h"
#include "job/request.h"

namespace pt::job {

// The job `request` asks for on `road`, for `described` (the model's description: names, graph,
// ties) and its data. The profile at request.profile_path is read into request.profile unless
// one is there. `pin`: where the workers outnumber this host's cores, pin each to one
// (core_pinning.h; emulated compute needs none). `dry`: a job to describe (--print-job), whose
// checkpoint folder is neither started nor locked and whose workers are not placed.
Job prepare_job(Request& request, Road road, model::LayeredModel& described, const model::DataSplit& data, bool pin,
                bool dry = false);

// Runs `job` on `road`: its workers as threads of this process, or as gloo processes, forked
// from this one (the launcher waits for them) or started by torchrun or mpirun (this process is
// one of them). `on_result` gets the reporting worker's result, in the process that holds it.
// The trace goes to `trace_path` when given. Returns the exit status; a worker's failure is
// printed, naming the worker, and returns non-zero (threads: RuntimeFailure is thrown). A gloo
// worker's process releases the part of `data` its stages never read (worker_data.h).
int run_job(const Job& job, Road road, const ModelFactory& factory, const model::LayeredModel& described,
            model::DataSplit& data, const std::string& trace_path,
            const std::function<void(const PipelineResult&)>& on_result);

}  // namespace pt::job
