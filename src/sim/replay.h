#pragma once
// One replay of a schedule on the simulator's virtual clock (internal to src/sim): the state it
// keeps per worker, per link and per stage. Its action loop (which action runs next, and when)
// is replay.cpp's; its link bookings (transfers, all-reduces, tie exchanges) replay_links.cpp's.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "plan/cluster.h"
#include "schedule/schedule.h"
#include "schedule/trace.h"
#include "sim/earliest_first.h"
#include "sim/link_ports.h"
#include "sim/stage_costs.h"

namespace pt::sim::detail {

using schedule::Action;
using schedule::ActionKind;
using schedule::TraceEvent;

// What a worker's action waits for, by kind: a compute done on the worker, or data arrived at it.
enum Slot { kForwardDone, kBackwardDone, kActivationIn, kGradientIn, kSlots };

// A tie group split over stages (plan/split_ties.h): its workers sum its gradient, an
// all-reduce of its bytes, before each one's first step.
struct TieExchange {
  std::vector<int> workers;
  int64_t bytes = 0;
};

class Replay {
 public:
  Replay(const schedule::Schedule& s, const std::vector<StageCost>& costs, const plan::Cluster& c, int64_t bucket_bytes,
         int cores, bool computes_only, std::vector<TieExchange> ties = {}, std::vector<int> placement = {});

  // Every worker's events, each list in time order.
  std::vector<std::vector<TraceEvent>> run();

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

  // The action loop (replay.cpp).
  void consider(int w);
  bool startable(int w, double& start) const;
  void execute(int w, double start);
  void compute(int w, const Action& a, double start, double ms, int64_t bytes);
  void finish_compute(int w, const Action& a, double begin, double start, double ms, int64_t bytes);

  // The bucket times of (stage, worker)'s completing backward; nullptr when none is pending.
  std::vector<double>* pending(int stage, int w) {
    for (auto& [st, times] : pending_buckets_[w])
      if (st == stage) return &times;
    return nullptr;
  }

  // Workers on shared cores (SimOptions::cores): the kernel time-slices their threads, so the
  // computes running at once share the cores evenly, each at min(1, cores / running) of one.
  // A compute's end is known only when it comes: it is timed with the others still running.
  // So is a transfer's (`send` set): between threads or processes of one host a message is the
  // host's work (copies, the kernel's socket, wake-ups), not a wire's, and shares the cores too.
  struct Running {
    int worker;
    double left_ms;          // of its work at now_
    double begin, host_ms;   // when it started, and its host time first (Cluster::action_ms)
    double ms;               // its layers' compute
    int64_t bytes;
    const Action* send = nullptr;  // a transfer: the worker's send it carries
  };
  // Each running item's rate, in running_'s order: one pool's share (Cluster::core_rate of all
  // running), or, with the workers placed on cores (SimOptions::placement), its core's: the
  // cores' rate with as many busy as run anything, times Cluster::core_share where it runs more
  // than one item, shared evenly among them.
  const std::vector<double>& rates() const;
  double first_end() const {
    const std::vector<double>& rate = rates();
    double end = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < running_.size(); ++i) end = std::min(end, now_ + running_[i].left_ms / rate[i]);
    return end;
  }
  void share_core(int w, double start, double host_ms, double ms, int64_t bytes);
  void arrive(int w, const Action& a, double begin, double end, int64_t bytes);  // a transfer's end
  void advance(double to);
  // Ends the computes done at `end` (the first to end, and any ending with it), lowest worker first.
  void finish_running(double end);

  // The links (replay_links.cpp).
  void send(int w, const Action& a, double posted);
  // A stage's all-reduce phases and, per phase, each ring's ports: the same at every round.
  struct RingPlan {
    std::vector<plan::AllreducePhase> phases;
    std::vector<std::vector<Ports>> ports;  // [phase][ring]
  };
  const RingPlan& ring_plan(int stage);
  void allreduce(const Action& a, double start);
  // The tie exchange worker w must run before its next action, or -1: one is due at its first
  // step until it has run its exchanges.
  int tie_due(int w) const {
    if (pc_[w] != first_step_[w] || next_tie_[w] >= mine_[w].size()) return -1;
    return mine_[w][next_tie_[w]];
  }
  void exchange(int e, double start);
  // Drops the link intervals that end before any booking still to come can start: a booking starts
  // no earlier than its worker's clock, or than a pending bucket's ready time (buckets of a
  // finished backward wait for their all-reduce). The links of a plan on hundreds of workers hold
  // tens of thousands of intervals each, and booking among them would take nearly all of a
  // replay's time. Every kForgetEvery actions, and once kForgetBooked intervals were booked since:
  // a data-parallel replay on hundreds of workers pops few actions but books every ring step on
  // every member's links (ResNet-50's 1 MiB buckets on 192 workers: millions of intervals a
  // round), and ResNet-101 12-4's replay with 1 MiB buckets, at 1 Mi, held 10 MB of intervals
  // whose first touch took 24 of its 32 ms.
  static constexpr int64_t kForgetEvery = 4096;
  static constexpr int64_t kForgetBooked = 1 << 14;
  int64_t booked_ = 0;  // intervals booked since the last forget_past
  void forget_past();

  const schedule::Schedule& s_;
  const plan::Cluster& cluster_;
  const std::vector<StageCost>& costs_;
  bool computes_only_;  // SimOptions::computes_only
  double scale_;
  int cores_ = 0;                   // SimOptions::cores; 0: a device per worker
  std::vector<int> placement_;      // SimOptions::placement: each worker's core (empty: one pool)
  mutable std::vector<double> rates_;   // rates()' scratch
  mutable std::vector<int> on_core_;    // rates()' scratch: items per core
  std::vector<Running> running_;    // on shared cores: the computes running at now_
  // On shared cores: the pairs (sender, receiver) with a message running, and the sends waiting
  // behind it. One host's workers hand a pair's messages over one after another (gloo's through
  // the pair's ring each way, shm_channel.h): side by side, 4 sends of 47 MiB from one worker
  // each took the whole link rate.
  std::map<std::pair<int, int>, std::deque<const Action*>> channels_;
  void start_message(int w, const Action& a, double at);
  int64_t message_bytes(const Action& a) const;  // a send's: its boundary's per microbatch
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

}  // namespace pt::sim::detail
