#include "sim/cycle_time.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "plan/realised_cost.h"

namespace pt::sim {

using schedule::Action;
using schedule::ActionKind;

double heaviest_cycle_ratio(int nodes, const std::vector<CycleEdge>& edges) {
  // Edges into each node, and the policy: one edge into each node (its time's binding precedence).
  std::vector<int> begin(nodes + 1, 0), into(edges.size());
  for (const auto& e : edges) ++begin[e.to + 1];
  for (int v = 0; v < nodes; ++v) begin[v + 1] += begin[v];
  std::vector<int> fill(begin.begin(), begin.end() - 1);
  for (size_t i = 0; i < edges.size(); ++i) into[fill[edges[i].to]++] = static_cast<int>(i);
  std::vector<int> policy(nodes);
  double scale = 1;
  // Each node starts from its heaviest edge in: the policy's cycles are then heavy ones, and
  // fewer rounds improve on them.
  for (int v = 0; v < nodes; ++v) {
    if (begin[v] == begin[v + 1]) return 0;
    policy[v] = into[begin[v]];
    for (int k = begin[v] + 1; k < begin[v + 1]; ++k)
      if (edges[into[k]].weight > edges[policy[v]].weight) policy[v] = into[k];
  }
  for (const auto& e : edges) scale += std::abs(e.weight);
  const double eps = 1e-12 * scale;
  std::vector<double> ratio(nodes), value(nodes);
  std::vector<char> state(nodes);  // 0: not yet valued; 1: on the path being followed; 2: valued
  std::vector<int> path;
  double best = 0;
  for (int round = 0; round < 10 * nodes + 100; ++round) {
    // Each node's value under the policy: the ratio of the cycle its chain of edges in reaches,
    // and its time relative to that cycle's first node.
    std::fill(state.begin(), state.end(), 0);
    for (int start = 0; start < nodes; ++start) {
      if (state[start]) continue;
      path.clear();
      int v = start;
      while (state[v] == 0) state[v] = 1, path.push_back(v), v = edges[policy[v]].from;
      if (state[v] == 1) {  // a new cycle through v
        double weight = 0;
        int periods = 0;
        int u = v;
        do {
          weight += edges[policy[u]].weight, periods += edges[policy[u]].periods;
          u = edges[policy[u]].from;
        } while (u != v);
        if (periods <= 0) return 0;
        ratio[v] = weight / periods, value[v] = 0, state[v] = 2;
      }
      // The path's nodes from the one nearest the valued node back to the start.
      for (size_t i = path.size(); i-- > 0;) {
        int x = path[i];
        if (state[x] == 2) continue;
        const CycleEdge& e = edges[policy[x]];
        ratio[x] = ratio[e.from];
        value[x] = value[e.from] + e.weight - ratio[x] * e.periods;
        state[x] = 2;
      }
    }
    best = *std::max_element(ratio.begin(), ratio.end());
    // Improve: first towards heavier cycles, then, where none is, towards later times.
    bool changed = false;
    for (int v = 0; v < nodes; ++v)
      for (int k = begin[v]; k < begin[v + 1]; ++k)
        if (ratio[edges[into[k]].from] > ratio[v] + eps &&
            ratio[edges[into[k]].from] > ratio[edges[policy[v]].from] + eps) {
          policy[v] = into[k];
          changed = true;
        }
    if (changed) continue;
    for (int v = 0; v < nodes; ++v) {
      double at = value[v];
      for (int k = begin[v]; k < begin[v + 1]; ++k) {
        const CycleEdge& e = edges[into[k]];
        if (std::abs(ratio[e.from] - ratio[v]) > eps) continue;
        double t = value[e.from] + e.weight - ratio[v] * e.periods;
        if (t > at + eps) at = t, policy[v] = into[k], changed = true;
      }
    }
    if (!changed) break;
  }
  return best;
}

namespace {

// The precedence graph of one period of a pipedream schedule, folded: each worker's actions in
// a window of one period in the middle of its list are its nodes; an action elsewhere is the
// node of its window's like action so many periods away (its list repeats every period there,
// which is checked for every action the graph reads).
class Folded {
 public:
  Folded(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& cluster,
         int64_t bucket_bytes, int period)
      : s_(s), costs_(costs), cluster_(cluster), bucket_bytes_(bucket_bytes), period_(period) {}

  // ms per period; 0 where the lists do not repeat as they should.
  double cycle_ms() {
    const int W = s_.num_workers(), S = s_.num_stages, periods = s_.minibatches / period_;
    const int M = s_.total_microbatches();
    where_.assign(static_cast<size_t>(kSlots) * S * M, {-1, -1});
    rounds_.assign(static_cast<size_t>(S) * M, -1);
    lead_.resize(S);
    for (int st = 0; st < S; ++st) lead_[st] = *std::min_element(s_.stage_workers[st].begin(), s_.stage_workers[st].end());
    lists_.resize(W);
    for (int w = 0; w < W; ++w) {
      auto& list = lists_[w];
      for (const Action& a : s_.actions[w])
        if (!is_recv(a.kind)) list.push_back(&a);
      if (list.size() % periods) return 0;
      every_.push_back(static_cast<int>(list.size()) / periods);
      base_.push_back(every_[w] * (periods / 2));
      first_.push_back(w ? first_[w - 1] + every_[w - 1] : 0);
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const Action& a = *list[i];
        int slot = slot_of(a.kind);
        if (slot >= 0) where_[(static_cast<size_t>(slot) * S + a.stage) * M + a.microbatch] = {w, i};
        if (a.kind == ActionKind::kAllReduce && w == lead_[a.stage]) rounds_[static_cast<size_t>(a.stage) * M + a.microbatch] = i;
      }
    }
    for (int w = 0; w < W; ++w)
      for (int i = base_[w]; i < base_[w] + every_[w]; ++i)
        if (!edges_into(w, i)) return 0;
    // Nodes no edge enters (the replicas' own all-reduces, which are their lead's) are left out.
    std::vector<int> id(first_.back() + every_.back(), -1);
    int nodes = 0;
    for (const auto& e : edges_)
      if (id[e.to] < 0) id[e.to] = nodes++;
    for (auto& e : edges_) {
      if (id[e.from] < 0) return 0;
      e.from = id[e.from], e.to = id[e.to];
    }
    return heaviest_cycle_ratio(nodes, edges_);
  }

 private:
  enum { kForwardAt, kBackwardAt, kActivationSent, kGradientSent, kSlots };
  static int slot_of(ActionKind k) {
    switch (k) {
      case ActionKind::kForward: return kForwardAt;
      case ActionKind::kBackward: return kBackwardAt;
      case ActionKind::kSendActivation: return kActivationSent;
      case ActionKind::kSendGradient: return kGradientSent;
      default: return -1;
    }
  }
  std::pair<int, int> at(int slot, int stage, int mb) const {
    return where_[(static_cast<size_t>(slot) * s_.num_stages + stage) * s_.total_microbatches() + mb];
  }

  // Whether a and b are like actions a period apart.
  bool like(const Action& a, const Action& b) const {
    int step = a.kind == ActionKind::kAllReduce ? period_ / s_.replicas(a.stage) : period_;
    return a.kind == b.kind && a.stage == b.stage && a.peer == b.peer && a.chunk == b.chunk &&
           b.microbatch - a.microbatch == step;
  }
  // The node of action i on worker w and how many periods it is from its window; false where the
  // list does not repeat around it. A replica's all-reduce is its group's lead's.
  bool locate(int w, int i, int& node, int& periods) const {
    const Action& a = *lists_[w][i];
    if (a.kind == ActionKind::kAllReduce && w != lead_[a.stage]) {
      i = rounds_[static_cast<size_t>(a.stage) * s_.total_microbatches() + a.microbatch];
      w = lead_[a.stage];
      if (i < 0) return false;
    }
    const auto& list = lists_[w];
    int n = static_cast<int>(list.size()), p = every_[w];
    if (i - p < 0 || i + p >= n || !like(*list[i - p], *list[i]) || !like(*list[i], *list[i + p])) return false;
    int d = i - base_[w];
    periods = (d >= 0 ? d : d - p + 1) / p;
    node = first_[w] + (d - periods * p);
    return true;
  }
  // What an action holds its worker for: a compute or a step with the host's time; a send or
  // receive nothing (the link carries it), an all-reduce's node is its end.
  double held_ms(const Action& a) const {
    if (is_compute(a.kind)) return cluster_.action_ms() + compute_ms(s_, a, costs_[a.stage]);
    if (a.kind == ActionKind::kStep) return cluster_.action_ms() + costs_[a.stage].step_ms;
    return 0;
  }
  bool add(int from_w, int from_i, int to, int to_periods, double ms) {
    int node, periods;
    if (!locate(from_w, from_i, node, periods)) return false;
    edges_.push_back({node, to, ms, to_periods - periods});
    return true;
  }
  // The data action a on w waits for: its input's transfer, or its producer on w itself.
  bool data_into(int w, const Action& a, int to, int to_periods) {
    bool forward = a.kind == ActionKind::kForward;
    int producer = forward ? a.stage - 1 : a.stage + 1;
    if (forward ? a.stage == 0 : a.stage + 1 == s_.num_stages) return true;
    auto [pw, pi] = at(forward ? kForwardAt : kBackwardAt, producer, a.microbatch);
    if (pw == w) return add(pw, pi, to, to_periods, held_ms(*lists_[pw][pi]));
    auto [sw, si] = at(forward ? kActivationSent : kGradientSent, producer, a.microbatch);
    if (sw < 0 || lists_[sw][si]->peer != w) return false;
    double bytes = static_cast<double>(costs_[forward ? producer : a.stage].boundary_bytes) / s_.microbatches;
    return add(sw, si, to, to_periods, cluster_.message_ms(cluster_.level_between(sw, w), bytes));
  }
  // An all-reduce ends no sooner than its buckets from this replica's last backward's start.
  bool buckets_into(int w, int i, int to, int to_periods) {
    const Action& a = *lists_[w][i];
    int b = i - 1;
    while (b >= 0 && !(lists_[w][b]->kind == ActionKind::kBackward && lists_[w][b]->stage == a.stage)) --b;
    if (b < 0) return false;
    const StageCost& c = costs_[a.stage];
    double end = plan::buckets_end_ms(c.buckets, compute_ms(s_, *lists_[w][b], c), cluster_,
                                      cluster_.allreduce_phases(s_.stage_workers[a.stage], 1.0));
    return add(w, b, to, to_periods, cluster_.action_ms() + end);
  }
  bool edges_into(int w, int i) {
    const Action& a = *lists_[w][i];
    int to, to_periods;
    if (!locate(w, i, to, to_periods)) return false;
    const Action& before = *lists_[w][i - 1];
    double after_before = held_ms(before);
    // Without buckets the all-reduce starts once every replica has reached it.
    if (a.kind == ActionKind::kAllReduce && bucket_bytes_ <= 0) {
      const StageCost& c = costs_[a.stage];
      after_before += plan::buckets_end_ms(c.buckets, 0, cluster_, cluster_.allreduce_phases(s_.stage_workers[a.stage], 1.0));
    }
    if (!add(w, i - 1, to, to_periods, after_before)) return false;
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) return data_into(w, a, to, to_periods);
    if (a.kind == ActionKind::kAllReduce) return buckets_into(w, i, to, to_periods);
    return true;
  }

  const schedule::Schedule& s_;
  const std::vector<StageCost>& costs_;
  const plan::Cluster& cluster_;
  int64_t bucket_bytes_;
  int period_;                                   // minibatches
  std::vector<std::vector<const Action*>> lists_;  // [worker] -> its actions but receives (which wait for nothing)
  std::vector<std::pair<int, int>> where_;       // [slot][stage][mb] -> (worker, index in lists_)
  std::vector<int> rounds_;                      // [stage][round] -> index on the lead
  std::vector<int> lead_;                        // [stage] -> its lowest worker
  std::vector<int> every_, base_, first_;        // [worker] -> actions a period, window start, first node
  std::vector<CycleEdge> edges_;
};

}  // namespace

double cycle_time_ms(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& cluster,
                     int64_t bucket_bytes) {
  if (s.kind != "pipedream" || s.microbatches != 1 || s.chunks > 1 || costs.size() != static_cast<size_t>(s.num_stages))
    return 0;
  int period = 1;
  for (int st = 0; st < s.num_stages; ++st) period = std::lcm(period, s.replicas(st));
  // A window with a period on either side of it, clear of the warm-up and the drain.
  if (s.minibatches % period || s.minibatches / period < 5) return 0;
  return Folded(s, costs, cluster, bucket_bytes, period).cycle_ms() / period;
}

}  // namespace pt::sim
