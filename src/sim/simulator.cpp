#include "sim/simulator.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"
#include "sim/stage_costs.h"

namespace pt::sim {

using schedule::Action;
using schedule::ActionKind;
using schedule::TraceEvent;

namespace {

// One direction of a worker's link at one level: the busy intervals, start -> end, disjoint.
using Port = std::map<double, double>;

// The earliest t >= from at which [t, t + ms) is free on every port.
double earliest_free(const std::vector<Port*>& ports, double from, double ms) {
  double t = from;
  for (bool moved = true; moved;) {
    moved = false;
    for (Port* p : ports) {
      auto next = p->upper_bound(t);
      if (next != p->begin() && std::prev(next)->second > t) {
        t = std::prev(next)->second;  // inside a busy interval: wait for its end
        moved = true;
      } else if (next != p->end() && next->first < t + ms) {
        t = next->second;  // the gap before the next interval is too short
        moved = true;
      }
    }
  }
  return t;
}

void reserve(const std::vector<Port*>& ports, double start, double end) {
  if (end > start)
    for (Port* p : ports) (*p)[start] = end;
}

class Replay {
 public:
  Replay(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& c, int64_t bucket_bytes)
      : s_(s), cluster_(c), costs_(stage_costs(s, p, bucket_bytes)), scale_(1.0 / s.microbatches),
        pc_(s.num_workers(), 0), clock_(s.num_workers(), 0), events_(s.num_workers()) {
    for (int w = 0; w < s.num_workers(); ++w)
      completes_.push_back(bucket_bytes > 0 ? s.completes_gradients(w) : std::vector<bool>(s.actions[w].size()));
  }

  std::vector<std::vector<TraceEvent>> run() {
    // In time order: each round runs the action that can start earliest (ties: the lowest
    // worker), so transfers claim their links in the order they are posted, as on a real link,
    // whatever the workers' numbering (replaying worker after worker made two mirror-image
    // placements of one plan simulate 14% apart).
    for (;;) {
      int next = -1;
      double next_start = 0;
      for (int w = 0; w < s_.num_workers(); ++w) {
        double start = 0;
        if (pc_[w] < s_.actions[w].size() && startable(w, start) && (next < 0 || start < next_start))
          next = w, next_start = start;
      }
      if (next < 0) break;
      execute(next, next_start);
    }
    for (int w = 0; w < s_.num_workers(); ++w)
      PT_CHECK(pc_[w] == s_.actions[w].size(), "simulator stuck: worker ", w, " at step ", pc_[w], " (",
               to_string(s_.actions[w][pc_[w]]), "); validate the schedule first");
    for (auto& list : events_)
      std::stable_sort(list.begin(), list.end(),
                       [](const TraceEvent& a, const TraceEvent& b) { return a.start_ms < b.start_ms; });
    return events_;
  }

 private:
  // (worker, kind, stage, mb): a compute done on the worker, or data arrived at it.
  using Key = std::tuple<int, int, int, int>;
  static Key key(int w, ActionKind k, int stage, int mb) { return {w, static_cast<int>(k), stage, mb}; }

  bool known(const Key& k, double& at) const {
    auto it = ready_.find(k);
    if (it == ready_.end()) return false;
    at = std::max(at, it->second);
    return true;
  }

  void record(int w, const Action& a, double start, double end, int64_t bytes) {
    events_[w].push_back({a, start, end, bytes});
  }

  // Whether worker w's next action can run now that what it waits for is known, and when.
  bool startable(int w, double& start) const {
    const Action& a = s_.actions[w][pc_[w]];
    start = clock_[w];
    switch (a.kind) {
      case ActionKind::kForward:
        // Input: F(stage-1) on this worker, or the activation arriving from another.
        return a.stage == 0 || known(key(w, ActionKind::kRecvActivation, a.stage, a.microbatch), start) ||
               known(key(w, ActionKind::kForward, a.stage - 1, a.microbatch), start);
      case ActionKind::kBackward:
        return a.stage + 1 == s_.num_stages || known(key(w, ActionKind::kRecvGradient, a.stage, a.microbatch), start) ||
               known(key(w, ActionKind::kBackward, a.stage + 1, a.microbatch), start);
      case ActionKind::kAllReduce:
        // Every replica has reached this all-reduce.
        for (int r : s_.stage_workers[a.stage]) {
          if (pc_[r] >= s_.actions[r].size()) return false;
          const Action& b = s_.actions[r][pc_[r]];
          if (b.kind != ActionKind::kAllReduce || b.stage != a.stage || b.microbatch != a.microbatch) return false;
          start = std::max(start, clock_[r]);
        }
        return true;
      default:
        return true;
    }
  }

  // Runs worker w's next action from `start` (startable said it can).
  void execute(int w, double start) {
    const Action& a = s_.actions[w][pc_[w]];
    const StageCost& c = costs_[a.stage];
    bool split = s_.split_backward[a.stage], recompute = s_.recomputes(a.stage);
    switch (a.kind) {
      case ActionKind::kForward:
        compute(w, a, start, c.forward_ms * scale_,
                static_cast<int64_t>((recompute ? c.input_bytes : c.stash_bytes) * scale_));
        break;
      case ActionKind::kBackward:
        // A recomputing stage runs its forward again before the backward.
        compute(w, a, start,
                ((recompute ? c.forward_ms : 0) + c.backward_ms * (split ? profile::kInputGradientShare : 1.0)) * scale_, 0);
        break;
      case ActionKind::kBackwardWeight:
        compute(w, a, start, c.backward_ms * scale_ * (1 - profile::kInputGradientShare), 0);
        break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient: send(w, a, start); break;
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: break;  // posted ahead; send() records the transfer
      case ActionKind::kAllReduce: allreduce(a, start); return;  // advances every replica
      case ActionKind::kStep:
        clock_[w] = start + c.step_ms;
        record(w, a, start, clock_[w], 0);
        break;
    }
    ++pc_[w];
  }

  void compute(int w, const Action& a, double start, double ms, int64_t bytes) {
    if (completes_[w][pc_[w]] && s_.replicas(a.stage) > 1) {
      // The backward completing the gradients: when each bucket's are final on this replica.
      auto& ready = bucket_ready_[{a.stage, w}];
      ready.clear();
      for (const auto& b : costs_[a.stage].buckets) ready.push_back(start + ms * b.ready_share);
    }
    clock_[w] = start + ms;
    ready_[key(w, a.kind, a.stage, a.microbatch)] = clock_[w];
    record(w, a, start, clock_[w], bytes);
  }

  void send(int w, const Action& a, double posted) {
    bool act = a.kind == ActionKind::kSendActivation;
    int to_stage = act ? a.stage + 1 : a.stage - 1;
    int64_t bytes = static_cast<int64_t>(costs_[act ? a.stage : a.stage - 1].boundary_bytes * scale_);
    int level = cluster_.level_between(w, a.peer);
    std::vector<Port*> ports = {&egress_[{w, level}], &ingress_[{a.peer, level}]};
    double ms = cluster_.transfer_ms(level, static_cast<double>(bytes));
    double start = earliest_free(ports, posted, ms), end = start + ms;
    reserve(ports, start, end);
    ActionKind recv = act ? ActionKind::kRecvActivation : ActionKind::kRecvGradient;
    ready_[key(a.peer, recv, to_stage, a.microbatch)] = end;
    record(w, a, start, end, bytes);
    Action r{a.peer, recv, to_stage, a.microbatch, s_.chunks > 1 ? s_.chunk_of(to_stage) : 0, w};
    record(a.peer, r, start, end, bytes);
  }

  void allreduce(const Action& a, double start) {
    const auto& group = s_.stage_workers[a.stage];
    // Each phase keeps its rings' links of its level busy both ways (one ring over the group, or
    // a hierarchical all-reduce's rings inside the units, then across them): a ring's step waits
    // for transfers already on its links; rings of a phase run side by side; a phase starts when
    // the one before has ended everywhere (each ring's members take part in every ring of the next).
    auto phases = cluster_.allreduce_phases(group, 1.0);
    std::vector<std::vector<std::vector<Port*>>> ports(phases.size());
    for (size_t p = 0; p < phases.size(); ++p)
      for (const auto& ring : phases[p].rings) {
        ports[p].emplace_back();
        for (int r : ring) ports[p].back().insert(ports[p].back().end(), {&egress_[{r, phases[p].level}], &ingress_[{r, phases[p].level}]});
      }
    const auto& buckets = costs_[a.stage].buckets;
    double end = 0;  // the previous bucket's end
    for (size_t k = 0; k < buckets.size(); ++k) {
      double from = end;  // in order: after the previous bucket
      bool early = true;  // every replica's completing backward made this bucket ready
      for (int r : group) {
        auto it = bucket_ready_.find({a.stage, r});
        if (it == bucket_ready_.end()) early = false;
        else from = std::max(from, it->second[k]);
      }
      if (!early) from = std::max(from, start);
      // A ring's phase is `steps` equal steps on its links; each step takes the next gap that fits
      // it, so the ring interleaves with the activations sharing those links.
      for (size_t p = 0; p < phases.size(); ++p) {
        double ms = cluster_.transfer_ms(phases[p].level, phases[p].bytes * static_cast<double>(buckets[k].bytes)) /
                    phases[p].steps;
        double phase_end = from;
        for (auto& ring_ports : ports[p]) {
          double t = from;
          for (int i = 0; i < phases[p].steps; ++i) {
            t = earliest_free(ring_ports, t, ms);
            reserve(ring_ports, t, t + ms);
            t += ms;
          }
          phase_end = std::max(phase_end, t);
        }
        from = phase_end;
      }
      end = from;
    }
    end = std::max(end, start);
    for (int r : group) {
      bucket_ready_.erase({a.stage, r});
      record(r, s_.actions[r][pc_[r]], start, end, costs_[a.stage].parameter_bytes);
      clock_[r] = end;
      ++pc_[r];
    }
  }

  const schedule::Schedule& s_;
  const plan::Cluster& cluster_;
  std::vector<StageCost> costs_;
  double scale_;
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<std::vector<TraceEvent>> events_;
  std::map<Key, double> ready_;                      // compute done / data arrived, by key
  std::map<std::pair<int, int>, Port> egress_, ingress_;  // (worker, level) -> its link's use
  std::vector<std::vector<bool>> completes_;              // [worker][i]: Schedule::completes_gradients
  std::map<std::pair<int, int>, std::vector<double>> bucket_ready_;  // (stage, worker) -> per bucket
};

}  // namespace

schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options) {
  if (cluster.workers() < s.num_workers())
    throw ConfigError(str("the ", s.kind, " schedule needs ", s.num_workers(), " workers but the cluster ",
                          cluster.describe(), " has ", cluster.workers()));
  schedule::Trace t;
  t.source = "simulated";
  t.schedule = s.kind;
  t.num_stages = s.num_stages;
  t.microbatches = s.microbatches;
  t.batch_size = p.batch_size;
  for (const auto& c : stage_costs(s, p)) t.stage_parameter_bytes.push_back(c.parameter_bytes);
  t.workers = Replay(s, p, cluster, options.bucket_bytes).run();
  return t;
}

}  // namespace pt::sim
