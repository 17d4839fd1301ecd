#pragma once
// The referee's own state (internal to src/referee): one choose() call's candidates replayed in
// turn, each plan worked out ahead (replay_ahead.h), then the local search from the best few
// (referee.cpp), and the ranking finished: the choice's window made periodic, its bucket chosen,
// why the others lost (referee_finish.cpp).
#include <chrono>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/cluster.h"
#include "plan/realised_cost.h"
#include "plan/plan.h"
#include "plan/planner.h"
#include "profile/profile.h"
#include "referee/referee.h"
#include "referee/replay_ahead.h"

namespace pt::referee::detail {

// `v` with `digits` decimals.

// What limits a plan's slowest stage, in words: the term of its time_ms that sets it
// (realised_cost.cpp), not only compute or links (GNMT-16 --straight on 8: a stage at 58.16 ms,
// set by its round trip over the minibatches it keeps in flight, computes 41.26).
std::string limit_of(const plan::PlanEstimate& e, const plan::Cluster& cluster);

// A plan as the runtime would run it: every field of its file but the estimates, which differ
// between the search's closed form and the exact model for the same plan (else VGG-16 15-1
// @conv5_3 on 4x4 would be replayed, and listed by --top, twice). Built field by field: written
// as the plan's JSON, it would take a tenth of GNMT's planning.
std::string identity(const plan::Plan& p);

// Where the local search goes next among plans as fast: the one on more workers, whose
// neighbours include plans that give some up (the choice itself prefers fewer, ranks_before).
// From the leaner plan the climbs end lower: VGG-16 --straight on 8 workers at 10 Gbit/s
// reached 5-1 at 124.4 ms per minibatch, not 7-1 at 88.9.
bool climbs_before(const Candidate& a, const Candidate& b);

// Index of a plan's candidate once replayed; kNotReplayed when seen before, unschedulable or
// past the time limit; kOverLimit when its floor (replay_floor.h) rules it out.
constexpr int kNotReplayed = -1;
constexpr int kOverLimit = -2;

// One choose(): the candidates replayed in turn, each plan's figures worked out ahead
// (replay_ahead.h), then the local search.
class Referee {
 public:
  Referee(const profile::Profile& profile, const plan::Cluster& cluster, const plan::PlanOptions& options,
          const std::string& kind, bool own_buckets)
      : context_{profile, cluster, options, kind, memo_}, started_(std::chrono::steady_clock::now()),
        own_buckets_(own_buckets) {
    r_.schedule = kind;
  }

  // Each candidate, then the local search from the best few; the result ranked.
  Refereed run(const std::vector<plan::Plan>& candidates);

 private:
  const plan::PlanOptions& options() const { return context_.options; }
  double elapsed() const { return options().seconds_planning(started_); }

  bool past_limit() const;
  bool out_of_time();  // past_limit, noted in the result
  void progress();
  // Queues the plans a plan is replayed as (variants_of) with no turn yet, to be worked out ahead.
  void work_ahead(const plan::Plan& p);
  // `weighed`: replayed whatever its floor (the search's own best, which a climb starts from).
  int replay(const plan::Plan& p, bool weighed = false);
  int replay_variants(const plan::Plan& p, bool weighed = false);
  void climb(int from);
  int climb_start(const std::function<bool(const plan::Plan&)>& eligible);
  void periodic_first();
  void own_buckets();
  void explain_losers();

  SimulationMemo memo_;  // before context_, which refers to it
  ReplayContext context_;
  std::chrono::steady_clock::time_point started_;
  bool own_buckets_;
  Refereed r_;
  std::string skipped_;
  std::set<std::string> seen_;
  // Plans not replayed, their floor above the best time then, with that floor: a climb may start
  // from one still (climb_start).
  std::vector<std::pair<plan::Plan, double>> ruled_out_;
  ReplayAhead ahead_{context_, options().planning_deadline(started_)};  // by identity: queued or worked out, not yet taken in turn
  // The best time replayed so far: a plan whose floor (replay_floor.h, never above its steady
  // state) is above it cannot win and is not replayed.
  double best_ms_ = std::numeric_limits<double>::infinity();

  double next_progress_ = 1;  // the first line after a second, then every 3
};

}  // namespace pt::referee::detail
