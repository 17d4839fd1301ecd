#pragma once
// The nodes the planner's search runs on and their downward-closed sets (internal to src/plan):
// the layers grouped into nodes, and the states enumerated over them (state_space.h).
#include <cstddef>
#include <string>
#include <vector>

#include "plan/state_space.h"
#include "profile/profile.h"

namespace pt::plan::detail {

// The graph the search runs on: nodes are groups of profile layers, in topological order.
// The graph the search runs on: nodes are groups of profile layers, in topological order.
struct NodeGraph {
  std::vector<std::vector<int>> layers;
  std::vector<std::vector<int>> preds, succs;
};

struct NodeStates {
  NodeGraph graph;
  std::vector<int> group_of;     // [layer] -> its node; -1: not planned
  std::vector<NodeSet> states;   // the downward-closed sets of the nodes, unsorted
  std::string note;              // how the layers were grouped where not one node each
};

// The `planned` layers' nodes and states: one node per layer (and its projections, with
// merge_projections) where the states are within max_states and max_pairs; else the chains of
// parallel branches merged; else the topological order as a chain of blocks of about equal compute.
NodeStates node_states(const profile::Profile& p, const std::vector<int>& planned, int max_states, size_t max_pairs,
                       bool merge_projections);

}  // namespace pt::plan::detail
