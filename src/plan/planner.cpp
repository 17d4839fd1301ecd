// make_plan: the search run on the profile's states (search.h), its best plan with the exact
// model's predictions; and the steps the other planning calls share (planner_internal.h).
#include "plan/planner.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/units.h"
#include "plan/realised_cost.h"
#include "plan/planner_internal.h"
#include "plan/search.h"
#include "plan/state_space.h"

namespace pt::plan {
namespace detail {
namespace {

// Bounds on the states of a DAG so that every search stays well under a second; above them the
// graph is coarsened (state_space.h). The compat model at inner levels solves every range
// (a, b), cubic in the states, hence its smaller bound.
constexpr int kMaxStates = 2500;
constexpr int kMaxStatesHierarchicalCompat = 600;
// The pipetrain search's tables hold W² links per level.
constexpr int kMaxPlanWorkers = 1024;
// The pipetrain search visits about pairs × W² (state pair, first worker, replicas) triples.
constexpr double kPipetrainWork = 6e7;

[[noreturn]] void explain_no_plan(const profile::Profile& profile, const Cluster& cluster,
                                  const PlanOptions& options, const StateSpace& space) {
  int W = cluster.workers();
  int nodes = space.num_states() > 0 ? static_cast<int>(space.node_layers.size()) : 0;
  size_t grouped = 0;  // the layers in the nodes: more than nodes where projections share one
  for (const auto& layers : space.node_layers) grouped += layers.size();
  std::string why = space.note;
  if (why.empty() && grouped > static_cast<size_t>(nodes))
    why = str("its ", grouped, " layers to plan in ", nodes, " groups: a layer that costs nothing and only selects from "
              "another's output stays with it");
  if (options.straight && W > nodes)
    throw ConfigError(str("--straight: ", counted(W, "worker"), " need ", counted(W, "stage"), " but '", profile.model,
                          "' has only ", counted(nodes, "layer"), " to split", why.empty() ? "" : " (" + why + ")",
                          "; use fewer workers or allow replication",
                          profile.ties.empty() ? "" : ", or a synchronous schedule (plan --schedule 1f1b, or auto)"));
  int64_t mem = memory_limit(cluster, options);
  if (mem > 0) {
    double largest = 0;
    for (const auto& l : profile.layers)
      largest = std::max(largest, static_cast<double>(l.activation_bytes + l.parameter_bytes));
    throw ConfigError(str("memory of ", human_bytes(static_cast<double>(mem)), " per worker (", memory_limit_named(options, &cluster),
                          ") is too small for any ",
                          name_of(options.cost_model), " plan of '", profile.model, "' on ", W,
                          " workers (its largest layer alone holds ", human_bytes(largest),
                          " of activations and parameters per minibatch in flight",
                          profile.ties.empty() ? "" : "; " + why + "; a synchronous schedule may split them: plan "
                                                      "--schedule 1f1b, or auto", ")"));
  }
  if (!profile.ties.empty())
    throw ConfigError(str("no ", name_of(options.cost_model), " plan of '", profile.model, "' on ", cluster.describe(),
                          why.empty() ? "" : ": " + why,
                          "; a synchronous schedule may split them, its stages summing the copies' gradients ",
                          "(plan --schedule 1f1b, or auto)"));
  throw InternalError(str("the planner found no plan for '", profile.model, "' on ", cluster.describe()));
}

// The search on `space` (search_space's), or no plan (result.pipeline_ms kInfinity) where none fits.
Searched search_if_any(std::shared_ptr<const StateSpace> space, const Cluster& cluster, const PlanOptions& options) {
  Searched out{std::move(space), {}};
  if (options.straight && cluster.workers() > static_cast<int>(out.space->node_layers.size())) return out;
  out.result = options.cost_model == CostModel::kPipedream ? search_pipedream(*out.space, cluster, options)
                                                          : search_pipetrain(*out.space, cluster, options);
  return out;
}

}  // namespace

const char* name_of(CostModel m) { return m == CostModel::kPipedream ? "pipedream" : "pipetrain"; }

StateSpace search_space(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  if (cluster.levels.empty()) throw ConfigError("cluster has no levels");
  if (cluster.workers() > kMaxPlanWorkers)
    throw ConfigError(str("the cluster ", cluster.describe(), cluster.source.empty() ? "" : " of " + cluster.source,
                          " has ", cluster.workers(), " workers; the planner handles at ",
                          "most ", kMaxPlanWorkers, " (its search grows with the square of the workers)"));
  if (options.memory_bytes < 0) throw UsageError(str("--memory: must be >= 0, got ", options.memory_bytes));
  bool compat = options.cost_model == CostModel::kPipedream;
  int max_states = compat && cluster.levels.size() > 1 ? kMaxStatesHierarchicalCompat : kMaxStates;
  int W = cluster.workers();
  size_t max_pairs = compat ? static_cast<size_t>(-1)
                            : static_cast<size_t>(std::max(1000.0, kPipetrainWork / (static_cast<double>(W) * W)));
  return build_state_space(profile, max_states, max_pairs, !compat);
}

Searched run_search(std::shared_ptr<const StateSpace> space, const profile::Profile& profile, const Cluster& cluster,
                    const PlanOptions& options) {
  Searched out = search_if_any(std::move(space), cluster, options);
  if (out.result.pipeline_ms == kInfinity) explain_no_plan(profile, cluster, options, *out.space);
  return out;
}

Searched run_search(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  return run_search(std::make_shared<const StateSpace>(search_space(profile, cluster, options)), profile, cluster,
                    options);
}

Plan to_plan(const std::vector<SearchStage>& stages, double search_ms, const StateSpace& space,
             double data_parallel_ms, const profile::Profile& profile, const Cluster& cluster,
             const PlanOptions& options) {
  Plan plan;
  plan.model = profile.model;
  for (const auto& t : profile.ties) plan.ties.push_back(t.layers);
  plan.batch_size = profile.batch_size;
  plan.cost_model = name_of(options.cost_model);
  plan.workers = cluster.workers();
  for (size_t i = 0; i < stages.size(); ++i) {
    const SearchStage& ss = stages[i];
    Stage st;
    st.layers = space.stage_layers(ss.from, ss.to);
    if (i == 0) {
      st.layers.insert(st.layers.end(), space.pinned_first.begin(), space.pinned_first.end());
      std::sort(st.layers.begin(), st.layers.end());
    }
    st.workers = ss.workers;
    std::sort(st.workers.begin(), st.workers.end());
    st.replicas = static_cast<int>(st.workers.size());
    st.compute_ms = ss.compute_ms;
    st.comm_ms = ss.comm_ms;
    st.time_ms = ss.time_ms;
    plan.stages.push_back(std::move(st));
  }
  // Detached sinks go with the stage of the layer they read (stage 0 for an Input).
  for (int l : space.attached) {
    int producer = profile.layers[l].inputs.front(), home = 0;
    for (int st = 0; st < plan.num_stages(); ++st)
      if (std::binary_search(plan.stages[st].layers.begin(), plan.stages[st].layers.end(), producer)) home = st;
    auto& layers = plan.stages[home].layers;
    layers.insert(std::upper_bound(layers.begin(), layers.end(), l), l);
  }
  plan.pipeline_ms_per_minibatch = search_ms;
  // Data parallelism may not fit the memory limit (pipetrain model); 0 then means "not possible".
  plan.data_parallel_ms_per_minibatch = data_parallel_ms == kInfinity ? 0 : data_parallel_ms;
  if (!space.note.empty()) plan.notes.push_back(space.note);
  if (data_parallel_ms == kInfinity) plan.notes.push_back("data parallelism does not fit the memory limit");
  check_plan_fits(plan, profile, "planner");
  return plan;
}

double exact_data_parallel_ms(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  PlanEstimate e = evaluate_plan(data_parallel_plan(profile.num_layers(), cluster.workers()), profile, cluster, options);
  return e.fits_memory ? e.pipeline_ms_per_minibatch : 0;
}

}  // namespace detail

Plan make_plan(const profile::Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  detail::Searched searched = detail::run_search(profile, cluster, options);
  Plan plan = detail::to_plan(searched.result.stages, searched.result.pipeline_ms, *searched.space,
                              searched.result.data_parallel_ms, profile, cluster, options);
  if (options.cost_model == CostModel::kRealised) {
    detail::predict(plan, exact_stage_sums(plan, profile, cluster), profile, cluster, options);
    if (plan.data_parallel_ms_per_minibatch > 0)
      plan.data_parallel_ms_per_minibatch = detail::exact_data_parallel_ms(profile, cluster, options);
  }
  return plan;
}

}  // namespace pt::plan
