#include "sim/simulator.h"

#include "core/error.h"
#include "core/units.h"
#include "plan/split_ties.h"
#include "sim/core_placement.h"
#include "sim/replay.h"
#include "sim/stage_costs.h"

namespace pt::sim {

using detail::TieExchange;

namespace {

// The schedule's tie exchanges, from the profile's ties. An asynchronous schedule cannot keep a
// split tie one parameter: refused, as the runtime refuses it.
std::vector<TieExchange> tie_exchanges(const schedule::Schedule& s, const profile::Profile& p) {
  std::vector<std::vector<int>> ties;
  for (const auto& t : p.ties) ties.push_back(t.layers);
  std::vector<TieExchange> out;
  for (const plan::SplitTie& t : plan::split_ties(ties, s.stage_layers, s.stage_workers)) {
    if (!s.flush || s.vertical_sync)
      throw ConfigError(str(p.model, ": a parameter of ", p.ties[t.group].bytes, " bytes is shared by ",
                            plan::describe_split_tie(t, ties[t.group], {}), ", and the ", s.kind,
                            " schedule steps each stage at its own time on its own weight version, so the copies "
                            "would train apart: use a synchronous schedule or keep these layers in one stage"));
    if (t.exchanges()) out.push_back({t.workers, p.ties[t.group].bytes});
  }
  return out;
}

}  // namespace

schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options) {
  return simulate(s, p, cluster, options, stage_costs(s, p, options.bucket_bytes));
}

schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options, const std::vector<StageCost>& costs) {
  if (cluster.workers() < s.num_workers())
    throw ConfigError(str("the ", s.kind, " schedule needs ", counted(s.num_workers(), "worker"), " but the cluster ",
                          cluster.describe(), " has ", cluster.workers()));
  schedule::Trace t;
  t.source = "simulated";
  t.schedule = s.kind;
  t.num_stages = s.num_stages;
  t.microbatches = s.microbatches;
  t.weight_delay = s.weight_delay;
  t.predicted_weights = options.weight_prediction && s.predicts_weights();
  t.batch_size = p.batch_size;
  for (const auto& c : costs) t.stage_parameter_bytes.push_back(c.parameter_bytes);
  int cores = options.cores > 0 ? options.cores : cluster.host_cores;
  std::vector<int> placement = options.placement;
  if (placement.empty() && options.pin_as_train && cores > 0 && s.num_workers() > cores)
    placement = place_on_cores(s, costs, cores);
  t.workers = detail::Replay(s, costs, cluster, options.bucket_bytes, cores, options.computes_only,
                             tie_exchanges(s, p), placement)
                  .run();
  return t;
}

}  // namespace pt::sim
