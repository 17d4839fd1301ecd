// The planner's nodes and states: layers grouped into nodes, the downward-closed sets of the
// nodes enumerated, and coarser groupings where they are too many (state_graph.h).
#include "plan/state_graph.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace pt::plan::detail {
namespace {

NodeGraph group_layers(const profile::Profile& p, const std::vector<int>& group_of, int groups) {
  NodeGraph g;
  g.layers.resize(groups);
  g.preds.resize(groups);
  g.succs.resize(groups);
  for (int l = 0; l < p.num_layers(); ++l) {
    if (group_of[l] < 0) continue;
    g.layers[group_of[l]].push_back(l);
    for (int in : p.layers[l].inputs) {
      int u = group_of[in], v = group_of[l];
      if (u < 0 || u == v) continue;
      if (std::find(g.preds[v].begin(), g.preds[v].end(), u) == g.preds[v].end()) {
        g.preds[v].push_back(u);
        g.succs[u].push_back(v);
      }
    }
  }
  return g;
}

// Downward-closed sets by breadth-first growth from ∅ (one node added per step); returns
// false when there are more than max_states, or more than max_pairs nested pairs (the
// searches' work grows with the pairs). The sets are kept in one array of words, and a
// candidate is hashed there before it is kept: copying each candidate into a set of its own
// would take most of the planning of Inception-v3 (2,500 states x 300 nodes, a block each).
bool enumerate_states(const NodeGraph& g, int max_states, size_t max_pairs, std::vector<NodeSet>& out) {
  const int n = static_cast<int>(g.layers.size());
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> flat(words, 0);  // state i: words [i * words, (i + 1) * words)
  auto word = [&](size_t state, size_t w) -> uint64_t& { return flat[state * words + w]; };
  auto hash = [&](size_t state) {
    size_t h = 1469598103934665603ull;
    for (size_t w = 0; w < words; ++w) h = (h ^ word(state, w)) * 1099511628211ull;
    return h;
  };
  auto same = [&](size_t a, size_t b) {
    return std::equal(flat.begin() + a * words, flat.begin() + (a + 1) * words, flat.begin() + b * words);
  };
  std::unordered_set<size_t, decltype(hash), decltype(same)> seen(4 * static_cast<size_t>(max_states), hash, same);
  seen.insert(0);
  size_t count = 1;
  for (size_t at = 0; at < count; ++at) {
    for (int v = 0; v < n; ++v) {
      if ((word(at, v / 64) >> (v % 64)) & 1) continue;
      bool ready = true;
      for (int u : g.preds[v]) ready = ready && ((word(at, u / 64) >> (u % 64)) & 1);
      if (!ready) continue;
      flat.resize((count + 1) * words);  // the candidate, kept only if new
      std::copy_n(flat.begin() + at * words, words, flat.begin() + count * words);
      word(count, v / 64) |= uint64_t{1} << (v % 64);
      if (!seen.insert(count).second) continue;
      if (static_cast<int>(++count) > max_states) return false;
    }
  }
  flat.resize(count * words);
  // Breadth first, the sets come by size: a strict subset comes before, and is smaller.
  std::vector<int> size(count, 0);
  for (size_t i = 0; i < count; ++i)
    for (size_t w = 0; w < words; ++w) size[i] += __builtin_popcountll(word(i, w));
  size_t pairs = 0;
  for (size_t j = 0; j < count; ++j)
    for (size_t k = 0; k < j && size[k] < size[j]; ++k) {
      bool subset = true;
      for (size_t w = 0; w < words && subset; ++w) subset = (word(k, w) & ~word(j, w)) == 0;
      if (subset && ++pairs > max_pairs) return false;
    }
  out.assign(count, NodeSet{std::vector<uint64_t>(words)});
  for (size_t i = 0; i < count; ++i) std::copy_n(flat.begin() + i * words, words, out[i].words.begin());
  return true;
}

}  // namespace

NodeStates node_states(const profile::Profile& p, const std::vector<int>& planned, int max_states, size_t max_pairs,
                       bool merge_projections) {
  const int L = p.num_layers();
  NodeStates out;
  // Attempt 1: one node per layer. Attempt 2: merge the chains inside parallel branches, as
  // PipeDream's compress_branches does (a layer whose single input has it as single consumer
  // joins that input's node, unless the input is on the trunk: every path passes through it).
  // Attempt 3: the topological order as one chain.
  std::vector<std::vector<int>> projections(L);
  if (merge_projections) {
    std::vector<char> is_planned(L, 0);
    for (int l : planned) is_planned[l] = 1;
    projections = projections_of(p, is_planned);
  }
  std::vector<int> group_of(L, -1);
  int groups = 0;
  // Layers in topological order: a projection's group is set with its producer's, before its turn.
  auto join_projections = [&](int l) {
    for (int r : projections[l]) group_of[r] = group_of[l];
  };
  for (int l : planned) {
    if (group_of[l] < 0) group_of[l] = groups++;
    join_projections(l);
  }
  NodeGraph g = group_layers(p, group_of, groups);
  std::vector<NodeSet> states;
  if (!enumerate_states(g, max_states, max_pairs, states)) {
    std::vector<int> consumers(L, 0), last_reader(L, -1);
    for (int l : planned)
      for (int in : p.layers[l].inputs) ++consumers[in], last_reader[in] = std::max(last_reader[in], l);
    // Layer l is on the trunk when no earlier layer is read after it.
    std::vector<char> trunk(L, 0);
    for (int l = 0, reach = -1; l < L; ++l) {
      trunk[l] = reach <= l;
      reach = std::max(reach, last_reader[l]);
    }
    std::fill(group_of.begin(), group_of.end(), -1);
    groups = 0;
    for (int l : planned) {
      const auto& in = p.layers[l].inputs;
      if (group_of[l] >= 0) {
        // a projection, already with its producer
      } else if (in.size() == 1 && group_of[in[0]] >= 0 && consumers[in[0]] == 1 && !trunk[in[0]]) {
        group_of[l] = group_of[in[0]];
      } else {
        group_of[l] = groups++;
      }
      join_projections(l);
    }
    int before = static_cast<int>(planned.size());
    g = group_layers(p, group_of, groups);
    if (enumerate_states(g, max_states, max_pairs, states)) {
      out.note = str("the layer graph has too many downward-closed sets to search in time; merged the chains "
                     "of its parallel branches (", before, " layers into ", groups, " nodes, ", states.size(), " states)");
    } else {
      // The topological order as a chain. Beyond the bounds (a chain of B nodes has B + 1
      // states and B(B + 1)/2 nested pairs) consecutive layers merge into blocks of about equal
      // compute, so that the search's work stays bounded for any number of layers.
      int n = static_cast<int>(planned.size());
      double fit = std::min(static_cast<double>(max_states) - 1,
                            std::floor(std::sqrt(2.0 * static_cast<double>(max_pairs))) - 1);
      int blocks = n <= fit ? n : std::max(1, static_cast<int>(fit));
      double total = 0, before = 0;
      for (int l : planned) total += p.layers[l].forward_ms + p.layers[l].backward_ms;
      groups = 0;
      for (int i = 0, prev = -1; i < n; ++i) {
        double c = p.layers[planned[i]].forward_ms + p.layers[planned[i]].backward_ms;
        // The block of the layer's compute midpoint (of its position when nothing costs time).
        double at = blocks == n ? (i + 0.5) / n : total > 0 ? (before + c / 2) / total : (i + 0.5) / n;
        int block = std::min(blocks - 1, static_cast<int>(at * blocks));
        if (block != prev) ++groups, prev = block;
        group_of[planned[i]] = groups - 1;
        before += c;
      }
      g = group_layers(p, group_of, groups);
      // Prefixes of a topological order are downward-closed, so this stays a valid search.
      states.clear();
      NodeSet cur{std::vector<uint64_t>((groups + 63) / 64, 0)};
      states.push_back(cur);
      for (int v = 0; v < groups; ++v) {
        cur.add(v);
        states.push_back(cur);
      }
      bool chain = true;
      for (int v = 1; v < groups; ++v) chain = chain && g.preds[v].size() == 1 && g.preds[v][0] == v - 1;
      if (groups < n)
        out.note = str("the layer graph is too large to search in time; planned its topological order as a chain of ",
                       groups, " blocks of consecutive layers of about equal compute (", n, " layers)");
      else if (!chain)
        out.note = str("the layer graph has too many downward-closed sets to search in time, even with the chains "
                       "of its branches merged; planned its topological order as a chain (", n + 1, " states)");
    }
  }
  out.graph = std::move(g);
  out.group_of = std::move(group_of);
  out.states = std::move(states);
  return out;
}

}  // namespace pt::plan::detail
