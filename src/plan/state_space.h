#pragma once
// The planner's search space over a layer graph (SOSP'19 §3.1, "the antichain DAG").
//
// A *state* is a downward-closed set of layers (every input of a member is a member); a stage
// is the difference of two nested states, so every sequence of states
// ∅ ⊊ D1 ⊊ ... ⊊ Dp = all layers is a valid pipeline. For a chain the states are its prefixes.
// PipeDream enumerates its states as augmented antichains reachable from the first source;
// every such state is a downward-closed set, so this space contains PipeDream's.
//
// Sources named "Input..." (data loading) are left out of the search and pinned to the first
// stage, and sinks named "__getitem__..." go with the layer they read, as PipeDream's
// optimizer removes both. When a graph has too many states (wide parallel
// branches), nodes are coarsened: first chains are merged into one node (as PipeDream's
// compress_branches does), and if that is not enough the topological order is planned as a chain.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "profile/profile.h"

namespace pt::plan {

// A set of graph nodes as a bit vector.
struct NodeSet {
  std::vector<uint64_t> words;
  bool has(int v) const { return (words[v / 64] >> (v % 64)) & 1; }
  void add(int v) { words[v / 64] |= uint64_t{1} << (v % 64); }
  bool subset_of(const NodeSet& other) const;
  int count() const;
  bool operator==(const NodeSet& o) const { return words == o.words; }
};

struct StateSpace {
  std::vector<int> pinned_first;               // Input layers: in stage 0, outside the search
  std::vector<int> attached;                   // __getitem__ sinks: with their producer, outside it
  std::vector<std::vector<int>> node_layers;   // profile layers of each search node
  std::vector<NodeSet> members;                // per state; state 0 = ∅, last = every node
  std::vector<double> compute_ms;              // per state: Σ forward + backward (+ optimizer) of its layers
  std::vector<double> backward_ms;             // per state: Σ backward of its layers
  std::vector<double> activation_bytes;        // per state: Σ activation bytes
  std::vector<double> parameter_bytes;         // per state: Σ parameter bytes
  // Per state, bytes that cross a cut after it: activations of member layers read by a
  // non-member (pipetrain's O), and PipeDream's figure, the activations of the state's
  // augmented antichain (its maximal nodes plus ancestors with an edge leaving their
  // ancestor set; graph.py augment_antichain), which also counts sinks and branch-internal edges.
  std::vector<double> frontier_bytes;
  std::vector<double> pipedream_output_bytes;
  std::vector<std::vector<int>> strict_subsets;  // per state j: every state k ⊊ j, ascending
  // Per state k, every state j ⊋ k by increasing compute (ties by index), in one array:
  // supersets[superset_begin[k] .. superset_begin[k + 1]). The pipetrain search's order; built
  // once here, not in each of its searches (Inception-v3-compressed: 16 ms in each of two threads).
  std::vector<int> superset_begin, supersets;
  std::string note;                              // says when and how the graph was coarsened

  int num_states() const { return static_cast<int>(members.size()); }
  int last() const { return num_states() - 1; }
  // Profile layers of the stage between states k ⊊ j (sorted).
  std::vector<int> stage_layers(int k, int j) const;
  // Adds to `f` what the searches and the cost engine read of the stage between states k ⊊ j:
  // its sums and the bytes crossing its two cuts, rounded to 1e-9 ms and whole bytes (sums in
  // another order reach them alike). Stages alike in these differ only in layers that cost
  // nothing, and plans of such stages on the same workers are one plan to every model.
  void add_stage_sums(Fingerprint& f, int k, int j) const;
};

// max_states and max_pairs (nested pairs of states) bound the enumeration; beyond them the
// graph is coarsened (see above). With merge_projections, a layer's projections (projections_of)
// share its node: no stage boundary falls between them, which only ever lowers the bytes
// across a cut (pipetrain's O), and takes GNMT from 562 states to 57. PipeDream's model keeps
// PipeDream's space.
StateSpace build_state_space(const profile::Profile& profile, int max_states,
                             size_t max_pairs = static_cast<size_t>(-1), bool merge_projections = false);

// Per layer, its projections: the layers that read it, where every layer planned that reads it
// reads nothing else and costs nothing (no compute, no parameters), and their outputs together
// hold no more bytes than its own (a tuple's __getitem__s: each of GNMT's LSTMs and its two).
// Empty for every other layer. Wherever a stage boundary falls between a layer and such
// readers, its output crosses it, at least as many bytes as theirs would.
std::vector<std::vector<int>> projections_of(const profile::Profile& profile, const std::vector<char>& planned);

// A chain of at most max_states of the space's states from ∅ to every node: a space of its own,
// whose plans are plans of `space` with the same stage sums, so that its search bounds `space`'s
// from above in a fraction of the time. Each state is the smallest strict superset of the one
// before (of those, the one whose cut carries the fewest bytes); beyond max_states, those whose
// compute is nearest to equal steps of the whole are kept.
StateSpace chain_within(const StateSpace& space, int max_states);

// An input layer or a detached sink (profile.h): the layer costs nothing in any cost model, and
// the search places it with its neighbour.
inline bool is_outside_search(const profile::Profile& profile, int layer) {
  return profile::is_input_layer(profile, layer) || profile::is_detached_sink(profile, layer);
}
// is_outside_search of every layer, in one pass.
std::vector<char> outside_search(const profile::Profile& profile);

}  // namespace pt::plan
