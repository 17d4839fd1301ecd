#include "apps/planning_flags.h"

#include <algorithm>

#include "core/error.h"
#include "plan/planner.h"

namespace pt::app {

void add_cluster_flags(CLI::App& app, plan::ClusterFlags& flags) {
  app.add_option("--cluster", flags.file, "Cluster file (pipetrain.cluster/1)");
  app.add_option("--workers", flags.workers, "Shorthand cluster: workers per level, innermost first (e.g. 4 or 4,4)");
  app.add_option("--bandwidth-gbps", flags.bandwidth_gbps,
                 "Shorthand cluster: Gbit/s per level, innermost first (e.g. 1 or 80,10)");
  app.add_option("--allreduce", flags.allreduce,
                 "How replicas all-reduce: ring (one ring over the group) or hierarchical (inside each server, then "
                 "across servers a shard each, then gathered; where faster)");
  app.add_option("--latency-us", flags.latency_us,
                 "Microseconds each message costs besides its bytes, per level, innermost first (e.g. 5 or 5,30; "
                 "a ring step is a message; default: the cluster file's, or 0)");
  app.add_option("--action-us", flags.action_us,
                 "Microseconds of the host's time each forward, backward and step costs besides its compute "
                 "(default: the cluster file's, as `pipetrain calibrate` measures it, or 0)");
}

void add_schedule_options(CLI::App& app, schedule::ScheduleOptions& schedule_options) {
  app.add_option("--microbatches", schedule_options.microbatches, "Microbatches per minibatch")->capture_default_str();
  app.add_option("--chunks", schedule_options.chunks, "Model chunks per worker (interleaved)")->capture_default_str();
  app.add_option("--minibatches", schedule_options.minibatches, "Minibatches an asynchronous schedule covers (0: enough for a steady state past warm-up and drain)")
      ->capture_default_str();
  app.add_flag("--vertical-sync", schedule_options.vertical_sync, "pipedream: vertical sync of weight versions");
  app.add_flag("--deferred-step", schedule_options.deferred_step,
               "pipedream: a replicated first stage steps after its next forward, which hides its all-reduce's "
               "tail (its weights lag one more update)");
}

void add_no_weight_prediction_flag(CLI::App& app, bool& no_weight_prediction) {
  app.add_flag("--no-weight-prediction", no_weight_prediction,
               "pipedream and 2bw: model a run of train --no-weight-prediction (the paper's weight versions, no "
               "predicted copies: 2bw keeps two on every stage, one more on its last than train's default)");
}

plan::Plan straight_plan(const profile::Profile& p, int stages, const std::string& why) {
  // Fewer stages ran on fewer workers than the cluster has, and simulate said nothing of it:
  // interleaved on 4 workers x 2 chunks of a 4-layer model ran on 2, its bubble 0.06 where its 4
  // workers idle more than half the time.
  if (stages > p.num_layers())
    throw ConfigError(str(why, " makes ", stages, " stages, but the profile of '", p.model, "' has ", p.num_layers(),
                          " layers: give fewer, or a --plan"));
  return plan::even_split(p, std::max(1, stages));
}

}  // namespace pt::app
