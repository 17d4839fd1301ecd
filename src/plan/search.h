#pragma once
// The two searches behind make_plan, over the states of a StateSpace (internal to src/plan).
#include <limits>
#include <vector>

#include "plan/cluster.h"
#include "plan/planner.h"
#include "plan/state_space.h"

namespace pt::plan {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct SearchStage {
  int from = 0, to = 0;       // states: the stage holds to \ from
  std::vector<int> workers;   // worker ids of its replicas
  double compute_ms = 0, comm_ms = 0;
  double time_ms = 0;  // PipeDream's model: the stage's time as its search weighs it (0: not set)
};

struct SearchAlternative {
  double pipeline_ms = kInfinity;  // under the search's own model
  std::vector<SearchStage> stages;
};

struct SearchResult {
  double pipeline_ms = kInfinity;       // kInfinity: no plan fits
  double data_parallel_ms = kInfinity;  // the same cost model on one stage over every worker
  std::vector<SearchStage> stages;      // the best plan
  // Pipetrain model: the best plan for each choice of the first stage, best first, at most
  // PlanOptions::candidates of them (the first is `stages`).
  std::vector<SearchAlternative> alternatives;
  // Pipetrain model with PlanOptions::fewer_workers: [w] the same for workers w..W-1 alone,
  // renumbered from 0. Every cluster smaller_clusters lists is such a suffix (its units are the
  // last ones of each level), so one search plans them all.
  struct Suffix {
    double data_parallel_ms = kInfinity;
    std::vector<SearchAlternative> alternatives;
  };
  std::vector<Suffix> suffixes;
};

// Pipetrain model (realised_cost.h): a dynamic program over (state, first free worker, level
// reached by the previous stage[, stages left]) minimising the slowest stage of estimate_plan
// over every sequence of nested states and every replica count, workers numbered stage by stage.
// A space of more than bounding_chain states is searched after a chain of its states
// (chain_within; the whole chain where that is under a fourth of the states, else
// bounding_chain of them), itself searched so, whose best plans bound the space's: every
// (state, worker) boundary that no plan within those bounds can cross is skipped, and the
// result is the same (0: never).
inline constexpr int kBoundingChain = 64;
SearchResult search_pipetrain(const StateSpace& space, const Cluster& cluster, const PlanOptions& options,
                              int bounding_chain = kBoundingChain);

// PipeDream's optimizer (SOSP'19 §3.1; optimizer_graph_hierarchical.py), level by level.
SearchResult search_pipedream(const StateSpace& space, const Cluster& cluster, const PlanOptions& options);

}  // namespace pt::plan
