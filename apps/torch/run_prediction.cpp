#include "apps/torch/run_prediction.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "metrics/metrics.h"
#include "referee/replay_ahead.h"
#include "sim/simulator.h"

namespace pt::app {

namespace {

RunPrediction simulate_run(const plan::Plan& plan, const runtime::PipelineOptions& o, const profile::Profile& p,
                           const plan::Cluster* cluster, int cores = 0) {
  RunPrediction r;
  schedule::Schedule s = runtime::schedule_for(plan, o, 0);
  r.workers = s.num_workers();
  r.on_cluster = cluster != nullptr;
  // A tensor handed to another thread costs no link time; the host's time per action is the
  // job's --cluster's (calibrate measures it on threads), where it gave one.
  plan::Cluster links = cluster ? *cluster : plan::Cluster::flat(r.workers, std::numeric_limits<double>::infinity());
  if (!cluster) links.action_us = o.cluster.action_us;
  // Over the default minibatches until the window settles and repeats, as `simulate` replays it.
  auto replay = [&](int on_cores) {
    sim::SimOptions so{o.bucket_bytes};
    so.cores = on_cores;
    return referee::settled_replay([&](int minibatches) {
             schedule::Schedule longer = minibatches ? runtime::schedule_for(plan, o, minibatches) : s;
             return metrics::compute_metrics(sim::simulate(longer, p, links, so));
           })
        .ms_per_minibatch;
  };
  r.simulated_ms = replay(0);
  if (cores > 0 && cores < r.workers) r.core_each_ms = r.simulated_ms, r.simulated_ms = replay(cores), r.cores = cores;
  return r;
}

}  // namespace

RunPrediction predict_threads_run(const plan::Plan& plan, const runtime::PipelineOptions& o,
                                  const profile::Profile& profile, int cores) {
  plan::check_plan_fits(plan, profile, "plan");
  // A cluster calibrated on threads (calibrate --workers N) measured this very hand-over: its
  // latency, rate and all-reduce terms; otherwise tensors cross for free.
  bool on_threads = o.cluster.calibration.is_object() && o.cluster.calibration.value("transport", "") == "threads";
  const plan::Cluster* measured = !o.cluster.levels.empty() && on_threads ? &o.cluster : nullptr;
  RunPrediction r = simulate_run(plan, o, profile::with_batch_size(profile, o.train.batch_size), measured, cores);
  r.calibrated_threads = measured != nullptr;
  return r;
}

RunPrediction predict_emulated_run(const plan::Plan& plan, const runtime::PipelineOptions& o,
                                   const profile::Profile& profile, double time_scale) {
  plan::check_plan_fits(plan, profile, "plan");
  profile::Profile p = profile::with_batch_size(profile, o.train.batch_size);
  RunPrediction r = simulate_run(plan, o, p, o.cluster.levels.empty() ? nullptr : &o.cluster);
  r.simulated_ms *= time_scale;
  return r;
}

std::string RunPrediction::describe(const runtime::PipelineOptions& o, const plan::Plan& plan) const {
  std::string s = o.schedule;
  if (o.schedule != "pipedream") s += str(", ", o.microbatches, " microbatches");
  if (schedule::is_interleaved(o.schedule)) s += str(", ", o.chunks, " chunks");
  s += str(", ", workers,
           calibrated_threads  ? " workers on threads, their hand-over as calibrated (--cluster)"
           : on_cluster        ? " workers on the job's --cluster"
           : transport == "threads" ? " workers on threads, transfers in memory"
                               : str(" workers as ", transport,
                                     " processes, their transfers not charged: no --cluster"));
  auto rate = [&](double ms) { return static_cast<int64_t>(o.train.batch_size * 1000.0 / ms); };
  if (core_each_ms > 0)
    s += str(" sharing this machine's ", cores, " cores; ", rate(core_each_ms), " samples/s with a core each");
  return s;
}

}  // namespace pt::app
