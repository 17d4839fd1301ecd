// The planner's search space (state_space.h): each state's sums and the bytes crossing its cut,
// PipeDream's augmented antichains, the states' nesting, and a chain of them within a space.
#include "plan/state_space.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/state_graph.h"

namespace pt::plan {

bool NodeSet::subset_of(const NodeSet& other) const {
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] & ~other.words[i]) return false;
  return true;
}

int NodeSet::count() const {
  int c = 0;
  for (uint64_t w : words) c += __builtin_popcountll(w);
  return c;
}

void StateSpace::add_stage_sums(Fingerprint& f, int k, int j) const {
  for (double ms : {compute_ms[j] - compute_ms[k], backward_ms[j] - backward_ms[k]}) f.add(std::llround(ms * 1e9));
  for (double bytes : {frontier_bytes[k], j != last() ? frontier_bytes[j] : 0.0, parameter_bytes[j] - parameter_bytes[k],
                       activation_bytes[j] - activation_bytes[k]})
    f.add(std::llround(bytes));
}

std::vector<int> StateSpace::stage_layers(int k, int j) const {
  std::vector<int> layers;
  for (size_t v = 0; v < node_layers.size(); ++v)
    if (members[j].has(static_cast<int>(v)) && !members[k].has(static_cast<int>(v)))
      layers.insert(layers.end(), node_layers[v].begin(), node_layers[v].end());
  std::sort(layers.begin(), layers.end());
  return layers;
}

namespace {

// StateSpace::superset_begin and supersets from strict_subsets.
void index_supersets(StateSpace& s) {
  const int S = s.num_states();
  std::vector<int> by_compute(S);
  for (int j = 0; j < S; ++j) by_compute[j] = j;
  std::stable_sort(by_compute.begin(), by_compute.end(),
                   [&](int a, int b) { return s.compute_ms[a] < s.compute_ms[b]; });
  s.superset_begin.assign(S + 1, 0);
  for (int j = 0; j < S; ++j)
    for (int k : s.strict_subsets[j]) ++s.superset_begin[k + 1];
  for (int k = 0; k < S; ++k) s.superset_begin[k + 1] += s.superset_begin[k];
  s.supersets.resize(s.superset_begin[S]);
  std::vector<int> next(s.superset_begin.begin(), s.superset_begin.end() - 1);
  for (int j : by_compute)
    for (int k : s.strict_subsets[j]) s.supersets[next[k]++] = j;
}

}  // namespace

std::vector<std::vector<int>> projections_of(const profile::Profile& p, const std::vector<char>& planned) {
  const int L = p.num_layers();
  std::vector<int64_t> own = profile::own_parameter_bytes(p);
  auto costs_nothing = [&](int l) {
    const profile::Layer& x = p.layers[l];
    return x.forward_ms == 0 && x.backward_ms == 0 && x.optimizer_ms == 0 && own[l] == 0;
  };
  std::vector<std::vector<int>> readers(L), out(L);
  for (int r = 0; r < L; ++r)
    if (planned[r])
      for (int in : p.layers[r].inputs) readers[in].push_back(r);
  for (int l = 0; l < L; ++l) {
    if (!planned[l] || readers[l].empty()) continue;
    double bytes = 0;
    bool all = true;
    for (int r : readers[l]) {
      all = all && costs_nothing(r) && p.layers[r].inputs.size() == 1;
      bytes += static_cast<double>(p.layers[r].activation_bytes);
    }
    if (all && bytes <= static_cast<double>(p.layers[l].activation_bytes)) out[l] = readers[l];
  }
  return out;
}

std::vector<char> outside_search(const profile::Profile& profile) {
  std::vector<char> out = profile::detached_sinks(profile);
  for (int l = 0; l < profile.num_layers(); ++l) out[l] = out[l] || profile::is_input_layer(profile, l);
  return out;
}

StateSpace build_state_space(const profile::Profile& p, int max_states, size_t max_pairs, bool merge_projections) {
  int L = p.num_layers();
  StateSpace s;
  std::vector<int> planned;
  std::vector<char> detached = profile::detached_sinks(p);
  for (int l = 0; l < L; ++l) {
    if (profile::is_input_layer(p, l)) s.pinned_first.push_back(l);
    else if (detached[l]) s.attached.push_back(l);
    else planned.push_back(l);
  }
  if (!profile::has_layer_to_plan(p))  // a file is refused for it where it is read (read_any_profile)
    throw ConfigError(str("profile of '", p.model, "' has no layer to plan besides its Input source(s)"));
  detail::NodeStates nodes = detail::node_states(p, planned, max_states, max_pairs, merge_projections);
  const detail::NodeGraph& g = nodes.graph;
  const std::vector<int>& group_of = nodes.group_of;
  std::vector<NodeSet>& states = nodes.states;
  s.note = nodes.note;
  int n = static_cast<int>(g.layers.size());
  s.node_layers = g.layers;
  // Ascending size is a topological order of the states (k ⊊ j implies |k| < |j|).
  std::stable_sort(states.begin(), states.end(),
                   [](const NodeSet& a, const NodeSet& b) { return a.count() < b.count(); });
  PT_CHECK(states.back().count() == n, "the last state must hold every node");
  // A tie group (profile.h) stays in one stage: no state may hold some of its nodes but not all.
  // These states are the pipedream schedule's, whose stages step at their own times and would
  // train a split tie's copies apart; the synchronous schedules' splits (referee/joint_search.h)
  // may split it, its exchange priced (plan/split_ties.h).
  size_t before_ties = states.size();
  for (const auto& tie : p.ties) {
    std::vector<int> nodes;
    for (int l : tie.layers)
      if (l < L && group_of[l] >= 0) nodes.push_back(group_of[l]);
    states.erase(std::remove_if(states.begin(), states.end(),
                                [&](const NodeSet& st) {
                                  int in = 0;
                                  for (int v : nodes) in += st.has(v);
                                  return in > 0 && in < static_cast<int>(nodes.size());
                                }),
                 states.end());
  }
  if (states.size() < before_ties) {
    std::string tied;
    for (const auto& tie : p.ties) {
      tied += tied.empty() ? "" : "; ";
      for (size_t i = 0; i < tie.layers.size(); ++i)
        tied += str(i == 0 ? "" : i + 1 == tie.layers.size() ? " and " : ", ", tie.layers[i], " ('",
                    p.layers[tie.layers[i]].name, "')");
    }
    s.note += str(s.note.empty() ? "" : "; ", "layers that share a parameter stay in one stage under pipedream, whose ",
                  "stages step at their own times and would train the copies apart (layers ", tied, ")");
  }

  // Per node: sums, and the bytes it sends out of itself.
  std::vector<double> compute(n, 0), backward(n, 0), act(n, 0), param(n, 0), out_bytes(n, 0);
  std::vector<int64_t> own = profile::own_parameter_bytes(p);  // a tie once: states hold it whole
  for (int v = 0; v < n; ++v) {
    for (int l : g.layers[v]) {
      compute[v] += p.layers[l].forward_ms + p.layers[l].backward_ms + p.layers[l].optimizer_ms;
      backward[v] += p.layers[l].backward_ms;
      act[v] += static_cast<double>(p.layers[l].activation_bytes);
      param[v] += static_cast<double>(own[l]);
    }
  }
  // Per layer, the other nodes that read it: a state's cut carries the layer's output where one
  // of them is outside the state (per layer, not per node: a node holding a tuple and its
  // projections sends only those read beyond the cut).
  std::vector<std::vector<int>> read_by(L);
  for (int l : planned)
    for (int in : p.layers[l].inputs) {
      int u = group_of[in], v = group_of[l];
      if (u >= 0 && u != v && std::find(read_by[in].begin(), read_by[in].end(), v) == read_by[in].end())
        read_by[in].push_back(v);
    }
  for (int v = 0; v < n; ++v) {
    for (int l : g.layers[v])
      if (!read_by[l].empty()) out_bytes[v] += static_cast<double>(p.layers[l].activation_bytes);
    if (g.succs[v].empty()) out_bytes[v] = static_cast<double>(p.layers[g.layers[v].back()].activation_bytes);
  }
  // PipeDream's augmented antichain: extra(a) = ancestors of a with an edge leaving anc(a) ∪ {a}.
  size_t words = (n + 63) / 64;
  std::vector<NodeSet> anc(n, NodeSet{std::vector<uint64_t>(words, 0)});
  for (int v = 0; v < n; ++v)  // nodes are in topological order
    for (int u : g.preds[v]) {
      for (size_t w = 0; w < words; ++w) anc[v].words[w] |= anc[u].words[w];
      anc[v].add(u);
    }
  std::vector<NodeSet> extra(n, NodeSet{std::vector<uint64_t>(words, 0)});
  for (int a = 0; a < n; ++a)
    for (int u = 0; u < n; ++u)
      if (anc[a].has(u))
        for (int q : g.succs[u])
          if (q != a && !anc[a].has(q)) extra[a].add(u);

  int S = static_cast<int>(states.size());
  s.members = states;
  s.compute_ms.assign(S, 0);
  s.backward_ms.assign(S, 0);
  s.activation_bytes.assign(S, 0);
  s.parameter_bytes.assign(S, 0);
  s.frontier_bytes.assign(S, 0);
  s.pipedream_output_bytes.assign(S, 0);
  for (int i = 0; i < S; ++i) {
    const NodeSet& d = states[i];
    NodeSet augmented{std::vector<uint64_t>(words, 0)};
    for (int v = 0; v < n; ++v) {
      if (!d.has(v)) continue;
      s.compute_ms[i] += compute[v];
      s.backward_ms[i] += backward[v];
      s.activation_bytes[i] += act[v];
      s.parameter_bytes[i] += param[v];
      bool maximal = true;
      for (int q : g.succs[v]) maximal = maximal && !d.has(q);
      for (int l : g.layers[v])
        for (int q : read_by[l])
          if (!d.has(q)) {
            s.frontier_bytes[i] += static_cast<double>(p.layers[l].activation_bytes);
            break;
          }
      if (maximal) {
        augmented.add(v);
        for (size_t w = 0; w < words; ++w) augmented.words[w] |= extra[v].words[w];
      }
    }
    if (i == 0) continue;
    for (int v = 0; v < n; ++v)
      if (augmented.has(v)) s.pipedream_output_bytes[i] += out_bytes[v];
  }
  s.strict_subsets.assign(S, {});
  std::vector<int> size(S), subsets;  // each state's list gathered, then copied at its size
  for (int i = 0; i < S; ++i) size[i] = states[i].count();
  for (int j = 0; j < S; ++j) {
    subsets.clear();
    for (int k = 0; k < j; ++k)
      if (size[k] < size[j] && states[k].subset_of(states[j])) subsets.push_back(k);
    s.strict_subsets[j].assign(subsets.begin(), subsets.end());
  }
  index_supersets(s);
  return s;
}

StateSpace chain_within(const StateSpace& s, int max_states) {
  const int S = s.num_states();
  std::vector<int> size(S), chain{0};
  for (int i = 0; i < S; ++i) size[i] = s.members[i].count();
  // States are sorted by size: the first strict superset met has the smallest size.
  while (chain.back() != s.last()) {
    int from = chain.back(), next = -1;
    for (int j = from + 1; j < S && (next < 0 || size[j] == size[next]); ++j)
      if (size[j] > size[from] && s.members[from].subset_of(s.members[j]) &&
          (next < 0 || s.frontier_bytes[j] < s.frontier_bytes[next]))
        next = j;
    PT_CHECK(next >= 0, "state ", from, " has no strict superset");
    chain.push_back(next);
  }
  const int C = static_cast<int>(chain.size());
  if (C > max_states && max_states >= 2) {
    // Position i of max_states: the chain's state nearest to compute total * i / (max_states - 1),
    // after the one kept before it and leaving room for those after.
    std::vector<int> kept{0};
    double total = s.compute_ms[s.last()];
    for (int i = 1, at = 0, prev = 0; i + 1 < max_states; ++i) {
      double target = total * i / (max_states - 1);
      while (at + 1 < C && s.compute_ms[chain[at + 1]] <= target) ++at;
      int nearer = at + 1 < C && s.compute_ms[chain[at + 1]] - target < target - s.compute_ms[chain[at]] ? at + 1 : at;
      prev = std::min(std::max(nearer, prev + 1), C - 1 - (max_states - 1 - i));
      kept.push_back(chain[prev]);
    }
    kept.push_back(s.last());
    chain = std::move(kept);
  }
  StateSpace c;
  c.pinned_first = s.pinned_first, c.attached = s.attached, c.node_layers = s.node_layers, c.note = s.note;
  for (size_t i = 0; i < chain.size(); ++i) {
    int j = chain[i];
    c.members.push_back(s.members[j]);
    c.compute_ms.push_back(s.compute_ms[j]);
    c.backward_ms.push_back(s.backward_ms[j]);
    c.activation_bytes.push_back(s.activation_bytes[j]);
    c.parameter_bytes.push_back(s.parameter_bytes[j]);
    c.frontier_bytes.push_back(s.frontier_bytes[j]);
    c.pipedream_output_bytes.push_back(s.pipedream_output_bytes[j]);
    c.strict_subsets.emplace_back();
    for (size_t k = 0; k < i; ++k) c.strict_subsets.back().push_back(static_cast<int>(k));
  }
  index_supersets(c);
  return c;
}

}  // namespace pt::plan
