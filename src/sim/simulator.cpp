#include "sim/simulator.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>

#include "core/error.h"
#include "plan/split_ties.h"
#include "sim/stage_costs.h"

namespace pt::sim {

using schedule::Action;
using schedule::ActionKind;
using schedule::TraceEvent;

namespace {

// One direction of a worker's link at one level: its busy intervals (start, end), disjoint and
// sorted by start. Transfers are mostly booked after every earlier one, so inserting is cheap.
using Port = std::vector<std::pair<double, double>>;

// A few ports booked together (a transfer's two, a ring's): pointers into Replay's tables.
using Ports = std::vector<Port*>;

// Whether nothing is booked on the ports after t.
template <class PortList>
bool after_everything(const PortList& ports, double t) {
  for (const Port* p : ports)
    if (!p->empty() && p->back().second > t) return false;
  return true;
}

// The earliest t >= from at which [t, t + ms) is free on every port.
template <class PortList>
double earliest_free(const PortList& ports, double from, double ms) {
  // Most bookings come after everything already booked on their ports (a ring's next step):
  // then `from` is free without a search.
  if (after_everything(ports, from)) return from;
  double t = from;
  for (bool moved = true; moved;) {
    moved = false;
    for (Port* p : ports) {
      auto next = std::upper_bound(p->begin(), p->end(), t,
                                   [](double v, const std::pair<double, double>& iv) { return v < iv.first; });
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

// Books `steps` steps of `ms` on every port, each at the earliest time free on all of them
// from the end of the one before (the first from `from`), as earliest_free and reserve step
// by step would, and returns the last one's end. Only the bookings ending after `from` can
// hold a step back: merged once, they are few, where a ring's ports hold thousands (ResNet-101
// 12-4's 1 MiB buckets, 22 steps a bucket each searching 24 ports: a replay 7.1 -> 3.0 ms).
template <class PortList>
double book_steps(const PortList& ports, double from, double ms, int steps) {
  thread_local std::vector<std::pair<double, double>> busy, placed, merged;
  busy.clear(), placed.clear();
  for (const Port* p : ports) {
    if (p->empty() || p->back().second <= from) continue;  // the common case: nothing after `from`
    auto after = std::upper_bound(p->begin(), p->end(), from,
                                  [](double v, const std::pair<double, double>& iv) { return v < iv.second; });
    busy.insert(busy.end(), after, p->end());
  }
  std::sort(busy.begin(), busy.end());
  double t = from;
  for (int i = 0, first = 0; i < steps; ++i) {
    // A booking meeting [t, t + ms) holds it back to the booking's end; none after t + ms can.
    for (bool moved = true; moved;) {
      moved = false;
      while (first < static_cast<int>(busy.size()) && busy[first].second <= t) ++first;
      for (int j = first; j < static_cast<int>(busy.size()) && busy[j].first < t + ms; ++j)
        if (busy[j].second > t) t = busy[j].second, moved = true;
    }
    if (ms > 0) placed.push_back({t, t + ms});  // reserve books nothing empty
    t += ms;
  }
  for (Port* p : ports) {  // the steps merged in after the port's bookings that start before them
    if (placed.empty()) break;
    if (p->empty() || p->back().first <= placed.front().first) {  // after them all: appended
      p->insert(p->end(), placed.begin(), placed.end());
      continue;
    }
    auto at = std::upper_bound(p->begin(), p->end(), placed.front().first,
                               [](double v, const std::pair<double, double>& iv) { return v < iv.first; });
    merged.clear();
    std::merge(at, p->end(), placed.begin(), placed.end(), std::back_inserter(merged));
    p->erase(at, p->end());
    p->insert(p->end(), merged.begin(), merged.end());
  }
  return t;
}

template <class PortList>
void reserve(const PortList& ports, double start, double end) {
  if (end <= start) return;
  for (Port* p : ports) {
    if (p->empty() || p->back().first < start) {  // the common case: after every interval
      p->push_back({start, end});
      continue;
    }
    auto at = std::upper_bound(p->begin(), p->end(), start,
                               [](double v, const std::pair<double, double>& iv) { return v < iv.first; });
    p->insert(at, {start, end});
  }
}

// Each worker's startable action by (start, worker), earliest first, ties to the lowest worker:
// a tournament over the workers, whose root is the next action to run. A worker holds one entry
// at most, and queuing it again gives the same start (what its action waits for is written
// once). A heap of (start, worker, version) entries did the same, stale entries and all, in a
// fifth of a replay's time.
class EarliestFirst {
 public:
  explicit EarliestFirst(int workers) {
    while (size_ < workers) size_ *= 2;
    start_.assign(size_, kNone);
    winner_.assign(2 * size_, 0);
    for (int w = 0; w < size_; ++w) winner_[size_ + w] = w;
    for (int i = size_ - 1; i >= 1; --i) winner_[i] = first_of(winner_[2 * i], winner_[2 * i + 1]);
  }
  bool empty() const { return start_[winner_[1]] == kNone; }
  int top() const { return winner_[1]; }
  double start(int w) const { return start_[w]; }
  void set(int w, double start) {
    if (start_[w] == start) return;
    start_[w] = start;
    for (int i = (size_ + w) / 2; i >= 1; i /= 2) winner_[i] = first_of(winner_[2 * i], winner_[2 * i + 1]);
  }
  void clear(int w) { set(w, kNone); }

 private:
  static constexpr double kNone = std::numeric_limits<double>::infinity();
  // a < b, so ties go to a.
  int first_of(int a, int b) const { return a ^ ((a ^ b) & -static_cast<int>(start_[b] < start_[a])); }
  int size_ = 1;
  std::vector<double> start_;  // [worker] -> its startable action's start; kNone: none
  std::vector<int> winner_;    // [node] -> the first worker below it
};

// What a worker's action waits for, by kind: a compute done on the worker, or data arrived at it.
enum Slot { kForwardDone, kBackwardDone, kActivationIn, kGradientIn, kSlots };

// A tie group split over stages (plan/split_ties.h): its workers sum its gradient, an
// all-reduce of its bytes, before each one's first step.
struct TieExchange {
  std::vector<int> workers;
  int64_t bytes = 0;
};

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

class Replay {
 public:
  Replay(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& c, int64_t bucket_bytes,
         int cores, bool computes_only, std::vector<TieExchange> ties = {})
      : s_(s), cluster_(c), costs_(costs), computes_only_(computes_only), scale_(1.0 / s.microbatches),
        cores_(std::max(cores, 0)), busy_(s.num_workers(), 0),
        pc_(s.num_workers(), 0), clock_(s.num_workers(), 0), events_(s.num_workers()),
        queue_(s.num_workers()), pending_buckets_(s.num_workers()), ring_plans_(s.num_stages) {
    // Only a replicated stage's backwards release buckets (finish_compute): a worker holding
    // none needs no table (most of a straight pipeline's).
    std::vector<char> replicated(s.num_workers(), 0);
    for (int st = 0; st < s.num_stages; ++st)
      if (s.replicas(st) > 1)
        for (int w : s.stage_workers[st]) replicated[w] = 1;
    for (int w = 0; w < s.num_workers(); ++w) {
      completes_.push_back(bucket_bytes > 0 && replicated[w] ? s.completes_gradients(w)
                                                             : std::vector<bool>(s.actions[w].size()));
      events_[w].reserve(s.actions[w].size() + (computes_only ? 0 : s.actions[w].size() / 2));
    }
    // A validated schedule's computes and transfers take microbatches below this (validate.cpp).
    microbatches_ = s.total_microbatches();
    ready_.assign(static_cast<size_t>(kSlots) * s.num_stages * microbatches_, {-1, 0.0});
    int L = static_cast<int>(c.levels.size());
    for (int k = 0; k < L; ++k) unit_.push_back(c.workers_per_unit_below(k + 1));
    egress_.resize(static_cast<size_t>(s.num_workers()) * L);
    ingress_.resize(egress_.size());
    for (auto* ports : {&egress_, &ingress_})  // room for a few rounds' bookings before any growth
      for (Port& p : *ports) p.reserve(64);
    // Each worker's tie exchanges, in group order (the runtime's), before its first step.
    ties_ = std::move(ties);
    mine_.resize(s.num_workers());
    next_tie_.assign(s.num_workers(), 0);
    first_step_.assign(s.num_workers(), 0);
    for (int w = 0; w < s.num_workers(); ++w) {
      const auto& list = s.actions[w];
      while (first_step_[w] < list.size() && list[first_step_[w]].kind != ActionKind::kStep) ++first_step_[w];
    }
    for (size_t e = 0; e < ties_.size(); ++e)
      for (int w : ties_[e].workers) mine_[w].push_back(static_cast<int>(e));
  }

  std::vector<std::vector<TraceEvent>> run() {
    // In time order: each round runs the action that can start earliest (ties: the lowest
    // worker), so transfers claim their links in the order they are posted, as on a real link,
    // whatever the workers' numbering (replaying worker after worker made two mirror-image
    // placements of one plan simulate 14% apart).
    //
    // The startable actions wait in queue_ by (start, worker): it gives what a scan of every
    // worker would pick, in O(log W) rather than O(W) per action. An all-reduce waits as one
    // entry under its group's lowest worker, which a scan would pick.
    for (int w = 0; w < s_.num_workers(); ++w) consider(w);
    for (int64_t pops = 0; !queue_.empty() || !running_.empty(); ++pops) {
      // On shared cores, a running compute that ends before the next action starts comes first.
      if (!running_.empty()) {
        double end = first_end();
        if (queue_.empty() || end <= queue_.start(queue_.top())) {
          finish_running(end);
          continue;
        }
      }
      int w = queue_.top();  // its entry stays until consider(w) below replaces it
      double start = queue_.start(w);
      if (pops % kForgetEvery == 0 || booked_ > kForgetBooked) forget_past();
      const Action& a = s_.actions[w][pc_[w]];
      bool send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGradient;
      int peer = a.peer;
      if (a.kind == ActionKind::kAllReduce) {
        const auto& group = s_.stage_workers[a.stage];
        execute(w, start);
        for (int r : group) consider(r);
        continue;
      }
      if (int e = tie_due(w); e >= 0) {
        exchange(e, start);
        for (int r : ties_[e].workers) consider(r);
        continue;
      }
      execute(w, start);
      consider(w);
      if (send) consider(peer);  // its data has arrived
    }
    for (int w = 0; w < s_.num_workers(); ++w)
      PT_CHECK(pc_[w] == s_.actions[w].size(), "simulator stuck: worker ", w, " at step ", pc_[w], " (",
               to_string(s_.actions[w][pc_[w]]), "); validate the schedule first");
    // A worker's computes and steps are recorded as they run, in order; the transfers it
    // receives when they are booked.
    auto by_start = [](const TraceEvent& a, const TraceEvent& b) { return a.start_ms < b.start_ms; };
    for (auto& list : events_)
      if (!std::is_sorted(list.begin(), list.end(), by_start)) std::stable_sort(list.begin(), list.end(), by_start);
    return std::move(events_);
  }

 private:
  // The worker that recorded (slot, stage, mb) and when; worker -1: not yet.
  std::pair<int, double>& ready(Slot slot, int stage, int mb) {
    return ready_[(static_cast<size_t>(slot) * s_.num_stages + stage) * microbatches_ + mb];
  }
  bool known(int w, Slot slot, int stage, int mb, double& at) const {
    const auto& r = const_cast<Replay*>(this)->ready(slot, stage, mb);
    if (r.first != w) return false;
    at = std::max(at, r.second);
    return true;
  }

  int level_between(int a, int b) const {
    for (size_t k = 0; k < unit_.size(); ++k)
      if (a / unit_[k] == b / unit_[k]) return static_cast<int>(k);
    return cluster_.level_between(a, b);  // names the bad pair
  }
  Port* egress(int w, int level) { return &egress_[static_cast<size_t>(w) * unit_.size() + level]; }
  Port* ingress(int w, int level) { return &ingress_[static_cast<size_t>(w) * unit_.size() + level]; }

  void record(int w, const Action& a, double start, double end, int64_t bytes) {
    if (computes_only_ && !is_compute(a.kind) && a.kind != ActionKind::kStep) return;
    events_[w].push_back({a, start, end, bytes});
  }

  // Queues worker w's next action if it can start (an all-reduce under its group's lowest
  // worker), and takes w's own entry out where it cannot: w has moved on, or is a peer whose
  // action waits still. A receive is passed over at once: it waits for nothing and holds
  // nothing (send() books the transfer and records it on both sides), so it would only pop at
  // its worker's clock and move on: a third of a pipeline's actions.
  void consider(int w) {
    if (busy_[w]) return queue_.clear(w);  // its compute runs on a shared core still
    const auto& list = s_.actions[w];
    while (pc_[w] < list.size() && is_recv(list[pc_[w]].kind)) ++pc_[w];
    double start = 0;
    if (pc_[w] >= list.size() || !startable(w, start)) return queue_.clear(w);
    const Action& a = s_.actions[w][pc_[w]];
    int tie = tie_due(w);
    if (a.kind == ActionKind::kAllReduce || tie >= 0) {
      const auto& group = tie >= 0 ? ties_[tie].workers : s_.stage_workers[a.stage];
      int lead = *std::min_element(group.begin(), group.end());
      if (lead != w) queue_.clear(w);
      queue_.set(lead, start);
    } else {
      queue_.set(w, start);
    }
  }

  // Whether worker w's next action can run now that what it waits for is known, and when.
  bool startable(int w, double& start) const {
    const Action& a = s_.actions[w][pc_[w]];
    start = clock_[w];
    if (int e = tie_due(w); e >= 0) {
      // Every worker of the exchange has reached it.
      for (int r : ties_[e].workers) {
        if (busy_[r] || tie_due(r) != e) return false;
        start = std::max(start, clock_[r]);
      }
      return true;
    }
    switch (a.kind) {
      case ActionKind::kForward:
        // Input: F(stage-1) on this worker, or the activation arriving from another.
        return a.stage == 0 || known(w, kActivationIn, a.stage, a.microbatch, start) ||
               known(w, kForwardDone, a.stage - 1, a.microbatch, start);
      case ActionKind::kBackward:
        return a.stage + 1 == s_.num_stages || known(w, kGradientIn, a.stage, a.microbatch, start) ||
               known(w, kBackwardDone, a.stage + 1, a.microbatch, start);
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
    switch (a.kind) {
      case ActionKind::kForward:
        compute(w, a, start, compute_ms(s_, a, c),
                static_cast<int64_t>((s_.recomputes(a.stage) ? c.input_bytes : c.stash_bytes) * scale_));
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardWeight: compute(w, a, start, compute_ms(s_, a, c), 0); break;
      case ActionKind::kSendActivation:
      case ActionKind::kSendGradient: send(w, a, start); break;
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: break;  // passed over by consider(); send() records the transfer
      case ActionKind::kAllReduce: allreduce(a, start); return;  // advances every replica
      case ActionKind::kStep:
        if (cores_ > 0) return share_core(w, start, cluster_.action_ms() + c.step_ms, 0, 0);
        clock_[w] = start + cluster_.action_ms() + c.step_ms;
        record(w, a, start, clock_[w], 0);
        break;
    }
    if (!busy_[w]) ++pc_[w];
  }

  // The bucket times of (stage, worker)'s completing backward; nullptr when none is pending.
  std::vector<double>* pending(int stage, int w) {
    for (auto& [st, times] : pending_buckets_[w])
      if (st == stage) return &times;
    return nullptr;
  }

  // Workers on shared cores (SimOptions::cores): the kernel time-slices their threads, so the
  // computes running at once share the cores evenly, each at min(1, cores / running) of one.
  // A compute's end is known only when it comes: it is timed with the others still running.
  struct Running {
    int worker;
    double left_ms;          // of its work at now_
    double begin, host_ms;   // when it started, and its host time first (Cluster::action_ms)
    double ms;               // its layers' compute
    int64_t bytes;
  };
  double rate() const { return cluster_.core_rate(static_cast<int>(running_.size()), cores_); }
  double first_end() const {
    double left = std::numeric_limits<double>::infinity();
    for (const Running& r : running_) left = std::min(left, r.left_ms);
    return now_ + left / rate();
  }
  void share_core(int w, double start, double host_ms, double ms, int64_t bytes) {
    start = std::max(start, now_);
    advance(start);
    running_.push_back({w, host_ms + ms, start, host_ms, ms, bytes});
    busy_[w] = 1;
  }
  void advance(double to) {
    if (!running_.empty()) {
      double done = (to - now_) * rate();
      for (Running& r : running_) r.left_ms -= done;
    }
    now_ = std::max(now_, to);
  }
  // Ends the computes done at `end` (the first to end, and any ending with it), lowest worker first.
  void finish_running(double end) {
    double left = std::numeric_limits<double>::infinity();
    for (const Running& r : running_) left = std::min(left, r.left_ms);
    advance(end);
    std::vector<Running> done;
    for (size_t i = 0; i < running_.size();) {
      if (running_[i].left_ms <= left * 1e-9 + 1e-12) {
        done.push_back(running_[i]);
        running_[i] = running_.back();
        running_.pop_back();
      } else {
        ++i;
      }
    }
    std::sort(done.begin(), done.end(), [](const Running& a, const Running& b) { return a.worker < b.worker; });
    for (const Running& r : done) {
      int w = r.worker;
      const Action& a = s_.actions[w][pc_[w]];
      busy_[w] = 0;
      if (a.kind == ActionKind::kStep) {
        clock_[w] = end;
        record(w, a, r.begin, end, 0);
      } else {
        // Its host time and compute took the span in proportion to their work.
        double span = end - r.begin, work = r.host_ms + r.ms;
        double host = work > 0 ? span * r.host_ms / work : 0;
        finish_compute(w, a, r.begin, r.begin + host, (span - host), r.bytes);
      }
      ++pc_[w];
      consider(w);
    }
  }

  // The host's time per action (Cluster::action_us) comes first, then the layers' compute.
  void compute(int w, const Action& a, double start, double ms, int64_t bytes) {
    if (cores_ > 0) return share_core(w, start, cluster_.action_ms(), ms, bytes);
    finish_compute(w, a, start, start + cluster_.action_ms(), ms, bytes);
  }
  // A compute that ran from `begin`, its layers from `start` for `ms`.
  void finish_compute(int w, const Action& a, double begin, double start, double ms, int64_t bytes) {
    if (completes_[w][pc_[w]] && s_.replicas(a.stage) > 1) {
      // The backward completing the gradients: when each bucket's are final on this replica.
      std::vector<double>* ready = pending(a.stage, w);
      if (!ready) ready = &pending_buckets_[w].emplace_back(a.stage, std::vector<double>()).second;
      ready->clear();
      for (const auto& b : costs_[a.stage].buckets) ready->push_back(start + ms * b.ready_share);
    }
    clock_[w] = start + ms;
    if (a.kind == ActionKind::kForward) ready(kForwardDone, a.stage, a.microbatch) = {w, clock_[w]};
    if (a.kind == ActionKind::kBackward) ready(kBackwardDone, a.stage, a.microbatch) = {w, clock_[w]};
    record(w, a, begin, clock_[w], bytes);
  }

  void send(int w, const Action& a, double posted) {
    bool act = a.kind == ActionKind::kSendActivation;
    int to_stage = act ? a.stage + 1 : a.stage - 1;
    int64_t bytes = static_cast<int64_t>(costs_[act ? a.stage : a.stage - 1].boundary_bytes * scale_);
    int level = level_between(w, a.peer);
    std::array<Port*, 2> ports = {egress(w, level), ingress(a.peer, level)};
    double ms = cluster_.message_ms(level, static_cast<double>(bytes));
    double start = earliest_free(ports, posted, ms), end = start + ms;
    reserve(ports, start, end);
    booked_ += static_cast<int64_t>(ports.size());
    ready(act ? kActivationIn : kGradientIn, to_stage, a.microbatch) = {a.peer, end};
    record(w, a, start, end, bytes);
    ActionKind recv = act ? ActionKind::kRecvActivation : ActionKind::kRecvGradient;
    Action r{a.peer, recv, to_stage, a.microbatch, s_.chunks > 1 ? s_.chunk_of(to_stage) : 0, w};
    record(a.peer, r, start, end, bytes);
  }

  // A stage's all-reduce phases and, per phase, each ring's ports: the same at every round.
  struct RingPlan {
    std::vector<plan::AllreducePhase> phases;
    std::vector<std::vector<Ports>> ports;  // [phase][ring]
  };
  const RingPlan& ring_plan(int stage) {
    RingPlan& rp = ring_plans_[stage];
    if (!rp.phases.empty()) return rp;
    rp.phases = cluster_.allreduce_phases(s_.stage_workers[stage], 1.0);
    rp.ports.resize(rp.phases.size());
    for (size_t p = 0; p < rp.phases.size(); ++p)
      for (const auto& ring : rp.phases[p].rings) {
        rp.ports[p].emplace_back();
        for (int r : ring) rp.ports[p].back().insert(rp.ports[p].back().end(), {egress(r, rp.phases[p].level), ingress(r, rp.phases[p].level)});
      }
    return rp;
  }

  void allreduce(const Action& a, double start) {
    const auto& group = s_.stage_workers[a.stage];
    // Each phase keeps its rings' links of its level busy both ways (one ring over the group, or
    // a hierarchical all-reduce's rings inside the units, then across them): a ring's step waits
    // for transfers already on its links; rings of a phase run side by side; a phase starts when
    // the one before has ended everywhere (each ring's members take part in every ring of the next).
    const RingPlan& rp = ring_plan(a.stage);
    const auto& phases = rp.phases;
    const auto& ports = rp.ports;
    const auto& buckets = costs_[a.stage].buckets;
    double end = 0;  // the previous bucket's end
    for (size_t k = 0; k < buckets.size(); ++k) {
      double from = end;  // in order: after the previous bucket
      bool early = true;  // every replica's completing backward made this bucket ready
      for (int r : group) {
        if (const std::vector<double>* ready = pending(a.stage, r)) from = std::max(from, (*ready)[k]);
        else early = false;
      }
      if (!early) from = std::max(from, start);
      // A ring's phase is `steps` equal steps on its links, each one message and its share of
      // the summing (which holds the ring's links: the next step waits for it); each step takes
      // the next gap that fits it, so the ring interleaves with the activations sharing those links.
      for (size_t p = 0; p < phases.size(); ++p) {
        double ms = cluster_.ring_step_ms(phases[p], static_cast<double>(buckets[k].bytes));
        double phase_end = from;
        for (const auto& ring_ports : ports[p]) {
          double t = book_steps(ring_ports, from, ms, phases[p].steps);
          booked_ += static_cast<int64_t>(ring_ports.size()) * phases[p].steps;
          phase_end = std::max(phase_end, t);
        }
        from = phase_end;
      }
      end = from;
    }
    end = std::max(end, start);
    for (int r : group) {
      auto& list = pending_buckets_[r];
      list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& e) { return e.first == a.stage; }), list.end());
      record(r, s_.actions[r][pc_[r]], start, end, costs_[a.stage].parameter_bytes);
      clock_[r] = end;
      ++pc_[r];
    }
  }

  // The tie exchange worker w must run before its next action, or -1: one is due at its first
  // step until it has run its exchanges.
  int tie_due(int w) const {
    if (pc_[w] != first_step_[w] || next_tie_[w] >= mine_[w].size()) return -1;
    return mine_[w][next_tie_[w]];
  }

  // A split tie's all-reduce, as a stage's in one bucket: its workers' links busy for its ring
  // steps, and every worker's clock at its end. No event is recorded: the trace's kinds are the
  // schedule's actions (the wait shows before the step).
  void exchange(int e, double start) {
    const TieExchange& x = ties_[e];
    double from = start;
    for (const plan::AllreducePhase& phase : cluster_.allreduce_phases(x.workers, 1.0)) {
      double ms = cluster_.ring_step_ms(phase, static_cast<double>(x.bytes));
      double phase_end = from;
      for (const auto& ring : phase.rings) {
        Ports ports;
        for (int r : ring) ports.insert(ports.end(), {egress(r, phase.level), ingress(r, phase.level)});
        phase_end = std::max(phase_end, book_steps(ports, from, ms, phase.steps));
        booked_ += static_cast<int64_t>(ports.size()) * phase.steps;
      }
      from = phase_end;
    }
    for (int r : x.workers) {
      clock_[r] = from;
      ++next_tie_[r];
    }
  }

  // Drops the link intervals that end before any booking still to come can start: the links of
  // a plan on hundreds of workers held tens of thousands each, and booking among them took
  // nearly all of a replay's time. A booking starts no earlier than its worker's clock, or than
  // a pending bucket's ready time (buckets of a finished backward wait for their all-reduce).
  // Also once that many intervals were booked since: a data-parallel replay on hundreds of
  // workers pops few actions but books every ring step on every member's links (ResNet-50's
  // 1 MiB buckets on 192 workers: millions of intervals a round, 1.3 GB before this), and
  // after 16 Ki rather than 1 Mi: ResNet-101 12-4's replay with 1 MiB buckets held 10 MB of
  // intervals, whose first touch took 24 of its 32 ms (now 8).
  static constexpr int64_t kForgetEvery = 4096;
  static constexpr int64_t kForgetBooked = 1 << 14;
  int64_t booked_ = 0;  // intervals booked since the last forget_past
  void forget_past() {
    booked_ = 0;
    double floor = std::numeric_limits<double>::infinity();
    for (int w = 0; w < s_.num_workers(); ++w) {
      if (pc_[w] < s_.actions[w].size()) floor = std::min(floor, clock_[w]);
      for (const auto& [stage, times] : pending_buckets_[w])
        for (double t : times) floor = std::min(floor, t);
    }
    for (auto* ports : {&egress_, &ingress_})
      for (Port& p : *ports) {
        auto keep = std::lower_bound(p.begin(), p.end(), floor,
                                     [](const std::pair<double, double>& iv, double v) { return iv.second <= v; });
        p.erase(p.begin(), keep);
      }
  }

  const schedule::Schedule& s_;
  const plan::Cluster& cluster_;
  const std::vector<StageCost>& costs_;
  bool computes_only_;  // SimOptions::computes_only
  double scale_;
  int cores_ = 0;                   // SimOptions::cores; 0: a device per worker
  std::vector<Running> running_;    // on shared cores: the computes running at now_
  std::vector<char> busy_;          // [worker]: its compute is in running_
  double now_ = 0;                  // on shared cores: the time running_ is at
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<std::vector<TraceEvent>> events_;
  EarliestFirst queue_;  // each worker's startable action
  int microbatches_ = 0;                                   // the schedule's total_microbatches()
  std::vector<std::pair<int, double>> ready_;              // [slot][stage][mb] -> (worker, time)
  std::vector<int> unit_;                                  // [level] -> workers per unit of it
  std::vector<Port> egress_, ingress_;                     // [worker][level] -> its link's use
  std::vector<std::vector<bool>> completes_;               // [worker][i]: Schedule::completes_gradients
  // [worker] -> (stage, bucket ready times) of completing backwards whose all-reduce is to come.
  std::vector<std::vector<std::pair<int, std::vector<double>>>> pending_buckets_;
  std::vector<RingPlan> ring_plans_;  // [stage], made at its first all-reduce
  std::vector<TieExchange> ties_;
  std::vector<std::vector<int>> mine_;  // [worker] -> its exchanges, in order
  std::vector<size_t> next_tie_;        // [worker] -> how many of them have run
  std::vector<size_t> first_step_;      // [worker] -> its first Step's index (the list's size: none)
};

}  // namespace

schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options) {
  return simulate(s, p, cluster, options, stage_costs(s, p, options.bucket_bytes));
}

schedule::Trace simulate(const schedule::Schedule& s, const profile::Profile& p, const plan::Cluster& cluster,
                         const SimOptions& options, const std::vector<StageCost>& costs) {
  if (cluster.workers() < s.num_workers())
    throw ConfigError(str("the ", s.kind, " schedule needs ", s.num_workers(), " workers but the cluster ",
                          cluster.describe(), " has ", cluster.workers()));
  schedule::Trace t;
  t.source = "simulated";
  t.schedule = s.kind;
  t.num_stages = s.num_stages;
  t.microbatches = s.microbatches;
  t.batch_size = p.batch_size;
  for (const auto& c : costs) t.stage_parameter_bytes.push_back(c.parameter_bytes);
  t.workers =
      Replay(s, costs, cluster, options.bucket_bytes, options.cores, options.computes_only, tie_exchanges(s, p)).run();
  return t;
}

}  // namespace pt::sim
