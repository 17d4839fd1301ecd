#include "job/road.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "core/error.h"
#include "core/units.h"
#include "job/core_pinning.h"
#include "job/gloo_job.h"
#include "job/threads_job.h"
#include "model/memory_meter.h"
#include "profile/pipedream_graph.h"
#include "runtime/checkpoint.h"
#include "runtime/launcher.h"
#include "runtime/progress.h"

namespace pt::job {

Job prepare_job(Request& r, Road road, model::LayeredModel& described, const model::DataSplit& data, bool pin,
                bool dry) {
  // The profile, read once: the split, the zero-bubble budget, the prediction and the memory model.
  if (!r.profile && !r.profile_path.empty()) {
    r.profile = std::make_shared<const profile::Profile>(profile::read_any_profile(r.profile_path));
    // As plan and simulate refuse it: a profile of no times split by nothing and predicted
    // -9223372036854775808 samples/s.
    profile::require_timed(*r.profile, r.profile_path);
  }
  r.over_links = road != Road::kThreads;
  Settled settled = settle_request(r, described, data);
  if (dry) {
    PipelineOptions options = settled.options;
    options.checkpoint.dir.clear();
    Job job = make_job(settled.plan, options, described, data, false);
    job.options.checkpoint = settled.options.checkpoint;
    return job;
  }
  Job job = make_job(settled.plan, settled.options, described, data, road != Road::kGlooWorker);
  job.gather_traces = road != Road::kThreads && r.profile != nullptr;
  if (pin && workers_share_this_host()) place_workers(job, r.profile.get(), usable_cores());
  return job;
}

int run_job(const Job& job, Road road, const ModelFactory& factory, const model::LayeredModel& described,
            model::DataSplit& data, const std::string& trace_path,
            const std::function<void(const PipelineResult&)>& on_result) {
  if (road == Road::kGlooLauncher) {  // one process per worker on this host: forks of this one, or this binary again
    double started = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    runtime::Launch launch = runtime::fork_gloo_job(job.plan, job.workers(), trace_path);
    if (!launch.worker) {
      if (launch.status == 0 && !trace_path.empty()) std::cerr << "wrote " << trace_path << "\n";
      // A reporting worker a signal ended (a kill -9, or the launcher's stop after another failed)
      // could not say where its rows are.
      bool reporter_signalled = std::count(launch.signalled.begin(), launch.signalled.end(), job.reporting) > 0;
      if (launch.status != 0 && reporter_signalled) runtime::note_metrics_left(job.options.train.metrics_path, started);
      if (launch.status != 0) runtime::remove_interrupted_saves(job.options.checkpoint.dir);
      // A process of the job too, and on a small model the largest (381 MiB beside workers of
      // 304-326): it read the data and checked the model before starting them. Where LibTorch
      // has started threads (OpenBLAS's, after a forward) they are new processes, not forks.
      if (launch.status == 0)
        std::cout << "peak RSS of the launcher process (measured, as the OS counts it): "
                  << human_bytes(static_cast<double>(model::process_peak_rss_bytes()))
                  << " (it read the data and checked the model"
                  << (job.options.timed_layers ? ", timed each layer for the split (--stages without --profile)" : "")
                  << ", then "
                  << (launch.forked ? "forked the workers, which share its pages" : "started the workers as new processes, each of which reads the data again")
                  << (trace_path.empty() ? std::string() : str("; it merged their traces into ", trace_path)) << ")\n";
      return launch.status;
    }
  }
  if (road != Road::kThreads) {
    // Started apart (torchrun, mpirun), not by this launcher, whether it forked its workers or ran
    // this binary again (which said "worker 0 does not report" where the launcher is quiet).
    return train_with_gloo(job, factory, described, data, trace_path, on_result,
                           road == Road::kGlooWorker && runtime::started_apart());
  }
  PipelineResult result = run_on_threads(job, factory, data);
  // Written before the report, which may still fail the run (a diverged loss): what ran is kept.
  // A trace that cannot be written (a full disk) fails the run after the report: it printed only
  // "write failed", the run's loss, accuracy and throughput lost.
  std::string unwritten;
  if (!trace_path.empty()) {
    try {
      schedule::write_trace(result.trace, trace_path);
      std::cerr << "wrote " << trace_path << "\n";
    } catch (const Error& e) {
      unwritten = e.what();
    }
  }
  // The process's peak to the report, the trace's writing included (read at the end of training,
  // it printed 249.6 MiB of the 270.7 the kernel counted).
  for (int64_t& rss : result.train.peak_rss_bytes) rss = std::max(rss, model::process_peak_rss_bytes());
  on_result(result);
  if (!unwritten.empty()) throw RuntimeFailure(str("--trace: ", unwritten, " (the run's report is above)"));
  return 0;
}

}  // namespace pt::job
