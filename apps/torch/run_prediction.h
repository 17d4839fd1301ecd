#pragma once
// What the simulator predicts for the run `train` just made, beside what it measured: the plan's
// stages under the schedule, microbatches and chunks the runtime ran (not the schedule the
// planner predicted for), the profile at the run's batch size, on the machine the threads
// transport runs on. There the workers hand tensors over in memory and share the host's cores,
// so no run is faster than the simulated one or than every core computing all the time.
#include <string>

#include "plan/plan.h"
#include "profile/profile.h"
#include "runtime/pipeline_job.h"

namespace pt::app {

struct RunPrediction {
  double simulated_ms = 0;   // per minibatch: the schedule on one core per worker, free transfers
  double cores_ms = 0;       // per minibatch: all the compute over the host's cores (0: cores >= workers)
  int cores = 0;
  double ms() const { return simulated_ms > cores_ms ? simulated_ms : cores_ms; }
  std::string describe(const runtime::PipelineOptions& o, const plan::Plan& plan) const;  // "1f1b, 4 microbatches; ..."
};

// ConfigError when the profile does not fit the plan.
RunPrediction predict_threads_run(const plan::Plan& plan, const runtime::PipelineOptions& o,
                                  const profile::Profile& profile, int cores);

}  // namespace pt::app
