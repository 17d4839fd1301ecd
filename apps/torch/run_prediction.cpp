#include "apps/torch/run_prediction.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "metrics/metrics.h"
#include "sim/simulator.h"

namespace pt::app {

namespace {

RunPrediction simulate_run(const plan::Plan& plan, const runtime::PipelineOptions& o, const profile::Profile& p,
                           const plan::Cluster* cluster) {
  RunPrediction r;
  schedule::Schedule s = runtime::schedule_for(plan, o, 0);
  r.workers = s.num_workers();
  r.on_cluster = cluster != nullptr;
  // A tensor handed to another thread costs no link time; the host's time per action is the
  // job's --cluster's (calibrate measures it on threads), where it gave one.
  plan::Cluster links = cluster ? *cluster : plan::Cluster::flat(r.workers, std::numeric_limits<double>::infinity());
  if (!cluster) links.action_us = o.cluster.action_us;
  r.simulated_ms = metrics::compute_metrics(sim::simulate(s, p, links, {o.bucket_bytes})).ms_per_minibatch;
  return r;
}

}  // namespace

RunPrediction predict_threads_run(const plan::Plan& plan, const runtime::PipelineOptions& o,
                                  const profile::Profile& profile, int cores) {
  plan::check_plan_fits(plan, profile, "plan");
  profile::Profile p = profile::with_batch_size(profile, o.train.batch_size);
  RunPrediction r = simulate_run(plan, o, p, nullptr);
  r.cores = cores;
  if (cores > 0 && cores < r.workers) {
    double compute = 0;  // one minibatch's forward, backward and optimizer steps
    for (int l = 0; l < p.num_layers(); ++l)
      compute += profile::compute_forward_ms(p, l) + profile::compute_backward_ms(p, l) + profile::compute_step_ms(p, l);
    r.cores_ms = compute / cores;
  }
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
  s += str(", ", workers, on_cluster ? " workers on the job's --cluster" : " workers on threads, transfers in memory");
  auto rate = [&](double ms) { return static_cast<int64_t>(o.train.batch_size * 1000.0 / ms); };
  if (cores_ms > simulated_ms)
    s += str(": ", rate(simulated_ms), " samples/s with a core each, but this machine's ", cores, " cores compute at most ",
             rate(cores_ms));
  return s;
}

}  // namespace pt::app
