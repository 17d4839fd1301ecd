#pragma once
// A plan's replay, worked out ahead of its turn on the machine's other cores. The referee weighs
// candidates one at a time, and whether it replays one depends on the best time so far; but a
// plan's estimate and simulation depend on the plan alone, so they can be computed side by side
// beforehand and taken in the referee's own order: the same choice as replaying one at a time.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/fingerprint.h"
#include "metrics/metrics.h"
#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "profile/profile.h"
#include "referee/steady_replay.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace pt::referee {

// Simulations already run, by a fingerprint of all a simulation reads: the schedule's action
// lists and structure and its stages' costs (sim::stage_costs). Plans that differ only where no
// cost does (GNMT's weightless dropouts on one side of a cut or the other) replay alike: a third
// of GNMT's replays on 8 workers and on 4x4, a fourth on 16. And the schedules built, by what
// their generator reads of the plan: plans that differ in their layers alone run the same action
// lists (GNMT-16: 70% of the replays that simulate reuse one).
class SimulationMemo {
 public:
  using Key = Fingerprint::Key;
  bool find(const Key& k, metrics::Metrics& out);
  void add(const Key& k, const metrics::Metrics& m);
  // The schedule of `key` (one plan structure under one kind, over one count of minibatches),
  // built by `build` the first time.
  // Only the actions and structure are shared: the layers are the first builder's, which a
  // replay with its own costs (sim::simulate's overload) does not read.
  std::shared_ptr<const schedule::Schedule> schedule(const Key& key, const std::function<schedule::Schedule()>& build);

 private:
  std::mutex mutex_;
  std::map<Key, metrics::Metrics> done_;
  std::map<Key, std::shared_ptr<const schedule::Schedule>> schedules_;
  size_t schedule_actions_ = 0;  // held by schedules_, within kMaxHeldActions
  // About 50 MB of actions: on a thousand workers, schedules of a few large plans.
  static constexpr size_t kMaxHeldActions = size_t{2} << 20;
};

struct ReplayContext {
  const profile::Profile& profile;
  const plan::Cluster& cluster;
  const plan::PlanOptions& options;
  const std::string& kind;  // the schedule replayed
  SimulationMemo& memo;
};

struct Replay {
  explicit Replay(plan::Plan p) : plan(std::move(p)) {}
  plan::Plan plan;
  std::optional<plan::PlanEstimate> estimate;  // evaluate_plan, once estimated
  double limit_ms = 0;                         // replay_floor_ms, with the estimate; with its cycle time once bound
  double estimate_floor_ms = 0;                // limit_ms before it was bound
  bool bound = false;
  std::vector<sim::StageCost> costs;           // what the simulator charges its stages, with the estimate
  std::optional<metrics::Metrics> simulated;   // the steady state's timing, once simulated
  std::string error;                           // why the estimate or the simulation was refused
};

// The longest period (the lcm of the stages' replica counts, in minibatches) a replay covers:
// the replay runs six or more periods, so a plan of 11, 13 and 17 replicas would need 14,586
// minibatches. GNMT-16 on 8x32 workers ran out of 24 GB replaying such plans; with the cap it
// plans in 55 s and 63 MB.
inline constexpr int64_t kMaxReplayPeriod = 240;
// The plan's period, or 0 when it is longer than kMaxReplayPeriod.
int64_t replay_period(const plan::Plan& p);

// The simulator's options for a replay ranked by its timing alone (metrics::Detail::kTiming).
inline sim::SimOptions timing_only(int64_t bucket_bytes) {
  sim::SimOptions sim_options;
  sim_options.bucket_bytes = bucket_bytes;
  sim_options.computes_only = true;
  sim_options.pin_as_train = true;
  return sim_options;
}
// Whether a plan's steady state is known without a replay: data parallelism under the pipedream
// schedule (replicas taking minibatches in turn), whose replicas are alike and exchange nothing
// but their all-reduce, so the closed form (evaluate_plan) is its replay's figure exactly
// (tests/referee: Referee.DataParallelismsClosedFormIsItsReplay; 825 more cases agreed to 1e-9
// when this was widened: 11 PipeDream profiles on 5 clusters, 5 buckets, with and without
// per-message, per-step, per-action and per-byte-reduced costs, ring and hierarchical). A replay
// books every ring step of every bucket on every member's links: on 16 workers with 1 MiB
// buckets, a third of `plan`'s time; on 1,024, minutes. Not where the workers share a host's
// cores (Cluster::host_cores): the closed form gives each its own.
bool steady_state_in_closed_form(const plan::Plan& p, const std::string& kind, const plan::Cluster& cluster);
// Its figures as a replay's (ms per minibatch and throughput; no per-worker detail).
metrics::Metrics closed_form_metrics(const plan::PlanEstimate& e, const plan::Plan& p, const profile::Profile& profile,
                                     const std::string& kind);

// Each step is done once: again, it does nothing. A refusal (ConfigError) leaves its optional
// empty and says why in `error`; simulate estimates and bounds first, and takes the closed form
// where steady_state_in_closed_form. Its replay is settled, not necessarily periodic.
void estimate(Replay& r, const ReplayContext& c);
// Raises the estimate's floor to the cycle time of the plan's schedule (sim/cycle_time.h): a
// schedule to build (shared with the plan's replay) and a small graph to solve, where the replay
// it may spare takes several times as long (GNMT-Large on 16 workers: 63 of 128 replays).
void bound(Replay& r, const ReplayContext& c);
void simulate(Replay& r, const ReplayContext& c);
// The floor the referee knows of `r` in its turn against the best time `best_ms`: the
// estimate's where that is above the best (then it is not bound), else the cycle time's. A
// replay worked out ahead against an older, higher best may be bound already; the plans ruled
// out are ranked by this (a climb may start from one), so the choice is the one made in turn
// (squeezenet on 4 workers ranked another runner-up in 6 of 16 runs).
double floor_in_turn(const Replay& r, double best_ms);

// `plan`'s replay longer, from the referee's settled one, until its window repeats
// (settled_replay with `periodic`): the figure `simulate` and `plan` print for it.
metrics::Metrics periodic_replay(const plan::Plan& plan, const metrics::Metrics& settled, const ReplayContext& c);

// Replays worked out ahead of their turn on the machine's other cores, without a barrier: the
// referee queues the plans it will weigh next (`queue`), background threads estimate them in
// queue order and simulate those whose floor (replay_floor.h) is not above the best time so far
// (`set_best`), and the referee takes each in its own turn (`take`): worked out already; or not
// begun, which it then works out itself; or begun, and while it waits it works out the next
// queued one. What a plan's replay is does not depend on when it is worked out, so the choice is
// the one replaying in turn makes. (Batches of a few plans side by side, each waited for, would
// leave a core idle at every batch's end and be worth starting only where a simulation takes
// long: GNMT-Large on 4x4 would run its 164 replays nearly all on one core.)
class ReplayAhead {
 public:
  // A thread per core beyond the first, which begins no replay after `deadline` (plan
  // --time-limit: on 1,024 workers a replay takes most of a second).
  explicit ReplayAhead(const ReplayContext& c,
                       std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  ~ReplayAhead();                                // after the replays begun end
  ReplayAhead(const ReplayAhead&) = delete;
  ReplayAhead& operator=(const ReplayAhead&) = delete;
  // Queues `plan`'s replay under `key` (Referee's identity) unless it is queued or taken.
  void queue(const std::string& key, const plan::Plan& plan);
  // The replay queued under `key`, out of the queue, as far as it was worked out; none when none was.
  std::optional<Replay> take(const std::string& key);
  // Drops the queued replays no thread has begun: the referee will not take them (a climb's round ended).
  void drop_queued();
  void set_best(double ms);

 private:
  struct Slot {
    Slot(std::string k, plan::Plan p) : key(std::move(k)), replay(std::move(p)) {}
    std::string key;
    Replay replay;
    enum State { kQueued, kBegun, kDone } state = kQueued;
  };
  using Held = std::shared_ptr<Slot>;
  void work(Slot& slot);            // estimate, and simulate unless ruled out; without the lock
  Held next_queued();               // claims the first queued slot (under the lock); null when none
  void finish(Slot& slot);          // marks it done and wakes the waiting referee (under the lock)
  void run();                       // a background thread's loop

  const ReplayContext& context_;
  const std::chrono::steady_clock::time_point deadline_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Held> slots_;  // queued or worked out, not yet taken
  std::deque<Held> queue_;             // in queue order; slots begun or dropped are skipped
  double best_ms_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};
}  // namespace pt::referee
