#pragma once
// What the simulator predicts for a job's run, beside what the run measured: the job's own
// schedules (the stages under the schedule, microbatches and chunks the runtime ran, not the
// schedule the planner predicted for), the profile at the run's batch size, on the machine the
// threads transport runs on. There the workers hand tensors over in memory and share the host's
// cores, so no run is faster than the simulated one or than every core computing all the time.
#include <string>

#include "job/job.h"
#include "profile/emulation.h"
#include "profile/profile.h"
#include "schedule/trace.h"

namespace pt::job {

struct RunPrediction {
  // Per minibatch: the schedule with the workers' computes on the host's cores, each on the one
  // free first (sim::SimOptions::cores), where they are fewer than the workers or the calibrated
  // cluster measured how computes at once slow each other (core_rates); else one each (links: in
  // memory, or the cluster's).
  double simulated_ms = 0;
  double core_each_ms = 0;   // per minibatch: one core per worker (0: simulated_ms is that)
  double steady_ms = 0;      // per minibatch: `trace`'s steady state (simulated_ms less any fill and drain)
  int cores = 0;             // this machine's, where the caller gave them
  // The cluster's figures for computes at once that simulated_ms took ("" where none): what to
  // calibrate again where the computes missed.
  std::string core_figures;
  // The host_cores the cluster's core_rates were measured on, where this machine has another
  // count: left out, the computes sharing the cores by time-slicing alone (0: used or none).
  int rates_measured_on = 0;
  int workers = 0;           // the schedule's (a V or interleaved schedule puts several stages on one)
  bool on_cluster = false;   // links of the job's --cluster, not memory
  bool calibrated_host = false;  // that cluster: this host's hand-over, as calibrate measured it
  double action_us = 0;          // the host's time per action charged (Cluster::action_us; 0: none)
  std::string transport = "threads";  // how the run's workers talk (train --transport): named, not costed
  // The replay simulated_ms was read from (an asynchronous run's steady state, where its segments'
  // fill and drain weigh in the figure besides): train --prediction-trace writes it, and
  // `pipetrain trace` sets the run's own trace against it, action kind by kind.
  schedule::Trace trace;
  double ms() const { return simulated_ms; }
  std::string describe(const Job& job) const;  // "1f1b, 4 microbatches; ..."
};

// A run on this host's `cores`, its workers threads of one process or (`transport` gloo) one
// process each: the job's --cluster where `calibrate` measured it over the same transport (its
// hand-over, latency and all-reduce terms), else tensors that cross for free. ConfigError when
// the profile does not fit the plan.
RunPrediction predict_host_run(const Job& job, const profile::Profile& profile, int cores,
                               const std::string& transport);
// Emulated compute waits the profile's times x S and moves its bytes x B (profile::as_emulated), so
// the host's cores are no limit; its links are the job's cluster (as the testbed shapes them) or,
// without one, memory.
RunPrediction predict_emulated_run(const Job& job, const profile::Profile& profile,
                                   const profile::EmulationOptions& emulation, const std::string& transport);

}  // namespace pt::job
