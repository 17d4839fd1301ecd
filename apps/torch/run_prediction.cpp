#include "apps/torch/run_prediction.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "metrics/metrics.h"
#include "sim/simulator.h"

namespace pt::app {

RunPrediction predict_threads_run(const plan::Plan& plan, const runtime::PipelineOptions& o,
                                  const profile::Profile& profile, int cores) {
  plan::check_plan_fits(plan, profile, "plan");
  profile::Profile p = profile::with_batch_size(profile, o.train.batch_size);
  RunPrediction r;
  r.cores = cores;
  // A tensor handed to another thread costs no link time.
  plan::Cluster in_memory = plan::Cluster::flat(plan.workers, std::numeric_limits<double>::infinity());
  r.simulated_ms = metrics::compute_metrics(sim::simulate(runtime::schedule_for(plan, o, 0), p, in_memory,
                                                          {o.bucket_bytes}))
                       .ms_per_minibatch;
  if (cores > 0 && cores < plan.workers) {
    double compute = 0;  // one minibatch's forward, backward and optimizer steps
    for (int l = 0; l < p.num_layers(); ++l)
      compute += profile::compute_forward_ms(p, l) + profile::compute_backward_ms(p, l) + profile::compute_step_ms(p, l);
    r.cores_ms = compute / cores;
  }
  return r;
}

std::string RunPrediction::describe(const runtime::PipelineOptions& o, const plan::Plan& plan) const {
  std::string s = o.schedule;
  if (o.schedule != "pipedream") s += str(", ", o.microbatches, " microbatches");
  if (o.schedule == "interleaved") s += str(", ", o.chunks, " chunks");
  s += str(", ", plan.workers, " workers on threads, transfers in memory");
  auto rate = [&](double ms) { return static_cast<int64_t>(o.train.batch_size * 1000.0 / ms); };
  if (cores_ms > simulated_ms)
    s += str(": ", rate(simulated_ms), " samples/s with a core each, but this machine's ", cores, " cores compute at most ",
             rate(cores_ms));
  return s;
}

}  // namespace pt::app
